"""Which identified factors a few runs move (``fastmodel.lm.calibrate.prior.choose``): the pull, then the factors
at that pull, chosen by leave-one-out on the runs and the one-standard-error rule (docs/calibration.md "Few runs:
the pull and the factors chosen by leave-one-out"). By hand on three synthetic runs
where one factor helps and one hurts, through the real selection code with a linear toy in place of the engine."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

import fastmodel.lm.calibrate.fit as fit_module
import fastmodel.lm.calibrate.prior as prior_module
import fastmodel.lm.calibrate.report as report_module
from fastmodel.lm.calibrate.prior import OUTSIDE, apply_choice, choose

#: the three runs' uncalibrated log step-time errors: a common 10% offset with +-2% of scatter
ERRORS = np.array([0.10, 0.12, 0.08])
#: each factor's sensitivity per run (d log step / d value): A scales every run alike (the offset), B separates
#: run 0 from run 1, which differ only by the scatter
SENSITIVITY = {"A": np.array([1.0, 1.0, 1.0]), "B": np.array([1.0, -1.0, 0.0])}


def toy_held_out_cost(train, test, prior, loss, f_scale, keep=None, **kw):
    """Squared error of the left-out run under the least-squares fit (pull ``prior``) of the factors in ``keep`` on
    the ``train`` runs (indices): residual ``e - X theta``, objective ``|e - X theta|^2 + prior^2 |theta|^2``."""
    (i,) = test
    names = sorted(keep or ()) if math.isfinite(prior) else []
    if not names:
        return float(ERRORS[i] ** 2)
    x = np.stack([SENSITIVITY[n][train] for n in names], axis=1)
    theta = np.linalg.solve(x.T @ x + prior ** 2 * np.eye(len(names)), x.T @ ERRORS[train])
    return float((ERRORS[i] - np.array([SENSITIVITY[n][i] for n in names]) @ theta) ** 2)


def toy_fit(records, **kw):
    """What identification says on the three runs: A and B pinned (held at infinite pull), C too weak."""
    held = "identified, held physical: infinite pull toward physical values"
    return SimpleNamespace(parameters=[SimpleNamespace(label="A", status=held),
                                       SimpleNamespace(label="B", status=held),
                                       SimpleNamespace(label="C", status="too weak: ...")])


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(fit_module, "held_out_cost", toy_held_out_cost)
    monkeypatch.setattr(fit_module, "fit", toy_fit)
    return [0, 1, 2]


def test_the_factor_that_helps_is_kept_and_the_one_that_hurts_dropped_by_hand(toy):
    # leave-one-out at pull 0 (plain least squares on the other two runs), per left-out run 0, 1, 2:
    #   physical:  errors 0.10, 0.12, 0.08                     -> costs 0.0100, 0.0144, 0.0064; mean 0.010267
    #   A and B:   two runs, two factors, exact on them: out 0: a = 0.08, b = -0.04, residual 0.10 - 0.04 = 0.06;
    #              out 1: a = 0.08, b = 0.02, residual 0.12 - 0.08 + 0.02 = 0.06; out 2: a = 0.11, b = -0.01,
    #              residual -0.03 -> costs 0.0036, 0.0036, 0.0009; mean 0.0027
    #   A alone:   a = mean of the other two: 0.10, 0.09, 0.11 -> residuals 0, +0.03, -0.03; costs 0, 0.0009, 0.0009;
    #              mean 0.0006
    #   B alone:   out 0: min (0.12 + b)^2 -> b = -0.12, residual 0.10 + 0.12 = 0.22; out 1: b = 0.10, residual
    #              0.12 + 0.10 = 0.22; out 2: (0.10 - b)^2 + (0.12 + b)^2 -> b = -0.01, residual 0.08
    #              -> costs 0.0484, 0.0484, 0.0064; mean 0.0344
    # 1. the pull: best (A and B) at 0, mean 0.0027, standard error std(0.0036, 0.0036, 0.0009; ddof 1) / sqrt(3)
    #    = 0.0015588 / 1.7321 = 0.0009: margin 0.0036; the physical model (0.0103) is outside it, so pull 0
    # 2. the factors at pull 0: without B (A alone) 0.0006 <= 0.0036: B is dropped; then A is the last factor
    #    (without it: the physical model, 0.0103, outside the margin): kept
    pull, scores, choice = choose(toy, "linear", 0.05, choices=(0.0, math.inf))
    assert pull == 0.0 and choice.keep == {"A"}
    assert scores == pytest.approx({0.0: 0.0027, math.inf: (0.0100 + 0.0144 + 0.0064) / 3})
    assert choice.lines[0].endswith("(0: 0.0027, inf: 0.01027; inf: uncalibrated): best 0.0027 at 0, one standard "
                                    "error over it 0.0036; pull 0, the largest within it")
    assert choice.lines[1:] == ["dropped B: at pull 0, 0.0006 without it, within 0.0036",
                                "kept A: at pull 0, 0.01027 without it, over 0.0036"]
    assert choice.statuses["B"].startswith("identified, dropped by leave-one-out: at pull 0 the left-out runs cost "
                                           "0.0006 without it, within one standard error of the best (0.0036")
    assert choice.statuses["C"] == "too weak: ..."   # a factor identification held keeps its reason
    # the fit of the kept factors holds B and C before identification (OUTSIDE); the choice gives back why
    result = SimpleNamespace(parameters=[SimpleNamespace(label="A", status="fitted"),
                                         SimpleNamespace(label="B", status=OUTSIDE),
                                         SimpleNamespace(label="C", status=OUTSIDE)], selection=[])
    apply_choice(result, choice)
    assert [p.status for p in result.parameters] == ["fitted", choice.statuses["B"], "too weak: ..."]
    assert result.selection == choice.lines


def test_runs_two_factors_generate_keep_both(toy, monkeypatch):
    # errors 0.10 x A + 0.05 x B exactly (0.15, 0.05, 0.10): A and B fitted on any two runs predict the third
    # exactly (costs 0, margin 0); without B (A alone): out 0: a = (0.05 + 0.10) / 2, residual 0.075 -> mean cost
    # > 0; without A (B alone) likewise: neither can go
    monkeypatch.setattr(f"{__name__}.ERRORS", np.array([0.15, 0.05, 0.10]))
    pull, _, choice = choose(toy, "linear", 0.05, choices=(0.0, math.inf))
    assert pull == 0.0 and choice.keep == {"A", "B"}
    assert [line.split(":")[0] for line in choice.lines[1:]] == ["kept A", "kept B"]


def test_runs_the_physical_model_predicts_within_the_margin_fit_nothing(toy, monkeypatch):
    # errors 0.05, 0.05, -0.10 (no common offset): the physical model's costs 0.0025, 0.0025, 0.01 (mean 0.005) are
    # the smallest -- A fitted on two runs predicts the third at 0.075, 0.075, -0.15 (mean 0.01125), A and B worse
    # (out 0: a = -0.10, b = -0.15, residual 0.30) -- so the pull step takes inf and no factor is kept
    monkeypatch.setattr(f"{__name__}.ERRORS", np.array([0.05, 0.05, -0.10]))
    pull, scores, choice = choose(toy, "linear", 0.05, choices=(0.0, math.inf))
    assert pull == math.inf and choice.keep == frozenset()
    assert scores[math.inf] == pytest.approx(0.005)
    assert choice.lines[1:] == [f"dropped {f}: the physical model is within one standard error of the best"
                                for f in ("A", "B")]


def test_the_report_and_the_saved_calibration_record_the_choice():
    """``format_report`` prints leave-one-out's lines under the pull; the TOML header's ``selection`` (what
    ``fastmodel calibrate -o`` writes, api.fit_runs) reads back, and a kept value's comment names the choice."""
    from fastmodel.lm.calibrate.fit import FitResult, Parameter
    from fastmodel.lm.calibrate.overlay import parse_calibration, to_toml, tomllib
    from fastmodel.lm.calibrate.report import format_report, toml_annotations

    kept = Parameter(device=None, column="step_overhead_s", rows=np.arange(3), start=0.0, lo=0.0, hi=100.0,
                     scale=0.01, value=0.02, status="fitted")
    lines = ["leave-one-out on the 3 runs, ...", "kept framework.step_overhead_s: at pull 0, 0.01 without it, over 0.003"]
    result = FitResult(parameters=[kept], cost_before=1.0, cost_after=0.5, n_runs=3, n_memory=0, prior=0.0,
                       prior_rule="chosen by leave-one-out on the 3 runs", selection=lines)
    report = format_report(result, [], [], None, 0)
    assert report.splitlines()[2:4] == [f"  {line}" for line in lines]
    comments, notes = toml_annotations(result)
    assert comments[(None, "step_overhead_s")].endswith("; kept by leave-one-out (selection)")
    header = {"format": 2, "fitted_on": "x", "fitted_at": "y", "selection": "; ".join(lines)}
    text = to_toml(result.calibration(header), comments, notes)
    assert parse_calibration(tomllib.loads(text), "").header["selection"] == "; ".join(lines)


def test_a_cross_validated_pull_fits_every_identified_factor(monkeypatch):
    """``prior="cv"`` chooses the pull alone and fits every identified factor (``keep=None``): its loop over the
    pulls once shadowed leave-one-out's choice (AttributeError: 'float' object has no attribute 'keep')."""
    monkeypatch.setattr(fit_module, "held_out_cost", lambda train, test, prior, *a, **kw: 0.0 if prior == 1.0 else 1.0)
    given = {}

    def stub_fit(records, **kw):
        given.update(kw)
        return SimpleNamespace(parameters=[], prior=kw["prior"])

    monkeypatch.setattr(fit_module, "fit", stub_fit)
    result = fit_module.calibrate([SimpleNamespace(id=str(i)) for i in range(6)], prior="cv")
    assert result.prior == 1.0 and given["keep"] is None and result.prior_rule == "chosen by 3-fold cross-validation"


def test_cross_validation_folds_apply_the_rule_of_all_the_runs(monkeypatch):
    """review14 #10: the folds score the rule the saved calibration uses, decided by all n runs. 3 runs, 3 folds:
    leave-one-out (stubbed) on each fold's 2 training runs, not the default of 2 runs; 10 runs, 5 folds: the
    default pull on each fold's 8 training runs, not leave-one-out."""
    chosen = []
    monkeypatch.setattr(prior_module, "choose", lambda records, *a, **kw: (
        chosen.append(len(records)) or (1.0, {1.0: 0.0}, prior_module.Choice(keep=frozenset()))))
    assert prior_module.auto_prior([None] * 2, "soft_l1", 0.05, runs=3)[0] == 1.0 and chosen == [2]
    assert prior_module.auto_prior([None] * 8, "soft_l1", 0.05, runs=10)[:2] == (0.5, {}) and chosen == [2]
    assert prior_module.auto_prior([None] * 8, "soft_l1", 0.05)[0] == 1.0 and chosen == [2, 8]
    given = []
    monkeypatch.setattr(report_module, "calibrate", lambda train, **kw: given.append((len(train), kw)) or
                        SimpleNamespace(calibration=lambda: None))
    monkeypatch.setattr(report_module, "apply_calibration", lambda test, cal: test)
    monkeypatch.setattr(report_module, "rows", lambda records: [])
    report_module.cross_validate([SimpleNamespace(id=str(i)) for i in range(10)], 5, prior="auto")
    assert [(n, kw["rule_runs"]) for n, kw in given] == [(8, 10)] * 5
    given.clear()
    report_module.cross_validate([SimpleNamespace(id=str(i)) for i in range(10)], 5, prior=0.5)
    assert all("rule_runs" not in kw for _, kw in given)


def test_a_kept_factor_the_final_fit_leaves_unfitted_says_so():
    """review14 #12: the final fit re-identifies with the other factors held, so a kept factor can come out
    unfitted; its status and its 'kept' line say it was not identified in the final fit."""
    from fastmodel.lm.calibrate.fit import FitResult, Parameter

    def parameter(column, status):
        return Parameter(device=None, column=column, rows=np.arange(3), start=0.0, lo=0.0, hi=100.0, scale=0.01,
                         value=0.02, status=status)

    fitted, lost = parameter("step_overhead_s", "fitted"), parameter("step_overhead_s", "left: collinear")
    lines = ["leave-one-out ...", f"kept {fitted.label}: at pull 0, 0.01 without it, over 0.003"]
    for p, suffix in ((fitted, ""), (lost, ", but not identified in the final fit")):
        result = FitResult(parameters=[p], cost_before=1.0, cost_after=0.5, n_runs=3, n_memory=0, prior=0.0)
        apply_choice(result, SimpleNamespace(keep=frozenset({p.label}), statuses={}, lines=lines))
        assert result.selection == [lines[0], lines[1] + suffix]
    assert fitted.status == "fitted"
    assert lost.status == "kept by leave-one-out, but not identified in the final fit: left: collinear"
