"""The search of a calibration fit: coarse stages through the vectorized engine, then local refinement.

1. ``coarse_search``: each stage builds ONE table of runs x candidates (the current point, a 1-D sweep of
   every fitted parameter, random points of the box) and evaluates it in one engine call; each device's
   parameters are taken from the candidate best for that device's runs, the others (framework, stacks)
   from the candidate best overall. The box shrinks by 3 a stage.
2. ``refine``: ``scipy.optimize.least_squares`` (trust-region reflective) within the registry bounds, the
   Jacobian from one batched table per call.

``Box`` maps the fitted parameters to the unit cube (linear for efficiencies, log for scales);
``robust_cost`` is scipy's loss on the log errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fastmodel.errors import FastmodelError

if TYPE_CHECKING:
    from fastmodel.lm.calibrate.fit import Parameter, Problem


class Box:
    """Unit-cube coordinates of the fitted parameters: linear for efficiencies, log for scales."""

    def __init__(self, params: list[Parameter]):
        self.linear = np.array([p.lo > 0 and p.hi / p.lo <= 50 for p in params])
        self.a = np.array([p.lo if lin else max(p.lo, p.scale / 20) for p, lin in zip(params, self.linear)])
        self.b = np.array([p.hi if lin else min(p.hi, p.scale * 20) for p, lin in zip(params, self.linear)])

    def to_theta(self, u: np.ndarray) -> np.ndarray:
        lin = self.a + u * (self.b - self.a)
        log = self.a * (self.b / self.a) ** u
        return np.where(self.linear, lin, log)

    def to_unit(self, theta: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            lin = (theta - self.a) / (self.b - self.a)
            log = np.log(np.maximum(theta, 1e-300) / self.a) / np.log(self.b / self.a)
        return np.clip(np.where(self.linear, lin, log), 0.0, 1.0)


def robust_cost(r: np.ndarray, loss: str, f_scale: float) -> np.ndarray:
    """Per-residual cost of scipy's ``loss`` (``linear``: r^2; ``soft_l1``: 2 f^2 (sqrt(1 + (r/f)^2) - 1))."""
    if loss == "linear":
        return r ** 2
    if loss == "soft_l1":
        return 2 * f_scale ** 2 * (np.sqrt(1 + (r / f_scale) ** 2) - 1)
    raise FastmodelError(f"calibrate: unknown loss {loss!r}; choose linear or soft_l1")


def coarse_search(problem: Problem, fitted: list[int], theta: np.ndarray, stages: int, sweep_points: int,
                  random_points: int, rng: np.random.Generator, loss: str = "linear", f_scale: float = 0.1,
                  prior: float = 0.0) -> np.ndarray:
    """Stages of runs x candidates tables, one ``evaluate_table`` call each; returns the best point."""
    params = problem.parameters
    box = Box([params[j] for j in fitted])
    device_of_run = [None] * problem.n
    for p in params:
        if p.device is not None:
            for i in p.rows:
                device_of_run[i] = p.device
    residual_device = [device_of_run[i] for i in problem.blocks]
    devices = sorted({d for d in residual_device if d is not None})
    masks = {d: np.array([rd == d for rd in residual_device]) for d in devices}
    u_best = box.to_unit(theta[fitted])
    k = len(fitted)
    for stage in range(stages):
        half = 0.5 / 3 ** stage
        lo, hi = np.clip(u_best - half, 0, 1), np.clip(u_best + half, 0, 1)
        cands = [u_best[None, :]]
        grid = np.linspace(0, 1, sweep_points)
        for j in range(k):
            sweep = np.repeat(u_best[None, :], sweep_points, axis=0)
            sweep[:, j] = lo[j] + grid * (hi[j] - lo[j])
            cands.append(sweep)
        cands.append(lo + rng.random((random_points, k)) * (hi - lo))
        cands = np.concatenate(cands)
        thetas = np.repeat(theta[None, :], cands.shape[0], axis=0)
        thetas[:, fitted] = box.to_theta(cands)
        cost = robust_cost(problem.residuals(thetas), loss, f_scale)
        penalty = (prior * (thetas[:, fitted] - theta[fitted]) / problem.scales[fitted]) ** 2
        total = cost.sum(axis=1) + penalty.sum(axis=1)
        new = cands[int(np.argmin(total))].copy()     # framework (all-run) parameters: best overall
        for d in devices:                             # device parameters: best for that device's runs
            own = [q for q, j in enumerate(fitted) if params[j].device == d]
            best = int(np.argmin(cost[:, masks[d]].sum(axis=1) + penalty[:, own].sum(axis=1)))
            for q, j in enumerate(fitted):
                if params[j].device == d:
                    new[q] = cands[best, q]
        u_best = new
    theta = theta.copy()
    theta[fitted] = box.to_theta(u_best)
    return theta


# --- refinement ----------------------------------------------------------------------------------

def refine(problem: Problem, fitted: list[int], theta: np.ndarray, max_nfev: int, loss: str = "linear",
           f_scale: float = 0.1, prior: float = 0.0, start: np.ndarray | None = None) -> np.ndarray:
    """scipy least_squares within the registry bounds; the Jacobian from one batched table per call."""
    from scipy.optimize import least_squares

    params = problem.parameters
    lo = np.array([params[j].lo for j in fitted])
    hi = np.array([params[j].hi for j in fitted])
    scale = np.array([params[j].scale for j in fitted])
    full = theta.copy()

    def expand(x):
        out = np.repeat(full[None, :], x.shape[0], axis=0)
        out[:, fitted] = x
        return out

    x_start = (theta if start is None else start)[fitted]

    def with_prior(x, r):
        return np.concatenate([r, prior * (x - x_start) / scale]) if prior > 0 else r

    def fun(x):
        return with_prior(x, problem.residuals(expand(x[None, :]))[0])

    def jac(x):
        h = 1e-3 * scale
        h = np.where(x + h <= hi, h, -h)
        xs = np.repeat(x[None, :], len(x) + 1, axis=0)
        xs[1:] += np.diag(h)
        r = problem.residuals(expand(xs))
        j = ((r[1:] - r[0]) / h[:, None]).T
        return np.vstack([j, prior * np.diag(1 / scale)]) if prior > 0 else j

    x0 = np.clip(theta[fitted], lo, hi)
    result = least_squares(fun, x0, jac=jac, bounds=(lo, hi), x_scale=scale, method="trf", max_nfev=max_nfev,
                           loss=loss, f_scale=f_scale,
                           xtol=1e-10, ftol=1e-10, gtol=1e-10)
    out = theta.copy()
    out[fitted] = result.x
    return out
