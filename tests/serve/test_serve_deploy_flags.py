"""Engine limits and client rounds a serving record states (docs/model_serving.md S34; fastmodel/serve/profiles.py
``deployment_limits``): ``serve.max_num_tokens`` / ``serve.max_batch_size`` replace the engine profile's defaults,
``serve.num_requests`` / ``serve.concurrency`` sets ``client_rounds``. aiconfigurator's generated benchmark
(rule=benchmark) sets max_num_tokens = B + ISL + 1500 (TensorRT-LLM: rounded up to 32), max_batch_size = B and
aiperf --num-requests 20 x concurrency."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.serve.load import wave_iterations
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
TOKENS, BATCH, ROUNDS = (COLUMN_INDEX[k] for k in ("max_num_tokens", "max_batch_size", "client_rounds"))


def _gap_rows():
    with open(DATA) as fh:
        return [r for r in map(json.loads, fh) if "aic-auto-gap" in json.dumps(r.get("aic", {}).get("provenance", {}))]


def _row(framework_word, input_len, output_len, concurrency, tp):
    return next(r for r in _gap_rows() if r["framework"].startswith(framework_word)
                and (r["serve"]["input_len"], r["serve"]["output_len"], r["serve"]["concurrency"], r["serve"]["tp"])
                == (input_len, output_len, concurrency, tp))


def test_generator_budget_by_hand():
    """TensorRT-LLM 1.0.0rc3, ISL 512, 4 in flight (B 4): 4 + 512 + 1500 = 2016 = 63 x 32, already a multiple of
    32. ISL 1024, B 128: 2652 rounds up to 83 x 32 = 2656. vLLM 0.12.0, ISL 8000, B 4: 9504, not rounded."""
    assert lower_serve_record(_row("TensorRT-LLM", 512, 128, 4, 4)).columns[TOKENS] == 2016.0
    rec = lower_serve_record(_row("TensorRT-LLM", 1024, 128, 128, 4))
    assert rec.columns[TOKENS] == 2656.0 and rec.columns[BATCH] == 128.0
    vllm = lower_serve_record(_row("vLLM 0.12", 8000, 100, 4, 2))
    assert vllm.columns[TOKENS] == 9504.0 and vllm.columns[BATCH] == 4.0


def test_every_stated_budget_follows_the_rule():
    rows = [r for r in _gap_rows() if "max_num_tokens" in r["serve"]]
    assert len(rows) == 163                  # 126 + 5 TensorRT-LLM, 32 vLLM; SGLang takes no max_num_tokens
    for r in rows:
        s, b = r["serve"], r["aic"]["batch_size"]
        raw = b + s["input_len"] + 1500
        want = -(-raw // 32) * 32 if r["framework"].startswith("TensorRT") else raw
        assert (s["max_num_tokens"], s["max_batch_size"], s["num_requests"]) == (want, b, 20 * s["concurrency"])


def test_absent_fields_keep_the_profile_and_ten_rounds():
    """Without the fields TensorRT-LLM's profile (8192 tokens, 2048 requests) and the column's 10 rounds stay."""
    bare = copy.deepcopy(_row("TensorRT-LLM", 512, 128, 4, 4))
    for key in ("max_num_tokens", "max_batch_size", "num_requests"):
        bare["serve"].pop(key)
    cols = lower_serve_record(bare).columns
    assert (cols[TOKENS], cols[BATCH], cols[ROUNDS]) == (8192.0, 2048.0, 10.0)


def test_rounds_from_num_requests_and_lockstep_wins():
    """80 requests over 4 slots: 20 rounds. SGLang (prefill first, fixed lengths) keeps S32's 1: every round is a
    start wave whatever their number. A static batch takes no rounds."""
    assert lower_serve_record(_row("TensorRT-LLM", 512, 128, 4, 4)).columns[ROUNDS] == 20.0
    sglang = _row("SGLang", 1000, 100, 3, 2)
    assert sglang["serve"]["num_requests"] == 60 and lower_serve_record(sglang).columns[ROUNDS] == 1.0
    static = copy.deepcopy(_row("TensorRT-LLM", 512, 128, 4, 4))
    static["serve"]["batch_size"] = static["serve"].pop("concurrency")
    assert lower_serve_record(static).columns[ROUNDS] == 10.0
    short = copy.deepcopy(_row("TensorRT-LLM", 512, 128, 4, 4))
    short["serve"]["num_requests"] = 3                 # fewer requests than slots cannot keep 4 in flight
    with pytest.raises(SpecError, match="num_requests"):
        lower_serve_record(short)


def test_whole_prompts_per_iteration_under_the_stated_budget():
    """TensorRT-LLM without chunking takes k = floor(2016 / 512) = 3 whole prompts per iteration: a wave of 8 is
    done in iterations 1, 1, 1, 2, 2, 2, 3, 3, mean 15 / 8; the profile's 8192 takes all 8 in one."""
    mean, q = wave_iterations(8.0, 512.0, 2016.0, False)
    assert (mean, q) == (pytest.approx(15.0 / 8.0, rel=1e-12), 3.0 * 512.0)
    assert wave_iterations(8.0, 512.0, 8192.0, False) == (1.0, 8.0 * 512.0)
