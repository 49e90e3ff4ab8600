"""The door into the real-world LM kernels: parameter tables -> result arrays by registry name."""

from __future__ import annotations

import numpy as np

from fastmodel.registry.lm import RESULTS

#: below this many rows the single-threaded kernel is used (waking the thread pool costs ~1 ms)
PARALLEL_MIN_ROWS = 256


def evaluate_into(params: np.ndarray, status: np.ndarray, out: np.ndarray) -> None:
    """Evaluate a ``(N_COLUMNS, n)`` table into ``out`` (``N_RESULTS`` x n, may be a view); rows with
    status != 0 get NaN. A Fortran-ordered table (one contiguous vector per configuration) is fastest."""
    from fastmodel.kernels.lm.evaluate import evaluate_parallel, evaluate_serial

    kernel = evaluate_parallel if params.shape[1] >= PARALLEL_MIN_ROWS else evaluate_serial
    params = np.asarray(params, dtype=np.float64)
    if not (params.flags.c_contiguous or params.flags.f_contiguous):
        params = np.ascontiguousarray(params)
    kernel(params, status, out)


def evaluate_table(params: np.ndarray) -> dict[str, np.ndarray]:
    """Every result of every configuration of ``params`` (all legal), as arrays by name."""
    n = params.shape[1]
    out = np.empty((len(RESULTS), n))
    evaluate_into(params, np.zeros(n, dtype=np.int8), out)
    return {r.name: out[i] for i, r in enumerate(RESULTS)}
