"""Fused evaluation of the real-world LM model: parameter table -> every result (time and memory), one pass
per config.

``params`` is column-major (``N_COLUMNS`` x n), as ``fastmodel.lm.table`` builds
it. Rows are cut into chunks, one ``prange`` iteration each, so scratch vectors
are allocated once per chunk; the loops are the grid kernel's (``kernels/lm/grid.py`` ``evaluate_points``,
which reads its points from the table here). Rows whose ``status`` is not 0 get NaN; an evaluated row whose
results are not all finite gets status ``not_finite`` and NaN results (``kernels/finite.py``).
"""

import numpy as np

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    N_COLUMNS, C_ALLOCATOR_CACHE_FRACTION, C_ALLOCATOR_CACHE_FRACTION_EXPANDABLE, C_ALLOCATOR_EXPANDABLE_SEGMENTS,
    C_HBM_BYTES, C_USABLE_HBM_FRACTION, M_OVERHEAD, N_MEMORY_KINDS,
    R_FITS_MEMORY, R_HOST_OFFLOAD_BYTES, R_MEMORY_ALLOCATED, R_MEMORY_PEAK_STAGE, R_MEMORY_PER_DEVICE, R_MEMORY_RESERVED, R_MEMORY_WEIGHTS,
)
from fastmodel.kernels.lm.step import step_row
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_fsdp import fsdp_run_ahead_bytes
from fastmodel.kernels.lm.memory_offload import host_offload_bytes

#: rows per prange chunk
CHUNK_ROWS = 256


@njit
def unrecoverable_cache_share(row):
    """The share of allocated bytes the caching allocator holds that a failed allocation does not get back
    (docs/model_memory.md "Expandable segments (``allocator_expandable_segments``)"):
    ``allocator_cache_fraction_expandable`` when the plan runs with expandable segments (only partial pages at the
    ends of free blocks stay mapped), else ``allocator_cache_fraction`` (the default allocator's cache)."""
    if row[C_ALLOCATOR_EXPANDABLE_SEGMENTS] > 0.0:
        return row[C_ALLOCATOR_CACHE_FRACTION_EXPANDABLE]
    return row[C_ALLOCATOR_CACHE_FRACTION]


@njit
def usable_hbm_bytes(row, allocated):
    """The HBM a plan may fill (docs/model_memory.md "What a run keeps free"): ``usable_hbm_fraction x HBM`` when
    the column is set (> 0); else the HBM less the plan's own allocator cache, ``unrecoverable_cache_share x
    allocated`` (reserved - allocated, the most the caching allocator can hold that a failed allocation does not
    get back), so that under the default allocator the plan fits when ``memory_reserved + overhead <= HBM``."""
    fraction = row[C_USABLE_HBM_FRACTION]
    if fraction > 0.0:
        return fraction * row[C_HBM_BYTES]
    return row[C_HBM_BYTES] - unrecoverable_cache_share(row) * allocated


@njit
def reserved_bytes(row, allocated, overhead, stage):
    """``memory_reserved`` at the peak: the allocated bytes and the allocator's cache of free blocks,
    ``(1 + allocator_cache_fraction) allocated`` (docs/model_memory.md "Allocated, reserved and what fits"), and
    under FSDP1 without its rate limiter the blocks freed ahead of the GPU (``fsdp_run_ahead_bytes``), at most
    up to the HBM less ``overhead`` (the caching allocator then synchronizes and releases them: docs/model_memory.md
    "PyTorch FSDP1: prefetch and the rate limiter"). Not what decides ``fits_memory``."""
    reserved = allocated * (1.0 + row[C_ALLOCATOR_CACHE_FRACTION])
    run_ahead = fsdp_run_ahead_bytes(row, stage)
    if run_ahead > 0.0:
        reserved = max(reserved, min(reserved + run_ahead, row[C_HBM_BYTES] - overhead))
    return reserved


@njit(inline="always")   # into grid._evaluate_points: no compile of its own of the whole evaluation (~3 s cold)
def evaluate_row(row, work, memory, result):
    """Every result of one legal configuration: step time (kernels/lm/step.py) and memory per device by kind
    (kernels/lm/memory.py; their sum is the peak, ``fits_memory`` compares it with usable HBM), the peak's
    allocated and reserved bytes (``overhead`` is not a tensor) and its pipeline rank."""
    step_row(row, work, result)
    stage = memory_row(row, memory)
    total = 0.0
    for k in range(N_MEMORY_KINDS):
        result[R_MEMORY_WEIGHTS + k] = memory[k]
        total += memory[k]
    allocated = total - memory[M_OVERHEAD]
    result[R_MEMORY_PER_DEVICE] = total
    result[R_MEMORY_ALLOCATED] = allocated
    result[R_MEMORY_RESERVED] = reserved_bytes(row, allocated, memory[M_OVERHEAD], stage)
    result[R_MEMORY_PEAK_STAGE] = stage
    result[R_FITS_MEMORY] = 1.0 if total <= usable_hbm_bytes(row, allocated) else 0.0
    result[R_HOST_OFFLOAD_BYTES] = host_offload_bytes(row)


def table_memory(params):
    """(vector, column step, configuration step) of a C or Fortran contiguous ``N_COLUMNS`` x n table: its
    memory as one vector (no copy) and where column ``c`` of configuration ``r`` is in it, ``c * column_step +
    r * configuration_step``. A kernel that reads tables this way has one argument type for both layouts, so it
    is compiled once, not once per layout a caller happens to pass. Any other table (a strided view such as
    ``params[:, ::2]``, another dtype) is copied to a C contiguous float64 one first: the steps are taken from the
    strides of the vector returned, not of a view that ``ravel`` would have to copy."""
    if params.dtype != np.float64 or not (params.flags.c_contiguous or params.flags.f_contiguous):
        params = np.ascontiguousarray(params, dtype=np.float64)
    n = params.shape[1]
    column_step, row_step = (x // params.itemsize for x in params.strides)
    if n <= 1:                       # one configuration: its columns one after another, whatever the strides
        column_step, row_step = 1, params.shape[0]
    return params.ravel(order="K"), column_step, row_step


def _table_call(params, status, out):
    """The arguments of ``kernels/lm/grid.py`` ``evaluate_points`` (or its serial chunk) for a table
    (:func:`table_memory`): no grid, ``shape`` holds the number of configurations."""
    return (table_memory(params), NO_BASE, NO_AXIS_COLUMNS, NO_AXIS_VALUES,
            np.array([params.shape[1]], dtype=np.int64), False, False, status, out, 0)


#: the grid arguments of a table call (unused there; the types of a grid call's)
NO_BASE = np.zeros(N_COLUMNS)
NO_AXIS_COLUMNS = np.full((1, 1), -1, dtype=np.int64)
NO_AXIS_VALUES = np.zeros((1, 1, 1))


def evaluate_parallel(params, status, out):
    """Evaluate every configuration (column) of ``params`` (an ``N_COLUMNS`` x n table, read in place when C or
    Fortran contiguous, else copied: :func:`table_memory`) into ``out`` (``N_RESULTS`` x n), chunks of
    ``CHUNK_ROWS`` in parallel: the grid kernel (``kernels/lm/grid.py`` ``evaluate_points``) reading its points
    from the table, so the parallel evaluation is compiled once for tables and grids (docs/performance.md "One
    parallel kernel for the table and the grid"). Rows whose ``status`` is not 0 get NaN."""
    from fastmodel.kernels.lm.grid import evaluate_points
    from fastmodel.sweeps.plan import grid_lanes

    evaluate_points(*_table_call(params, status, out), CHUNK_ROWS, grid_lanes())


def evaluate_serial(params, status, out):
    """Single-threaded :func:`evaluate_parallel` for small tables: the grid kernel's chunk of points
    (``kernels/lm/grid.py`` ``_evaluate_points``, inlined there) over every row, called from Python (a compiled
    wrapper around it would be one more cold compile of the whole evaluation, ~2 s)."""
    from fastmodel.kernels.lm.grid import _evaluate_points

    _evaluate_points(0, params.shape[1], *_table_call(params, status, out))
