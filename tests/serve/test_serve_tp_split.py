"""The low-load TTFT split of bench/serve_tp_split.py (docs/model_serving.md §S49), by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_tp_split = load_bench("serve_tp_split")

_COLS = ["id", "status", "framework", "gpu", "precision", "model", "measured_ttft_s", "predicted_ttft_s"]


def _write(tmp_path, rows):
    """rows: (id, tp, N, isl, attention_dp, ep, measured TTFT, predicted TTFT, status)."""
    records = [{"id": rid, "serve": {"tp": tp, "concurrency": n, "input_len": isl, "attention_dp": adp, "ep": ep}}
               for rid, tp, n, isl, adp, ep, *_ in rows]
    table = [[rid, status, "vLLM 0.15.1", "B200", "fp4", "gpt-oss-120b", ttft, pred] for rid, *_, ttft, pred, status in rows]
    return write_validated(tmp_path, records, _COLS, table)


def test_tp_fit_recovers_a_plus_b_over_tp():
    """10 ms + 80 ms / TP at TP 1, 2, 4, 8: 90, 50, 30, 20 ms -> a 10 ms, b 80 ms, no residual; with TP 8 at
    26 ms instead the least-squares line leaves a residual."""
    a, b, r = serve_tp_split.tp_fit([1, 2, 4, 8], [0.090, 0.050, 0.030, 0.020])
    assert (a, b, r) == (pytest.approx(0.010), pytest.approx(0.080), pytest.approx(0.0, abs=1e-12))
    assert serve_tp_split.tp_fit([1, 2, 4, 8], [0.090, 0.050, 0.030, 0.026])[2] > 1e-3


def test_parts_fit_recovers_fixed_scale_and_comm_factor():
    """measured = 20 ms + 0.8 (predicted - comm) + 1.5 comm on four rows whose comm and rest differ."""
    pred = [0.100, 0.060, 0.045, 0.300]
    comm = [0.000, 0.007, 0.012, 0.060]
    meas = [0.020 + 0.8 * (p - c) + 1.5 * c for p, c in zip(pred, comm)]
    f, c, k, err = serve_tp_split.parts_fit(meas, pred, comm)
    assert (f, c, k) == (pytest.approx(0.020), pytest.approx(0.8), pytest.approx(1.5))
    assert err == pytest.approx(0.0, abs=1e-12)


def test_tables_group_and_filter(tmp_path):
    """TP 1 rows (two, median of 40 and 44 ms measured) and a TP 8 row at N 4; left out of the N <= 4 tables:
    N 16, attention DP 2, EP 8 and a refused row; the N table at TP 8 holds N 4 and N 16 (EP and attention DP
    rows still left out)."""
    table, recs = _write(tmp_path, [
        ("a", 1, 4, 1024, None, 1, 0.040, 0.036, "ok"),
        ("b", 1, 2, 1024, 1, 1, 0.044, 0.036, "ok"),
        ("c", 8, 4, 1024, 1, 1, 0.030, 0.020, "ok"),
        ("d", 8, 16, 1024, 1, 1, 0.090, 0.020, "ok"),
        ("e", 8, 4, 1024, 2, 1, 0.090, 0.020, "ok"),
        ("f", 8, 4, 1024, 1, 8, 0.090, 0.020, "ok"),
        ("g", 8, 4, 1024, 1, 1, 0.090, 0.020, "refused"),
    ])
    key = ("vLLM 0.15.1", "B200", "fp4", "gpt-oss-120b", 1024)
    tp = serve_tp_split.by_tp(table, recs, 4)
    assert list(tp) == [key]
    assert tp[key] == {1: (pytest.approx(0.042), pytest.approx(0.036)), 8: (pytest.approx(0.030), pytest.approx(0.020))}
    n = serve_tp_split.by_n(table, recs, 8)
    assert n == {("vLLM 0.15.1", "B200", "gpt-oss-120b", 1024): {4: pytest.approx(0.010), 16: pytest.approx(0.070)}}
    parts = serve_tp_split.by_parts(table, recs, 4, comm=lambda rec: 0.001 * rec["serve"]["tp"])
    assert sorted(parts[key[:4]], key=lambda r: r[0]) == [
        (0.030, 0.020, pytest.approx(0.008), 8), (0.040, 0.036, pytest.approx(0.001), 1),
        (0.044, 0.036, pytest.approx(0.001), 1)]
