"""The fused passes of the serving model over many configurations, each point through :func:`serve_row`
(``kernels/serve/evaluate.py``) in frame vectors: a Cartesian grid built point by point without a parameter table
(:func:`serve_grid`; sweeps and the search) and a table of rows (:func:`serve_parallel`, :func:`serve_serial`;
``fastmodel.serve.api``), which runs as a grid of one axis. A row whose results are not all finite gets the
``not_finite`` status and NaN results (:func:`_emit`, ``kernels/finite.py``).
"""

import numpy as np

from fastmodel.kernels.finite import all_finite
from fastmodel.kernels.jit import njit, prange, stack_vector
from fastmodel.kernels.columns import (
    C_ATTENTION_DP,
    C_INPUT_LEN,
    C_N_GPUS,
    C_OUTPUT_LEN,
    C_PP,
    C_SEQ_LEN,
    C_TP,
    N_COLUMNS,
)
from fastmodel.kernels.serve.layout import N_SERVE_RESULTS, ST_NOT_FINITE, ST_OK
from fastmodel.kernels.serve.evaluate import MEMO_SIZE, MEMO_WIDTH, new_memo, serve_row


# --- fused passes ------------------------------------------------------------------
# One compiled driver for tables and grids: a table of n rows is a grid of one axis that sets every column
# (:func:`_table_grid`), so serve_parallel / serve_serial run serve_grid / _grid_rows, and the whole evaluation
# is compiled and optimised once per driver level instead of once per entry point (docs/performance.md "One
# parallel kernel for the table and the grid"). The driver takes no row function as an argument: numba (0.68.1)
# types a jitted-function argument by its dispatcher, whose type differs in every process, so a cached driver
# would miss its cache in each new process (checked: cache_misses 1, cache_hits 0 on the second run of a two-line
# example).

#: rows per prange chunk of serve_grid over a grid: 8 KiB of each result row, whole 4 KiB pages (its lanes share no
#: page)
GRID_CHUNK_ROWS = 1024
#: rows per prange chunk of a table (serve_parallel), as before the table ran as a grid (review6 F3): a table of
#: 256-1023 rows (``serve.api.PARALLEL_MIN_ROWS`` = 256, a validation set) is up to 4 chunks, not one on one thread
TABLE_CHUNK_ROWS = 256


def _table_grid(params, status, out):
    """The arguments of :func:`_grid_rows` / :func:`serve_grid` (up to ``out``) that evaluate a C-ordered
    ``(N_COLUMNS, n)`` table: one axis of n values setting every column, its values the table's memory
    (``axis_vals[k * n + r]`` is ``params[k, r]``), nothing derived, so row ``r`` is the table's column ``r``."""
    n = params.shape[1]
    return (np.zeros(N_COLUMNS), np.arange(N_COLUMNS, dtype=np.int64), np.array([0, N_COLUMNS], dtype=np.int64),
            np.ascontiguousarray(params).ravel(), np.zeros(1, dtype=np.int64), np.array([n], dtype=np.int64),
            np.zeros(2, dtype=np.bool_), status, out)


def serve_parallel(params, status, out):
    """Evaluate every row of ``params`` (N_COLUMNS x n, C order) into ``out`` (N_SERVE_RESULTS x n) and
    ``status``: :func:`serve_grid` over the table (:func:`_table_grid`)."""
    from fastmodel.sweeps.plan import grid_lanes

    if params.shape[1] == 0:         # no rows: nothing to do (the one-axis grid of size 0 would divide by it)
        return
    serve_grid(*_table_grid(params, status, out), 0, TABLE_CHUNK_ROWS, grid_lanes())


def serve_serial(params, status, out):
    """Single-threaded :func:`serve_parallel` for small tables: :func:`_grid_rows` over every row, called from
    Python (a compiled wrapper would be one more compile of the whole evaluation). No rows: nothing to do
    (:func:`_grid_rows` starts its odometer with ``lo % shape[0]``, a division by zero on a grid of size 0)."""
    if params.shape[1] == 0:
        return
    _grid_rows(*_table_grid(params, status, out), 0, params.shape[1], 0)


@njit(inline="always")
def _emit(row, result, scratch, memo, status, out, r):
    """One row's results and status into column ``r``; results that are not all finite numbers give the
    ``not_finite`` status (``kernels/finite.py`` ``all_finite``, applied here while the row is in its frame
    vector) and, as every row that is not ``ok``, NaN results (written once, below)."""
    code = serve_row(row, result, scratch, memo)
    if code == ST_OK and not all_finite(result, N_SERVE_RESULTS):
        code = ST_NOT_FINITE
    status[r] = code
    if code == ST_OK:
        for v in range(N_SERVE_RESULTS):
            out[v, r] = result[v]
    else:
        for v in range(N_SERVE_RESULTS):
            out[v, r] = np.nan


@njit
def _grid_rows(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, lo, hi, offset):
    result = stack_vector(N_SERVE_RESULTS)
    scratch = stack_vector(36).reshape((6, 6))
    memo = stack_vector(MEMO_SIZE).reshape((4, MEMO_WIDTH))
    new_memo(memo)
    row = stack_vector(N_COLUMNS)
    for k in range(N_COLUMNS):
        row[k] = base[k]
    axes = shape.shape[0]
    index = np.empty(axes, dtype=np.int64)
    rest = lo
    for a in range(axes - 1, -1, -1):          # the first row's grid index; later rows count up (odometer)
        index[a] = rest % shape[a]
        rest //= shape[a]
    changed = 0                                # axes >= changed were set for this row
    for r in range(lo, hi):
        for a in range(changed, axes):
            size = shape[a]
            i = index[a]
            for j in range(col_start[a], col_start[a + 1]):
                row[axis_cols[j]] = axis_vals[val_start[a] + (j - col_start[a]) * size + i]
        if derive[0]:
            row[C_N_GPUS] = row[C_TP] * row[C_ATTENTION_DP] * row[C_PP]
        if derive[1]:
            row[C_SEQ_LEN] = row[C_INPUT_LEN] + row[C_OUTPUT_LEN]
        _emit(row, result, scratch, memo, status, out, offset + r)
        if axes == 0:
            continue
        changed = axes - 1
        while changed > 0 and index[changed] + 1 == shape[changed]:
            index[changed] = 0
            changed -= 1
        index[changed] += 1


@njit(parallel=True)
def serve_grid(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, offset, chunk_rows,
               lanes):
    """Evaluate a Cartesian grid without materialising its parameter table: row r is ``base`` with, for every
    axis a (C order, last fastest), the columns ``axis_cols[col_start[a]:col_start[a+1]]`` set to that axis's
    values at index i_a (``axis_vals[val_start[a] + j * shape[a] + i_a]`` for its j-th column); then
    ``derive`` (n_gpus = tp x pp, seq_len = input_len + output_len). Results into ``out[:, offset + r]`` and
    ``status[offset + r]``, so a sweep writes a unit of work straight into its place in a larger matrix. Chunks of
    ``chunk_rows`` rows (:data:`GRID_CHUNK_ROWS` for grids, :data:`TABLE_CHUNK_ROWS` for tables); lane k of
    ``lanes`` (numba's thread count) takes chunks k, k + lanes, ... (kernels/lm/grid.py ``evaluate_grid``); a chunk
    runs whole from a fresh memo, so the results do not depend on ``lanes`` (docs/performance.md)."""
    n = 1
    for size in shape:
        n *= size
    chunks = (n + chunk_rows - 1) // chunk_rows
    lanes = min(chunks, max(1, lanes))
    for lane in prange(lanes):
        for chunk in range(lane, chunks, lanes):
            lo = chunk * chunk_rows
            _grid_rows(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, lo,
                       min(n, lo + chunk_rows), offset)
