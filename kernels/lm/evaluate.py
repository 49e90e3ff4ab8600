"""Fused evaluation of the real-world LM model: parameter table -> every result (time and memory), one pass
per config.

``params`` is column-major (``N_COLUMNS`` x n), as ``fastmodel.lm.table`` builds
it. Rows are cut into chunks, one ``prange`` iteration each, so scratch vectors
are allocated once per chunk. Rows whose ``status`` is not 0 get NaN; an evaluated row whose
results are not all finite gets status ``not_finite`` and NaN results (``kernels/finite.py``).
"""

import numpy as np

from fastmodel.kernels.finite import finite_or_marked
from fastmodel.kernels.jit import njit, prange, stack_vector
from fastmodel.kernels.lm.layout import (
    N_COLUMNS, C_ALLOCATOR_CACHE_FRACTION, C_ALLOCATOR_CACHE_FRACTION_EXPANDABLE, C_ALLOCATOR_EXPANDABLE_SEGMENTS,
    C_HBM_BYTES, C_USABLE_HBM_FRACTION, M_OVERHEAD, N_MEMORY_KINDS, N_RESULTS,
    R_FITS_MEMORY, R_HOST_OFFLOAD_BYTES, R_MEMORY_ALLOCATED, R_MEMORY_PEAK_STAGE, R_MEMORY_PER_DEVICE, R_MEMORY_RESERVED, R_MEMORY_WEIGHTS,
)
from fastmodel.kernels.lm.passes import N_WORK
from fastmodel.kernels.lm.step import step_row
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_offload import host_offload_bytes
from fastmodel.registry.lm import STATUS_CODES

ST_NOT_FINITE = STATUS_CODES["not_finite"]

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


@njit(inline="always")   # into its two callers: no compile of its own of the whole evaluation (~3 s cold)
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
    result[R_MEMORY_RESERVED] = allocated * (1.0 + row[C_ALLOCATOR_CACHE_FRACTION])
    result[R_MEMORY_PEAK_STAGE] = stage
    result[R_FITS_MEMORY] = 1.0 if total <= usable_hbm_bytes(row, allocated) else 0.0
    result[R_HOST_OFFLOAD_BYTES] = host_offload_bytes(row)


@njit(inline="always")   # into evaluate_parallel's prange body: one compile of the whole evaluation fewer
def evaluate_rows(params, status, out, lo, hi):
    """Evaluate rows ``lo .. hi - 1`` of ``params`` into ``out`` (``N_RESULTS`` x n), one after another."""
    # frame vectors (kernels/jit.py stack_vector): passed through every cost term without reference counting;
    # the row is copied out of the column-major table, as the grid kernel builds its rows
    row = stack_vector(N_COLUMNS)
    work = stack_vector(N_WORK)
    memory = stack_vector(N_MEMORY_KINDS)
    result = stack_vector(N_RESULTS)
    for r in range(lo, hi):
        if status[r] != 0:
            for v in range(N_RESULTS):
                out[v, r] = np.nan
            continue
        for v in range(N_RESULTS):
            result[v] = np.nan
        for c in range(N_COLUMNS):
            row[c] = params[c, r]
        evaluate_row(row, work, memory, result)
        status[r] = finite_or_marked(result, N_RESULTS, 0, True, ST_NOT_FINITE)
        for v in range(N_RESULTS):
            out[v, r] = result[v]


@njit(parallel=True)
def evaluate_parallel(params, status, out):
    """Evaluate every row of ``params`` into ``out`` (``N_RESULTS`` x n), chunks in parallel."""
    n = params.shape[1]
    chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for chunk in prange(chunks):
        lo = chunk * CHUNK_ROWS
        evaluate_rows(params, status, out, lo, min(n, lo + CHUNK_ROWS))


def evaluate_serial(params, status, out):
    """Single-threaded :func:`evaluate_parallel` for small tables: :func:`evaluate_rows` over every row, called
    from Python (a compiled wrapper around it was one more cold compile of the whole evaluation, ~2 s)."""
    evaluate_rows(params, status, out, 0, params.shape[1])
