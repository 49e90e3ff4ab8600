"""The harness-kind and prompt-length split of bench/serve_kind_split.py (docs/model_serving.md §S53), by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_kind_split = load_bench("serve_kind_split")

_COLS = ["id", "status", "framework", "gpu", "model", "measured_ttft_s", "predicted_ttft_s", "measured_tpot_s",
         "predicted_tpot_s"]


def _write(tmp_path, rows):
    """rows: (id, source_file, model, tp, ep, N, isl, osl, measured TTFT, predicted TTFT, status)."""
    records = [{"id": rid, "aic": {"provenance": {"source_file": src}},
                "serve": {"tp": tp, "ep": ep, "concurrency": n, "input_len": isl, "output_len": osl}}
               for rid, src, _, tp, ep, n, isl, osl, *_ in rows]
    table = [[rid, status, "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", model, ttft, pred, 0.010, 0.011]
             for rid, _, model, *_, ttft, pred, status in rows]
    return write_validated(tmp_path, records, _COLS, table)


def test_kind_reads_the_gap_analysis_folder():
    """A row under aiconfigurator's aic-auto-gap-analysis/ folder is kind B; a dated CSV or no aic block is A."""
    kind = serve_kind_split.kind
    assert kind({"aic": {"provenance": {"source_file": "aic-auto-gap-analysis/data/h100_sxm/x.csv"}}}) == "B"
    assert kind({"aic": {"provenance": {"source_file": "2026-04-06.csv"}}}) == "A"
    assert kind({}) == "A"


def test_n_bucket_edges():
    """4 and 5, 8 and 9, 16 and 17, 32 and 33 fall on either side of the edges."""
    b = serve_kind_split.n_bucket
    assert [b(n) for n in (1, 4, 5, 8, 9, 16, 17, 32, 33, 512)] == [
        "1-4", "1-4", "5-8", "5-8", "9-16", "9-16", "17-32", "17-32", "33+", "33+"]


def test_slope_per_k_by_hand():
    """TTFT 100 ms + 40 ms per 1,000 tokens at ISL 512 and 1,024: 120.48 and 140.96 ms -> 40 ms per 1k; a flat
    174 ms at both lengths has slope 0 (the TensorRT-LLM 1.0.0rc3 N 4 floor, §S41)."""
    assert serve_kind_split.slope_per_k([512, 1024], [0.12048, 0.14096]) == pytest.approx(0.040, rel=1e-9)
    assert serve_kind_split.slope_per_k([512, 1024], [0.174, 0.174]) == pytest.approx(0.0, abs=1e-12)


def test_tables_group_and_filter(tmp_path):
    """Two kind-B Qwen3 rows at N 4 (ISL 512 and 1,024, TTFT 174 ms measured against 75 and 95 ms predicted), one
    kind-A Llama row, one refused row. by_kind: the B group has 2 rows, errors -75/174 and -79/174; by_slice keeps
    the Qwen3 rows apart by ISL with excess 99 and 79 ms; by_isl: measured slope 0, predicted 20/0.512 =
    39.0625 ms per 1k tokens."""
    gap = "aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/q.csv"
    rows = [("q1", gap, "Qwen3-235B-A22B-FP8", 4, 4, 4, 512, 128, 0.174, 0.075, "ok"),
            ("q2", gap, "Qwen3-235B-A22B-FP8", 4, 4, 4, 1024, 128, 0.174, 0.095, "ok"),
            ("l1", "2026-04-06.csv", "Llama-3.1-70B", 4, 1, 4, 1024, 1024, 0.2, 0.2, "ok"),
            ("x", gap, "Qwen3-235B-A22B-FP8", 4, 4, 4, 256, 128, 0.2, 0.1, "refused")]
    pairs = list(serve_kind_split.rows(*_write(tmp_path, rows)))
    assert [r["id"] for r, _ in pairs] == ["q1", "q2", "l1"]
    kinds = serve_kind_split.by_kind(pairs)
    n, mape, bias, tbias = kinds[("B", "Qwen3-235B-A22B-FP8", "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB")]
    assert n == 2
    assert mape == pytest.approx((99 / 174 + 79 / 174) / 2)
    assert bias == pytest.approx(-mape)
    assert tbias == pytest.approx(0.1)
    assert kinds[("A", "Llama-3.1-70B", "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB")][:3] == (1, 0.0, 0.0)
    slices = serve_kind_split.by_slice(pairs, "Qwen3-235B-A22B-FP8")
    key = ("TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", 4, 4, "1-4")
    assert slices[key + (512,)][3] == pytest.approx(0.099)
    assert slices[key + (1024,)][3] == pytest.approx(0.079)
    isl = serve_kind_split.by_isl(pairs, "Qwen3-235B-A22B-FP8")
    isls, sm, sp = isl[("TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", 4, 4, 4, 128)]
    assert isls == [512, 1024]
    assert sm == pytest.approx(0.0, abs=1e-12)
    assert sp == pytest.approx(0.020 / 0.512)
    assert len(isl) == 1
