"""vLLM 0.12's DeepGEMM MoE on Hopper (``engine_kernels.deepgemm_moe_columns``; kernels/roofline.py
``buffer_tail_compute``; docs/model_serving.md S42), derived by hand on a Qwen3-235B-A22B-shaped layer (h 4096,
128 experts of width 1536, top-8) at TP 2 on an H200: the 128-row block of the contiguous layout, the worst-case
buffer of ``compute_aligned_M`` and the tail of blocks it computes, and the rule by engine, version, device and
layout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fastmodel.kernels.roofline import buffer_tail_compute, expert_gemm_roofline, tiled_bounds
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns
from fastmodel.serve.engine_kernels import DEEPGEMM_MOE_BLOCK_M, deepgemm_moe_columns
from fastmodel.serve.precisions import block_fp8_checkpoint
from fastmodel.serve.records import lower_any, lower_serve_record
from tests.suite_fixtures import QWEN3

H, N_UP = 4096.0, 2.0 * 768.0          # gate/up of one expert at TP 2
DATA = Path(__file__).resolve().parents[1] / "data"


def _row(align=0.0, ep=1):
    row = columns(QWEN3, "H200", precision="fp8", input_len=1000, output_len=2, batch_size=16, tp=2, ep=ep)
    row[COLUMN_INDEX["expert_tile_min"]] = 128.0
    row[COLUMN_INDEX["expert_tile_max"]] = 128.0
    row[COLUMN_INDEX["expert_align_rows"]] = align
    return row


def test_the_buffer_holds_128_blocks_at_every_small_decode_batch():
    """``compute_aligned_M`` without CPU counts: M top_k + E (128 - 1), rounded up to 128. With 128 local experts
    that is 16,256 rows of slack: 4 tokens (32 routed rows) and 16 tokens (128) both launch 128 blocks, so the
    kernel's work does not shrink with the batch (the measured flat TPOT, S42)."""
    for tokens in (4, 16):
        assert math.ceil((tokens * 8 + 128 * 127) / 128) == 128
    assert math.ceil((64 * 8 + 128 * 127) / 128) == 131


def test_the_tail_is_computed_at_the_fp8_rate_by_hand():
    """16 tokens spread as 64 touched experts of 2 rows: 64 routed blocks, 128 - 64 = 64 tail blocks. Gate/up
    (1536 x 4096, FP8): 64 x 6 tiles of 128 x 256 = 384 on 132 SMs in 3 waves (useful 384 / 396), compute
    2 x 64 x 128 x 1536 x (4096 + 128) / (1979e12 x 0.65 x 384 / 396); no weight stream (one expert's tile in L2)."""
    row = _row(128.0)
    tail = buffer_tail_compute(row, 64.0, 2.0, N_UP, H, 1.0)
    by_hand = 2.0 * 64 * 128 * N_UP * (H + 128.0) / (1979e12 * 0.65 * 384.0 / 396.0)
    assert tail == pytest.approx(by_hand, rel=1e-12)
    launch = row[COLUMN_INDEX["kernel_overhead_s"]]
    plain = expert_gemm_roofline(_row(0.0), 64.0, 2.0, N_UP, H, 1.0, 1.0, 1.0)
    assert expert_gemm_roofline(row, 64.0, 2.0, N_UP, H, 1.0, 1.0, 1.0) == pytest.approx(plain + tail, rel=1e-12)
    # the routed blocks keep the model's grouped rule at the 128-row tile: one tile per expert, load and math add
    compute, memory = tiled_bounds(_row(0.0), 64.0, 2.0, N_UP, H, 1.0, 1.0, 128.0)
    assert plain == pytest.approx(compute + memory + launch, rel=1e-12)


def test_no_tail_without_the_column_or_once_the_buffer_is_routed_rows():
    """0 (the default of every training row, sweep and other engine): nothing added. 128 experts of 1,024 rows:
    buffer ceil((131072 + 16256) / 128) = 1151 blocks < the 128 x 8 = 1024 routed blocks + 127 -> 1151 - 1024 = 127
    tail blocks, still computed; so the tail is a constant 127 blocks per GEMM at most, whatever the batch."""
    assert buffer_tail_compute(_row(0.0), 64.0, 2.0, N_UP, H, 1.0) == 0.0
    assert math.ceil((128 * 1024 + 128 * 127) / 128) - 128 * 8 == 127
    full = buffer_tail_compute(_row(128.0), 128.0, 1024.0, N_UP, H, 1.0)
    one = buffer_tail_compute(_row(128.0), 64.0, 2.0, N_UP, H, 1.0) / 64.0
    assert full / one == pytest.approx(127.0, rel=0.05)      # waves differ slightly


def test_expert_parallel_buffer_counts_every_tokens_top_k():
    """EP 2 without DP: 64 local experts, but ``compute_aligned_M`` takes M top_k of all tokens: 16 tokens give
    ceil((128 + 64 x 127) / 128) = 65 blocks; with 32 touched local experts of 2 rows, 33 tail blocks."""
    row = _row(128.0, ep=2)
    tail = buffer_tail_compute(row, 32.0, 2.0, N_UP, H, 1.0)
    assert math.ceil((128 + 64 * 127) / 128) - 32 == 33
    one = buffer_tail_compute(_row(128.0), 1.0, 128.0, N_UP, H, 1.0)     # 128 routed rows: 127 - 0 tail blocks
    assert tail > 0.0 and one > 0.0


def test_the_rule_by_engine_version_device_and_layout():
    """vLLM 0.12 on SM90 with a block-FP8 checkpoint below 8 expert-TP ranks: 128 / 128 / 128; EP without DP too
    (expert TP 1); not at expert TP 8 (PR #29346), not EP with attention DP (all-to-all kernels), not another
    version, engine, device or a per-tensor checkpoint."""
    on = {"expert_tile_min": 128.0, "expert_tile_max": 128.0, "expert_align_rows": 128.0}
    off = dict.fromkeys(on, 0.0)
    assert DEEPGEMM_MOE_BLOCK_M == 128.0
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, True, 2, 1, 1) == on
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, True, 1, 4, 1) == on
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, True, 4, 1, 4) == on
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, True, 8, 1, 1) == off
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, True, 1, 8, 8) == off
    assert deepgemm_moe_columns("vllm", (0, 18, 0), True, True, 2, 1, 1) == off
    assert deepgemm_moe_columns("vllm", None, True, True, 2, 1, 1) == off
    assert deepgemm_moe_columns("sglang", (0, 12, 0), True, True, 2, 1, 1) == off
    assert deepgemm_moe_columns("vllm", (0, 12, 0), False, True, 2, 1, 1) == off
    assert deepgemm_moe_columns("vllm", (0, 12, 0), True, False, 2, 1, 1) == off


def test_the_checkpoint_not_the_aic_mode_says_block_fp8():
    """The vLLM 0.12 rows' ``aic`` block names ``fp8`` (aiconfigurator's database op); the checkpoint they ran,
    Qwen/Qwen3-235B-A22B-FP8, is block-scaled, which is what vLLM reads."""
    aic = {"gemm_quant_mode": "fp8", "moe_quant_mode": "fp8"}
    assert block_fp8_checkpoint("Qwen3-235B-A22B-FP8", "fp8", aic)
    assert block_fp8_checkpoint("Qwen/Qwen3-235B-A22B-FP8", "fp8")
    assert not block_fp8_checkpoint("Qwen3-32B", "fp8", aic)
    assert block_fp8_checkpoint("Qwen3-32B", "fp8", {"moe_quant_mode": "fp8_block"})     # stated block-scaled
    assert not block_fp8_checkpoint("Qwen3-235B-A22B-FP8", "bf16")


def test_exactly_the_vllm_0_12_rows_lower_with_the_deepgemm_block():
    """The 32 vLLM 0.12.0 Qwen3-235B-A22B-FP8 H200 rows of serve_dev_load (TP 2 and 4, some with EP = TP) take 128;
    every other row keeps 0."""
    marked = 0
    for line in (DATA / "serve_dev_load.jsonl").read_text().splitlines():
        data = json.loads(line)
        col = lower_serve_record(data).columns
        on = data["framework"].startswith("vLLM 0.12")
        expected = 128.0 if on else 0.0
        assert col[COLUMN_INDEX["expert_align_rows"]] == expected, data["id"]
        if on:
            assert col[COLUMN_INDEX["expert_tile_min"]] == col[COLUMN_INDEX["expert_tile_max"]] == 128.0
        marked += on
    assert marked == 32


def test_disaggregated_pools_follow_the_rule():
    """serve_dev_disagg, vLLM 0.12 Qwen3-235B-A22B-FP8 on H100: the TP 4 decode pool and the DP 4 prefill pools
    (expert TP 4) take 128; the attention-DP 8 decode pool (expert TP 8) does not; Qwen3-32B is dense."""
    seen = {}
    for line in (DATA / "serve_dev_disagg.jsonl").read_text().splitlines():
        data = json.loads(line)
        if not data["framework"].startswith("vLLM 0.12") or "235B" not in data["model"]["name"]:
            continue
        rec = lower_any(data)
        assert rec.prefill[COLUMN_INDEX["expert_align_rows"]] == 128.0
        seen[data["disagg"]["decode"]["attention_dp"]] = rec.decode[COLUMN_INDEX["expert_align_rows"]]
    assert seen == {1: 128.0, 8: 0.0}
