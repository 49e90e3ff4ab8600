"""Fused grid evaluation of the real-world LM model: grid index -> configuration -> rules -> results.

No parameter table is materialised. Point ``flat`` of a grid of ``shape``
(C order) starts from the ``base`` configuration; axis ``a`` at index ``i``
writes ``axis_values[a, j, i]`` into column ``axis_columns[a, j]`` for each of
its columns (-1 ends the list; the ``plan`` axis sets tp, pp, cp and ep
together). Then the derived columns are filled (``dp = n_gpus / (tp pp cp)``;
the FSDP shard group defaults to dp), the rule table gives the status, and
legal points are evaluated; a point whose results are not all finite gets status
``not_finite`` and NaN results (``kernels/finite.py``). Chunks of points run in parallel (``prange``), dealt to
the threads round-robin (:func:`evaluate_grid`).

The same compiled kernel, :func:`evaluate_points`, evaluates a parameter table (``kernels/lm/evaluate.py``
``evaluate_parallel``): its point ``r`` is then the table's configuration ``r``, with the status it was given.
One parallel kernel holds the whole evaluation, so it is compiled and optimised once, not once per entry point
(docs/performance.md "One parallel kernel for the table and the grid").
"""

import numpy as np

from fastmodel.kernels.finite import finite_or_marked
from fastmodel.kernels.jit import njit, prange, stack_vector
from fastmodel.kernels.lm.evaluate import evaluate_row
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_N_GPUS, C_PP, C_SHARD_DEGREE, C_TP, N_COLUMNS, N_MEMORY_KINDS, N_RESULTS, R_FITS_MEMORY,
)
from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.kernels.lm.passes import N_WORK
from fastmodel.registry.lm import STATUS_CODES

ST_DOES_NOT_FIT = STATUS_CODES["does_not_fit"]
ST_NOT_FINITE = STATUS_CODES["not_finite"]

#: grid points per prange chunk
CHUNK_POINTS = 1024
#: the ``table`` argument of a grid call (no table: the points are built from the grid)
NO_TABLE = (np.zeros(0), 0, 0)


@njit(inline="always")
def _grid_point(flat, base, axis_columns, axis_values, shape, auto_shard, row):
    for c in range(N_COLUMNS):
        row[c] = base[c]
    rest = flat
    for axis in range(shape.shape[0] - 1, -1, -1):
        index = rest % shape[axis]
        rest //= shape[axis]
        for j in range(axis_columns.shape[1]):
            column = axis_columns[axis, j]
            if column < 0:
                break
            row[column] = axis_values[axis, j, index]
    row[C_DP] = row[C_N_GPUS] / (row[C_TP] * row[C_PP] * row[C_CP])
    if auto_shard:
        row[C_SHARD_DEGREE] = row[C_DP]


@njit(inline="always")   # into the prange body: one compile of the whole evaluation fewer (~5 s cold)
def _evaluate_points(lo, hi, table, base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out,
                     offset):
    # frame vectors (kernels/jit.py stack_vector): passed through every cost term without reference counting
    row = stack_vector(N_COLUMNS)
    work = stack_vector(N_WORK)
    memory = stack_vector(N_MEMORY_KINDS)
    result = stack_vector(N_RESULTS)
    vector, column_step, row_step = table
    from_table = column_step > 0
    for flat in range(lo, hi):
        if from_table:          # configuration ``flat`` of the table, with the status it was given
            for c in range(N_COLUMNS):
                row[c] = vector[c * column_step + flat * row_step]
            code = np.int64(status[offset + flat])
        else:
            _grid_point(flat, base, axis_columns, axis_values, shape, auto_shard, row)
            code = plan_status_row(row)
        for v in range(N_RESULTS):
            result[v] = np.nan
        if code == 0:
            evaluate_row(row, work, memory, result)
            if only_fitting and result[R_FITS_MEMORY] == 0.0:
                code = ST_DOES_NOT_FIT
            code = finite_or_marked(result, N_RESULTS, code, True, ST_NOT_FINITE)
        status[offset + flat] = code
        for v in range(N_RESULTS):
            out[v, offset + flat] = result[v]


@njit(parallel=True)
def evaluate_points(table, base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out, offset,
                    chunk_points, lanes):
    """Status and every result of each point ``i`` of the grid of ``shape`` into ``status[offset + i]`` (int8)
    and ``out[:, offset + i]`` (N_RESULTS rows), chunks of ``chunk_points`` dealt round-robin over ``lanes``
    (:func:`evaluate_grid`). ``table`` is ``(vector, column_step, row_step)``: with ``column_step`` > 0 point ``i``
    is configuration ``i`` of a parameter table, column ``c`` of it at ``vector[c * column_step + i * row_step]``
    (a C or Fortran table's memory, one type for both: kernels/lm/evaluate.py ``table_memory``), evaluated when
    its given ``status`` is 0 (NaN results otherwise); the grid arguments are then unused but for ``shape`` (the
    number of configurations). :data:`NO_TABLE`: the grid's points."""
    n = 1
    for size in shape:
        n *= size
    chunks = (n + chunk_points - 1) // chunk_points
    lanes = min(chunks, max(1, lanes))
    for lane in prange(lanes):
        for chunk in range(lane, chunks, lanes):
            lo = chunk * chunk_points
            _evaluate_points(lo, min(n, lo + chunk_points), table, base, axis_columns, axis_values, shape, auto_shard,
                             only_fitting, status, out, offset)


def evaluate_grid(base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out, offset, lanes):
    """Status and every result of each point of the grid of ``shape`` into ``status[offset + i]`` (int8) and
    ``out[:, offset + i]`` (N_RESULTS rows) for point ``i`` (C order), so a sweep writes a unit of work straight
    into its place in a larger result matrix. With ``only_fitting``, legal points that do not fit in memory get
    status ``does_not_fit`` (their results stay, so the memory breakdown shows why). Runs :func:`evaluate_points`.

    numba hands each thread one contiguous 1/T of a ``prange`` (chunksize 0; under the OpenMP layer a plain
    ``omp for``, static), and a point's cost follows its place in the grid (the first axis, e.g. num_nodes,
    decides how many plans are legal), so 1/T of the grid in a row is not 1/T of the work: the dense sweep of
    bench/bench_lm_sweep.py gave 57 % and 43 % of the CPU seconds to its two halves (docs/performance.md). The
    ``prange`` therefore runs over ``lanes`` (the caller passes numba's thread count T; asking numba for it in
    here would make the kernel uncacheable), lane ``k`` taking chunks ``k, k + T, k + 2T, ...``: every thread gets
    chunks from the whole grid. Each point is still evaluated by the same code into its own place, so the results
    do not depend on ``lanes``."""
    evaluate_points(NO_TABLE, base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out,
                    offset, CHUNK_POINTS, lanes)


@njit
def grid_configuration(flat, base, axis_columns, axis_values, shape, auto_shard):
    """The column vector of one grid point (for reports and tests)."""
    row = np.empty(N_COLUMNS)
    _grid_point(flat, base, axis_columns, axis_values, shape, auto_shard, row)
    return row
