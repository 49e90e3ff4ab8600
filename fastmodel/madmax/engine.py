"""The evaluation engine: configurations -> result arrays, through the kernels only.

Configurations are grouped by Program structure; each group is lowered once
and its parameter table goes through the fused kernel (``kernels.evaluate``:
family cost kernel + generic scheduler + derived variables). One config and a
million take the same path; sweeps call :func:`evaluate_into` to write a chunk
straight into its region of the grid.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import numpy as np

from fastmodel.madmax.families import FAMILIES
from fastmodel.madmax.lowering.config import Config, param_row, structure_key
from fastmodel.kernels.args import EvalOptions, PlanCodes, make_eval_options, make_plan_codes
from fastmodel.kernels.madmax.evaluate import evaluate_parallel, evaluate_serial
from fastmodel.kernels.madmax.layout import (
    F_DDP_GRAD_SHARDED, N_FLAGS, N_RESULTS, RESULTS, STRAT_NONE, STRATEGY_CODES,
)
from fastmodel.kernels.madmax.costs import costs
from fastmodel.madmax.lowering.graph import StructureKey, lower
from fastmodel.schedule.program import Program
from fastmodel.schedule.run import schedule
from fastmodel.registry.madmax import NAMES
from fastmodel.semantics import Semantics


#: below this many rows the single-threaded kernel is used: waking the
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


@lru_cache(maxsize=4096)
def plan_codes(key: StructureKey, semantics: Semantics) -> PlanCodes:
    """The kernels' plan bundle: family code, (codes, levels) of each plan component, semantics flags
    (immutable; built once per structure and semantics)."""
    return make_plan_codes(FAMILIES[key.family].kernel_code, strategy_codes(key.dense), len(key.dense),
                           strategy_codes(key.emb), len(key.emb), strategy_codes(key.transformer),
                           len(key.transformer), semantics_flags(semantics))


def eval_options(program: Program, semantics: Semantics, mask_infeasible: bool = False,
                 extrapolate: bool = True) -> EvalOptions:
    """The fused pass's options bundle for ``program`` under ``semantics``."""
    return make_eval_options(extrapolate, semantics.memory_weight_factor, mask_infeasible,
                             program.num_compute_ops, program.num_comm_ops)


def evaluate_into(key: StructureKey, semantics: Semantics, params: np.ndarray, status: np.ndarray,
                  out: np.ndarray, offset: int = 0, mask_infeasible: bool = False, extrapolate: bool = True,
                  parallel_min_rows: int = PARALLEL_MIN_ROWS) -> None:
    """Evaluate the configs of ``params`` (one structure; COLUMNS x n) into ``out[:, offset:offset + n]``.

    Rows with a non-zero ``status`` get NaN. With ``mask_infeasible``, legal
    rows that do not fit in memory get status ``does_not_fit`` and keep only
    their memory variables (sweeps); otherwise they keep every value.
    ``extrapolate`` lets the scheduler jump over steady-state layers (exact to
    ~1e-12 relative, see ``kernels/schedule.py``). Below ``parallel_min_rows``
    rows the single-threaded kernel runs.
    """
    program = lower(key)
    kernel = evaluate_parallel if params.shape[1] >= parallel_min_rows else evaluate_serial
    kernel(np.ascontiguousarray(params, dtype=np.float64), status, plan_codes(key, semantics), program.kernel_arrays,
           eval_options(program, semantics, mask_infeasible, extrapolate), out, offset)


def evaluate_table(key: StructureKey, semantics: Semantics, params: np.ndarray,
                   extrapolate: bool = True) -> dict[str, np.ndarray]:
    """Evaluate every config of ``params`` (one structure, all legal; COLUMNS x n) -> arrays by name."""
    n = params.shape[1]
    out = np.empty((N_RESULTS, n))
    evaluate_into(key, semantics, params, np.zeros(n, dtype=np.int8), out, 0, False, extrapolate)
    return {name: out[v] for v, name in enumerate(RESULTS)}


def evaluate_configs(configs: list[Config], extrapolate: bool = True) -> dict[str, np.ndarray]:
    """Result arrays (registry names) for ``configs``, in input order."""
    out = {name: np.full(len(configs), np.nan) for name in NAMES}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, config in enumerate(configs):
        groups[(structure_key(config), config.semantics)].append(i)
    for (key, semantics), indices in groups.items():
        params = np.stack([param_row(configs[i]) for i in indices], axis=1)
        results = evaluate_table(key, semantics, params, extrapolate)
        idx = np.asarray(indices)
        for name, values in results.items():
            out[name][idx] = values
    return out


def trace(config: Config) -> tuple[Program, np.ndarray, np.ndarray]:
    """The Program of one configuration with each op's start and end (seconds)."""
    key = structure_key(config)
    program = lower(key)
    params = param_row(config)[:, None]
    slots, _ = costs(params, plan_codes(key, config.semantics))
    start, end, _ = schedule(program, slots[0])
    return program, start, end
