"""tests/data/serve_public.jsonl, the unseen public serving points (issue 24): every record loads, is answered
and scores finite errors (fastmodel.serve.records, .validate). No threshold on the errors: the file is a check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fastmodel.serve.records import read_serve_records
from fastmodel.serve.validate import format_report, rows

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "serve_public.jsonl"
METRICS = ("ttft_s", "tpot_s", "output_tokens_per_s")


def test_every_public_serving_record_loads_and_scores_finite():
    lines = [json.loads(x) for x in PUBLIC.read_text().splitlines() if x.strip()]
    refused: list = []
    records = read_serve_records(PUBLIC, refused)
    assert not refused                               # a record that stops loading fails here
    assert len(records) == len(lines) == 31
    table = rows(records)
    assert [r["id"] for r in table] == [x["id"] for x in lines]
    assert all(r["status"] == "ok" for r in table)
    for metric in METRICS:
        errors = np.array([r[f"error_{metric}"] for r in table], dtype=float)
        assert np.isfinite(errors).all(), metric
    report = format_report(table)
    assert "engine=SGLang" in report and "engine=vLLM" in report


def test_every_public_record_names_its_source_and_assumptions():
    lines = [json.loads(x) for x in PUBLIC.read_text().splitlines() if x.strip()]
    assert len({x["id"] for x in lines}) == len(lines)
    assert {x["source"] for x in lines} == {"sglang_cookbook", "vllm_blog_fp8_kvcache"}
    for x in lines:
        assert x["source_ref"] and x["assumptions"] and x["framework"]
        assert all(x["measured"][k] > 0 for k in METRICS)
        assert "derived" in x["measured"]
        # the closed-loop load the benchmark client stated (--max-concurrency / "at concurrency 8")
        assert x["serve"]["concurrency"] >= 1 and x["serve"]["num_requests"] >= x["serve"]["concurrency"]
