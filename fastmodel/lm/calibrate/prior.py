"""The pull toward physical values, chosen by leave-one-out when there are few runs (docs/calibration.md
"Few runs: the pull chosen by leave-one-out").

A fit with pull ``W`` minimises ``sum_i rho(r_i) + sum_j (W (theta_j - theta0_j) / s_j)^2`` (``fit.fit``): ``r_i``
the log step-time errors, ``rho`` the robust loss, ``theta0`` the physical values, ``s_j`` the parameters' scales.
``W = inf`` is the physical model itself: every identified parameter held at its physical value.

``calibrate(prior="auto")`` (the default) takes ``W = DEFAULT_PRIOR`` from ``LOO_MAX_RUNS`` runs up; below,
each ``W`` of ``LOO_CHOICES`` is scored by leave-one-out on the runs: run ``i`` is predicted by a calibration
fitted (with ``W``) on the others, and ``c_i(W) = rho(log(predicted_i / measured_i))``. The choice is the
largest ``W`` whose mean ``mean_i c_i(W)`` is within one standard error (``std_i c_i(W*) / sqrt(n)``) of the
smallest mean, at ``W*``: the one-standard-error rule (Hastie, Tibshirani & Friedman, *The Elements of
Statistical Learning*, 2nd ed., 2009, §7.10.1), which prefers the model nearest the physical one among those the
runs cannot tell apart. A calibration is therefore applied only when, on the runs themselves, predicting a run
from the others beats the physical model by more than the scatter of that comparison.
"""

from __future__ import annotations

import math

import numpy as np

#: the pull used from ``LOO_MAX_RUNS`` runs up (and given explicitly, ``--prior 0.5``)
DEFAULT_PRIOR = 0.5
#: below this many runs, ``prior="auto"`` chooses the pull by leave-one-out
LOO_MAX_RUNS = 10
#: pulls leave-one-out chooses among (``inf``: nothing fitted, the physical model)
LOO_CHOICES = (0.0, 0.5, 1.0, 2.0, 4.0, math.inf)
#: status of an identified parameter the chosen pull holds at its physical value
HELD = ("identified, held physical: leave-one-out on these runs predicts no left-out run better with a fit "
        "(one-standard-error rule)")


def one_standard_error(costs: dict[float, np.ndarray]) -> float:
    """The largest pull whose mean held-out cost is within one standard error of the smallest mean (ESL
    §7.10.1); ``costs``: pull -> per-run held-out costs."""
    means = {w: float(np.mean(c)) for w, c in costs.items()}
    best = min(means, key=lambda w: (means[w], -w))
    c = costs[best]
    se = float(np.std(c, ddof=1) / np.sqrt(c.size)) if c.size > 1 else 0.0
    return max(w for w in costs if means[w] <= means[best] + se + 1e-12)


def leave_one_out_prior(records, loss: str, f_scale: float, choices=LOO_CHOICES,
                        **kw) -> tuple[float, dict[float, float]]:
    """The pull chosen by leave-one-out and the one-standard-error rule, and the mean held-out cost per run of
    every choice."""
    from fastmodel.lm.calibrate.fit import held_out_cost

    n = len(records)
    costs = {w: np.array([held_out_cost(records[:i] + records[i + 1:], [records[i]], w, loss, f_scale, **kw)
                          for i in range(n)]) for w in choices}
    return one_standard_error(costs), {w: float(np.mean(c)) for w, c in costs.items()}


def auto_prior(records, loss: str, f_scale: float, **kw) -> tuple[float, dict[float, float], str]:
    """``prior="auto"``: (pull, held-out cost per choice, how it was chosen)."""
    n = len(records)
    if n >= LOO_MAX_RUNS or n < 3:
        return DEFAULT_PRIOR, {}, f"default (leave-one-out chooses it for 3 to {LOO_MAX_RUNS - 1} runs)"
    prior, scores = leave_one_out_prior(list(records), loss, f_scale, **kw)
    return prior, scores, f"chosen by leave-one-out on the {n} runs (one-standard-error rule)"
