"""The frozen held-out split of measured runs, and the rows of records an engine refused.

``tests/data/heldout.json`` (written once by ``tests/data/freeze_heldout.py``) lists, per dev file, the ids
held out of all development: ``fastmodel validate RUNS --heldout`` scores them beside the in-sample rows so
that no in-sample score is quoted alone. A refused record (a field or plan the engine does not take) is a
miss: it stays in the table with status ``refused`` and counts against the hit rate.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fastmodel.errors import SpecError

#: a prediction within this relative error of the measurement is a hit (refused records are misses)
HIT_TOLERANCE = 0.25
SPLITS = ("dev", "held-out")
#: the group label (gpu, model, ...) of a refused record that does not give the field (a malformed line gives
#: none), so that its row in validate's tables is named rather than blank
NOT_GIVEN = "(not given)"


def split_file_for(runs: str | Path, given: str | None) -> Path:
    """The split file: ``given``, or ``heldout.json`` beside RUNS when ``--heldout`` has no value."""
    return Path(given) if given else Path(runs).resolve().parent / "heldout.json"


def heldout_ids(split_file: str | Path, runs: str | Path, default: bool = False) -> set[str]:
    """The held-out ids of RUNS (by file name) in ``split_file``; a SpecError when it lists none for RUNS.
    ``default``: ``split_file`` is the one ``--heldout`` reads without a value (:func:`split_file_for`), so a
    missing one says how to name another."""
    try:
        data = json.loads(Path(split_file).read_text())
        files = data["files"]
    except FileNotFoundError:
        hint = "; --heldout without a value reads heldout.json beside RUNS: name the split, --heldout SPLIT.json"
        raise SpecError(str(split_file), "", f"cannot read the held-out split: no such file{hint if default else ''}") \
            from None
    except OSError as error:
        raise SpecError(str(split_file), "", f"cannot read the held-out split: {error.strerror or error}") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise SpecError(str(split_file), "files", "not a held-out split (expected {\"files\": {name: [ids]}})") \
            from None
    name = Path(runs).name
    if name not in files:
        raise SpecError(str(split_file), f"files.{name}", f"no held-out split for {name} (split files: "
                                                          f"{', '.join(sorted(files)) or 'none'})")
    return {str(i) for i in files[name]}


def mark_split(table: list[dict], ids: set[str]) -> list[dict]:
    """Each row gets ``split``: ``held-out`` when its id is in ``ids``, ``dev`` otherwise."""
    for row in table:
        row["split"] = SPLITS[1] if str(row["id"]) in ids else SPLITS[0]
    return table


def hit_rate(errors: list[float], total: int) -> float:
    """Share of ``total`` records whose |error| <= HIT_TOLERANCE; records without an error are misses."""
    if total == 0:
        return float("nan")
    errors = np.asarray(errors, dtype=float)
    return float(np.sum(np.abs(errors[np.isfinite(errors)]) <= HIT_TOLERANCE)) / total
