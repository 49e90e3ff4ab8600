"""Which identified factors a few runs move, and how far: chosen by leave-one-out (docs/calibration.md "Few
runs: the pull and the factors chosen by leave-one-out").

A fit of the factor set ``S`` with pull ``W`` minimises ``sum_i rho(r_i) + sum_{j in S} (W (theta_j - theta0_j) /
s_j)^2`` (``fit.fit(keep=S)``): ``r_i`` the log step-time errors, ``rho`` the robust loss, ``theta0`` the physical
values, ``s_j`` the parameters' scales; the factors outside ``S`` stay physical. ``W = inf`` is the physical model.

``calibrate(prior="auto")`` (the default) fits every identified factor with ``W = DEFAULT_PRIOR`` from
``LOO_MAX_RUNS`` runs up. Below (3 to 9 runs), ``F`` is the set the runs identify (``identify.py``, on all of
them), and models are scored by leave-one-out on the runs: run ``i`` is predicted by the whole fit of the model
(identification included) on the other runs, ``c_i = rho(log(predicted_i / measured_i))``, and a model's score is
``mean_i c_i``. With ``b`` the smallest mean of ``(F, W)`` over ``W`` in ``LOO_CHOICES`` and ``se`` the standard
error of that model's costs (``std_i c_i / sqrt(n)``), the choice is the simplest model within ``b + se``: the
one-standard-error rule (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, 2nd ed., 2009,
§7.10.1) along a path of models that grow simpler:

1. how far: the largest pull ``W*`` whose ``(F, W*)`` is within ``b + se`` (``W* = inf``: nothing is fitted);
2. which: at ``W*``, backward elimination -- the factor ``f`` whose removal costs least is dropped while
   ``mean_i c_i(S - {f}, W*) <= b + se``, until one factor is left or every removal costs more.

A kept factor therefore makes the left-out runs worse, by more than the margin, when it is taken out, and a kept
set always beats the uncalibrated prediction on the runs themselves (the physical model is outside the margin, or
step 1 chose it). The path, not every subset at every pull, is searched: the more models a few runs choose among,
the more the smallest leave-one-out mean is luck, which tightens the margin for every simpler model (Cawley &
Talbot, "On over-fitting in model selection and subsequent selection bias in performance evaluation", JMLR 11,
2010). Nothing outside the given runs is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: the pull used from ``LOO_MAX_RUNS`` runs up (and given explicitly, ``--prior 0.5``)
DEFAULT_PRIOR = 0.5
#: below this many runs, ``prior="auto"`` chooses the factors and the pull by leave-one-out
LOO_MAX_RUNS = 10
#: pulls leave-one-out chooses among (``inf``: nothing fitted, the physical model)
LOO_CHOICES = (0.0, 0.5, 1.0, 2.0, 4.0, math.inf)
#: status of an identified parameter held at its physical value because leave-one-out keeps no factor
HELD = ("identified, held physical: leave-one-out on these runs predicts no left-out run better with a fit "
        "(one-standard-error rule)")
#: status, before identification, of a parameter outside the factor subset a fit may move (``fit.fit(keep=)``)
OUTSIDE = "outside the factors this fit may move"


@dataclass
class Choice:
    """Leave-one-out's choice: the factors kept (labels), every identified factor's status where it is dropped,
    the statuses identification gave the others, and the lines the report prints."""
    keep: frozenset
    statuses: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)


def pull_and_margin(costs: dict[float, np.ndarray]) -> tuple[float, float, float]:
    """(the largest pull whose mean held-out cost is within one standard error of the smallest mean, the pull of
    that smallest mean -- ties: the larger pull --, the margin: smallest mean + its standard error; ESL §7.10.1);
    ``costs``: pull -> per-run held-out costs. One function, so the pull and the elimination's margin never
    disagree (review14 #11)."""
    means = {w: float(np.mean(c)) for w, c in costs.items()}
    best = min(means, key=lambda w: (means[w], -w))
    c = costs[best]
    margin = means[best] + (float(np.std(c, ddof=1) / np.sqrt(c.size)) if c.size > 1 else 0.0)
    return max(w for w in costs if means[w] <= margin + 1e-12), best, margin


def one_standard_error(costs: dict[float, np.ndarray]) -> float:
    """The largest pull whose mean held-out cost is within one standard error of the smallest mean (ESL
    §7.10.1); ``costs``: pull -> per-run held-out costs."""
    return pull_and_margin(costs)[0]


def leave_one_out(records, pull: float, keep, loss: str, f_scale: float, **kw) -> np.ndarray:
    """Per-run held-out costs: run ``i`` predicted by the fit of the factors ``keep`` with pull ``pull`` on the
    other runs (identification included; ``pull = inf``: the physical model)."""
    from fastmodel.lm.calibrate.fit import held_out_cost

    return np.array([held_out_cost(records[:i] + records[i + 1:], [records[i]], pull, loss, f_scale,
                                   keep=keep, **kw) for i in range(len(records))])


def choose(records, loss: str, f_scale: float, choices=LOO_CHOICES, **kw) -> tuple[float, dict[float, float], Choice]:
    """The pull and the factors kept, by leave-one-out and the one-standard-error rule (module docstring); the
    mean held-out cost of the identified factors at each pull of ``choices`` (``inf``: the physical model); the
    choice, with its report lines."""
    from fastmodel.lm.calibrate.fit import fit

    n = len(records)
    identified = fit(records, prior=math.inf, loss=loss, f_scale=f_scale, **kw).parameters
    factors = tuple(p.label for p in identified if p.status.startswith("identified, held"))
    choice = Choice(keep=frozenset(), statuses={p.label: p.status for p in identified})
    costs = {w: leave_one_out(records, w, frozenset(factors), loss, f_scale, **kw) for w in choices}
    means = {w: float(np.mean(c)) for w, c in costs.items()}
    pull, best, margin = pull_and_margin(costs)
    tried = ", ".join(f"{w:g}: {m:.4g}" for w, m in means.items())
    choice.lines.append(f"leave-one-out on the {n} runs, mean held-out cost per run of the {len(factors)} "
                        f"identified factor(s) by pull ({tried}; inf: uncalibrated): best {means[best]:.4g} at "
                        f"{best:g}, one standard error over it {margin:.4g}; pull {pull:g}, the largest within it")
    if not factors or not math.isfinite(pull):
        choice.lines += [f"dropped {label}: the physical model is within one standard error of the best"
                         for label in factors]
        return pull, means, choice
    keep, without = set(factors), {}
    while len(keep) > 1:    # backward: drop the factor whose fit without it costs least, while within the margin
        trial = {f: float(np.mean(leave_one_out(records, pull, frozenset(keep - {f}), loss, f_scale, **kw)))
                 for f in sorted(keep)}
        label = min(trial, key=lambda f: (trial[f], f))     # ties: the first label in sort order
        if trial[label] > margin + 1e-12:
            without.update(trial)
            break
        keep.remove(label)
        choice.statuses[label] = (f"identified, dropped by leave-one-out: at pull {pull:g} the left-out runs cost "
                                  f"{trial[label]:.4g} without it, within one standard error of the best "
                                  f"({margin:.4g}; one-standard-error rule: the simpler model)")
        choice.lines.append(f"dropped {label}: at pull {pull:g}, {trial[label]:.4g} without it, within "
                            f"{margin:.4g}")
    if len(keep) == 1:
        without[next(iter(keep))] = means[math.inf]
    choice.lines += [f"kept {label}: at pull {pull:g}, {without[label]:.4g} without it, over {margin:.4g}"
                     for label in sorted(keep)]
    choice.keep = frozenset(keep)
    return pull, means, choice


def loo_decides(n: int) -> bool:
    """True where ``prior="auto"`` on ``n`` runs lets leave-one-out choose the factors and the pull."""
    return 3 <= n < LOO_MAX_RUNS


def auto_prior(records, loss: str, f_scale: float, runs: int | None = None,
               **kw) -> tuple[float, dict[float, float], str, Choice | None]:
    """``prior="auto"``: (pull, held-out cost per pull, how it was chosen, leave-one-out's factor choice or None
    where every identified factor is fitted). ``runs``: the number of runs whose rule applies, where it is not
    ``len(records)`` -- a cross-validation fold of a calibration on ``runs`` runs scores that calibration's rule
    (review14 #10); leave-one-out needs two runs."""
    n = len(records)
    if not loo_decides(n if runs is None else runs) or n < 2:
        return DEFAULT_PRIOR, {}, f"default (leave-one-out chooses it for 3 to {LOO_MAX_RUNS - 1} runs)", None
    prior, scores, choice = choose(list(records), loss, f_scale, **kw)
    rule = f"chosen by leave-one-out on the {n} runs, with the factors it moves (one-standard-error rule)"
    return prior, scores, rule, choice


def apply_choice(result, choice: Choice | None) -> None:
    """Statuses of ``result`` (a ``fit.FitResult``) under leave-one-out's choice: a factor it dropped says why,
    a parameter held only because it lay outside the kept factors gets back the reason identification gave it,
    and the report's lines are recorded. A kept factor the final fit (re-identified with the others held) left
    unfitted says so, in its status and its line (review14 #12)."""
    if choice is None:
        return
    unfitted = set()
    for p in result.parameters:
        if p.status == OUTSIDE:
            p.status = choice.statuses.get(p.label, p.status)
        if p.label in choice.keep and p.status != "fitted":     # Parameter.fitted
            unfitted.add(p.label)
            p.status = f"kept by leave-one-out, but not identified in the final fit: {p.status}"
    result.selection = [line + (", but not identified in the final fit" if any(
        line.startswith(f"kept {label}:") for label in unfitted) else "") for line in choice.lines]
