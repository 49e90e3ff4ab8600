"""Integer indices of the real-world LM model, derived from ``fastmodel.registry.lm``.

For every column ``name`` this module defines ``C_<NAME>`` (its row index in the
parameter table), for every result ``R_<NAME>``, for every memory kind
``M_<KIND>`` (index into a memory breakdown), for every serving result ``S_<NAME>``, and the code constants
(``SHARD_*``, ``RECOMPUTE_*``, ``PRECISION_*``, ``OPT_*``, ``SCHED_*``).
Numba reads module-level integers as compile-time constants, so kernels index
rows by name at no cost; nothing here is written by hand twice.
"""

from fastmodel.registry.lm import (
    COLLECTIVE_ALGORITHMS, COLUMNS, CP_ALGORITHMS, LOAD_MODES, MEMORY_KINDS, OPTIMIZER_CODES, PIPELINE_SCHEDULES,
    PRECISION_CODES, RECOMPUTE_CODES, RESULTS, SERVE_RESULTS, SHARDING_CODES,
)

N_COLUMNS = len(COLUMNS)
N_RESULTS = len(RESULTS)
N_MEMORY_KINDS = len(MEMORY_KINDS)
N_SERVE_RESULTS = len(SERVE_RESULTS)

_constants = {}
_constants.update({"C_" + c.name.upper(): i for i, c in enumerate(COLUMNS)})
_constants.update({"R_" + r.name.upper(): i for i, r in enumerate(RESULTS)})
_constants.update({"M_" + k.upper(): i for i, k in enumerate(MEMORY_KINDS)})
_constants.update({"S_" + r.name.upper(): i for i, r in enumerate(SERVE_RESULTS)})
for _prefix, _codes in (("SHARD_", SHARDING_CODES), ("RECOMPUTE_", RECOMPUTE_CODES), ("PRECISION_", PRECISION_CODES),
                        ("OPT_", OPTIMIZER_CODES), ("SCHED_", PIPELINE_SCHEDULES),
                        ("CP_", CP_ALGORITHMS), ("ALGO_", COLLECTIVE_ALGORITHMS), ("LOAD_", LOAD_MODES)):
    for _name, _code in _codes.items():
        _constants.setdefault(_prefix + _name.upper(), _code)
globals().update(_constants)
__all__ = ["N_COLUMNS", "N_RESULTS", "N_MEMORY_KINDS", "N_SERVE_RESULTS", *_constants]
