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
