"""The frozen held-out split of a dev file (``heldout.json`` beside it: ``{"files": {name: [ids]}}``).

Scores are quoted on the development rows and the held-out rows side by side; nothing is tuned on the latter
(tests/data/README.md, "The frozen held-out split").
"""

from __future__ import annotations

import json
from pathlib import Path

from fastmodel.errors import SpecError

SPLIT_FILE = "heldout.json"


def heldout_ids(records_path: str | Path, split_path: str | Path | None = None) -> set[str]:
    """The held-out ids of ``records_path`` listed in ``split_path`` (default: heldout.json beside it)."""
    records_path = Path(records_path)
    path = Path(split_path) if split_path else records_path.with_name(SPLIT_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(str(path), "", f"--heldout needs the frozen split file: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise SpecError(str(path), "", f"invalid JSON: {error.msg}") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise SpecError(str(path), "files", "expected an object of file name -> held-out ids")
    ids = files.get(records_path.name)
    if not isinstance(ids, list):
        raise SpecError(str(path), f"files.{records_path.name}", "no held-out split for this file")
    return {str(i) for i in ids}


def split_name(record_id: str, held: set[str] | None) -> str:
    """``heldout`` or ``dev`` (``all`` without a split)."""
    if held is None:
        return "all"
    return "heldout" if str(record_id) in held else "dev"
