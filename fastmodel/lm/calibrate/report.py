"""The calibration report: errors before / after / k-fold cross-validated, and the fitted values.

Error figures come from ``fastmodel.lm.validate`` (``rows`` and ``group_scores``), so
they mean exactly what ``fastmodel validate`` prints: step-time MAPE, median
absolute error and mean signed error (bias), by source, GPU, parallelism kind
and tier.
"""

from __future__ import annotations

from fastmodel.lm.calibrate.fit import PRIOR_FOLDS, FitResult, calibrate, fold_of
from fastmodel.lm.calibrate.overlay import apply_calibration
from fastmodel.lm.validate import GROUP_KEYS, group_scores, rows


def cross_validate(records, folds: int, groups=None, **fit_kwargs) -> list[dict]:
    """Validation rows of every record predicted by a calibration fitted on the other folds (the whole
    ``calibrate``, prior choice included). Under ``prior="auto"`` each fold applies the rule the calibration on
    all the records applies (leave-one-out's selection below ``prior.LOO_MAX_RUNS`` runs, run inside the fold on
    its own training runs; the default pull from there up), so the cross-validated error is that of the rule the
    calibration saves (review14 #10). ``groups`` (a key per record): records sharing a key share a fold
    (group k-fold, ``fit.fold_of``)."""
    if fit_kwargs.get("prior", "auto") == "auto":
        fit_kwargs = {**fit_kwargs, "rule_runs": len(records)}
    n = len(records) if groups is None else len(set(map(str, groups)))
    if folds < 2 or folds > n:
        raise ValueError(f"folds must be in [2, {n}], got {folds}")
    fold = fold_of(records, folds, groups)
    out: list[dict] = []
    for k in range(folds):
        train = [r for r, f in zip(records, fold) if f != k]
        test = [r for r, f in zip(records, fold) if f == k]
        cal = calibrate(train, **fit_kwargs).calibration()
        out += rows(apply_calibration(test, cal))
    return out


def _scores(table: list[dict] | None, key) -> dict:
    if not table:
        return {}
    return {name: model for name, model, _, _ in group_scores(table, key)}


def error_tables(before: list[dict], after: list[dict], cv: list[dict] | None = None) -> str:
    """Before / after (in-sample) / cross-validated step-time errors by group, beside the MFU 0.40 baseline."""
    lines = []
    cv_head = f" {'CV MAPE':>8s} {'median':>7s} {'bias':>7s}" if cv else ""
    header = (f"{'group':30s} {'n':>4s} {'before':>8s} {'bias':>7s} {'after':>8s} {'median':>7s} {'bias':>7s}"
              f"{cv_head} {'MFU.40':>7s}")
    for key in (None, *GROUP_KEYS):
        b = {name: (model, b40) for name, model, b40, _ in group_scores(before, key)}
        a, c = _scores(after, key), _scores(cv, key)
        lines += ["", f"step time by {key or 'all runs'} (MAPE, median |error|, bias)", header]
        for name, (model, b40) in b.items():
            text = (f"{name[:30]:30s} {model.n:4d} {100 * model.mape:7.1f}% {100 * model.bias:+6.1f}%")
            if name in a:
                s = a[name]
                text += f" {100 * s.mape:7.1f}% {100 * s.median:6.1f}% {100 * s.bias:+6.1f}%"
            if cv:
                s = c.get(name)
                text += (f" {100 * s.mape:7.1f}% {100 * s.median:6.1f}% {100 * s.bias:+6.1f}%" if s
                         else f" {'-':>8s} {'-':>7s} {'-':>7s}")
            lines.append(text + f" {100 * b40.mape:6.1f}%")
    return "\n".join(lines).lstrip("\n")


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _pinned(p) -> str:
    """Status of a fitted parameter; a stack's names the devices its value applies on (``stack_tables``)."""
    return "pinned by the runs" + (f"; applies on {', '.join(p.devices)}" if p.stack is not None else "")


def parameter_table(result: FitResult) -> str:
    """Every candidate parameter: physical value, fitted value, bounds, and whether the runs pinned it."""
    lines = [f"{'parameter':46s} {'physical':>9s} {'fitted':>9s} {'bounds':>17s}  status"]
    for p in result.parameters:
        fitted = _fmt(p.value) if p.fitted else "-"
        bounds = f"[{p.lo:g}, {p.hi:g}]"
        lines.append(f"{p.label[:46]:46s} {_fmt(p.start):>9s} {fitted:>9s} {bounds:>17s}  "
                     f"{_pinned(p) if p.fitted else 'left physical: ' + p.status}")
    return "\n".join(lines)


def toml_annotations(result: FitResult):
    """Comments for the TOML file: each fitted value's physical value and bounds; what was left physical."""
    comments, notes = {}, {}
    for p in result.parameters:
        if p.fitted:
            comments[(p.group, p.column)] = (f"physical {_fmt(p.start)}, bounds [{p.lo:g}, {p.hi:g}]"
                                             + ("; kept by leave-one-out (selection)" if result.selection else ""))
        else:
            name = p.label.split(".", 2)[-1] if p.group is not None else p.label.split(".", 1)[1]
            notes.setdefault(p.group, []).append(f"left physical ({_fmt(p.start)}): {name}: {p.status}")
    return comments, notes


def format_report(result: FitResult, before: list[dict], after: list[dict], cv: list[dict] | None,
                  folds: int, calibration_line: str = "") -> str:
    """The whole report as text."""
    n_fit = sum(p.fitted for p in result.parameters)
    head = [f"calibrated {n_fit} of {len(result.parameters)} parameters on {result.n_runs} runs"
            f" ({result.n_memory} with measured memory); objective {result.cost_before:.4g} -> "
            f"{result.cost_after:.4g} (sum of squared log step-time errors)"]
    if result.prior_scores:
        tried = ", ".join(f"{k:g}: {v:.4g}" for k, v in result.prior_scores.items())
        how = result.prior_rule or f"chosen by {PRIOR_FOLDS}-fold cross-validation"
        head.append(f"pull toward physical values: {result.prior:g}, {how} (held-out cost per run {tried})")
    else:
        head.append(f"pull toward physical values: {result.prior:g}"
                    + (f", {result.prior_rule}" if result.prior_rule else ""))
    head += [f"  {line}" for line in result.selection]   # leave-one-out's factors kept and dropped (prior.py)
    if calibration_line:
        head.append(calibration_line)
    cv_line = (f"cross-validated: {folds}-fold, each fold predicted by a calibration fitted on the others"
               f" by the same rule{' (leave-one-out selection inside each fold)' if result.selection else ''}"
               if cv else "cross-validation: off (--folds 0)")
    return "\n".join(head + ["", parameter_table(result), "", cv_line, error_tables(before, after, cv)])
