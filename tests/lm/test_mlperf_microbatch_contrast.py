"""The MLPerf GPT-3 175B rows at micro-batch 1 against the one at micro-batch 2 (docs/model.md §11.47).

A diagnostic, nothing applied. The chunk counts of the userbuffers GEMMs each submission ran (mlcommons/
training_results_v3.1 d06288b ``NVIDIA/benchmarks/gpt3/implementations/pytorch/conf/tp_overlap/h100tp4pp8mbs1.yaml``,
TE 09ba842 of f33f944's image; mlcommons/training_results_v4.0 6fe9543 ``NVIDIA/benchmarks/gpt3/implementations/
nemo/conf/tp_overlap/h100tp4mbs2.yaml`` and ``config_DGXH100_1344x8x6x4x6_mbs1_cg.sh``, TE v1.6rc1) and the
helpers are bench/mlperf_microbatch_contrast.py's, which prints §11.47's figures from the current predictions.
Here: the chunk-serial bounds derived by hand in the model's tile and wave rule (H100: 132 SMs, 128 x 256 tiles,
split-K below one wave), and the section's conclusions on the residual (E = measured - predicted), asserted as
signs and orderings, not as the residual's digits, which follow the model.
"""

import numpy as np
import pytest

from fastmodel.kernels.roofline import tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.bench_scripts import load_bench

contrast = load_bench("mlperf_microbatch_contrast")
H, F, TP, NK, CHUNKS = contrast.H, contrast.F, contrast.TP, contrast.NK, contrast.CHUNKS
V40_MB2, V40_MB1 = contrast.V40_MB2, contrast.V40_MB1
_gemm, _chunk_serial = contrast.gemm, contrast.chunk_serial


@pytest.fixture(scope="module")
def rows():
    """{id: (columns, measured step, predicted step)} of the nine dev MLPerf rows (no held-out row)."""
    return contrast.predicted_rows()


def test_the_aggregated_fc2_dgrad_chunks_lose_nothing_by_hand(rows):
    col = rows["mlperf-v31-gpt3-175b-nvidia-n96"][0]
    t = 2048.0
    # 1,024-row chunks of FC2 dgrad (n 12,288): 8 x 48 = 384 tiles in 3 waves of 132, the whole 768 in 6: equal Q
    assert tile_quantization(col, 1.0, t / 2, F / TP, H) == pytest.approx(384 / 396, rel=1e-12)
    assert tile_quantization(col, 1.0, t, F / TP, H) == pytest.approx(768 / 792, rel=1e-12)
    qkv, fc = _gemm(col, t, 3 * H / TP, H), _gemm(col, t, F / TP, H)
    # per layer 0.6 t_QKV + t_FC / 3 (FC1 fprop only), not §11.29's 0.6 t_QKV + 2 t_FC / 3: 5.00 ms, not 7.01
    assert _chunk_serial(col, CHUNKS["v31"]) == pytest.approx(0.6 * qkv + fc / 3.0, rel=1e-12)
    assert 1e3 * 12 * _chunk_serial(col, CHUNKS["v31"]) == pytest.approx(5.00, abs=0.01)
    # §11.35's chunk rate that would close the residual: phi = L t_chunks / (R + L t_whole), R = 9.50 ms (§11.46)
    whole = 12 * sum(_gemm(col, t, *NK[op]) for op in CHUNKS["v31"])
    assert 1e3 * whole == pytest.approx(19.04, abs=0.01)
    assert (whole + 12 * _chunk_serial(col, CHUNKS["v31"])) / (9.50e-3 + whole) == pytest.approx(0.84, abs=0.005)


def test_v40_chunk_serial_bounds_by_hand(rows):
    col2, col1 = rows[V40_MB2][0], rows[V40_MB1][0]
    # micro-batch 2 (4,096 tokens): 1,024-row chunks; QKV 8 x 36 = 288 tiles / 396 vs 1,152 / 1,188, proj dgrad
    # 8 x 12 = 96 tiles (one partial wave, no split-K: 132 // 96 = 1) vs 384 / 396; FC1, FC2 dgrad and fprop equal Q
    t = 4096.0
    assert tile_quantization(col2, 1.0, t / 4, 3 * H / TP, H) == pytest.approx(288 / 396, rel=1e-12)
    assert tile_quantization(col2, 1.0, t / 4, H / TP, H) == pytest.approx(96 / 132, rel=1e-12)
    two = (_gemm(col2, t, 3 * H / TP, H) + _gemm(col2, t, H / TP, H)) / 3.0
    assert _chunk_serial(col2, CHUNKS["v40_mbs2"]) == pytest.approx(two, rel=1e-12)
    assert 1e3 * _chunk_serial(col2, CHUNKS["v40_mbs2"]) == pytest.approx(0.334, abs=0.001)
    # micro-batch 1, the _cg config: v3.1's four at 4 chunks (0.6 t_QKV + 2 t_FC / 3) + the split proj fprop
    # (512 x 12,288 x 3,072: 4 x 48 = 192 tiles / 264 vs 768 / 792, 1/3 longer)
    t = 2048.0
    one = 0.6 * _gemm(col1, t, 3 * H / TP, H) + 2.0 * _gemm(col1, t, F / TP, H) / 3.0 + _gemm(col1, t, H, H / TP) / 3.0
    assert _chunk_serial(col1, CHUNKS["v40_mbs1_cg"]) == pytest.approx(one, rel=1e-12)
    assert 1e3 * _chunk_serial(col1, CHUNKS["v40_mbs1_cg"]) == pytest.approx(0.628, abs=0.001)


def test_the_residual_per_layer_and_micro_batch(rows):
    """§11.47's conclusions: the seven v3.1 rows lie within 12 ms of one line a + b m with b > 0 (a residual per
    micro-batch); the micro-batch of two sequences leaves less of it a layer and micro-batch than v3.1 (0.55 of it
    since the records state learned positions, issue 26; less than half before); split as c + d s (s sequences),
    both micro-batch-1 figures give d < 0, so no non-negative fixed cost plus non-negative per-token cost fits, and
    a fixed cost per operation, bounded by the micro-batch-2 figure, leaves part of the micro-batch-1 residual
    unexplained. (Within 11 ms before §11.65 timed the DP collectives one per chunk, each with its ring latency,
    which grows with dp: n1280 is now 11.9 ms off the line.)"""
    a, b, m, r = contrast.v31_fit(rows)
    assert sorted(set(m)) == [8.0, 16.0, 128.0]
    assert b > 0 and np.max(np.abs(r - (a + b * m))) < 0.012
    per_layer = contrast.per_layer(rows, a)
    assert 0 < per_layer[V40_MB2] < b / 12.0
    assert per_layer[V40_MB1] > per_layer[V40_MB2]
    for mb1 in (b / 12.0, per_layer[V40_MB1]):
        d = per_layer[V40_MB2] - mb1
        assert d < 0 and mb1 - d > 0


def test_the_chunk_serial_bound_against_the_contrast(rows):
    """At its worst (no stream overlap) the chunk-serial bound leaves v4.0 n1344 more than v3.1, v3.1 something,
    and n64 something (it took three quarters of n64's residual since the records state learned positions, issue
    26, all of it within 5 % before; 46 % since they state NeMo's delayed scaling, §11.19, whose cheaper
    activation casts lower the micro-batch-heavy rows' predictions); §11.29's FP8 bookkeeping bound (3 x 2 x 6
    kernels at ``kernel_overhead_s``) closes none of the three rows (it took all of n64's but 65 us a layer before
    the recipe was stated). (v3.1 left more than n1344, and the bookkeeping bound took all of both v4.0 rows',
    before §11.65 priced the chain sends' share of the NIC, each chunk collective's latency and the weights' FP8
    re-cast, the other ranks' on the chain included: they lowered the v3.1 a from 0.068 to -0.015 s, and the v4.0
    rows carry v3.1's a; 20 us before the chain's casts.)"""
    a, b, _, _ = contrast.v31_fit(rows)
    left = contrast.left_after_bound(rows, a, b)
    assert left["v40_mbs1_cg"] > left["v31"] > 0
    assert 0 < left["v40_mbs2"] < contrast.per_layer(rows, a)[V40_MB2]
    book = contrast.fp8_bookkeeping_bound(rows[V40_MB2][0])
    assert book == pytest.approx(36 * rows[V40_MB2][0][C["kernel_overhead_s"]], rel=1e-12)
    assert min(left["v31"], left["v40_mbs1_cg"], left["v40_mbs2"]) - book > 0
