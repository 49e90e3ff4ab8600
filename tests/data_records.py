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


def lowered_and_predicted(run_id: str, file: str = "runs_dev.jsonl"):
    """(the lowered record, its predictions) of the run ``run_id`` of ``file``: ``read_records`` then
    ``predict_records``, for the tests that derive a run's figures by hand (exactly one run has the id)."""
    import numpy as np

    from fastmodel.lm.records import read_records
    from fastmodel.lm.validate import predict_records

    records = [r for r in read_records(DATA / file) if r.id == run_id]
    assert len(records) == 1, f"{len(records)} runs {run_id} in {file}"
    return records[0], predict_records(records, np.zeros(1, dtype=np.int8))
