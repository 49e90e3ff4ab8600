"""The paired FP4-over-FP8 TTFT ratio of bench/serve_fp4_ttft_pairs.py (docs/model_serving.md §S59), by hand."""

import math

import pytest

from tests.bench_scripts import load_bench, write_validated

pairs = load_bench("serve_fp4_ttft_pairs")

_COLS = ["id", "status", "split", "engine", "framework", "gpu", "precision", "model", "measured_ttft_s",
         "predicted_ttft_s"]


def _write(tmp_path, rows):
    """rows: (id, engine, precision, tp, ISL, measured TTFT s, predicted TTFT s, split); concurrency 4, OSL 1024."""
    records = [{"id": rid, "serve": {"tp": tp, "concurrency": 4, "input_len": isl, "output_len": 1024}}
               for rid, _, _, tp, isl, *_ in rows]
    table = [[rid, "ok", split, engine, engine + " x", "B200", prec, "Llama-3.1-70B", meas, pred]
             for rid, engine, prec, _, _, meas, pred, split in rows]
    return write_validated(tmp_path, records, _COLS, table)


_ROWS = [
    # TensorRT-LLM TP 1, ISL 8192: measured FP4 0.67 s of FP8's 1.00 s, predicted 0.60 of 1.00: q = 0.60 / 0.67
    ("a4", "TensorRT-LLM", "fp4", 1, 8192, 0.67, 0.60, "dev"),
    ("a8", "TensorRT-LLM", "fp8", 1, 8192, 1.00, 1.00, "dev"),
    # TensorRT-LLM TP 8, ISL 1024: measured 0.09 of 0.10 s, predicted 0.05 of 0.06 s: q = (5/6) / 0.9
    ("b4", "TensorRT-LLM", "fp4", 8, 1024, 0.09, 0.05, "dev"),
    ("b8", "TensorRT-LLM", "fp8", 8, 1024, 0.10, 0.06, "dev"),
    # vLLM TP 1, ISL 8192: q = (0.62 / 0.90) / (0.70 / 1.00)
    ("c4", "vLLM", "fp4", 1, 8192, 0.70, 0.62, "dev"),
    ("c8", "vLLM", "fp8", 1, 8192, 1.00, 0.90, "dev"),
    # an FP4 shape without its FP8 twin, and a held-out pair: no pair in the dev split
    ("d4", "vLLM", "fp4", 2, 1024, 0.20, 0.10, "dev"),
    ("e4", "vLLM", "fp4", 4, 1024, 0.20, 0.10, "held-out"),
    ("e8", "vLLM", "fp8", 4, 1024, 0.25, 0.20, "held-out"),
]


def test_paired_ratios_by_hand(tmp_path):
    """Three dev pairs; the unpaired and held-out rows drop out."""
    q = pairs.paired_ratios(pairs.split_rows(*_write(tmp_path, _ROWS)))
    assert q == pytest.approx({
        ("TensorRT-LLM", "B200", "Llama-3.1-70B", 1, 4, 8192, 1024): 0.60 / 0.67,
        ("TensorRT-LLM", "B200", "Llama-3.1-70B", 8, 4, 1024, 1024): (0.05 / 0.06) / 0.9,
        ("vLLM", "B200", "Llama-3.1-70B", 1, 4, 8192, 1024): (0.62 / 0.90) / 0.70,
    })


def test_summary_by_engine_and_isl(tmp_path):
    """By engine: TensorRT-LLM's two pairs (median: their mean; geometric mean: the root of their product),
    vLLM's one; by ISL: 1024 holds one pair, 8192 two."""
    q = pairs.paired_ratios(pairs.split_rows(*_write(tmp_path, _ROWS)))
    t1, t8, v1 = 0.60 / 0.67, (0.05 / 0.06) / 0.9, (0.62 / 0.90) / 0.70
    by_engine = pairs.summary(q, 0)
    assert [g for g, *_ in by_engine] == ["TensorRT-LLM", "vLLM"]
    _, n, med, geo = by_engine[0]
    assert (n, med, geo) == (2, pytest.approx((t1 + t8) / 2), pytest.approx(math.sqrt(t1 * t8)))
    assert by_engine[1][1:] == (1, pytest.approx(v1), pytest.approx(v1))
    by_isl = pairs.summary(q, 5)
    assert [(g, n) for g, n, *_ in by_isl] == [(1024, 1), (8192, 2)]
    assert by_isl[1][2] == pytest.approx((t1 + v1) / 2)
