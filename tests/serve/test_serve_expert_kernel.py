"""The engine's routed-expert kernel efficiency (``expert_gemm_eff``; kernels/roofline.py ``expert_compute_scale``,
``expert_bounds``; fastmodel/serve/engine_kernels.py ``expert_kernel_eff``; docs/model_serving.md S29), derived by
hand on a Qwen3-235B-A22B-shaped layer (h 4096, 128 experts of width 1536, top-8) at TP 2 on an H200."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fastmodel.kernels.roofline import expert_bounds, expert_gemm_roofline, tiled_bounds
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns
from fastmodel.serve.engine_kernels import TRITON_BLOCK_FP8_SM90_EFF, expert_kernel_eff
from fastmodel.serve.precisions import block_fp8_checkpoint
from fastmodel.serve.records import lower_serve_record
from tests.suite_fixtures import QWEN3

H, GROUPS, ROWS, N = 4096.0, 128.0, 256.0, 2.0 * 1536.0 / 2.0     # gate/up of one expert at TP 2: 2 x 768
DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"


def _row(eff=0.0):
    row = columns(QWEN3, "H200", precision="fp8", input_len=4000, output_len=2, batch_size=1, tp=2)
    row[COLUMN_INDEX["expert_gemm_eff"]] = eff
    return row


def test_the_triton_block_fp8_efficiency_is_the_mean_of_the_two_published_microbenchmarks():
    """SGLang PR #3893 (H200): m 4096, n 24576, k 7168 in 4067.3 us = 354.8 TFLOP/s, 0.179 of the 1979 TFLOP/s
    FP8 peak; vLLM PR #23280 (H100): N 2112, K 7168, M 8192 at 406.5 TFLOP/s, 0.205. Their mean is 0.19."""
    h200 = 2.0 * 4096 * 24576 * 7168 / 4067.3e-6
    assert h200 == pytest.approx(354.8e12, rel=1e-3)
    mean = (h200 / 1979e12 + 406.5e12 / 1979e12) / 2.0
    assert round(mean, 2) == TRITON_BLOCK_FP8_SM90_EFF == 0.19


def test_expert_compute_bound_runs_at_the_kernels_share_of_the_fp8_peak():
    """128 experts of 256 rows, (256 x 4096) @ (4096 x 1536), FP8: row tile 128, 128 x 2 x 6 = 1,536 output tiles
    on 132 SMs in 12 waves (useful share 1536 / 1584); the compute bound is 2 g m n (k + 128) / (1979e12 x 0.19 x
    1536 / 1584) instead of the device's gemm_eff_8 (0.65). The memory bound does not change."""
    row = _row(0.19)
    compute, memory = expert_bounds(row, GROUPS, ROWS, N, H, 1.0, 1.0)
    useful = 1536.0 / (math.ceil(1536.0 / 132.0) * 132.0)
    by_hand = 2.0 * GROUPS * ROWS * N * (H + 128.0) / (1979e12 * 0.19 * useful)
    assert compute == pytest.approx(by_hand, rel=1e-12)
    base_compute, base_memory = tiled_bounds(_row(), GROUPS, ROWS, N, H, 1.0, 1.0, 128.0)
    assert memory == base_memory
    assert compute / base_compute == pytest.approx(0.65 / 0.19, rel=1e-12)
    # the grouped GEMM: max(c, w) + (128 / 256) min(c, w), plus the launch
    launch = row[COLUMN_INDEX["kernel_overhead_s"]]
    assert expert_gemm_roofline(row, GROUPS, ROWS, N, H, 1.0, 1.0, 1.0) == pytest.approx(
        max(compute, memory) + 0.5 * min(compute, memory) + launch, rel=1e-12)


def test_unset_efficiency_leaves_the_expert_gemm_and_training_as_they_were():
    """0 (the column default, every training row and sweep) is the device's gemm_eff: the bounds are
    ``tiled_bounds``' at the expert row tile, for 16-bit and FP8 alike."""
    row = _row()
    for fmt in (0.0, 1.0):
        assert expert_bounds(row, GROUPS, ROWS, N, H, fmt, 1.0) == tiled_bounds(row, GROUPS, ROWS, N, H, fmt, 1.0,
                                                                                128.0)


def test_sixteen_bit_experts_take_the_share_of_the_sixteen_bit_peak():
    """The share applies to the format's own datasheet peak: a 16-bit expert GEMM at 0.19 runs at 989e12 x 0.19."""
    row = _row(0.19)
    compute, _ = expert_bounds(row, GROUPS, ROWS, N, H, 0.0, 2.0)
    base, _ = tiled_bounds(_row(), GROUPS, ROWS, N, H, 0.0, 2.0, 128.0)
    assert compute / base == pytest.approx(0.72 / 0.19, rel=1e-12)


def test_only_sglang_block_fp8_experts_on_hopper_take_the_triton_share():
    assert expert_kernel_eff("sglang", True, True) == 0.19
    assert expert_kernel_eff("vllm", True, True) == 0.0
    assert expert_kernel_eff("trtllm", True, True) == 0.0
    assert expert_kernel_eff("sglang", False, True) == 0.0
    assert expert_kernel_eff("sglang", True, False) == 0.0
    assert expert_kernel_eff("sglang", True, True, marlin=True) == 0.19
    assert block_fp8_checkpoint("Qwen/Qwen3-235B-A22B-FP8", "fp8")
    assert not block_fp8_checkpoint("Qwen3-235B-A22B-FP8", "bf16")
    assert not block_fp8_checkpoint("Llama-3.1-70B", "fp8")


def test_records_lower_the_engines_expert_kernel():
    """The SGLang 0.5.6.post2 Qwen3-235B-A22B-FP8 records on H200 carry 0.19; vLLM's and TensorRT-LLM's 0."""
    seen = {}
    with open(DATA) as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["model"]["name"] == "Qwen3-235B-A22B-FP8":
                eff = lower_serve_record(rec).columns[COLUMN_INDEX["expert_gemm_eff"]]
                seen[rec["framework"].split()[0]] = eff
    assert seen == {"SGLang": 0.19, "vLLM": 0.0, "TensorRT-LLM": 0.0}


def test_a_stated_block_mode_or_the_published_checkpoint_make_block_fp8():
    """A checkpoint is block-FP8 when the model is published so (DeepSeek-V3/R1: quantization_config
    weight_block_size [128, 128]) or the record's ``aic`` block says ``fp8_block`` (``moe_quant_mode``, else
    ``gemm_quant_mode``) whatever the model's name. A plain ``fp8`` there names aiconfigurator's database operation
    (docs/model_serving.md S42) and leaves a published block-scaled checkpoint block-scaled. So an SGLang record of
    DeepSeek-V3 on H200 takes the Triton share with or without its aic block."""
    assert block_fp8_checkpoint("deepseek-ai/DeepSeek-V3", "fp8") and block_fp8_checkpoint("DeepSeek-R1", "fp8")
    assert not block_fp8_checkpoint("deepseek-ai/DeepSeek-R1", "bf16")
    assert block_fp8_checkpoint("some-moe", "fp8", {"gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block"})
    assert block_fp8_checkpoint("some-moe", "fp8", {"gemm_quant_mode": "fp8_block"})
    assert not block_fp8_checkpoint("some-moe", "fp8", {"gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"})
    assert block_fp8_checkpoint("Qwen3-235B-A22B-FP8", "fp8", {"gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"})
    assert block_fp8_checkpoint("Qwen3-235B-A22B-FP8", "fp8", {"source_row_id": "x"})    # no mode stated: the name
    with open(DATA) as fh:
        rec = next(r for r in map(json.loads, fh)
                   if r["model"]["name"] == "Qwen3-235B-A22B-FP8" and r["framework"].startswith("SGLang"))
    deepseek = {k: v for k, v in rec.items() if k != "aic"}
    deepseek["model"] = {**rec["model"], "name": "DeepSeek-V3"}
    assert lower_serve_record(deepseek).columns[COLUMN_INDEX["expert_gemm_eff"]] == TRITON_BLOCK_FP8_SM90_EFF
    labelled = {**deepseek, "aic": {"moe_quant_mode": "fp8", "gemm_quant_mode": "fp8"}}
    assert lower_serve_record(labelled).columns[COLUMN_INDEX["expert_gemm_eff"]] == TRITON_BLOCK_FP8_SM90_EFF
