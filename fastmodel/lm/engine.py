"""The door into the real-world LM kernels: parameter tables -> result arrays by registry name."""

from __future__ import annotations

import numpy as np

from fastmodel.registry.lm import RESULTS, STATUS_CODES
from fastmodel.spec.columns import check_table

NOT_FINITE = STATUS_CODES["not_finite"]

#: below this many rows the single-threaded kernel is used (waking the thread pool costs ~1 ms)
PARALLEL_MIN_ROWS = 256


def evaluate_into(params: np.ndarray, status: np.ndarray, out: np.ndarray) -> None:
    """Evaluate a ``(N_COLUMNS, n)`` table into ``out`` (``N_RESULTS`` x n, may be a view); rows with
    status != 0 get NaN, rows whose results are not all finite get status ``not_finite`` (and NaN; the
    kernel's own check, ``kernels/finite.py``). A
    Fortran-ordered table (one contiguous vector per configuration) is fastest; any other layout or dtype is
    copied once by ``kernels/lm/evaluate.py`` ``table_memory``."""
    from fastmodel.kernels.lm.evaluate import evaluate_parallel, evaluate_serial

    check_table(params)
    kernel = evaluate_parallel if params.shape[1] >= PARALLEL_MIN_ROWS else evaluate_serial
    with np.errstate(all="ignore"):  # interpreted kernels (FASTMODEL_JIT=0) overflow in numpy scalars
        kernel(params, status, out)


def evaluate_table(params: np.ndarray, status: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every result of every configuration of ``params`` (all legal), as arrays by name; ``status`` (int8
    n, zeros), if given, receives ``not_finite`` for configurations whose results are not all finite (their
    results are NaN)."""
    check_table(params)
    n = params.shape[1]
    out = np.empty((len(RESULTS), n))
    evaluate_into(params, np.zeros(n, dtype=np.int8) if status is None else status, out)
    return {r.name: out[i] for i, r in enumerate(RESULTS)}


def evaluate_one(columns: np.ndarray, where: str) -> dict[str, float]:
    """Every result of one configuration (a column vector) by name; a one-line NotFiniteError naming
    ``where`` when they are not all finite numbers."""
    from fastmodel.errors import NotFiniteError
    from fastmodel.registry.lm import STATUSES

    status = np.zeros(1, dtype=np.int8)
    results = {name: float(v[0]) for name, v in evaluate_table(np.asarray(columns, dtype=np.float64)[:, None],
                                                                status).items()}
    if status[0] == NOT_FINITE:
        raise NotFiniteError(where, STATUSES[NOT_FINITE].message)
    return results
