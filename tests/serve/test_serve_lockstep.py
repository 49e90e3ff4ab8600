"""A closed loop that stays in lockstep (docs/model_serving.md S32; fastmodel/serve/profiles.py ``lockstep_rounds``,
``serve.fixed_lengths``): a prefill-first engine under a fixed-length client re-forms the start wave every round,
so ``client_rounds`` is 1 and the mean TTFT is the wave's."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fastmodel.kernels.serve.load import wave_iterations
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import evaluate
from fastmodel.serve.profiles import lockstep_rounds
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
ROUNDS = COLUMN_INDEX["client_rounds"]


def _records(framework_word):
    with open(DATA) as fh:
        return [r for r in map(json.loads, fh) if r["framework"].startswith(framework_word)]


def test_wave_of_eight_4000_token_prompts_under_sglang_h200_budget():
    """SGLang on an H200 (< 160 GiB: chunked_prefill_size 8192) takes the wave of 8 prompts of 4000 tokens as one
    stream of 8192 tokens per iteration: prompt i is done in iteration ceil(4000 i / 8192) = 1, 1, 2, 2, 3, 3, 4, 4
    (mean 2.5) over these 8; over whole cycles of 256 prompts the closed form is (4000 / 8192)(8 + 1)/2 +
    255/512 = 2.197265625 + 0.498046875 = 2.6953125 iterations of 8192 tokens."""
    mean, q = wave_iterations(8.0, 4000.0, 8192.0, True)
    assert q == 8192.0
    assert mean == pytest.approx(125.0 / 256.0 * 4.5 + 255.0 / 512.0, rel=1e-12)
    assert mean == pytest.approx(2.6953125, rel=1e-12)


def test_lockstep_needs_a_prefill_first_engine_and_fixed_lengths():
    assert lockstep_rounds(0.0, True) == 1.0
    assert lockstep_rounds(1.0, True) is None          # mixing (vLLM, TensorRT-LLM) staggers the wave
    assert lockstep_rounds(0.0, False) is None         # random lengths break the wave up


def test_records_lower_lockstep_for_sglang_only():
    """Every SGLang record (aiconfigurator gap analysis: serve.fixed_lengths, concurrency load) lowers with
    client_rounds 1; vLLM 0.12.0 rows of the same benchmark mix prompts into decodes and keep the rounds their
    serve.num_requests states (20, S34); an SGLang record without fixed lengths, or at a static batch, keeps the
    default 10 (num_requests gone as well: a static batch takes no rounds)."""
    sglang = _records("SGLang")
    assert sglang and all(lower_serve_record(r).columns[ROUNDS] == 1.0 for r in sglang)
    vllm = [r for r in _records("vLLM 0.12") if r["serve"].get("fixed_lengths")]
    assert vllm and all(lower_serve_record(r).columns[ROUNDS] == 20.0 for r in vllm)
    bare = copy.deepcopy(sglang[0])
    bare["serve"].pop("fixed_lengths")
    bare["serve"].pop("num_requests")
    assert lower_serve_record(bare).columns[ROUNDS] == 10.0
    static = copy.deepcopy(sglang[0])
    static["serve"]["batch_size"] = static["serve"].pop("concurrency")
    assert lower_serve_record(static).columns[ROUNDS] == 10.0


def test_one_round_makes_the_mean_ttft_the_wave():
    """8 requests of 1024 tokens under SGLang's schedule (prefill first, chunked budget 8192, no overlap step):
    the wave fits one iteration, the static prefill of 8 prompts. With client_rounds 1 that is the whole mean
    TTFT; TPOT and throughput stay the steady state's."""
    kw = dict(tp=4, input_len=1024, output_len=256, precision="fp8", overlap_step=0, chunked_prefill=1,
              max_num_tokens=8192, mixed_prefill=0)
    static = evaluate("llama3.1-70b", "H100", batch_size=8, **kw)
    steady = evaluate("llama3.1-70b", "H100", concurrency=8, client_rounds=0, **kw)
    lockstep = evaluate("llama3.1-70b", "H100", concurrency=8, client_rounds=1, **kw)
    assert lockstep["ttft"] == pytest.approx(static["ttft"], rel=1e-9)
    assert lockstep["ttft"] > steady["ttft"]
    assert lockstep["tpot"] == steady["tpot"]
    assert lockstep["output_tokens_per_s"] == steady["output_tokens_per_s"]
