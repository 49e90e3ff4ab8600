"""``fastmodel validate``'s memory tables (fastmodel/lm/validate_memory.py)."""

import json
from pathlib import Path

import numpy as np

from fastmodel.lm.records import lower_record
from fastmodel.lm.validate import format_report, rows

DATA = Path(__file__).resolve().parents[1] / "data"


def _b200(n=2):
    return [json.loads(line) for line in (DATA / "runs_dev_b200.jsonl").read_text().splitlines()[:n]]


def test_rows_compare_allocated_and_reserved_with_what_the_run_logged():
    """The B200 runs log max_memory_allocated (memory_gib) and max_memory_reserved (memory_reserved_gib)."""
    records = [lower_record(r) for r in _b200()]
    table = rows(records)
    for row, record in zip(table, records):
        assert row["measured_memory_gib"] == record.measured["memory_gib"]
        assert row["memory_error"] == row["memory_allocated"] / 2**30 / record.measured["memory_gib"] - 1.0
        assert row["reserved_error"] == row["memory_reserved"] / 2**30 / record.measured["memory_reserved_gib"] - 1
    text = format_report(table)
    assert "peak                                        2" in text and "does not fit: 0 of 2 answered" in text


def test_a_run_that_ran_but_does_not_fit_is_named():
    """The same run on a device of 40 GiB: predicted over its HBM, listed as a false "does not fit"."""
    small = _b200(1)[0]
    small["system"] = {**small["system"], "hbm_bytes": 40 * 2**30}
    table = rows([lower_record(small)])
    assert table[0]["fits_memory"] is False and np.isfinite(table[0]["memory_error"])
    text = format_report(table)
    assert "does not fit: 1 of 1 answered" in text and small["id"] in text.split("does not fit: 1 of 1 answered")[1]
