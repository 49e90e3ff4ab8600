"""The low-load TTFT excess table of bench/serve_floor.py (docs/model_serving.md §S27), by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_floor = load_bench("serve_floor")

_COLS = ["id", "status", "framework", "gpu", "model", "measured_ttft_s", "predicted_ttft_s", "measured_tpot_s"]


def _write(tmp_path, rows):
    """rows: (id, tp, N, attention_dp, ep, measured TTFT, predicted TTFT, measured TPOT, status)."""
    records = [{"id": rid, "serve": {"tp": tp, "concurrency": n, "attention_dp": adp, "ep": ep}}
               for rid, tp, n, adp, ep, *_ in rows]
    table = [[rid, status, "vLLM 0.15.1", "B200", "gpt-oss-120b", ttft, pred, tpot]
             for rid, _tp, _n, _adp, _ep, ttft, pred, tpot, status in rows]
    return write_validated(tmp_path, records, _COLS, table)


def test_excess_groups_by_tp_and_counts_tpot_units(tmp_path):
    """TP 1: 40 ms measured against 36 ms, TPOT 4 ms -> 4 ms, 1 TPOT. TP 8: 45 - 20 = 25 ms at TPOT 2.5 ms ->
    10 TPOT. Left out: N = 16 > 8, attention DP 4, EP 8, a refused row."""
    table, recs = _write(tmp_path, [
        ("a", 1, 4, None, 1, 0.040, 0.036, 0.004, "ok"),
        ("b", 8, 8, 1, 1, 0.045, 0.020, 0.0025, "ok"),
        ("c", 8, 16, 1, 1, 0.090, 0.020, 0.0025, "ok"),
        ("d", 1, 4, 4, 1, 0.090, 0.020, 0.0025, "ok"),
        ("e", 8, 4, 1, 8, 0.090, 0.020, 0.0025, "ok"),
        ("f", 8, 4, 1, 1, 0.090, 0.020, 0.0025, "refused"),
    ])
    out = serve_floor.excess(table, recs, 8)
    assert sorted(out) == [("vLLM 0.15.1", "B200", "gpt-oss-120b", 1), ("vLLM 0.15.1", "B200", "gpt-oss-120b", 8)]
    (gap1, k1), = out[("vLLM 0.15.1", "B200", "gpt-oss-120b", 1)]
    (gap8, k8), = out[("vLLM 0.15.1", "B200", "gpt-oss-120b", 8)]
    assert (gap1, k1) == (pytest.approx(0.004), pytest.approx(1.0))
    assert (gap8, k8) == (pytest.approx(0.025), pytest.approx(10.0))
