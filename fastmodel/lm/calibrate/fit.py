"""Fit the registry's fittable columns to measured runs.

Objective: least squares on ``log(predicted / measured)`` step time, plus
``log`` peak memory for runs that publish it (``measured.memory_gib``) while the
model gives a memory result (a NaN memory prediction is skipped). By default
the loss is robust (scipy ``soft_l1``, scale 5%: runs the model misses for
structural reasons weigh linearly) and each fitted value is pulled toward its
physical one with weight ``prior`` per scale (0.5; ``calibrate(prior="cv")``
chooses it by cross-validation; ``calibrate``'s default ``"auto"`` chooses it by
leave-one-out below 10 runs, ``prior.py``; ``inf`` holds every value physical).

Parameters (``Parameter``): one per fittable column and group that appears in
the runs -- device x precision for the GEMM efficiency, device for the other
device efficiencies, device x network tier (``intra``: the NVLink domain,
``inter``: scale-out) for bandwidth efficiency and latency, one framework
overhead per step shared by every run, and per software stack (the stack profile the runs resolve to,
``overlay.stack_key``) the share of the modelled kernel speed
it attains (``stack_compute_eff``) and its host issue time (``host_op_s``, a scale on the counted operators,
or ``host_layer_s`` where it counts none); runs that name no framework get none. Built-in (physical) values
are the starting point.

1. Identifiability (``identify.py``). A parameter is fitted only if the runs constrain it: no run
   on its device / precision / tier -> left physical; a change of
   ``PROBE`` x its scale moving no run's step time by ``min_effect`` -> left
   physical; moving only one run -> left physical; its sensitivity column nearly inside the span of stronger
   parameters' (greedy pivoted Gram-Schmidt, ``min_independence``) -> left
   physical, "not separable from X"; at most one fitted parameter per
   ``runs_per_parameter`` (2) runs of its device or stack, and of all the runs.
2. Coarse search through the vectorized engine: each stage builds ONE table of
   runs x candidates (the current point, a 1-D sweep of every parameter, random
   points of the box) and evaluates it in one ``evaluate_table`` call; runs of
   different devices are independent, so each device's parameters are taken
   from the candidate best for that device's runs. The box shrinks by 3 a stage.
3. Local refinement: ``scipy.optimize.least_squares`` (trust-region reflective)
   within the registry bounds, its Jacobian from one batched table per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fastmodel.errors import FastmodelError
from fastmodel.lm.calibrate.identify import PROBE, replaced_terms, select_identifiable  # noqa: F401 (re-exported)
from fastmodel.lm.calibrate.overlay import (
    DEVICE_FIELDS,
    FRAMEWORK_FIELDS,
    STACK_FIELDS,
    STACK_GROUP,
    Calibration,
    canonical_device,
    device_aliases,
    record_stack_key,
)
from fastmodel.lm.calibrate.prior import HELD, OUTSIDE, apply_choice, auto_prior
from fastmodel.lm.calibrate.search import Box, coarse_search, refine, robust_cost  # noqa: F401 (re-exported)
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import COLUMNS

#: bounds of the host issue time's scale per layer pass (see :func:`host_layer_scale`): 1 ms, the order of an
#: eager layer forward of a few dozen operators, to 4 ms (about a hundred at 40 us) [A]: runs whose layer passes
#: take longer on the GPU than 1 ms (large models) cannot show the host and leave it physical
HOST_LAYER_SCALE_S = (1e-3, 4e-3)


def host_layer_scale(records, rows) -> float:
    """Scale of ``host_layer_s``, which starts at 0 where it moves no run (the GPU runs ahead): such that the
    sensitivity probe (``PROBE`` x scale) is 1.25 x the host time per layer pass at which the median run becomes
    host-bound (its predicted step time over micro-batches x layers per stage x (2 + full recompute) passes),
    so the probe binds about half the runs; within ``HOST_LAYER_SCALE_S``."""
    from fastmodel.lm.engine import evaluate_table

    low, high = HOST_LAYER_SCALE_S
    if len(rows) == 0:
        return low
    table = np.stack([records[i].columns for i in rows], axis=1)
    steps = evaluate_table(table)["step_time"]
    micro = table[C["global_batch"]] / (table[C["micro_batch"]] * table[C["dp"]])
    passes = micro * np.ceil(table[C["layers"]] / table[C["pp"]]) * (2.0 + (table[C["recompute"]] == 2.0))
    per_pass = steps / passes
    finite = per_pass[np.isfinite(per_pass)]
    return float(np.clip(1.25 / PROBE * np.median(finite), low, high)) if finite.size else low
#: residual given to a run whose prediction is not finite for a candidate
BAD_RESIDUAL = 10.0
GIB = 2.0 ** 30
TIER_COLUMNS = {"intra": ("intra_eff", "intra_latency"), "inter": ("inter_eff", "inter_latency")}


@dataclass
class Parameter:
    """One fitted quantity: a column's value on every run of a device, of a software stack, or (both None)
    on every run."""
    device: str | None
    column: str
    rows: np.ndarray
    start: float
    lo: float
    hi: float
    scale: float
    value: float = float("nan")
    status: str = ""              # "fitted" or why it kept its physical value
    sensitivity: float = 0.0      # largest |change of log step time| of a PROBE x scale change
    stack: str | None = None      # the software stack whose runs it applies to (device is then None)
    devices: tuple = ()           # a stack's: the (canonical) devices of its runs, where its value applies

    @property
    def group(self) -> str | None:
        """The runs it applies to: a device name, ``stack:NAME``, or None (every run)."""
        return STACK_GROUP + self.stack if self.stack is not None else self.device

    @property
    def label(self) -> str:
        if self.stack is not None:
            return f'stack."{self.stack}".{STACK_FIELDS[self.column]}'
        if self.device is None:
            return f"framework.{FRAMEWORK_FIELDS[self.column]}"
        return f'device."{self.device}".{DEVICE_FIELDS[self.column]}'

    @property
    def fitted(self) -> bool:
        return self.status == "fitted"


@dataclass
class FitResult:
    parameters: list[Parameter]
    cost_before: float
    cost_after: float
    n_runs: int
    n_memory: int
    precision_names: dict = field(default_factory=dict)
    evaluations: int = 0
    prior: float = 0.0
    prior_scores: dict = field(default_factory=dict)   # prior weight -> held-out cost (when chosen by CV)
    prior_rule: str = ""                               # how the prior weight was chosen (calibrate)
    selection: list = field(default_factory=list)      # leave-one-out's factor choice, one line each (prior.py)

    def calibration(self, header: dict | None = None, source: str = "") -> Calibration:
        """The fitted parameters as a calibration overlay (parameters left physical are not in it)."""
        devices: dict[str, dict[str, float]] = {}
        framework: dict[str, float] = {}
        stacks: dict[str, dict[str, float]] = {}
        scopes: dict[str, tuple] = {}
        for p in self.parameters:
            if not p.fitted:
                continue
            if p.stack is not None:   # the runs identify the stack on their devices only (stack_tables.py)
                stacks.setdefault(p.stack, {})[p.column] = p.value
                scopes[p.stack] = p.devices
            elif p.device is None:
                framework[p.column] = p.value
            else:
                devices.setdefault(p.device, {})[p.column] = p.value
        known = set(device_aliases().values())
        custom = frozenset(d for d in devices if d not in known)
        return Calibration(header=dict(header or {}), devices=devices, framework=framework, custom=custom,
                           source=source, stacks=stacks, stack_devices=scopes)


def measured_step_times(records) -> np.ndarray:
    return np.array([float(r.measured.get("step_time_s", np.nan) or np.nan) for r in records])


class Problem:
    """Residuals of many parameter vectors at once: runs x candidates in one parameter table."""

    def __init__(self, records, parameters: list[Parameter]):
        from fastmodel.lm.engine import evaluate_table

        self._evaluate_table = evaluate_table
        self.records = records
        self.parameters = parameters
        self.n = len(records)
        self.base = np.stack([r.columns for r in records], axis=1)
        self.log_step = np.log(measured_step_times(records))
        memory = np.array([float(r.measured.get("memory_gib", np.nan) or np.nan) for r in records]) * GIB
        self.mem_rows = np.flatnonzero(np.isfinite(memory) & (memory > 0))
        self.log_mem = np.log(memory[self.mem_rows])
        self.evaluations = 0
        self.scales = np.array([p.scale for p in parameters])
        if self.mem_rows.size:   # a memory residual only where the model gives a memory result
            start = self._evaluate(np.array([[p.start for p in parameters]]))
            finite = np.isfinite(start["memory_per_device"][0, self.mem_rows])
            self.mem_rows, self.log_mem = self.mem_rows[finite], self.log_mem[finite]
        self.blocks = np.concatenate([np.arange(self.n), self.mem_rows])   # residual -> run index

    def _evaluate(self, thetas: np.ndarray) -> dict[str, np.ndarray]:
        m = thetas.shape[0]
        table = np.asfortranarray(np.tile(self.base, (1, m)))   # one contiguous vector per configuration
        offsets = np.arange(m)[:, None] * self.n
        for j, p in enumerate(self.parameters):
            moved = np.nonzero(thetas[:, j] != p.start)[0]   # a candidate at the start: each run keeps its own
            if moved.size == 0:                                # value, whatever the other candidates hold
                continue
            idx = (offsets[moved] + p.rows[None, :]).ravel()
            table[C[p.column], idx] = np.repeat(thetas[moved, j], p.rows.size)
        self.evaluations += 1
        out = self._evaluate_table(table)
        return {k: out[k].reshape(m, self.n) for k in ("step_time", "memory_per_device")}

    def residuals(self, thetas: np.ndarray) -> np.ndarray:
        """(candidates, residuals): log step-time errors of every run, then log memory errors."""
        thetas = np.atleast_2d(thetas)
        out = self._evaluate(thetas)
        with np.errstate(divide="ignore", invalid="ignore"):
            parts = [np.log(out["step_time"]) - self.log_step]
            if self.mem_rows.size:
                parts.append(np.log(out["memory_per_device"][:, self.mem_rows]) - self.log_mem)
        r = np.concatenate(parts, axis=1)
        r[~np.isfinite(r)] = BAD_RESIDUAL
        return r


# --- parameters ----------------------------------------------------------------------------------

def _tiers_used(col: np.ndarray) -> set[str]:
    n_gpus, domain = col[C["n_gpus"]], min(col[C["domain_size"]], col[C["n_gpus"]])
    used = set()
    if domain > 1:
        used.add("intra")
    if n_gpus > col[C["domain_size"]]:
        used.add("inter")
    return used


def candidate_parameters(records) -> list[Parameter]:
    """Every fittable column of every group appearing in the runs, at its physical (built-in) value.

    A column whose group no run uses (a precision, a network tier) gets status saying so."""
    by_device: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_device.setdefault(canonical_device(r.gpu), []).append(i)
    median_step = float(np.nanmedian(measured_step_times(records)))
    params: list[Parameter] = []

    def make(device, column, rows, status="", stack=None):
        col = COLUMNS[C[column]]
        rows = np.asarray(rows, dtype=np.int64)
        values = np.array([records[i].columns[C[column]] for i in rows]) if rows.size else np.array([col.default])
        start = float(np.median(values))
        if column == "step_overhead_s":
            scale = max(start, 0.05 * median_step)
        elif column == "host_layer_s":
            scale = max(start, host_layer_scale(records, rows))
        else:
            scale = start if start > 0 else max(col.default, 1e-6)
        devices = tuple(sorted({canonical_device(records[i].gpu) for i in rows})) if stack is not None else ()
        params.append(Parameter(device, column, rows, start, col.lo, col.hi, scale, value=start, status=status,
                                stack=stack, devices=devices))

    for device in sorted(by_device):
        rows = by_device[device]
        precisions = {int(records[i].columns[C["precision"]]) for i in rows}
        tiers = set().union(*(_tiers_used(records[i].columns) for i in rows))
        for column in DEVICE_FIELDS:
            if COLUMNS[C[column]].group == "serve":      # serving-engine columns: no training step uses them
                continue
            status = ""
            if column == "gemm_eff_8" and 1 not in precisions:
                status = "no FP8 run on this device"
            elif column == "gemm_eff_16" and 0 not in precisions:
                status = "no 16-bit run on this device"
            for tier, columns in TIER_COLUMNS.items():
                if column in columns and tier not in tiers:
                    status = f"no run uses the {tier} tier on this device"
            make(device, column, rows, status)
    for column in FRAMEWORK_FIELDS:
        make(None, column, np.arange(len(records)))
    by_stack: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        stack = record_stack_key(r)
        if stack is not None:
            by_stack.setdefault(stack, []).append(i)
    for stack in sorted(by_stack):
        held = replaced_terms(records, by_stack[stack])
        for column in STACK_FIELDS:
            make(None, column, by_stack[stack], held.get(column, ""), stack=stack)
    return params


def precision_names(records) -> dict[str, str]:
    """Per device, the name to write for 16-bit GEMMs (fp16 when no run says bf16)."""
    names: dict[str, set] = {}
    for r in records:
        names.setdefault(canonical_device(r.gpu), set()).add(str(r.raw.get("plan", {}).get("precision", "bf16")))
    return {d: ("fp16" if "fp16" in s and "bf16" not in s else "bf16") for d, s in names.items()}


# --- entry point ---------------------------------------------------------------------------------

def objective_text(loss: str = "soft_l1", f_scale: float = 0.05, prior: float = 0.5) -> str:
    """One line naming the objective (written into the calibration header)."""
    kind = "least squares" if loss == "linear" else f"robust least squares ({loss}, scale {f_scale:g})"
    pull = f", pull {prior:g} toward physical values" if 0 < prior < np.inf else ""
    if prior == np.inf:
        pull = ", every value held physical (infinite pull)"
    return f"{kind} on log step time (+ log memory where measured){pull}"


def fit(records, *, min_effect: float = 0.005, min_independence: float = 0.5, stages: int = 3,
        sweep_points: int = 9, random_points: int = 200, max_nfev: int = 60, seed: int = 0,
        loss: str = "soft_l1", f_scale: float = 0.05, prior: float = 0.5, runs_per_parameter: int = 2,
        keep=None) -> FitResult:
    """Fit the fittable parameters of the groups appearing in ``records`` (run records with a measured step time).

    ``loss``/``f_scale``: scipy's loss on the log errors (``soft_l1``: residuals beyond ~``f_scale`` -- runs
    the model misses for reasons no efficiency explains -- weigh linearly, not quadratically; ``linear``: plain
    least squares). ``prior``: weight of ``(value - physical) / scale`` residuals pulling each fitted value
    toward its physical one (0: none). ``keep`` (labels): only these parameters may be fitted, the others are
    held before identification (``prior.OUTSIDE``; leave-one-out's factor subsets); None: every one.
    """
    if not records:
        raise FastmodelError("calibrate: no run records")
    steps = measured_step_times(records)
    bad = [r.id or f"#{i + 1}" for i, r in enumerate(records) if not (np.isfinite(steps[i]) and steps[i] > 0)]
    if bad:
        raise FastmodelError(f"calibrate: run {bad[0]} has no positive measured.step_time_s"
                             + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    params = candidate_parameters(records)
    for p in params if keep is not None else ():
        p.status = p.status or ("" if p.label in keep else OUTSIDE)
    problem = Problem(records, params)
    theta = np.array([p.start for p in params])
    cost_before = float(np.sum(problem.residuals(theta)[0] ** 2))
    select_identifiable(problem, params, min_effect, min_independence, runs_per_parameter)
    if not np.isfinite(prior):   # an infinite pull: the physical model itself
        for p in params:
            p.status = "identified, held physical: infinite pull toward physical values" if p.fitted else p.status
    fitted = [j for j, p in enumerate(params) if p.fitted]
    if fitted:
        rng = np.random.default_rng(seed)
        start = theta.copy()
        coarse = coarse_search(problem, fitted, theta, stages, sweep_points, random_points, rng, loss, f_scale,
                               prior)
        # devices' picks come from different candidates: keep the coarse point only if it beats the start
        cost = robust_cost(problem.residuals(np.stack([theta, coarse])), loss, f_scale).sum(axis=1)
        cost += ((prior * (coarse - start) / problem.scales) ** 2).sum() * np.array([0.0, 1.0])
        theta = refine(problem, fitted, coarse if cost[1] <= cost[0] else theta, max_nfev, loss, f_scale, prior, start)
        if cost[1] <= cost[0]:
            # the coarse point can sit in a degenerate valley (a device efficiency traded against a stack's
            # compute efficiency at its bound) that max_nfev steps do not leave: refine from the physical start
            # too and keep the lower objective
            other = refine(problem, fitted, start, max_nfev, loss, f_scale, prior, start)
            both = np.stack([theta, other])
            objective = robust_cost(problem.residuals(both), loss, f_scale).sum(axis=1)
            objective += ((prior * (both - start) / problem.scales) ** 2).sum(axis=1)
            theta = both[int(np.argmin(objective))]
    for j, p in enumerate(params):
        p.value = float(theta[j]) if p.fitted else p.start
    cost_after = float(np.sum(problem.residuals(theta)[0] ** 2))
    return FitResult(parameters=params, cost_before=cost_before, cost_after=cost_after, n_runs=len(records),
                     n_memory=int(problem.mem_rows.size), precision_names=precision_names(records),
                     evaluations=problem.evaluations, prior=prior)


# --- the pull toward physical values, chosen by cross-validation ---------------------------------

#: prior weights tried by ``calibrate(prior="cv")``
PRIOR_CHOICES = (0.0, 0.5, 1.0, 2.0, 4.0)
#: folds of the inner cross-validation that chooses the prior, and the weight used below 2 x that many runs
PRIOR_FOLDS = 3
PRIOR_FEW_RUNS = 1.0


def fold_of(records, folds: int, groups=None) -> np.ndarray:
    """Fold index of every record: alternating over the records sorted by id (a fixed, reproducible split).
    ``groups`` (one key per record): group k-fold, alternating over the sorted keys, so records that share a key
    (a run and its synthetic copies) share a fold and never sit on both sides of a split."""
    keys = [str(records[i].id) for i in range(len(records))] if groups is None else [str(g) for g in groups]
    if len(keys) != len(records):
        raise ValueError(f"groups: {len(keys)} keys for {len(records)} records")
    if groups is None:
        order = sorted(range(len(records)), key=lambda i: (keys[i], i))
        rank = {i: r for r, i in enumerate(order)}
        return np.array([rank[i] % folds for i in range(len(records))], dtype=np.int64)
    rank = {key: r for r, key in enumerate(sorted(set(keys)))}
    return np.array([rank[key] % folds for key in keys], dtype=np.int64)


def held_out_cost(train, test, prior: float, loss: str, f_scale: float, **kw) -> float:
    """Robust cost of ``test``'s log step-time errors under a calibration fitted on ``train``."""
    from fastmodel.lm.calibrate.overlay import apply_calibration
    from fastmodel.lm.engine import evaluate_table

    cal = fit(train, prior=prior, loss=loss, f_scale=f_scale, **kw).calibration()
    table = np.stack([r.columns for r in apply_calibration(test, cal)], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(evaluate_table(table)["step_time"] / measured_step_times(test))
    r[~np.isfinite(r)] = BAD_RESIDUAL
    return float(robust_cost(r, loss, f_scale).sum())


def calibrate(records, *, prior: float | str = "auto", loss: str = "soft_l1", f_scale: float = 0.05,
              choices=PRIOR_CHOICES, folds: int = PRIOR_FOLDS, rule_runs: int | None = None, **kw) -> FitResult:
    """``fit`` with the pull toward physical values given, chosen (``"cv"``) among ``choices`` by the
    smallest held-out cost of a ``folds``-fold cross-validation on ``records`` (ties: the larger pull), or
    (``"auto"``, the default) 0.5 from ``prior.LOO_MAX_RUNS`` runs up and, below, the identified factors kept
    and their pull chosen together by leave-one-out (``prior``); ``rule_runs``: decide that by this many runs
    instead of ``len(records)`` (a cross-validation fold, ``report.cross_validate``).
    Synthetic runs the model fits exactly choose 0; runs the model misses for structural reasons choose a
    pull that keeps efficiencies near their datasheet values unless many runs agree."""
    scores: dict[float, float] = {}
    rule, picked = "", None
    if prior == "auto":   # below prior.LOO_MAX_RUNS runs: the factors kept and their pull, by leave-one-out
        prior, scores, rule, picked = auto_prior(records, loss, f_scale, runs=rule_runs, **kw)
    elif prior == "cv":
        rule = f"chosen by {folds}-fold cross-validation"
        if len(records) < 2 * folds:    # said 'chosen by 3-fold cross-validation' of one run
            prior = PRIOR_FEW_RUNS
            rule = f"cv's fallback below {2 * folds} runs, too few for {folds}-fold cross-validation"
        else:
            fold = fold_of(records, folds)
            for choice in choices:
                scores[choice] = sum(
                    held_out_cost([r for r, f in zip(records, fold) if f != k],
                                  [r for r, f in zip(records, fold) if f == k], choice, loss, f_scale, **kw)
                    for k in range(folds)) / len(records)
            prior = min(choices, key=lambda c: (round(scores[c], 12), -c))
    elif isinstance(prior, str) or not prior >= 0:
        raise FastmodelError(f"calibrate: prior must be a number >= 0, 'cv' or 'auto', got {prior!r}")
    keep = picked.keep if picked is not None and np.isfinite(prior) else None
    result = fit(records, prior=float(prior), loss=loss, f_scale=f_scale, keep=keep, **kw)
    result.prior_scores, result.prior_rule = scores, rule
    apply_choice(result, picked)
    if rule and not np.isfinite(result.prior):
        for p in result.parameters:
            p.status = HELD if p.status.startswith("identified, held") else p.status
    return result
