"""Diagnostic: the MLPerf GPT-3 175B rows at micro-batch 1 against the one at micro-batch 2 (docs/model.md §11.47).

A diagnostic, nothing applied: prints the figures §11.47 quotes from the model's current predictions of the nine
dev MLPerf rows of tests/data/runs_dev.jsonl (no held-out row): the residual E = measured - predicted step, the
line E = a + b m through the seven v3.1 rows, the residual per layer and micro-batch of the two v4.0 rows, its
split c + d s, and the chunk-serial bound of the userbuffers GEMM chunks each submission ran, subtracted. The
figures follow the model: rerun this after a change that moves the rows (tests/lm/test_mlperf_microbatch_contrast.py
asserts the conclusions, not the digits).

Sources of the chunk counts (the GEMM chunks each overlapped op runs; hand derivations in the tests):

- v3.1: mlcommons/training_results_v3.1 d06288b ``NVIDIA/benchmarks/gpt3/implementations/pytorch/conf/tp_overlap/
  h100tp4pp8mbs1.yaml`` lines 26-40 (TE 09ba842, the image of f33f944's ``Dockerfile``): ``qkv_fprop``,
  ``fc1_fprop``, ``proj_dgrad`` ring exchange with ``aggregate: 0`` (4 chunk GEMMs of T/4 rows), ``fc2_dgrad``
  with ``aggregate: 1`` (2 chunk GEMMs of T/2 rows); ``proj_fprop`` and ``fc2_fprop`` one atomic GEMM each
  (``config_common.sh`` ``NVTE_UB_SPLIT_RS=0``, ``NVTE_UB_ATOMIC_GEMM_RS=1``).
- v4.0: mlcommons/training_results_v4.0 6fe9543 ``NVIDIA/benchmarks/gpt3/implementations/nemo/conf/tp_overlap/
  h100tp4mbs2.yaml`` (= ``h100tp4mbs1.yaml``; TE v1.6rc1): the four all-gather GEMMs in 4 chunks. n64 (micro-batch
  2): ``proj_fprop`` atomic, ``fc2_fprop`` ring exchange (4 chunks). n1344 (micro-batch 1,
  ``config_DGXH100_1344x8x6x4x6_mbs1_cg.sh``: ``NVTE_UB_ATOMIC_GEMM_RS_PROJ=0``, ``FC2_FPROP_METHOD=pipeline``,
  ``NVTE_UB_ATOMIC_GEMM_RS_FC2=1``): ``proj_fprop`` split pipeline (4 chunks), ``fc2_fprop`` atomic.

    FASTMODEL_JIT=0 python bench/mlperf_microbatch_contrast.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
V31 = "mlperf-v31-gpt3-175b-"
V40_MB2 = "mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo"
V40_MB1 = "mlperf-v40-gpt3-175b-eos-dfw_n1344_ngc24.04_nemo"
RUNS = Path(__file__).resolve().parents[1] / "tests" / "data" / "runs_dev.jsonl"


def predicted_rows(runs: Path = RUNS) -> dict:
    """{id: (columns, measured step, predicted step)} of the nine dev MLPerf rows."""
    from fastmodel.lm.records import read_records
    from fastmodel.lm.validate import predict_records

    ids = [V31 + i for i in V31_DEV] + [V40_MB2, V40_MB1]
    records = [r for r in read_records(runs) if r.id in ids]
    assert sorted(r.id for r in records) == sorted(ids)
    out = predict_records(records, np.zeros(len(records), dtype=np.int8))
    return {r.id: (r.columns, r.measured["step_time_s"], out["step_time"][i]) for i, r in enumerate(records)}


def shape(col) -> tuple[float, float, float]:
    """(tokens a micro-batch, micro-batches a step, layers a rank)."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    mb = col[C["micro_batch"]]
    return 2048.0 * mb, col[C["global_batch"]] / col[C["dp"]] / mb, col[C["layers"]] / col[C["pp"]]


def gemm(col, m, n, k) -> float:
    """The model's seconds of one m x n x k GEMM of the row (its tile and wave rule, §11.3)."""
    from fastmodel.kernels.roofline import gemm_bounds

    return gemm_bounds(col, 1.0, m, n, k, True, 1.0)[0]


def chunk_serial(col, chunks: dict) -> float:
    """Seconds a layer and micro-batch the chunk GEMMs add if they run one after another (no stream overlap)."""
    t = shape(col)[0]
    return sum(c * gemm(col, t / c, *NK[op]) - gemm(col, t, *NK[op]) for op, c in chunks.items())


def v31_fit(rows: dict) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Least squares residual = a + b m over the seven v3.1 dev rows (m = 128, 16, 8): (a s, b s a micro-batch,
    m, residuals)."""
    m = np.array([shape(rows[V31 + i][0])[1] for i in V31_DEV])
    r = np.array([rows[V31 + i][1] - rows[V31 + i][2] for i in V31_DEV])
    b, a = np.polyfit(m, r, 1)
    return a, b, m, r


def per_layer(rows: dict, a: float) -> dict:
    """The v4.0 rows' residual a layer and micro-batch, v3.1's a carried over [A] (two rows of different shape
    cannot separate their own)."""
    out = {}
    for rid in (V40_MB2, V40_MB1):
        col, measured, predicted = rows[rid]
        _, micro, layers = shape(col)
        out[rid] = (measured - predicted - a) / (micro * layers)
    return out


def left_after_bound(rows: dict, a: float, b: float) -> dict:
    """Residual minus the chunk-serial bound, a layer and micro-batch: {"v31", "v40_mbs2", "v40_mbs1_cg"}."""
    per = per_layer(rows, a)
    left = {"v31": b / 12.0 - chunk_serial(rows[V31 + "nvidia-n96"][0], CHUNKS["v31"])}
    for rid, cfg in ((V40_MB2, "v40_mbs2"), (V40_MB1, "v40_mbs1_cg")):
        left[cfg] = per[rid] - chunk_serial(rows[rid][0], CHUNKS[cfg])
    return left


def fp8_bookkeeping_bound(col) -> float:
    """§11.29's FP8 bookkeeping bound a layer and micro-batch: 3 x 2 x 6 kernels at ``kernel_overhead_s``."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    return 3 * 2 * 6 * col[C["kernel_overhead_s"]]


def main() -> None:
    from fastmodel.registry.lm import COLUMN_INDEX as C

    rows = predicted_rows()
    a, b, m, r = v31_fit(rows)
    print(f"v3.1 line E = a + b m: a = {a:.4f} s, b = {1e3 * b:.2f} ms a micro-batch "
          f"({1e3 * b / 12:.3f} ms a layer), largest distance {1e3 * np.max(np.abs(r - (a + b * m))):.1f} ms")
    per = per_layer(rows, a)
    naked = per_layer(rows, 0.0)
    for rid, name in ((V40_MB1, "n1344 (micro-batch 1)"), (V40_MB2, "n64 (micro-batch 2)")):
        print(f"v4.0 {name}: {1e3 * per[rid]:.3f} ms a layer and micro-batch (a = 0: {1e3 * naked[rid]:.3f})")
    for mb1, what in ((b / 12.0, "v3.1"), (per[V40_MB1], "v4.0 n1344")):
        d = per[V40_MB2] - mb1
        print(f"split against {what}: d = {1e3 * d:.3f} ms a sequence, c = {1e3 * (mb1 - d):.2f} ms")
    col2 = rows[V40_MB2][0]
    print(f"the micro-batch-2 figure in kernels at kernel_overhead_s: {per[V40_MB2] / col2[C['kernel_overhead_s']]:.1f}")
    left = left_after_bound(rows, a, b)
    book = fp8_bookkeeping_bound(col2)
    for cfg, value in left.items():
        print(f"residual minus chunk-serial bound, {cfg}: {1e3 * value:.3f} ms a layer and micro-batch "
              f"(minus the FP8 bookkeeping bound {1e3 * book:.3f}: {1e3 * (value - book):.3f})")


if __name__ == "__main__":
    main()
