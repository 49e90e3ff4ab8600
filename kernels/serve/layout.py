"""Integer indices of the serving kernels, derived from ``fastmodel.registry.serve``.

For every serving result ``S_<NAME>`` (its row in the result matrix) and for every serving status
``ST_<NAME>`` (its code); the column indices ``C_*`` are the real-world model's (``kernels/columns.py``).
Numba reads module-level integers as compile-time constants; nothing here is written by hand twice.
"""

from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUSES

N_SERVE_RESULTS = len(SERVE_RESULTS)

_constants = {"S_" + r.name.upper(): i for i, r in enumerate(SERVE_RESULTS)}
_constants.update({"ST_" + s.name.upper(): code for code, s in enumerate(SERVE_STATUSES)})
globals().update(_constants)
__all__ = ["N_SERVE_RESULTS", *_constants]
