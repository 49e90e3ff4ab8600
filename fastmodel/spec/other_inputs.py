"""A file given as a model spec that is another input: one line naming what it is and where it goes.

``serve -m`` and ``plans -m`` read a file through the model loader, which took a record for a spec with unknown
fields ("model.id: unknown field (did you mean 'hidden'?) [and 17 more problems]") and a ``.jsonl`` file for
TOML ("invalid TOML: Invalid statement"). ``run -m`` evaluates a record itself (``cli/run._record_in``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastmodel.errors import SpecError


def refuse_other_input(spec: Any) -> None:
    """Raise a SpecError (``spec``'s file, field ``model``) when the model ``spec`` is an existing file holding a
    serving or training run record (SERVE_RUNS.md / RUNS.md), JSON lines, a sweep file or a cluster spec
    (:func:`fastmodel.spec.detect.misplaced`); anything else is left to the model loader."""
    from fastmodel.spec import detect
    from fastmodel.spec.loader import resolve_source

    if not isinstance(spec, (str, Path)) or not Path(spec).is_file():
        return
    source = str(spec)
    if source.endswith(".jsonl"):
        raise SpecError(source, "model", "a JSON-lines file (one record per line), not a model spec: serving records "
                        "go as RECORDS ('fastmodel serve FILE'), training runs to 'fastmodel validate' or 'batch'")
    if not source.endswith((".toml", ".json")):
        return
    data = resolve_source(source, "model")[0]      # an unreadable or invalid file: its own one line
    if detect.is_serve_record(data):
        raise SpecError(source, "model", "a serving record (SERVE_RUNS.md), not a model spec: evaluate it as RECORDS "
                        "('fastmodel serve FILE')")
    if detect.is_run_record(data):
        raise SpecError(source, "model", "a training run record (RUNS.md), not a model spec: 'fastmodel run -m FILE' "
                        "evaluates it")
    if problem := detect.misplaced(data, "model"):
        raise SpecError(source, "model", problem)
