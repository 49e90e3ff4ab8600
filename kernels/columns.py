"""Integer indices of the real-world column vector, derived from ``fastmodel.registry.lm``.

One configuration of the real-world training model and of serving is one column vector
(``registry.lm.COLUMNS``). For every column ``name`` this module defines ``C_<NAME>`` (its row index in the
parameter table) and the code constants of the coded columns (``SHARD_*``, ``RECOMPUTE_*``, ``PRECISION_*``,
``OPT_*``, ``SCHED_*``, ``CP_*``, ``ALGO_*``, ``LOAD_*``, ``DISPATCH_*``, ``A2A_*``, ``LOSS_*``,
``RECOMPUTE_MODULE_*`` and ``OFFLOAD_*`` bits, ``FP8_*``, ``VENDOR_*``, ``EMB32_*``, ``BWD_PREFETCH_*``). Shared by the roofline and NCCL kernels and by the
lm and serving kernels. Numba reads module-level integers as compile-time constants, so kernels index rows by
name at no cost; nothing here is written by hand twice.
"""

from fastmodel.registry.lm import (
    COLLECTIVE_ALGORITHMS, COLUMNS, CP_ALGORITHMS, EMBEDDING_FP32_GRADS, FP8_RECIPES, LOAD_MODES, LOSS_IMPLS,
    MOE_A2A_OVERLAPS, MOE_DISPATCHERS,
    OFFLOAD_MODULES, OPTIMIZER_CODES, PIPELINE_SCHEDULES, PRECISION_CODES, RECOMPUTE_CODES, RECOMPUTE_MODULES, SHARDING_CODES,
)
from fastmodel.registry.lm_fsdp1 import FSDP_BACKWARD_PREFETCH
from fastmodel.registry.lm_lowprec import VENDORS

N_COLUMNS = len(COLUMNS)

_constants = {"C_" + c.name.upper(): i for i, c in enumerate(COLUMNS)}
for _prefix, _codes in (("SHARD_", SHARDING_CODES), ("RECOMPUTE_", RECOMPUTE_CODES), ("PRECISION_", PRECISION_CODES),
                        ("OPT_", OPTIMIZER_CODES), ("SCHED_", PIPELINE_SCHEDULES),
                        ("CP_", CP_ALGORITHMS), ("ALGO_", COLLECTIVE_ALGORITHMS), ("LOAD_", LOAD_MODES),
                        ("DISPATCH_", MOE_DISPATCHERS), ("A2A_", MOE_A2A_OVERLAPS), ("LOSS_", LOSS_IMPLS),
                        ("RECOMPUTE_MODULE_", RECOMPUTE_MODULES), ("FP8_", FP8_RECIPES),
                        ("OFFLOAD_", OFFLOAD_MODULES), ("VENDOR_", VENDORS), ("EMB32_", EMBEDDING_FP32_GRADS),
                        ("BWD_PREFETCH_", FSDP_BACKWARD_PREFETCH)):
    for _name, _code in _codes.items():
        _constants.setdefault(_prefix + _name.upper(), _code)
globals().update(_constants)
__all__ = ["N_COLUMNS", *_constants]
