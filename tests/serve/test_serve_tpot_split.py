"""The TPOT slices and the FP4-minus-FP8 excess of bench/serve_tpot_split.py (docs/model_serving.md §S50), by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_tpot_split = load_bench("serve_tpot_split")

_COLS = ["id", "status", "split", "engine", "framework", "gpu", "precision", "model", "measured_tpot_s",
         "predicted_tpot_s", "error_tpot_s"]


def _write(tmp_path, rows):
    """rows: (id, engine, precision, tp, N, measured TPOT s, predicted TPOT s, split, status); ISL/OSL 1024."""
    records = [{"id": rid, "serve": {"tp": tp, "concurrency": n, "input_len": 1024, "output_len": 1024}}
               for rid, _, _, tp, n, *_ in rows]
    table = [[rid, status, split, engine, engine + " x", "B200", prec, "Llama-3.1-70B", meas, pred, (pred - meas) / meas]
             for rid, engine, prec, _, _, meas, pred, split, status in rows]
    return write_validated(tmp_path, records, _COLS, table)


_ROWS = [
    # TensorRT-LLM: FP4 measured 12 ms against 10 predicted at TP 1 (gap +2 ms), FP8 14 against 14 (gap 0);
    # at TP 8 FP4 6 against 5 (gap +1), FP8 5.5 against 5.5.
    ("t4-1", "TensorRT-LLM", "fp4", 1, 4, 0.012, 0.010, "dev", "ok"),
    ("t8-1", "TensorRT-LLM", "fp8", 1, 4, 0.014, 0.014, "dev", "ok"),
    ("t4-8", "TensorRT-LLM", "fp4", 8, 4, 0.006, 0.005, "dev", "ok"),
    ("t8-8", "TensorRT-LLM", "fp8", 8, 4, 0.0055, 0.0055, "dev", "ok"),
    # an FP4 shape without its FP8 twin: counted in the slices, not in the pairs
    ("t4-2", "TensorRT-LLM", "fp4", 2, 4, 0.010, 0.008, "dev", "ok"),
    # held-out and refused rows: outside the dev split
    ("h", "vLLM", "fp4", 1, 4, 0.010, 0.020, "held-out", "ok"),
    ("r", "vLLM", "fp4", 1, 4, 0.010, 0.020, "dev", "refused"),
]


def test_slices_add_up_to_the_mape_and_rank_by_points(tmp_path):
    """Dev rows' |errors|: 1/6, 0, 1/6, 0, 1/5 -> MAPE (1/6 + 1/6 + 1/5) / 5 = 10.67 %. By precision: fp4 holds
    all of it (3 rows, mean error -(1/6 + 1/6 + 1/5)/3 = -17.8 %), fp8 none."""
    rows = serve_tpot_split.split_rows(*_write(tmp_path, _ROWS))
    assert sorted(r["id"] for r, _ in rows) == ["t4-1", "t4-2", "t4-8", "t8-1", "t8-8"]
    table = serve_tpot_split.slices(rows, ("precision",))
    assert [k for _, k, *_ in table] == [("fp4",), ("fp8",)]
    pts, _, n, bias, med = table[0]
    assert (n, pts) == (3, pytest.approx(100 * (1 / 6 + 1 / 6 + 1 / 5) / 5))
    assert bias == pytest.approx(-100 * (1 / 6 + 1 / 6 + 1 / 5) / 3)
    assert med == pytest.approx(-100 / 6)
    assert sum(p for p, *_ in table) == pytest.approx(100 * (1 / 6 + 1 / 6 + 1 / 5) / 5)


def test_slice_keys_read_the_serve_block():
    """``tp`` and ``concurrency`` come from the record, CSV columns from the row."""
    row, serve = {"engine": "vLLM", "gpu": "B200"}, {"tp": 4, "concurrency": 64, "input_len": 8192}
    assert serve_tpot_split.key_of(row, serve, ("engine", "tp", "concurrency", "isl")) == ("vLLM", 4, 64, 8192)


def test_paired_excess_and_its_tp_fit(tmp_path):
    """gap(fp4) - gap(fp8): TP 1 +2 - 0 = +2 ms, TP 8 +1 - 0 = +1 ms; the unpaired TP 2 row drops out.
    a + b / TP through (1, 2) and (8, 1): b (1 - 1/8) = 1 -> b = 8/7 ms, a = 2 - 8/7 = 6/7 ms."""
    rows = serve_tpot_split.split_rows(*_write(tmp_path, _ROWS))
    pairs = serve_tpot_split.paired_excess(rows)
    assert list(pairs) == [("TensorRT-LLM", "B200", "Llama-3.1-70B")]
    cells = pairs[("TensorRT-LLM", "B200", "Llama-3.1-70B")]
    assert cells == {1: pytest.approx(2.0), 8: pytest.approx(1.0)}
    a, b, r = serve_tpot_split.tp_fit(list(cells), list(cells.values()))
    assert (a, b, r) == (pytest.approx(6 / 7), pytest.approx(8 / 7), pytest.approx(0.0, abs=1e-12))
