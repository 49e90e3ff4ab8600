"""The MoE block's own kernels in serving (kernels/serve/upcast.py, kernels/serve/costs.py ``combine_bytes``;
docs/model_serving.md S23), derived by hand on a gpt-oss-120b-shaped model (36 layers, h 2880, 128 experts of
width 2880, top-4, MXFP4 routed experts)."""

from __future__ import annotations

import math

import pytest

from fastmodel.kernels.roofline import tiled_bounds
from fastmodel.kernels.serve import costs, upcast
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, device_columns, evaluate
from tests.suite_fixtures import GPT_OSS

H, E, K, FFN = 2880.0, 128.0, 4.0, 2880.0
ONE = dict(input_len=1024, output_len=2, batch_size=1, quant_experts_only=1.0)


def _row(device, precision="mxfp4", **cols):
    return columns(GPT_OSS, device, precision=precision, **{**ONE, **cols})


def test_upcast_time_is_seventeen_integer_ops_per_eight_values_per_row_tile():
    """256 rows per expert on H200: row tile 128 (the library's largest), two row tiles, each converting the
    whole (K x N) panel: 17/8 ops per value on 64 INT32 lanes per clock, the clock x SMs being P16 / 4096."""
    row = _row("H200")
    groups, m, n, k = 32.0, 256.0, 2.0 * FFN, H
    clock_sms = 989e12 / 4096.0
    by_hand = (17.0 / 8.0) * groups * 2.0 * n * k / (64.0 * clock_sms)
    assert upcast.upcast_time(row, groups, m, n, k) == pytest.approx(by_hand, rel=1e-12)
    # 32 rows: one row tile of 32, one conversion of each panel
    assert upcast.upcast_time(row, groups, 32.0, n, k) == pytest.approx(by_hand / 2.0, rel=1e-12)


def test_compute_bound_expert_gemm_adds_the_upcast_and_devices_with_fp4_pay_nothing():
    """Prefill rows (256 per expert) are compute-bound, so the upcast adds to the GEMM in full; a B200 (FP4 peak,
    hardware E2M1 conversion), FP8 weights and W4A8 are untouched."""
    row = _row("H200")
    groups, m = 32.0, 256.0
    extra = upcast.expert_upcast_time(row, groups, m, FFN, H, 3.0, 0.0, row[COLUMN_INDEX["weight_bytes"]])
    by_hand = upcast.upcast_time(row, groups, m, 2.0 * FFN, H) + upcast.upcast_time(row, groups, m, H, FFN)
    assert extra == pytest.approx(by_hand, rel=1e-12)
    assert upcast.expert_upcast_time(_row("B200"), groups, m, FFN, H, 3.0, 0.0, 0.53125) == 0.0
    assert upcast.expert_upcast_time(_row("H200", "fp8"), groups, m, FFN, H, 3.0, 0.0, 1.0) == 0.0
    assert upcast.expert_upcast_time(row, groups, m, FFN, H, 3.0, 1.0, 0.53125) == 0.0   # FP8 activations


def test_memory_bound_decode_hides_the_upcast_under_the_weight_stream():
    """One row per expert: ``max(c + u, w) - max(c, w)``; with the weights streaming longer than the math and
    the conversion together, nothing is added (a device with slow HBM, as a bound)."""
    row = _row("H200")
    row[COLUMN_INDEX["hbm_bw"]] = 0.5e12
    assert upcast.upcast_extra(row, 128.0, 1.0, 2.0 * FFN, H, 0.53125) == 0.0
    fast = _row("H200")
    compute, memory = tiled_bounds(fast, 128.0, 1.0, 2.0 * FFN, H, 0.0, 0.53125, 16.0)
    u = upcast.upcast_time(fast, 128.0, 1.0, 2.0 * FFN, H)
    assert upcast.upcast_extra(fast, 128.0, 1.0, 2.0 * FFN, H, 0.53125) == pytest.approx(
        max(compute + u, memory) - max(compute, memory), rel=1e-12)


def test_prefill_gemm_of_a_lone_prompt_grows_by_the_upcast_of_every_layer():
    """A lone 1,024-token prompt at TP 1 on H200: 4,096 routed rows over the experts touched,
    E (1 - (1 - k/E)^1024) = 128 to 1e-12, 32 rows each (a hair over: row tile 64, one tile, as Triton's ragged
    rule min(64, next_pow2(2 rows)) takes). Both grouped GEMMs are compute-bound, so the prefill's GEMM time grows
    by 36 layers x their upcast: 17/8 x 128 x 3 h f x 64 / P16 per layer. The same row with a (token) FP4 peak
    and 16-bit activations is priced identically but converts in hardware: the reference."""
    upcast_on = evaluate(GPT_OSS, "H200", precision="mxfp4", **ONE)
    upcast_off = evaluate(GPT_OSS, "H200", precision="mxfp4", peak_flops_4=1.0, fp4_act=0.0, **ONE)
    per_layer = (17.0 / 8.0) * 128 * 3 * FFN * H * 64.0 / 989e12
    assert E * (1.0 - (1.0 - K / E) ** 1024) == pytest.approx(E, rel=1e-12)
    assert upcast_on["prefill_gemm"] - upcast_off["prefill_gemm"] == pytest.approx(36 * per_layer, rel=1e-6)


def test_moe_combine_reads_the_local_expert_rows_and_writes_the_tokens():
    """The combine of m tokens: 2 m h (k / ep) bytes read, 2 m h written; EP 2 halves the rows read."""
    d = device_columns("H200")
    row1 = _row("H200", tp=2)
    row2 = _row("H200", tp=2, ep=2)
    m = 1024.0
    assert costs.combine_bytes(row1, m) == 2.0 * m * H * (K + 1.0)
    assert costs.combine_bytes(row2, m) == 2.0 * m * H * (K / 2.0 + 1.0)
    diff = costs.layer_memory_bound(row1, m, costs.MOE) - costs.layer_memory_bound(row2, m, costs.MOE)
    assert diff == pytest.approx(2.0 * m * H * K / 2.0 / (d["hbm_bw"] * d["hbm_eff"]), rel=1e-9)
    assert math.isclose(costs.combine_bytes(row1, 0.0), 0.0)
