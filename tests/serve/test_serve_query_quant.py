"""vLLM 0.10.2's FP8 query quantization kernel (Hopper; Blackwell where stated) (``q_quant_kernel``,
kernels/serve/attention.py ``attention_launches``; fastmodel/serve/engine_kernels.py ``query_quant_kernel``; ``serve.query_quant_kernel``;
docs/model_serving.md S54), derived by hand: one more kernel per layer and iteration, 80 x 4 us on Llama-3.1-70B."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.serve.attention import attention_launches
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.engine_kernels import VLLM_QUERY_QUANT_KERNEL_LAST, query_quant_kernel
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"


def _records():
    with open(DATA, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_attention_launches_by_hand():
    row = columns("llama3.1-70b", "H100-SXM-80GB", precision="fp8", tp=2, batch_size=1)
    assert row[COLUMN_INDEX["kernel_overhead_s"]] == 4e-6  # specs/devices/h100-sxm.toml
    row[COLUMN_INDEX["kv_write_kernel"]] = 1.0
    # vLLM V1: the KV write and the attention kernel, 80 x 2 x 4 us = 640 us
    assert attention_launches(row) == pytest.approx(640e-6, rel=1e-12)
    # vLLM 0.10.2 with an FP8 KV cache: static_scaled_fp8_quant of the queries too, 80 x 3 x 4 us = 960 us
    row[COLUMN_INDEX["q_quant_kernel"]] = 1.0
    assert attention_launches(row) == pytest.approx(960e-6, rel=1e-12)
    # a pipeline stage launches its own 40 layers' kernels: 40 x 3 x 4 us
    row[COLUMN_INDEX["pp"]] = 2.0
    assert attention_launches(row) == pytest.approx(480e-6, rel=1e-12)


def test_the_rule_by_engine_version_device_and_kv_cache():
    assert COLUMNS[COLUMN_INDEX["q_quant_kernel"]].default == 0  # sweeps without --engine: no such kernel
    assert VLLM_QUERY_QUANT_KERNEL_LAST == (0, 10, 2)
    assert query_quant_kernel("vllm", (0, 10, 2), True, True) == 1.0
    # before 0.10.2 no source was read: no kernel is charged
    assert query_quant_kernel("vllm", (0, 9, 0), True, True) == 0.0
    # 0.12.0 and 0.18.0: the Attention layer's QuantFP8, fused by torch.compile into the kernel before
    for version in ((0, 11, 2), (0, 12, 0), (0, 18, 0), None):
        assert query_quant_kernel("vllm", version, True, True) == 0.0
    # Blackwell: FlashInfer quantizes the query only on its TRTLLM path, a condition of the run (the cubin repository
    # reachable at start), so only a stated record takes it there; another device never
    assert query_quant_kernel("vllm", (0, 10, 2), False, True, sm100=True) == 0.0
    assert query_quant_kernel("vllm", None, False, True, stated=True, sm100=True) == 1.0
    assert query_quant_kernel("vllm", (0, 10, 2), False, True) == 0.0
    assert query_quant_kernel("vllm", (0, 10, 2), False, True, stated=True) == 0.0
    # a 16-bit KV cache (no query quantization), other engines
    assert query_quant_kernel("vllm", (0, 10, 2), True, False) == 0.0
    for engine in ("trtllm", "sglang", None):
        assert query_quant_kernel(engine, (0, 10, 2), True, True) == 0.0
    # a stated image replaces the version's rule, on Hopper with an FP8 KV cache only
    assert query_quant_kernel("vllm", None, True, True, stated=True) == 1.0
    assert query_quant_kernel("vllm", (0, 10, 2), True, True, stated=False) == 0.0
    assert query_quant_kernel("vllm", None, True, False, stated=True) == 0.0


def test_one_request_pays_one_more_launch_per_layer_per_step():
    # a static batch of one 64-token prompt and two output tokens on one H200: the one decode step launches 80 more
    # kernels, 80 x 4 us = 320 us; a prompt-only iteration is priced without per-kernel attention launches (S5, S7),
    # so the lone prefill does not move
    kw = dict(precision="fp8", tp=1, input_len=64, output_len=2, batch_size=1, kv_write_kernel=1.0)
    base = evaluate("llama3.1-70b", "H200-SXM-141GB", **kw)
    quant = evaluate("llama3.1-70b", "H200-SXM-141GB", q_quant_kernel=1.0, **kw)
    assert quant["tpot"] - base["tpot"] == pytest.approx(320e-6, rel=1e-9)
    assert quant["ttft"] == base["ttft"]


def test_exactly_the_0_10_2_llama_rows_state_it_and_lower_to_one_kernel():
    records = _records()
    stated = [r for r in records if "query_quant_kernel" in r["serve"]]
    # the InferenceX vLLM 0.10.2 Llama-3.1-70B launchers with kv-cache-dtype fp8 (S45): H100 (45 rows) and H200 (60),
    # FlashAttention; B200 FP8 (60) and NVFP4 (60), FlashInfer's TRTLLM path (the launchers' cubin patch)
    counts: dict[tuple, int] = {}
    for record in stated:
        key = (record["system"]["gpu"], record["serve"]["precision"])
        counts[key] = counts.get(key, 0) + 1
        assert record["serve"]["query_quant_kernel"] is True
        assert record["framework"] == "vLLM (version not recorded)" and record["serve"]["kv_precision"] == "fp8"
        lines = [a for a in record["assumptions"] if a.startswith("serve.query_quant_kernel=true")]
        assert len(lines) == 1 and "v0.10.2" in lines[0]
        cited = "flashinfer.py:770-777" if record["system"]["gpu"] == "B200" else "flash_attn.py:509-518"
        assert cited in lines[0]
    assert counts == {
        ("H100-SXM-80GB", "fp8"): 45,
        ("H200-SXM-141GB", "fp8"): 60,
        ("B200", "fp8"): 60,
        ("B200", "fp4"): 60,
    }
    for record in (stated[0], next(r for r in stated if r["system"]["gpu"] == "B200")):
        lowered = lower_serve_record(record)
        assert lowered.columns[COLUMN_INDEX["q_quant_kernel"]] == 1.0
        assert any("serve.query_quant_kernel = true" in note for note in lowered.notes)
        plain = copy.deepcopy(record)
        plain["serve"].pop("query_quant_kernel")
        assert lower_serve_record(plain).columns[COLUMN_INDEX["q_quant_kernel"]] == 0.0  # unversioned: newest rule
    # every other aggregated record lowers to no such kernel
    others = [r for r in records if "query_quant_kernel" not in r["serve"]][:60]
    assert all(lower_serve_record(r).columns[COLUMN_INDEX["q_quant_kernel"]] == 0.0 for r in others)


def test_refused_outside_vllm():
    trt = next(r for r in _records() if r["framework"].startswith("TensorRT-LLM"))
    trt = copy.deepcopy(trt)
    trt["serve"]["query_quant_kernel"] = True
    with pytest.raises(SpecError, match="serve.query_quant_kernel"):
        lower_serve_record(trt)
