"""The MLPerf GPT-3 175B rows at micro-batch 1 against the one at micro-batch 2 (docs/model.md §11.47).

A diagnostic, nothing applied: the residual per layer and micro-batch of the dev rows, the algebra that rules out
any split of it into a fixed per-operation cost plus a per-token cost, and the chunk-serial bound of the
userbuffers GEMM chunks recomputed per row from the overlap settings each submission ran (hand derivations in the
model's tile and wave rule, H100: 132 SMs, 128 x 256 tiles, split-K below one wave):

- v3.1 (TE 09ba842; ``conf/tp_overlap/h100tp4pp8mbs1.yaml``): ``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad`` ring
  exchange with ``aggregate: 0`` (4 chunk GEMMs of T/4 rows), ``fc2_dgrad`` with ``aggregate: 1`` (2 chunk GEMMs of
  T/2 rows, ``split_overlap_ag``'s aggregate path); the reduce-scatter GEMMs ``proj_fprop`` and ``fc2_fprop`` are
  one atomic GEMM each (``config_common.sh`` ``NVTE_UB_SPLIT_RS=0``, ``NVTE_UB_ATOMIC_GEMM_RS=1``).
- v4.0 (TE v1.6rc1; ``h100tp4mbs1.yaml`` = ``h100tp4mbs2.yaml``): the four all-gather GEMMs in 4 chunks. n64
  (micro-batch 2): ``proj_fprop`` atomic, ``fc2_fprop`` ring exchange (4 chunks). n1344 (micro-batch 1,
  ``NVTE_UB_ATOMIC_GEMM_RS_PROJ=0``, ``FC2_FPROP_METHOD=pipeline``, ``NVTE_UB_ATOMIC_GEMM_RS_FC2=1``):
  ``proj_fprop`` split pipeline (4 chunks), ``fc2_fprop`` atomic.
"""

import numpy as np
import pytest

from fastmodel.kernels.roofline import gemm_bounds, tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.data_records import DATA

H, F, TP = 12288.0, 49152.0, 4.0
# (n, k) of each overlapped GEMM, m = the micro-batch's tokens (sequence parallel: the whole sequence per rank)
NK = {"qkv_fprop": (3 * H / TP, H), "fc1_fprop": (F / TP, H), "proj_dgrad": (H / TP, H), "fc2_dgrad": (F / TP, H),
      "proj_fprop": (H, H / TP), "fc2_fprop": (H, F / TP)}
# chunk GEMMs each overlapped op runs, per submission (absent: one GEMM, atomic or not overlapped by chunks)
CHUNKS = {
    "v31": {"qkv_fprop": 4, "fc1_fprop": 4, "proj_dgrad": 4, "fc2_dgrad": 2},
    "v40_mbs2": {"qkv_fprop": 4, "fc1_fprop": 4, "proj_dgrad": 4, "fc2_dgrad": 4, "fc2_fprop": 4},
    "v40_mbs1_cg": {"qkv_fprop": 4, "fc1_fprop": 4, "proj_dgrad": 4, "fc2_dgrad": 4, "proj_fprop": 4},
}
V31_DEV = ["nvidia-n96", "nvidia-n512", "nvidia-n768", "nvidia-n1024", "nvidia-n1280", "nvidia-n1344", "azure-n1344"]
V40_MB2 = "mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo"
V40_MB1 = "mlperf-v40-gpt3-175b-eos-dfw_n1344_ngc24.04_nemo"


@pytest.fixture(scope="module")
def rows():
    """{id: (columns, measured step, predicted step)} of the nine dev MLPerf rows (no held-out row)."""
    from fastmodel.lm.records import read_records
    from fastmodel.lm.validate import predict_records

    ids = ["mlperf-v31-gpt3-175b-" + i for i in V31_DEV] + [V40_MB2, V40_MB1]
    records = [r for r in read_records(DATA / "runs_dev.jsonl") if r.id in ids]
    assert sorted(r.id for r in records) == sorted(ids)
    out = predict_records(records, np.zeros(len(records), dtype=np.int8))
    return {r.id: (r.columns, r.measured["step_time_s"], out["step_time"][i]) for i, r in enumerate(records)}


def _shape(col):
    """(tokens a micro-batch, micro-batches a step, layers a rank)."""
    mb = col[C["micro_batch"]]
    return 2048.0 * mb, col[C["global_batch"]] / col[C["dp"]] / mb, col[C["layers"]] / col[C["pp"]]


def _gemm(col, m, n, k):
    return gemm_bounds(col, 1.0, m, n, k, True, 1.0)[0]


def _chunk_serial(col, chunks):
    """Seconds a layer and micro-batch the chunk GEMMs add if they run one after another (no stream overlap)."""
    t = _shape(col)[0]
    return sum(c * _gemm(col, t / c, *NK[op]) - _gemm(col, t, *NK[op]) for op, c in chunks.items())


def _v31_fit(rows):
    """Least squares residual = a + b m over the seven v3.1 dev rows (m = 128, 16, 8): (a s, b s a micro-batch)."""
    m = np.array([_shape(rows["mlperf-v31-gpt3-175b-" + i][0])[1] for i in V31_DEV])
    r = np.array([rows["mlperf-v31-gpt3-175b-" + i][1] - rows["mlperf-v31-gpt3-175b-" + i][2] for i in V31_DEV])
    b, a = np.polyfit(m, r, 1)
    return a, b, m, r


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
    a, b, m, r = _v31_fit(rows)
    assert sorted(set(m)) == [8.0, 16.0, 128.0]
    assert 1e3 * b == pytest.approx(8.94, abs=0.01)  # ms a micro-batch, 12 layers: 0.745 ms a layer
    assert a == pytest.approx(0.0932, abs=0.0002)  # s a step, whatever the micro-batches
    assert np.max(np.abs(r - (a + b * m))) < 0.011  # the seven rows within 11 ms of the line
    per_layer = {}
    for rid in (V40_MB2, V40_MB1):
        col, measured, predicted = rows[rid]
        _, micro, layers = _shape(col)
        # v4.0's per-step part is not separable from two rows of different shape: v3.1's a is carried over [A]
        per_layer[rid] = (measured - predicted - a) / (micro * layers)
    assert 1e3 * per_layer[V40_MB1] == pytest.approx(0.683, abs=0.001)  # 16 layers, m = 6
    assert 1e3 * per_layer[V40_MB2] == pytest.approx(0.330, abs=0.001)  # 12 layers, m = 72, 2 sequences
    # r = c + d s (c per layer and micro-batch, whatever its tokens; d per sequence): both micro-batch-1 figures
    # against the micro-batch-2 one give d < 0, so no fixed per-operation cost plus per-token cost fits
    for mb1 in (b / 12.0, per_layer[V40_MB1]):
        d = per_layer[V40_MB2] - mb1
        assert d < -0.35e-3 and mb1 - d > 1.0e-3
    # a fixed cost per operation, the same at either micro-batch, is bounded by the micro-batch-2 figure: at most
    # 0.33 ms a layer (82 kernels at kernel_overhead_s), leaving >= 0.35 ms a layer at micro-batch 1
    assert per_layer[V40_MB2] / rows[V40_MB2][0][C["kernel_overhead_s"]] == pytest.approx(82.4, abs=0.1)


def test_the_chunk_serial_bound_against_the_contrast(rows):
    a, b, _, _ = _v31_fit(rows)
    v31 = _chunk_serial(rows["mlperf-v31-gpt3-175b-nvidia-n96"][0], CHUNKS["v31"])
    left = {"v31": b / 12.0 - v31}
    for rid, cfg in ((V40_MB2, "v40_mbs2"), (V40_MB1, "v40_mbs1_cg")):
        col, measured, predicted = rows[rid]
        _, micro, layers = _shape(col)
        left[cfg] = (measured - predicted - a) / (micro * layers) - _chunk_serial(col, CHUNKS[cfg])
    # the bound at its worst (no stream overlap) leaves v3.1 0.33 ms a layer and micro-batch, v4.0 nothing
    assert 1e3 * left["v31"] == pytest.approx(0.328, abs=0.002)
    assert 1e3 * left["v40_mbs1_cg"] == pytest.approx(0.055, abs=0.002)
    assert abs(left["v40_mbs2"]) < 0.01e-3
    # §11.29's FP8 bookkeeping bound, 1.73 ms a micro-batch over 12 layers, does not close v3.1's
    book = 3 * 2 * 6 * rows[V40_MB2][0][C["kernel_overhead_s"]]
    assert 1e3 * (left["v31"] - book) == pytest.approx(0.184, abs=0.002)
