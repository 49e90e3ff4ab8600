"""Megatron-Core's SequentialMLP (``moe_grouped_gemm = false``), docs/model.md §11.57, derived by hand.

Mixtral's shape (hidden 4,096, moe_ffn 14,336, 8 experts, top 2, 4,096-token sequences) at EP 4 on a B200-like
device (148 SMs, 128 x 256 tiles, gemm_k_half 128, 2.25 PFLOP/s x 0.49, 8 TB/s x 0.8, 4 us a kernel): the rank's
4,096 tokens x 2 = 8,192 routed rows over 2 local experts, 4,096 rows each.
"""

import math

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_BACKWARD_MEM, W_FORWARD_ONLY, W_GEMM, W_WGRAD, layer_costs
from fastmodel.kernels.lm.moe import SEQUENTIAL_CAT_BYTES, expert_rows, sequential_mlp_time
from fastmodel.kernels.roofline import expert_gemm_roofline, expert_wgrad_roofline
from fastmodel.lm.table import row
from tests.lm.test_moe import B200, MIXTRAL

PEAK = 2.25e15 * 0.49
HBM = 8e12 * 0.8


def _rows(**fields):
    grouped = row(**MIXTRAL, **B200, ep=4, dp=4, **fields)
    return grouped, row(**MIXTRAL, **B200, ep=4, dp=4, moe_grouped_gemm=0, **fields)


def _wave_share(tiles):
    """Useful share of ``tiles`` output tiles on 148 SMs (no split-K: every grid here is over one wave)."""
    return tiles / (math.ceil(tiles / 148) * 148)


def test_each_expert_gemm_is_its_own_gemm_with_its_own_waves():
    """FC1 of one expert: 4,096 x 28,672 (gate and up) over K 4,096: 32 x 112 = 3,584 tiles, 25 waves of 148
    (Q = 3,584 / 3,700); compute-bound (2 x 4,096 x 28,672 x 4,224 / (1.1025e15 Q) = 0.931 ms against 503 MB /
    6.4 TB/s = 0.079 ms), plus the grouped kernel's exposed share 128 / 4,096 of the weight stream (each expert is
    one cuBLAS GEMM in TE's grouped GEMM too, docs/model.md §11.57); two launches. FC2: 4,096 x 4,096 over K 14,336
    (268 MB): 512 tiles, 4 waves (Q = 512 / 592): the grouped kernel's 1,024 tiles fill 7 waves (Q = 1,024 /
    1,036), so SequentialMLP's FC2 is 14.6% slower."""
    grouped, sequential = _rows()
    assert expert_rows(sequential) == 8192.0
    fc1_memory = (2.0 * 4096 * 28672 + 2.0 * 4096 * 4096 + 2.0 * 4096 * 28672) / HBM
    fc2_memory = (2.0 * 14336 * 4096 + 2.0 * 4096 * 14336 + 2.0 * 4096 * 4096) / HBM
    fc1 = 2.0 * 4096 * 28672 * (4096 + 128) / (PEAK * _wave_share(32 * 112)) + 128 / 4096 * fc1_memory + 4e-6
    fc2 = 2.0 * 4096 * 4096 * (14336 + 128) / (PEAK * _wave_share(32 * 16)) + 128 / 4096 * fc2_memory + 4e-6
    assert expert_gemm_roofline(sequential, 2.0, 4096.0, 28672.0, 4096.0, False, 2.0, 1.0) == pytest.approx(
        2.0 * fc1, rel=1e-12)
    assert expert_gemm_roofline(sequential, 2.0, 4096.0, 4096.0, 14336.0, False, 2.0, 1.0) == pytest.approx(
        2.0 * fc2, rel=1e-12)
    # the grouped kernel: one launch, 1,024 tiles in 7 waves, and 128 / 4,096 of its weight stream exposed
    compute = 2.0 * 2 * 4096 * 4096 * (14336 + 128) / (PEAK * _wave_share(2 * 32 * 16))
    grouped_fc2 = compute + 128 / 4096 * 2 * fc2_memory + 4e-6
    assert expert_gemm_roofline(grouped, 2.0, 4096.0, 4096.0, 14336.0, False, 2.0, 1.0) == pytest.approx(
        grouped_fc2, rel=1e-12)
    assert 2.0 * fc2 / grouped_fc2 == pytest.approx(1.146, abs=1e-3)


def test_few_rows_per_expert_expose_the_weight_stream_in_the_loop_as_in_the_grouped_gemm():
    """Two local experts of 128 rows (review12 #5): FC1 of one expert is 1 x 112 tiles of 128 x 256, under one wave
    and not split (K 4,096 allows 16 splits but 148 / 112 rounds down to 1), Q = 112 / 148, and the grouped kernel's
    224 tiles have the same Q = 224 / 296. Compute 2 x 128 x 28,672 x 4,224 / (1.1025e15 x 112 / 148) = 37.16 us,
    memory (2 x 4,096 x 28,672 + 2 x 128 x 4,096 + 2 x 128 x 28,672) B / 6.4 TB/s = 38.01 us; one row tile per
    expert exposes all of the shorter bound (s = 1). Grouped: max(2c, 2w) + 2c + 4 us = 154.34 us; the loop:
    2 x (c + w + 4 us) = 158.34 us, one launch more and never less (before: 2 x (w + 4 us) = 84.0 us, 0.54x)."""
    grouped, sequential = _rows()
    c = 2.0 * 128 * 28672 * (4096 + 128) / (PEAK * 112 / 148)
    w = (2.0 * 4096 * 28672 + 2.0 * 128 * 4096 + 2.0 * 128 * 28672) / HBM
    assert c == pytest.approx(37.161e-6, rel=1e-4) and w == pytest.approx(38.011e-6, rel=1e-4)
    args = (2.0, 128.0, 28672.0, 4096.0, False, 2.0)
    assert expert_gemm_roofline(grouped, *args, 1.0) == pytest.approx(2.0 * (c + w) + 4e-6, rel=1e-12)
    assert expert_gemm_roofline(sequential, *args, 1.0) == pytest.approx(2.0 * (c + w + 4e-6), rel=1e-12)
    # 40 tiles of one expert (n 10,240) split K in 3 (Q = 120 / 148) where the grouped 80 tiles do not split
    # (Q = 80 / 148): the loop's own bounds would be 2 x (12.39 + 13.68) us = 52.1 us, below the grouped 64.5 us; it
    # is held at the grouped time (one cuBLAS GEMM per expert is what the grouped kernel measured), plus its launches
    grouped_narrow = expert_gemm_roofline(grouped, 2.0, 128.0, 10240.0, 4096.0, False, 2.0, 0.0)
    assert grouped_narrow == pytest.approx(64.52e-6, rel=1e-3)
    assert expert_gemm_roofline(sequential, 2.0, 128.0, 10240.0, 4096.0, False, 2.0, 1.0) == pytest.approx(
        grouped_narrow + 8e-6, rel=1e-12)
    for m in (16.0, 128.0, 1024.0, 4096.0):
        for launch in (0.0, 1.0):
            shape = (2.0, m, 28672.0, 4096.0, False, 2.0, launch)
            assert expert_gemm_roofline(sequential, *shape) >= expert_gemm_roofline(grouped, *shape) * (1 - 1e-12)


def test_each_expert_weight_gradient_is_its_own_launch():
    """FC1's weight gradient of one expert: a 4,096 x 28,672 output (3,584 tiles, Q as its forward) reduced over
    the expert's 4,096 rows, plus the read of the 4-byte main gradient it accumulates into, 4,096 x 28,672 x 4 B
    at 6.4 TB/s; two launches against the grouped kernel's one over 7,168 tiles."""
    grouped, sequential = _rows()
    one = 2.0 * 4096 * 28672 * (4096 + 128) / (PEAK * _wave_share(32 * 112)) + 4096 * 28672 * 4.0 / HBM + 4e-6
    assert expert_wgrad_roofline(sequential, 2.0, 4096.0, 28672.0, 4096.0, False, 4.0, 1.0) == pytest.approx(
        2.0 * one, rel=1e-12)
    both = 2.0 * 2 * 4096 * 28672 * (4096 + 128) / (PEAK * _wave_share(2 * 32 * 112)) \
        + 2 * 4096 * 28672 * 4.0 / HBM + 4e-6
    assert expert_wgrad_roofline(grouped, 2.0, 4096.0, 28672.0, 4096.0, False, 4.0, 1.0) == pytest.approx(
        both, rel=1e-12)


def test_one_local_expert_runs_the_same_gemms_and_no_loop():
    """EP 8 of 8 experts: SequentialMLP calls its one expert directly (experts.py line 1051): no cat, no extra
    activation; its weight gradient is the grouped one's (one group, one launch), and so is its forward GEMM (one
    expert's tiles and waves, 128 / 8,192 of min(compute, memory) exposed, one launch)."""
    grouped = row(**MIXTRAL, **B200, ep=8, dp=8)
    sequential = row(**MIXTRAL, **B200, ep=8, dp=8, moe_grouped_gemm=0)
    assert sequential_mlp_time(sequential) == 0.0 == sequential_mlp_time(grouped)
    args = (1.0, 8192.0, 28672.0, 4096.0, False, 4.0, 1.0)
    assert expert_wgrad_roofline(sequential, *args) == expert_wgrad_roofline(grouped, *args)
    compute = 2.0 * 8192 * 28672 * (4096 + 128) / (PEAK * _wave_share(64 * 112))
    memory = (2.0 * 4096 * 28672 + 2.0 * 8192 * 4096 + 2.0 * 8192 * 28672) / HBM
    for r in (sequential, grouped):
        assert expert_gemm_roofline(r, *args[:5], 2.0, 1.0) == pytest.approx(
            compute + 128 / 8192 * memory + 4e-6, rel=1e-12)


def test_the_loop_adds_its_activations_and_the_cat_to_both_passes():
    """Two local experts: one activation kernel more than the grouped MLP's, and the cat of 8,192 x 4,096 outputs
    at 4 B (forward; the split's gradient cat in backward): 2 x 4 us + 134.2 MB / 6.4 TB/s = 28.97 us a pass,
    charged to the layer's forward-only and backward-only slots; the layer's GEMMs move by the per-expert GEMMs."""
    grouped, sequential = _rows()
    assert SEQUENTIAL_CAT_BYTES == 4.0
    cat = 2.0 * 4e-6 + 4.0 * 8192 * 4096 / HBM
    assert sequential_mlp_time(sequential) == pytest.approx(cat, rel=1e-12) == pytest.approx(28.97152e-6, rel=1e-9)
    assert sequential_mlp_time(grouped) == 0.0
    work = {}
    for name, r in (("grouped", grouped), ("sequential", sequential)):
        work[name] = np.zeros(N_WORK)
        layer_costs(r, True, False, work[name])
    for slot in (W_FORWARD_ONLY, W_BACKWARD_MEM):
        assert work["sequential"][slot] - work["grouped"][slot] == pytest.approx(cat, rel=1e-9)
    routed = [expert_gemm_roofline(r, 2.0, 4096.0, 28672.0, 4096.0, False, 2.0, 1.0)
              + expert_gemm_roofline(r, 2.0, 4096.0, 4096.0, 14336.0, False, 2.0, 1.0) for r in (grouped, sequential)]
    assert work["sequential"][W_GEMM] - work["grouped"][W_GEMM] == pytest.approx(routed[1] - routed[0], rel=1e-9)
    # W_WGRAD is the weight gradients beyond the forward (no main-gradient read: the row states no fused
    # accumulation): each pass's per-expert difference, wgrad minus forward
    wgrad = [expert_wgrad_roofline(r, 2.0, 4096.0, 28672.0, 4096.0, False, 0.0, 1.0)
             + expert_wgrad_roofline(r, 2.0, 4096.0, 4096.0, 14336.0, False, 0.0, 1.0) for r in (grouped, sequential)]
    assert work["sequential"][W_WGRAD] - work["grouped"][W_WGRAD] == pytest.approx(
        (wgrad[1] - wgrad[0]) - (routed[1] - routed[0]), rel=1e-9)
