"""A file given as a model spec that is another input: one line naming what it is and where it goes.

The model loader (``fastmodel.spec.loader.resolve_source``, kind ``model``) took a record for a spec with unknown
fields ("model.id: unknown field (did you mean 'hidden'?) [and 17 more problems]") and a ``.jsonl`` file for TOML
("invalid TOML: Invalid statement"). It asks here before and after it reads a model file, so every path that loads
a model from a file (``serve -m``, ``plans -m``, ``fastmodel.evaluate``, ``fastmodel.serve.api``) says what the file
is, reading it once. ``run -m`` evaluates a record itself (``cli/run._record_in``) before any model is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastmodel.errors import SpecError

JSONL_REASON = ("a JSON-lines file (one record per line), not a model spec: serving records go as RECORDS "
                "('fastmodel serve FILE'), training runs to 'fastmodel validate' or 'batch'")


def refuse_jsonl_model(source: str) -> None:
    """Raise a SpecError (``source``, field ``model``) when the model file ``source`` is an existing ``.jsonl`` file:
    before the loader reads it as TOML."""
    if source.endswith(".jsonl") and Path(source).is_file():
        raise SpecError(source, "model", JSONL_REASON)


def refuse_other_model(data: Any, source: str) -> None:
    """Raise a SpecError (``source``, field ``model``) when the data read from the model file ``source`` is a serving
    or training run record (SERVE_RUNS.md / RUNS.md), a sweep file or a cluster spec
    (:func:`fastmodel.spec.detect.misplaced`); anything else is left to the model's validation."""
    from fastmodel.spec import detect

    if detect.is_serve_record(data):
        raise SpecError(source, "model", "a serving record (SERVE_RUNS.md), not a model spec: evaluate it as RECORDS "
                        "('fastmodel serve FILE')")
    if detect.is_run_record(data):
        raise SpecError(source, "model", "a training run record (RUNS.md), not a model spec: 'fastmodel run -m FILE' "
                        "evaluates it")
    if problem := detect.misplaced(data, "model"):
        raise SpecError(source, "model", problem)
