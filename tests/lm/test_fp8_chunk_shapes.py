"""FP8 GEMM rate at MLPerf GPT-3's chunk shapes (docs/model.md §11.35): quantified negative result, nothing applied.

Hand derivations on the model's own shape rule (H100 file: 132 SMs, 128 x 256 tiles, k_half 128, FP8 at 0.65 of
1,979 TFLOP/s) against the M-resolved Hopper FP8 GEMM figures found (DeepGEMM's block-scaled kernel, the only
kernel with published rates at several M for N, K in the thousands), and the chunk rate that would close the v3.1
residual:

- sgl-project/sglang PR #3893 (H200, tp 1, DeepGEMM column, microseconds): m 2,048 / 4,096 at n 24,576, k 7,168 ran
  731.423974 / 1,354.048014 us: rate(2,048) / rate(4,096) = 1,354.048014 / (2 x 731.423974) = 0.9256.
- sgl-project/sglang PR #4769 (GPU not named in the text read; DeepGEMM rows, TFLOPS): n 7,168, k 16,384: m 1,024 /
  2,048 / 4,096 = 701.92 / 970.14 / 1,038.33; n 4,096, k 7,168: 612.07 / 802.33 / 939.99.
- The model's rate ratio between those M is Q(M/2) / Q(M) (the depth factor does not depend on M; every shape is
  compute-bound), 1 or 0.848 / 0.970 where the tile counts fall on different wave counts.
"""

import pytest

from fastmodel.kernels.roofline import gemm_bounds, tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.data_records import lowered_and_predicted

T, H, F, TP = 2048.0, 12288.0, 49152.0, 4.0
# the four ring-exchange AG GEMMs of one layer (TE split_overlap_ag, docs/model.md §11.29): (m, n, k)
AG_OPS = ((T, 3 * H / TP, H), (T, F / TP, H), (T, H / TP, H), (T, F / TP, H))
# DeepGEMM TFLOPS by M, sgl-project/sglang PR #4769: {(n, k): {m: TFLOPS}}
PR4769 = {
    (7168.0, 16384.0): {1024.0: 701.92, 2048.0: 970.14, 4096.0: 1038.33},
    (4096.0, 7168.0): {1024.0: 612.07, 2048.0: 802.33, 4096.0: 939.99},
}
# DeepGEMM microseconds, sgl-project/sglang PR #3893, H200 tp 1, n 24,576, k 7,168
PR3893_US = {2048.0: 731.423974, 4096.0: 1354.048014}


@pytest.fixture(scope="module")
def v31():
    return lowered_and_predicted("mlperf-v31-gpt3-175b-nvidia-n64")


def _rate(col, m, n, k):
    """The model's FP8 rate in TFLOP/s of one (m x k) @ (k x n) GEMM (compute bound)."""
    return 2.0 * m * n * k / gemm_bounds(col, 1.0, m, n, k, True, 1.0)[0] / 1e12


def test_source_shapes_quantize_by_hand(v31):
    col = v31[0].columns
    assert col[C["sm_count"]] == 132 and col[C["gemm_tile_m"]] == 128 and col[C["gemm_tile_n"]] == 256
    # n 7,168 -> 28 column tiles: 8 x 28 = 224 tiles in 2 waves, 448 in 4, 896 in 7
    assert tile_quantization(col, 1.0, 1024.0, 7168.0, 16384.0) == pytest.approx(224 / 264, rel=1e-12)
    assert tile_quantization(col, 1.0, 2048.0, 7168.0, 16384.0) == pytest.approx(448 / 528, rel=1e-12)
    assert tile_quantization(col, 1.0, 4096.0, 7168.0, 16384.0) == pytest.approx(896 / 924, rel=1e-12)
    # n 4,096 -> 16 column tiles: 128 tiles (< 132, split-K floor(132/128) = 1), 256 in 2 waves, 512 in 4
    assert tile_quantization(col, 1.0, 1024.0, 4096.0, 7168.0) == pytest.approx(128 / 132, rel=1e-12)
    assert tile_quantization(col, 1.0, 2048.0, 4096.0, 7168.0) == pytest.approx(256 / 264, rel=1e-12)
    assert tile_quantization(col, 1.0, 4096.0, 4096.0, 7168.0) == pytest.approx(512 / 528, rel=1e-12)
    # n 24,576 -> 96 column tiles: 1,536 tiles in 12 waves, 3,072 in 24
    assert tile_quantization(col, 1.0, 2048.0, 24576.0, 7168.0) == pytest.approx(1536 / 1584, rel=1e-12)
    assert tile_quantization(col, 1.0, 4096.0, 24576.0, 7168.0) == pytest.approx(3072 / 3168, rel=1e-12)


def test_halving_m_costs_the_block_scaled_kernel_more_than_the_shape_rule(v31):
    col = v31[0].columns
    # (source ratio rate(M/2)/rate(M), model ratio by hand), per halving
    h200 = PR3893_US[4096.0] / (2.0 * PR3893_US[2048.0])
    assert h200 == pytest.approx(0.9256, abs=1e-4)
    pairs = [(h200, 1.0, (2048.0, 24576.0, 7168.0))]
    for (n, k), by_m in PR4769.items():
        pairs.append((by_m[1024.0] / by_m[2048.0], 1.0, (1024.0, n, k)))
        half = (448 / 528) / (896 / 924) if n == 7168.0 else 1.0
        pairs.append((by_m[2048.0] / by_m[4096.0], half, (2048.0, n, k)))
    for source, by_hand, (m, n, k) in pairs:
        assert _rate(col, m, n, k) / _rate(col, 2.0 * m, n, k) == pytest.approx(by_hand, rel=1e-12)
    below_2048 = [s for s, _, (m, _, _) in pairs if m < 2048.0]
    assert below_2048 == pytest.approx([0.7235, 0.7629], abs=1e-4)
    # every halving at or below 2,048 rows loses 7-28% beyond the model's quantization; one above is 7% kinder
    assert all(s < b - 0.07 for s, b, (m, _, _) in pairs if m <= 2048.0 and b == 1.0)
    assert pairs[2][0] > pairs[2][1] + 0.05


def test_the_chunk_rate_that_would_close_the_residual(v31):
    record, out = v31
    col = record.columns
    m = col[C["global_batch"]] / col[C["dp"]] / col[C["micro_batch"]]
    residual = (record.measured["step_time_s"] - out["step_time"][0]) / m
    layers = col[C["layers"]] / col[C["pp"]]
    # 13.45 ms in §11.35; 13.58 with the SP all-gathers' FP8 bytes and the weight-gradient re-gathers
    # (docs/model.md §11.40, §11.41); 13.42 with the LM head's own input gather and reduce-scatter (§11.44); 9.50
    # with the fused weight gradients' read of the (BF16) main gradient (§11.46); 9.34 with the per-step FP32
    # embedding terms (§11.54: +19.6 ms a step, spread over the 128 micro-batches here); 10.00 since the record
    # states NeMo's learned absolute positions (issue 26: no rotary kernel in a layer); 9.20 since it states the
    # FlashAttention-2 kernels TE 09ba842 ran (§11.60); 8.52 since it states TE's QKV copies around them (§11.60);
    # 8.38 since the chain sends share the NIC with the per-chunk DP collectives (§11.65: +18.5 ms a step); 8.33
    # since the FP8 re-cast of the weights once a step (§11.65 C: +6.1 ms a step); 7.99 since the other ranks' casts
    # on micro-batch 0's chain (§11.65 C: +42.6 ms a step); 9.05 since the record states NeMo's delayed scaling
    # (§11.19: activation casts 4 B an element, not the generic 6; weight casts 4 B, not 3: -135.2 ms a step)
    assert layers == 12.0 and 1e3 * residual == pytest.approx(9.05, abs=0.1)
    whole = sum(gemm_bounds(col, 1.0, *op, True, 1.0)[0] for op in AG_OPS)
    chunks = sum(TP * gemm_bounds(col, 1.0, op[0] / TP, op[1], op[2], True, 1.0)[0] for op in AG_OPS)
    # by hand, in units of 2 T (k + 128) / (P eta) per output column: n / Q summed over the four ops
    # whole: 9,216 x 660/576 + 2 x 12,288 x 792/768 + 3,072 x 264/192 = 40,128
    # chunks: 9,216 x 264/144 + 2 x 12,288 x 264/192 + 3,072 x 132/96 = 54,912
    unit = 2.0 * T * (H + 128.0) / (col[C["peak_flops_8"]] * col[C["gemm_eff_8"]])
    assert whole == pytest.approx(40128.0 * unit, rel=1e-12)
    assert chunks == pytest.approx(54912.0 * unit, rel=1e-12)
    assert 1e3 * layers * whole == pytest.approx(19.04, abs=0.01)
    assert 1e3 * layers * chunks == pytest.approx(26.05, abs=0.01)
    # chunks one after another at phi x the model's chunk rate: layers (chunks/phi - whole) = residual
    phi = layers * chunks / (residual + layers * whole)
    assert phi == pytest.approx(54912.0 / (residual / (layers * unit) + 40128.0), rel=1e-12)
    assert phi == pytest.approx(0.927, abs=0.005)     # 0.80 in §11.35, before §11.46; 0.913 before §11.54; 0.918
    # before the record stated its learned positions (issue 26); 0.897 before it stated FlashAttention-2 and 0.923
    # before it stated TE's QKV copies (§11.60); 0.945 before the chain sends shared the NIC, 0.950 before the
    # weights' FP8 re-cast, 0.952 before the other ranks' casts on the chain (§11.65), 0.964 before the record
    # stated delayed scaling (§11.19)
    # the QKV chunk (512 x 9,216 x 12,288) and FC chunk (512 x 12,288 x 12,288) rates phi would imply, TFLOP/s
    assert _rate(col, 512.0, 9216.0, 12288.0) == pytest.approx(694.4, abs=0.1)
    # §11.35: 557 and 742; 555 and 740 before §11.44 charged the LM head's own input collectives; 557 and 743 before
    # §11.46 charged the main-gradient read; 634 and 845 before §11.54 charged the FP32 embedding terms; 637 and 850
    # before the record stated its learned positions (issue 26); 623 and 830 before it stated FlashAttention-2, 641
    # and 854 before it stated TE's QKV copies (§11.60); 656 and 875 before the chain sends shared the NIC, 660 and
    # 880 before the weights' FP8 re-cast, 661 and 882 before the other ranks' casts on the chain (§11.65); 669 and
    # 893 before the record stated delayed scaling (§11.19)
    assert phi * _rate(col, 512.0, 9216.0, 12288.0) == pytest.approx(644, abs=1)
    assert phi * _rate(col, 512.0, 12288.0, 12288.0) == pytest.approx(859, abs=1)
