"""Run records of tests/data by id, shared by the tests that derive a record's figures by hand."""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def record_by_id(run_id: str, file: str = "runs_moe_public.jsonl") -> dict:
    """The record of ``file`` (a JSONL file of tests/data) whose ``id`` is ``run_id``; an AssertionError naming
    it when none is."""
    for line in (DATA / file).read_text().splitlines():
        record = json.loads(line)
        if record["id"] == run_id:
            return record
    raise AssertionError(f"{run_id} missing from {file}")
