"""The evaluation engine: configurations -> result arrays, through the kernels only.

Configurations are grouped by Program structure; each group is lowered once,
its parameter table goes through the family's cost kernel and the generic
scheduler kernel, and results are scattered back in input order. One config
and a million take the same path.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from fastmodel.config import Config, llm_param_row, structure_key
from fastmodel.kernels.layout import (
    CATEGORY_NAMES, N_FLAGS, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME, STRAT_NONE, STRATEGY_CODES,
    T_EFF_FLOPS, T_GLOBAL_BATCH, T_WMEM_DENSE, T_WMEM_EMB, F_DDP_GRAD_SHARDED,
)
from fastmodel.kernels.llm_costs import llm_costs, llm_costs_serial
from fastmodel.kernels.schedule import schedule_many, schedule_many_serial, schedule_trace
from fastmodel.lower import StructureKey, lower
from fastmodel.program import Program
from fastmodel.results import NAMES, derive
from fastmodel.semantics import Semantics


#: below this many rows the single-threaded kernels are used: waking the
#: thread pool costs about a millisecond, far more than a few configs take.
PARALLEL_MIN_ROWS = 256


def strategy_codes(strategies: tuple[str, ...]) -> np.ndarray:
    """Strategy names -> int64 codes, padded to 2 levels with STRAT_NONE."""
    codes = np.full(2, STRAT_NONE, dtype=np.int64)
    for i, name in enumerate(strategies):
        codes[i] = STRATEGY_CODES[name]
    return codes


def semantics_flags(semantics: Semantics) -> np.ndarray:
    flags = np.zeros(N_FLAGS, dtype=np.int64)
    flags[F_DDP_GRAD_SHARDED] = int(semantics.ddp_grad_sharded_layer)
    return flags


def cost_slots(key: StructureKey, semantics: Semantics, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slot durations and terms of a parameter table (family cost kernel)."""
    kernel = llm_costs if params.shape[0] >= PARALLEL_MIN_ROWS else llm_costs_serial
    return kernel(
        np.ascontiguousarray(params, dtype=np.float64),
        strategy_codes(key.dense), len(key.dense),
        strategy_codes(key.emb), len(key.emb),
        semantics_flags(semantics),
    )


def evaluate_table(key: StructureKey, semantics: Semantics, params: np.ndarray,
                   extrapolate: bool = True) -> dict[str, np.ndarray]:
    """Evaluate every row of ``params`` (one structure) -> result arrays.

    ``extrapolate`` lets the scheduler jump over steady-state layers
    (exact to ~1e-12 relative, see ``kernels/schedule.py``).
    """
    program = lower(key)
    slots, terms = cost_slots(key, semantics, params)
    scheduler = schedule_many if slots.shape[0] >= PARALLEL_MIN_ROWS else schedule_many_serial
    sched = scheduler(*program.arrays(), *program.segment_arrays(), extrapolate, slots)
    n = params.shape[0]
    results = {
        "iteration_time": sched[:, O_ITERATION_TIME],
        "forward_time": sched[:, O_FORWARD_TIME],
        "global_batch": terms[:, T_GLOBAL_BATCH],
        "weight_memory_dense": terms[:, T_WMEM_DENSE],
        "weight_memory_emb": terms[:, T_WMEM_EMB],
        "eff_flop_per_s": terms[:, T_EFF_FLOPS],
        "num_compute_ops": np.full(n, float(program.num_compute_ops)),
        "num_comm_ops": np.full(n, float(program.num_comm_ops)),
    }
    for c, name in enumerate(CATEGORY_NAMES):
        results["time_" + name] = sched[:, O_CATEGORY0 + c]
    return derive(results)


def evaluate_configs(configs: list[Config], extrapolate: bool = True) -> dict[str, np.ndarray]:
    """Result arrays (registry names) for ``configs``, in input order."""
    out = {name: np.full(len(configs), np.nan) for name in NAMES}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, config in enumerate(configs):
        groups[(structure_key(config), config.semantics)].append(i)
    for (key, semantics), indices in groups.items():
        params = np.stack([llm_param_row(configs[i]) for i in indices])
        results = evaluate_table(key, semantics, params, extrapolate)
        idx = np.asarray(indices)
        for name, values in results.items():
            out[name][idx] = values
    return out


def trace(config: Config) -> tuple[Program, np.ndarray, np.ndarray]:
    """The Program of one configuration with each op's start and end (seconds)."""
    key = structure_key(config)
    program = lower(key)
    slots, _ = cost_slots(key, config.semantics, llm_param_row(config)[None, :])
    start, end, _ = schedule_trace(*program.arrays(), *program.segment_arrays(), slots[0])
    return program, start, end
