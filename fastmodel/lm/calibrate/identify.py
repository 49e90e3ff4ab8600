"""Which parameters the runs identify (docs/calibration.md "Which parameters the runs pin down").

A candidate parameter is fitted only if the runs constrain it; every other one keeps its physical value and a
status saying why. ``select_identifiable`` probes every open parameter by ``PROBE`` x its scale in one batched
engine call, which gives the sensitivity matrix (runs x parameters, the change of each run's log step time),
then, strongest first (software stacks before devices):

1. too weak: no run moves by ``min_effect``;
2. one run: fewer than ``MIN_RUNS_MOVED`` runs move by ``min_effect`` -- the fit would carry that one run's
   error to every other run, with no second run to check it against (no residual degree of freedom);
3. not separable: less than ``min_independence`` of the column's norm lies outside the span of the columns
   already taken (greedy pivoted Gram-Schmidt: this bounds the condition of the fitted Jacobian);
4. too few runs in its group: at most one parameter per ``runs_per_parameter`` runs of its device or stack;
5. too few runs in all: at most one parameter per ``runs_per_parameter`` runs overall -- groups share runs (a
   stack's runs are its device's runs), so five runs fit at most two parameters whatever their groups.

``replaced_terms`` holds, before any probe, a fitted value that would replace a term the model resolves per
configuration: a stack's ``host_layer_s`` (one host time per layer pass for every run) where the stack counts
its operators (``host_ops_layer x host_op_s``, which differs by configuration); ``host_op_s`` is fitted there
instead, a scale on the counted term.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastmodel.registry.lm import COLUMN_INDEX as C

if TYPE_CHECKING:
    from fastmodel.lm.calibrate.fit import Parameter, Problem

#: relative change of a parameter (of its scale) used to probe sensitivity
PROBE = 0.25
#: runs whose step time a parameter must move by ``min_effect`` to be fitted
MIN_RUNS_MOVED = 2


def counted_issue_time(records, rows) -> np.ndarray:
    """Per run of ``rows``: the stack's counted host time per layer pass, ``(host_ops_layer + moe_sync_issue_ops)
    x host_op_s`` (the second: ops issued after each MoE host sync, docs/model.md §11.14.6; 0: the stack counts
    none)."""
    return np.array([(records[i].columns[C["host_ops_layer"]] + records[i].columns[C["moe_sync_issue_ops"]])
                     * records[i].columns[C["host_op_s"]] for i in rows])


def replaced_terms(records, stack_rows: np.ndarray) -> dict[str, str]:
    """Statuses of the host-time columns of a stack whose runs are ``stack_rows``: the one the fit must leave
    physical, and why (empty: both open)."""
    counted = counted_issue_time(records, stack_rows)
    if np.any(counted > 0.0):
        ops = sorted({f"{records[i].columns[C['host_ops_layer']]:g}" for i in stack_rows})
        return {"host_layer_s": "would replace the counted issue time host_ops_layer x host_op_s "
                                f"({'/'.join(ops)} operators) of every run; host_op_s, its scale, is fitted instead"}
    return {"host_op_s": "the stack counts no operators ((host_ops_layer + moe_sync_issue_ops) x host_op_s = 0): "
                         "nothing to scale; "
                         "host_layer_s is fitted instead"}


def _runs_moved(problem: Problem, delta: np.ndarray, min_effect: float) -> int:
    """Distinct runs whose residuals (step time, or memory) move by ``min_effect`` or more."""
    return int(np.unique(problem.blocks[np.abs(delta) >= min_effect]).size)


def select_identifiable(problem: Problem, params: list[Parameter], min_effect: float,
                        min_independence: float, runs_per_parameter: int = 2) -> None:
    """Mark which open parameters the runs constrain (status "fitted") and why the others stay physical."""
    open_ = [j for j, p in enumerate(params) if not p.status]
    theta0 = np.array([p.start for p in params])
    steps = np.array([PROBE * p.scale * (1.0 if p.start + PROBE * p.scale <= p.hi else -1.0) for p in params])
    probes = np.repeat(theta0[None, :], len(open_) + 1, axis=0)
    for k, j in enumerate(open_):
        probes[k + 1, j] += steps[j]
    r = problem.residuals(probes)
    delta = r[1:] - r[0]                                 # change of each residual for each probe
    block_runs = {p.group: p.rows.size for p in params}
    total_limit = max(1, problem.n // runs_per_parameter)
    fitted_in_block: dict[str | None, int] = {}
    basis: list[np.ndarray] = []
    owners: list[int] = []
    # software stacks first: a device's efficiency is fitted only on what its runs' stacks leave unexplained
    order = sorted(range(len(open_)), key=lambda k: (params[open_[k]].stack is None, -np.linalg.norm(delta[k])))
    for k in order:
        p = params[open_[k]]
        p.sensitivity = float(np.max(np.abs(delta[k]))) if delta.shape[1] else 0.0
        if p.sensitivity < min_effect:
            p.status = (f"too weak: a {100 * PROBE:.0f}% change moves no run's step time by "
                        f"{100 * min_effect:.1f}% (largest {100 * p.sensitivity:.2g}%)")
            continue
        moved = _runs_moved(problem, delta[k], min_effect)
        if moved < MIN_RUNS_MOVED:
            p.status = (f"one run: a {100 * PROBE:.0f}% change moves {moved} run's step time by "
                        f"{100 * min_effect:.1f}% (at least {MIN_RUNS_MOVED} needed)")
            continue
        v = delta[k].copy()
        norm = np.linalg.norm(v)
        coefs = [float(q @ v) for q in basis]
        for q, c in zip(basis, coefs):
            v -= c * q
        if np.linalg.norm(v) < min_independence * norm:
            twin = params[owners[int(np.argmax(np.abs(coefs)))]].label
            p.status = f"not separable from {twin} in these runs"
            continue
        limit = max(1, block_runs[p.group] // runs_per_parameter)
        if fitted_in_block.get(p.group, 0) >= limit:
            p.status = f"too few runs: {block_runs[p.group]} runs pin at most {limit} parameter(s)"
            continue
        if len(owners) >= total_limit:
            p.status = f"too few runs: {problem.n} runs pin at most {total_limit} parameter(s) in all"
            continue
        basis.append(v / np.linalg.norm(v))
        owners.append(open_[k])
        fitted_in_block[p.group] = fitted_in_block.get(p.group, 0) + 1
        p.status = "fitted"
