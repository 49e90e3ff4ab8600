"""Integer indices of the real-world LM model, derived from ``fastmodel.registry.lm``.

The column indices ``C_<NAME>`` and the code constants (``SHARD_*``, ``RECOMPUTE_*``, ``PRECISION_*``,
``OPT_*``, ``SCHED_*``...) come from the shared ``kernels/columns.py`` (one column vector for training and
serving); this module adds, for every result, ``R_<NAME>`` and, for every memory kind, ``M_<KIND>`` (index into
a memory breakdown). Numba reads module-level integers as compile-time constants, so kernels index rows by name
at no cost; nothing here is written by hand twice.
"""

from fastmodel.kernels import columns as _columns
from fastmodel.registry.lm import MEMORY_KINDS, RESULTS

N_COLUMNS = _columns.N_COLUMNS
N_RESULTS = len(RESULTS)
N_MEMORY_KINDS = len(MEMORY_KINDS)

_constants = {name: getattr(_columns, name) for name in _columns.__all__ if name != "N_COLUMNS"}
_constants.update({"R_" + r.name.upper(): i for i, r in enumerate(RESULTS)})
_constants.update({"M_" + k.upper(): i for i, k in enumerate(MEMORY_KINDS)})
globals().update(_constants)
__all__ = ["N_COLUMNS", "N_RESULTS", "N_MEMORY_KINDS", *_constants]
