"""Serving tables through kernels/serve/fused.py ``serve_parallel`` / ``serve_serial`` (a table runs as a grid of
one axis, ``_table_grid``): the table paths agree with each other and with a row-by-row evaluation."""

import numpy as np
import pytest

import fastmodel.kernels.serve.fused as fused
from fastmodel.kernels.columns import N_COLUMNS
from fastmodel.kernels.serve.layout import N_SERVE_RESULTS
from fastmodel.serve.api import evaluate_table


def _refuse(*args):
    raise AssertionError("a table of no rows reached the grid kernel")


@pytest.mark.parametrize("entry", ["serve_parallel", "serve_serial"])
def test_no_rows_return_before_the_kernel(monkeypatch, entry):
    """A (N_COLUMNS, 0) table: nothing to evaluate. Compiled, ``_grid_rows``'s odometer start ``lo % shape[0]``
    divided by zero on the grid of size 0 (ZeroDivisionError); interpreted, numpy's 0 % 0 is 0 with a warning,
    so the test asserts that the kernel is not reached at all."""
    monkeypatch.setattr(fused, "_grid_rows", _refuse)
    monkeypatch.setattr(fused, "serve_grid", _refuse)
    status = np.zeros(0, dtype=np.int8)
    out = np.empty((N_SERVE_RESULTS, 0))
    getattr(fused, entry)(np.zeros((N_COLUMNS, 0)), status, out)
    results, codes = evaluate_table(np.zeros((N_COLUMNS, 0)))
    assert results.shape == (N_SERVE_RESULTS, 0) and codes.shape == (0,)


@pytest.fixture(scope="module")
def table():
    """30 serving configurations of llama3.1-8b on H100 (batch size, input and output lengths varied), C order."""
    from fastmodel.serve.api import COLUMN_INDEX, columns

    params = np.repeat(np.asarray(columns("llama3.1-8b", "H100", batch_size=8))[:, None], 30, axis=1)
    params[COLUMN_INDEX["batch_size"]] = np.resize([1, 4, 16, 64, 256], 30)
    params[COLUMN_INDEX["input_len"]] = np.resize([128, 1024, 4096], 30)
    params[COLUMN_INDEX["output_len"]] = np.resize([64, 512], 30)
    params[COLUMN_INDEX["seq_len"]] = params[COLUMN_INDEX["input_len"]] + params[COLUMN_INDEX["output_len"]]
    return params


def _run(entry, params):
    out = np.full((N_SERVE_RESULTS, params.shape[1]), -7.0)
    status = np.full(params.shape[1], -1, dtype=np.int8)
    with np.errstate(all="ignore"):
        entry(params, status, out)
    return out, status


def _per_row(params):
    """Each configuration as a table of its own (one row, one chunk, a fresh memo)."""
    rows = [evaluate_table(params[:, r:r + 1]) for r in range(params.shape[1])]
    return np.concatenate([out for out, _ in rows], axis=1), np.concatenate([status for _, status in rows])


def _same(got, want):
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_a_table_runs_in_chunks_of_256_rows_and_its_results_do_not_depend_on_them(table, monkeypatch):
    """review6 F3: since tables ran through serve_grid they were cut in its GRID_CHUNK_ROWS = 1024 rows, so a
    table of 256-1023 rows (PARALLEL_MIN_ROWS = 256: a validation set) was one chunk on one thread. Tables pass
    TABLE_CHUNK_ROWS = 256 again; chunks of 7 rows (the last one short) give the per-row results."""
    chunks = []
    grid = fused.serve_grid
    monkeypatch.setattr(fused, "serve_grid", lambda *args: chunks.append(args[-2]) or grid(*args))
    want = _per_row(table)
    _same(_run(fused.serve_parallel, table), want)
    assert chunks == [fused.TABLE_CHUNK_ROWS] == [256]
    monkeypatch.setattr(fused, "TABLE_CHUNK_ROWS", 7)
    _same(_run(fused.serve_parallel, table), want)
    assert chunks[-1] == 7 and (want[1] == 0).any()


@pytest.mark.parametrize("layout", ["C", "F", "one"])
def test_every_table_path_gives_the_per_row_results(table, layout, monkeypatch):
    """review6 F5: serve_parallel (chunks of 7: 30 rows cross four chunk boundaries), serve_serial and
    evaluate_table on C and Fortran tables and one row give each configuration's results as a table of its own."""
    monkeypatch.setattr(fused, "TABLE_CHUNK_ROWS", 7)
    params = {"C": np.ascontiguousarray(table), "F": np.asfortranarray(table), "one": table[:, 11:12]}[layout]
    want = _per_row(np.ascontiguousarray(params))
    for entry in (fused.serve_parallel, fused.serve_serial):
        _same(_run(entry, params), want)
    with np.errstate(all="ignore"):
        _same(evaluate_table(params), want)
