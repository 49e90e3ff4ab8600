"""Fused evaluation of the real-world LM model: parameter table -> every result, one pass per config.

``params`` is column-major (``N_COLUMNS`` x n), as ``fastmodel.lm_table`` builds
it. Rows are cut into chunks, one ``prange`` iteration each, so scratch vectors
are allocated once per chunk. Rows whose ``status`` is not 0 get NaN.
"""

import numpy as np

from fastmodel.kernels.jit import njit, prange
from fastmodel.kernels.lm_layout import N_RESULTS
from fastmodel.kernels.lm_step import N_WORK, step_row

#: rows per prange chunk
CHUNK_ROWS = 256


@njit
def _evaluate_rows(params, status, out, lo, hi):
    work = np.empty(N_WORK)
    result = np.empty(N_RESULTS)
    for r in range(lo, hi):
        if status[r] != 0:
            for v in range(N_RESULTS):
                out[v, r] = np.nan
            continue
        for v in range(N_RESULTS):
            result[v] = np.nan
        step_row(params[:, r], work, result)
        for v in range(N_RESULTS):
            out[v, r] = result[v]


@njit(parallel=True)
def evaluate_parallel(params, status, out):
    """Evaluate every row of ``params`` into ``out`` (``N_RESULTS`` x n), chunks in parallel."""
    n = params.shape[1]
    chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for chunk in prange(chunks):
        lo = chunk * CHUNK_ROWS
        _evaluate_rows(params, status, out, lo, min(n, lo + CHUNK_ROWS))


@njit
def evaluate_serial(params, status, out):
    """Single-threaded :func:`evaluate_parallel` for small tables."""
    _evaluate_rows(params, status, out, 0, params.shape[1])
