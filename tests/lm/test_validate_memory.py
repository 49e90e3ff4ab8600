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


def test_no_dev_run_that_ran_is_predicted_not_to_fit():
    """Issue 23 'done when': every in-sample run of runs_dev.jsonl fits under the default margin (the held-out
    rows are scored by ``validate --heldout``, not asserted here). The two that did not: GPT-529.6B under
    ZeRO-3 (DeepSpeed keeps 16-bit gradients) and Llama 3 405B at 8K (balanced first stage, V = 8)."""
    heldout = set(json.loads((DATA / "heldout.json").read_text())["files"]["runs_dev.jsonl"])
    records = [lower_record(json.loads(line)) for line in (DATA / "runs_dev.jsonl").read_text().splitlines()]
    table = rows([r for r in records if r.id not in heldout])
    assert len(table) == 54
    assert [r["id"] for r in table if not r["fits_memory"]] == []
    # the default margin is each plan's allocator cache (docs/model_memory.md "What a run keeps free"): reserved +
    # overhead within the smaller of A100 80GB and H100 SXM (79.25, 79.11 GiB)
    kept = {r["id"]: (r["memory_per_device"] + r["memory_reserved"] - r["memory_allocated"]) / 2**30 for r in table}
    assert kept["narayanan2021_t2-GPT-529.6B-n640-tp1pp1-full-zero3"] < 79.11
    assert kept["llama3-paper-405b-s8192-n8192"] < 79.11
