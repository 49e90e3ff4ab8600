"""kernels/jit.py stack_vector: a float64 vector in the calling kernel's frame, read and written through calls and
views like an ``np.empty`` vector (no timing here: bench/bench_serve.py and bench/bench_lm_sweep.py measure it)."""

import os
import subprocess
import sys

import numpy as np
from numba import njit, prange

from fastmodel.kernels.jit import stack_vector

SIZE = 12


@njit
def _fill(vector, start):
    for i in range(vector.shape[0]):
        vector[i] = start + i


@njit
def _sum(vector):
    total = 0.0
    for i in range(vector.shape[0]):
        total += vector[i]
    return total


@njit
def _through_calls(rows):
    """For r = 0..rows-1: fill a frame vector with r, r+1, ..., r+11 in a callee, sum it in another callee, and
    read one element through a 2-D view (3 x 4) of it."""
    vector = stack_vector(SIZE)
    grid = stack_vector(SIZE).reshape((3, 4))
    sums = np.empty(rows)
    corner = np.empty(rows)
    for r in range(rows):
        _fill(vector, float(r))
        sums[r] = _sum(vector)
        _fill(grid.reshape(SIZE), 10.0 * r)
        corner[r] = grid[2, 3] + _sum(grid[1])
    return sums, corner


def _expected(rows):
    # by hand: sum of r .. r+11 is 12 r + 66; grid row 2 column 3 is element 11 (10 r + 11), row 1 is elements
    # 4..7 (4 x 10 r + 22)
    r = np.arange(rows, dtype=float)
    return 12.0 * r + 66.0, 10.0 * r + 11.0 + 40.0 * r + 22.0


def test_stack_vector_holds_what_callees_write_and_views_see_it():
    sums, corner = _through_calls(50)
    want_sums, want_corner = _expected(50)
    np.testing.assert_array_equal(sums, want_sums)
    np.testing.assert_array_equal(corner, want_corner)


@njit
def _chunk_rows(sums, corner, lo, hi):
    """Rows lo..hi-1 of ``_through_calls`` written into ``sums`` and ``corner``: the frame vectors of one chunk,
    as the engines' row kernels make them (kernels/serve/fused.py ``_grid_rows``)."""
    vector = stack_vector(SIZE)
    grid = stack_vector(SIZE).reshape((3, 4))
    for r in range(lo, hi):
        _fill(vector, float(r))
        sums[r] = _sum(vector)
        _fill(grid.reshape(SIZE), 10.0 * r)
        corner[r] = grid[2, 3] + _sum(grid[1])


@njit(parallel=True)
def _through_prange(rows, chunk):
    sums = np.empty(rows)
    corner = np.empty(rows)
    chunks = (rows + chunk - 1) // chunk
    for c in prange(chunks):
        _chunk_rows(sums, corner, c * chunk, min(rows, (c + 1) * chunk))
    return sums, corner


def test_stack_vector_under_a_parallel_prange_matches_the_serial_kernel():
    """Each worker thread calls the chunk kernel in its own frame: no two chunks share a frame vector, so the
    parallel results equal the serial ones and the hand values (many small chunks, so the threads interleave)."""
    rows = 20_000
    sums, corner = _through_prange(rows, 7)
    serial_sums, serial_corner = _through_calls(rows)
    np.testing.assert_array_equal(sums, serial_sums)
    np.testing.assert_array_equal(corner, serial_corner)
    want_sums, want_corner = _expected(rows)
    np.testing.assert_array_equal(sums, want_sums)
    np.testing.assert_array_equal(corner, want_corner)


def test_stack_vector_interpreted_is_a_plain_vector():
    """FASTMODEL_JIT=0 (plain-Python kernels): stack_vector is an ordinary float64 vector of the size."""
    env = {**os.environ, "FASTMODEL_JIT": "0"}
    probe = "from fastmodel.kernels.jit import stack_vector; v = stack_vector(12); print(v.shape, v.dtype)"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(12,)", "float64"]


def test_a_table_of_the_wrong_height_is_refused_before_the_kernels_copy_it_into_frame_vectors():
    # the row kernels copy N_COLUMNS values per configuration into a stack_vector: a shorter table would be read
    # past its end, so both engines' table entry points check the height first
    import numpy as np
    import pytest

    from fastmodel.lm.engine import evaluate_table as lm_table
    from fastmodel.registry.lm import COLUMNS
    from fastmodel.serve.api import evaluate_table as serve_table

    short = np.zeros((len(COLUMNS) - 1, 3))
    for evaluate in (lm_table, serve_table):
        with pytest.raises(ValueError, match=f"{len(COLUMNS)} columns"):
            evaluate(short)
        with pytest.raises(ValueError, match="shape"):
            evaluate(np.zeros(len(COLUMNS)))


def test_a_grid_base_of_the_wrong_length_is_refused_before_the_grid_kernels_copy_it():
    # the lm and serving grid kernels copy the base vector's N_COLUMNS values into each point's stack_vector
    from pathlib import Path

    import numpy as np
    import pytest

    from fastmodel.lm.sweep import sweep_plan
    from fastmodel.registry.lm import COLUMNS
    from fastmodel.serve.sweep_file import serve_plan
    from fastmodel.spec.columns import check_base

    check_base(np.zeros(len(COLUMNS)))
    for bad in (np.zeros(len(COLUMNS) - 1), np.zeros((len(COLUMNS), 1))):
        with pytest.raises(ValueError, match=f"{len(COLUMNS)} columns"):
            check_base(bad)
    specs = Path(__file__).resolve().parents[2] / "specs"
    plans = [sweep_plan("llama3.1-8b", "dgx-h100", "llm-pretrain", {"num_nodes": [1, 2]}),
             serve_plan(None, "llama3.1-8b", "dgx-h100", "serve-chat", {"tp": [1, 2]}, specs)]
    for plan in plans:
        unit = next(iter(plan.units()))
        out = np.empty((64, unit.size))
        status = np.zeros(unit.size, dtype=np.int8)
        plan.base = plan.base[:-1]
        with pytest.raises(ValueError, match="base vector"):
            plan.evaluate_unit(unit, out, status, 0)
