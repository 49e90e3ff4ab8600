"""The Hopper 16-bit GEMM efficiency from the sustained (power-saturated) matmul rate, and the residual diagnostic
(docs/model.md §11.30, issue 26).

Source: stas00/ml-engineering@082816f (branch fast-mamf) compute/accelerator/README.md, "Maximum Achievable Matmul
FLOPS comparison table": H200 SXM (GH100, 700 W) MSMF BF16 708.5 TFLOP/s at 8,192 x 8,448 x 20,480 (~693 W,
1,465 MHz), FP8 1,288.7 TFLOP/s at 8,448 x 8,192 x 16,384 (~693 W, 1,374 MHz); the model's GEMM time is
2 m n (k + k_half) / (P eta Q) (§11.3).
"""

import pytest

from fastmodel.kernels.roofline import gemm_roofline, tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.serve.api import columns
from fastmodel.spec.devices import device_table
from tests.bench_scripts import load_bench

ratio_spread = load_bench("h100_residual").ratio_spread

MSMF_BF16 = (708.5e12, 8192.0, 8448.0, 20480.0)
MSMF_FP8 = (1288.7e12, 8448.0, 8192.0, 16384.0)
HOPPER_700W_OR_MORE = ("h100", "h200", "gh200", "gh200-144gb")


def test_the_msmf_shapes_fill_whole_waves_by_hand():
    """8,192 x 8,448 in tiles of 128 x 256: 64 x 33 = 2,112 tiles, no padding; 8,448 x 8,192: 66 x 32 = 2,112.
    2,112 / 132 SMs = 16 full waves, so Q = 1 for both."""
    row = columns("llama3.1-8b", "H200", batch_size=1)
    assert (row[C["gemm_tile_m"]], row[C["gemm_tile_n"]], row[C["sm_count"]]) == (128.0, 256.0, 132.0)
    assert 64 * 33 == 66 * 32 == 2112 == 16 * 132
    for _, m, n, k in (MSMF_BF16, MSMF_FP8):
        assert tile_quantization(row, 1.0, m, n, k) == pytest.approx(1.0, abs=1e-12)


def test_eta_is_the_sustained_rate_over_the_tile_prologue_by_hand():
    """eta16 = (708.5 / 989) / (20,480 / 20,608) = 0.71638 / 0.99379 = 0.7209; eta8 = (1,288.7 / 1,979) /
    (16,384 / 16,512) = 0.65119 / 0.99225 = 0.6563. The files hold 0.72 (H100 SXM, H200 SXM, and GH200 through
    its 'at least H100's clocks' argument) and 0.65 (inside the source's 1-2% run-to-run)."""
    eta16 = MSMF_BF16[0] / 989e12 / (20480.0 / (20480.0 + 128.0))
    eta8 = MSMF_FP8[0] / 1979e12 / (16384.0 / (16384.0 + 128.0))
    assert eta16 == pytest.approx(0.7209, abs=5e-5)
    assert eta8 == pytest.approx(0.6563, abs=5e-5)
    devices = device_table()
    for name in HOPPER_700W_OR_MORE:
        assert devices[name]["gemm_k_half"] == 128.0
        assert devices[name]["gemm_eff_16"] == pytest.approx(eta16, abs=0.005)
        assert devices[name]["gemm_eff_8"] == pytest.approx(eta8, rel=0.02)


def test_the_model_runs_the_msmf_gemms_at_the_measured_rate():
    """One GEMM of each MSMF shape through the model's roofline on H200 and H100 (launch overhead left out):
    2 m n (k + 128) / (P eta Q) with Q = 1 gives back 708.5 TFLOP/s within the rounding of eta to 0.72 (0.12%) and
    1,288.7 within 0.65 / 0.6563 (1.0%). Both are compute-bound: 2,112 tiles of 128 x 256 at k = 16,384-20,480."""
    for gpu in ("H200", "H100"):
        row = columns("llama3.1-8b", gpu, batch_size=1)
        for fp8, (rate, m, n, k) in ((False, MSMF_BF16), (True, MSMF_FP8)):
            seconds = gemm_roofline(row, 1.0, m, n, k, fp8, 1.0 if fp8 else 2.0, 0.0)
            assert 2.0 * m * n * k / seconds == pytest.approx(rate, rel=0.011)


def test_the_a100_rate_stays_below_a_randn_measurement_by_hand():
    """The A100 file (no MSMF published) is not changed. Its 8,192^3 GEMM: 64 x 32 = 2,048 tiles over 108 SMs is
    19 waves (2,052 slots), Q = 2,048 / 2,052; depth 8,192 / 8,320; 312 TF x 0.80 x Q x depth = 245.3 TFLOP/s,
    4.9% below the 258 TFLOP/s cuBLAS ran on randn inputs at the 400 W limit (He, thonking.ai, "Strangely, Matrix
    Multiplications on GPUs Run Faster When Given 'Predictable' Data")."""
    row = columns("llama3.1-8b", "A100", batch_size=1)
    q = 2048.0 / 2052.0
    assert tile_quantization(row, 1.0, 8192.0, 8192.0, 8192.0) == pytest.approx(q, rel=1e-12)
    rate = 2.0 * 8192.0**3 / gemm_roofline(row, 1.0, 8192.0, 8192.0, 8192.0, False, 2.0, 0.0)
    assert rate == pytest.approx(312e12 * 0.80 * q * 8192.0 / 8320.0, rel=1e-9)
    assert rate / 258e12 == pytest.approx(0.951, abs=0.001)


def test_the_residual_diagnostic_finds_the_component_it_scales_with():
    """Three rows whose residual E is 0.2 x the GEMM time: E / GEMM has mean 0.2 and no spread; E / memory-bound
    is 0.2 / 1, 0.4 / 4, 0.6 / 1 = 0.2, 0.1, 0.6 (mean 0.3, spread std / mean). A component under 1% of the step
    is left out; fewer than two rows give NaN."""
    rows = [
        dict(E=0.2 * g, time_gemm=g, time_memory_bound=mb, predicted=10.0)
        for g, mb in ((1.0, 1.0), (2.0, 4.0), (3.0, 1.0))
    ]
    mean, cv = ratio_spread(rows, "time_gemm")
    assert mean == pytest.approx(0.2) and cv == pytest.approx(0.0, abs=1e-12)
    ratios = [0.2, 0.1, 0.6]
    mean, cv = ratio_spread(rows, "time_memory_bound")
    assert mean == pytest.approx(0.3)
    assert cv == pytest.approx((sum((r - 0.3) ** 2 for r in ratios) / 3) ** 0.5 / 0.3)
    rows[0]["time_memory_bound"] = 0.05  # 0.5% of the 10 s step: left out
    assert ratio_spread(rows, "time_memory_bound")[0] == pytest.approx((0.1 + 0.6) / 2)
    assert ratio_spread(rows[:1], "time_gemm")[0] != ratio_spread(rows[:1], "time_gemm")[0]  # NaN
