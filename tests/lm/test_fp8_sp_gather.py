"""Sequence-parallel all-gathers of quantized GEMM operands (docs/model.md §11.40): ``roofline.sp_gather_bytes``
per precision, recipe and direction, and one layer's TP bytes and seconds forward and backward, each against a
hand derivation."""

import numpy as np
import pytest

from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK, W_TP, W_TP_BACKWARD, layer_costs
from fastmodel.kernels.lm.passes import A_TP_COMM, layer_passes
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import sp_gather_bytes
from tests.lm.lowprec_rows import BLACKWELL, HOPPER, MICRO, SEQ, TP, H, sp_row


def _row(precision: str, recipe: str = "unstated", cc: float = HOPPER, **values) -> np.ndarray:
    """SP on, §11.41's wgrad re-gathers off (they are tests/lm/test_sp_wgrad_gather.py's)."""
    return sp_row(precision, recipe, cc, regather=0.0, **values)


# forward: rowwise data (+ its scales); backward output gradient: rowwise and columnwise copies, except per-tensor
# FP8, which gathers the rowwise data and transposes it locally (TE v2.14 distributed.py _all_gather_fp8)
@pytest.mark.parametrize("precision, recipe, forward, backward", [
    ("bf16", "unstated", 2.0, 2.0),
    ("fp8", "unstated", 1.0, 1.0),                              # TE 1.x (MLPerf GPT-3): delayed scaling, uint8
    ("fp8", "delayed", 1.0, 1.0),
    ("fp8", "tensorwise", 1.0, 1.0),
    ("fp8", "mxfp8", 1.0 + 1.0 / 32.0, 2.0 * (1.0 + 1.0 / 32.0)),          # one E8M0 byte per 32
    ("fp8", "blockwise", 1.0 + 4.0 / 128.0, 2.0 * (1.0 + 4.0 / 128.0)),    # one FP32 scale per 1 x 128
    ("fp4", "unstated", 0.5 + 1.0 / 16.0, 2.0 * (0.5 + 1.0 / 16.0)),       # E2M1 + one E4M3 per 16
])
def test_gathered_bytes_per_element(precision, recipe, forward, backward):
    row = _row(precision, recipe, BLACKWELL if recipe == "mxfp8" else HOPPER)
    assert sp_gather_bytes(row, False) == pytest.approx(forward, rel=1e-15)
    assert sp_gather_bytes(row, True) == pytest.approx(backward, rel=1e-15)


def _layer(row):
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    return work[W_TP], work[W_TP_BACKWARD]


def test_one_layer_tp_seconds_under_sp_per_recipe():
    """One GPT-3 175B layer, micro-batch 1 x 2,048 tokens, TP 4 with SP: two all-gathers and two reduce-scatters
    each way of N = 2,048 x 12,288 = 25,165,824 elements. BF16 gathers 2 N = 50,331,648 B each; delayed-scaling
    FP8 gathers N = 25,165,824 B (both directions); MXFP8 1.03125 N = 25,952,256 B forward and 2.0625 N =
    51,904,512 B backward; the reduce-scatters stay at 2 N (priced as an all-gather of the same bytes)."""
    n = SEQ * MICRO * H
    assert n == 25_165_824.0
    for precision, recipe, cc, fwd_bytes, bwd_bytes in (
        ("bf16", "unstated", HOPPER, 50_331_648.0, 50_331_648.0),
        ("fp8", "delayed", HOPPER, 25_165_824.0, 25_165_824.0),
        ("fp8", "mxfp8", BLACKWELL, 25_952_256.0, 51_904_512.0),
    ):
        row = _row(precision, recipe, cc, collective_overhead_s=20e-6)
        scatter = allgather_time(row, 2.0 * n, TP, 1.0)
        fixed = 4.0 * 20e-6 + amax_reduction_time(row)
        forward = 2.0 * (allgather_time(row, fwd_bytes, TP, 1.0) + scatter) + fixed
        backward = 2.0 * (allgather_time(row, bwd_bytes, TP, 1.0) + scatter) + fixed
        assert _layer(row) == pytest.approx((forward, backward), rel=1e-12), (precision, recipe)
    # the quantized gathers are cheaper: delayed FP8 below BF16 each way; MXFP8's backward moves 2.0625 N > 2 N
    bf16, delayed, mx = (_layer(_row(*a)) for a in (("bf16",), ("fp8", "delayed"), ("fp8", "mxfp8", BLACKWELL)))
    assert delayed[0] < bf16[0] and delayed[1] < bf16[1] and delayed[0] == delayed[1]
    assert mx[0] < bf16[0] < mx[1]


def test_without_sp_the_all_reduces_stay_16_bit_and_symmetric():
    row = _row("fp8", "delayed", sequence_parallel=0.0, collective_overhead_s=20e-6)
    expected = 2.0 * (allreduce_time(row, 2.0 * SEQ * H, TP, 1.0) + 20e-6)
    assert _layer(row) == pytest.approx((expected, expected), rel=1e-12)
    assert _layer(_row("fp8", "delayed", tp=1.0)) == (0.0, 0.0)


def test_the_layer_passes_charge_the_backward_gathers_once_per_backward():
    """A_TP_COMM of the average dense layer without recompute: one forward W_TP plus one backward W_TP_BACKWARD
    (TP_BACKWARD_PASSES = 1, the conjugate collectives)."""
    row = _row("fp8", "mxfp8", BLACKWELL, layers=2.0, heads=96.0, kv_heads=96.0, head_dim=128.0, ffn=49152.0,
               moe_experts=0.0, collective_overhead_s=20e-6)
    forward, backward = _layer(row)
    work = np.zeros(N_PASS_WORK)
    layer_passes(row, work)
    assert work[A_TP_COMM] == pytest.approx(forward + backward, rel=1e-12)
