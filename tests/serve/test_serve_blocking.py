"""The prefill-blocking estimator of bench/serve_blocking.py (docs/model_serving.md §S24), by hand."""


import pytest

from tests.bench_scripts import load_bench

serve_blocking = load_bench("serve_blocking")


def test_blocking_recovers_the_prefill_stall_from_two_output_lengths():
    """N = 4, T_d = 13 ms, each prefill stalls the decodes by ΔT = 30 ms: TPOT(O) = T_d + 3 ΔT / (O - 1), so
    TPOT(128) = 13 + 90/127 = 13.7087 ms and TPOT(512) = 13 + 90/511 = 13.1761 ms; the estimator returns 30 ms."""
    tpot_128 = 0.013 + 3 * 0.030 / 127
    tpot_512 = 0.013 + 3 * 0.030 / 511
    assert tpot_128 == pytest.approx(0.0137087, rel=1e-5)
    assert serve_blocking.blocking(tpot_128, tpot_512, 4, 128, 512) == pytest.approx(0.030, rel=1e-12)


def test_blocking_is_zero_when_tpot_does_not_depend_on_the_output_length():
    """Qwen3-235B on TensorRT-LLM at N = 4 measures the same TPOT at O = 128 and 512: no stall is seen."""
    assert serve_blocking.blocking(0.0133, 0.0133, 4, 128, 512) == 0.0
