"""LM parameter tables through kernels/lm/evaluate.py ``evaluate_parallel`` / ``evaluate_serial`` (the grid
kernel reading its points from the table's memory, ``table_memory``): every layout a caller may pass gives the
results of a row-by-row ``evaluate_row``, with the statuses given kept and those rows NaN."""

import numpy as np
import pytest

import fastmodel.kernels.lm.evaluate as kernel
from fastmodel.kernels.finite import finite_or_marked
from fastmodel.kernels.lm.layout import N_MEMORY_KINDS, N_RESULTS
from fastmodel.kernels.lm.passes import N_WORK
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.loader import load_cluster, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import STATUS_CODES

ENTRIES = (kernel.evaluate_parallel, kernel.evaluate_serial)


@pytest.fixture(scope="module")
def table():
    """13 configurations of llama3.1-8b on dgx-h100 (tp and micro_batch varied), C order."""
    base = lower(load_lm_model("llama3.1-8b"), load_cluster("dgx-h100"), ExecutionSpec(), Mesh(dp=8), 64)
    params = np.repeat(base[:, None], 13, axis=1)
    params[C["tp"]] = [1, 2, 4, 8, 1, 2, 4, 8, 2, 1, 8, 4, 2]
    params[C["micro_batch"]] = [1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 4, 8, 1]
    return params


def _given(n):
    """Statuses given to the table: every fifth configuration already refused (status 3)."""
    status = np.zeros(n, dtype=np.int8)
    status[::5] = 3
    return status


def _per_row(params, status):
    """(results, status) of a Python loop of ``evaluate_row`` over the configurations not refused."""
    out = np.full((N_RESULTS, params.shape[1]), np.nan)
    status = status.copy()
    for r in range(params.shape[1]):
        if status[r]:
            continue
        result = np.full(N_RESULTS, np.nan)
        kernel.evaluate_row(params[:, r].copy(), np.empty(N_WORK), np.empty(N_MEMORY_KINDS), result)
        status[r] = finite_or_marked(result, N_RESULTS, 0, True, STATUS_CODES["not_finite"])
        out[:, r] = result
    return out, status


def _run(entry, params, status):
    out = np.full((N_RESULTS, params.shape[1]), -7.0)
    status = status.copy()
    entry(params, status, out)
    return out, status


def _same(got, want):
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])         # NaN == NaN here


@pytest.mark.parametrize("entry", ENTRIES)
def test_strided_view_is_read_as_its_values(table, entry):
    """review6 F4: a view that is neither C nor Fortran contiguous (every other configuration): ``table_memory``
    took the steps from the view's strides but returned ``ravel``'s compact copy, so it read past its end
    (IndexError interpreted, a silent wrong read compiled). It is now copied to a C table first."""
    wide = np.repeat(table, 2, axis=1)
    view = wide[:, ::2]
    assert not (view.flags.c_contiguous or view.flags.f_contiguous)
    vector, column_step, row_step = kernel.table_memory(view)
    assert (table.shape[0] - 1) * column_step + (table.shape[1] - 1) * row_step < len(vector)
    _same(_run(entry, view, _given(13)), _per_row(table, _given(13)))


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("layout", ["C", "F", "one C", "one F", "none"])
def test_every_layout_gives_the_row_by_row_results(table, entry, layout, monkeypatch):
    """review6 F5: C and Fortran tables (read in place with swapped steps), one configuration (its columns one
    after another whatever the strides) and none; chunks of 5 configurations, so 13 cross two chunk boundaries
    (the last chunk short). A swapped column/configuration step or an off-by-one at a boundary fails here."""
    monkeypatch.setattr(kernel, "CHUNK_ROWS", 5)
    params = {"C": np.ascontiguousarray(table), "F": np.asfortranarray(table),
              "one C": np.ascontiguousarray(table[:, 5:6]), "one F": np.asfortranarray(table[:, 5:6]),
              "none": np.zeros((table.shape[0], 0))}[layout]
    want = _per_row(np.ascontiguousarray(params), _given(params.shape[1]))
    _same(_run(entry, params, _given(params.shape[1])), want)
    if layout == "C":
        assert (want[1] == 0).sum() >= 6 and (want[1] == 3).sum() == 3    # evaluated rows, and the given kept
        assert np.isnan(want[0][:, want[1] != 0]).all()
