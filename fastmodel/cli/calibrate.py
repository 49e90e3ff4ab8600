"""``fastmodel calibrate RUNS.jsonl -o cal.toml``: fit device and network efficiencies to measured runs
(see fastmodel.lm.calibrate)."""

from __future__ import annotations

import click

from fastmodel.cli.common import friendly


@click.command("calibrate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write the calibration overlay (.toml), atomically; never onto RUNS.")
@click.option("--force", is_flag=True, help="Replace an existing calibration file (a TOML file, never another kind).")
@click.option("--folds", "-k", type=int, default=None,
              help="k-fold cross-validated error in the report (0: off)  [default: 5, or one fold per run below 5 runs]")
@click.option("--loss", type=click.Choice(["soft_l1", "linear"]), default="soft_l1", show_default=True,
              help="soft_l1: robust to runs the model misses; linear: plain least squares.")
@click.option("--prior", default="auto", show_default=True,
              help="Weight pulling each fitted value toward its physical one, per scale (0: none); 'cv': "
                   "chosen among 0, 0.5, 1, 2, 4 by 3-fold cross-validation on RUNS; 'auto': 0.5 from 10 runs, "
                   "below chosen among 0, 0.5, 1, 2, 4 and inf (nothing fitted) by leave-one-out.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the coarse search's random points.")
@friendly
def calibrate(runs, output, force, folds, loss, prior, seed):
    """Fit the fittable efficiencies (GEMM by precision, attention, HBM, network tiers, step overhead) of
    every device, precision and network tier appearing in RUNS (JSONL, RUNS.md schema, with measured step
    times), and per software stack (the profile each run's framework or stack names) its share of the modelled
    kernel speed and its host time to issue a layer; print before / after / cross-validated errors and each
    parameter fitted or left physical with the reason (too few runs, not separable, too weak), and write them as
    a TOML overlay to apply with --calibration."""
    import datetime
    import hashlib
    import math
    from pathlib import Path

    from fastmodel import __version__
    from fastmodel.errors import FastmodelError
    from fastmodel.io.outputs import check_output, claim_output
    from fastmodel.lm.calibrate.fit import calibrate as fit_runs
    from fastmodel.lm.calibrate.fit import objective_text
    from fastmodel.lm.calibrate.overlay import FORMAT, apply_calibration, to_toml, write_calibration
    from fastmodel.lm.calibrate.report import cross_validate, format_report, toml_annotations
    from fastmodel.lm.records import read_records, with_measurements
    from fastmodel.lm.validate import group_scores, rows

    if output:   # before any work: an earlier calibration is never replaced without --force
        check_output(output, "toml", inputs=(runs,), force=force, what="calibration")
    if prior not in ("cv", "auto"):
        try:
            weight = float(prior)
        except ValueError:
            weight = -1.0
        if not (math.isfinite(weight) and weight >= 0):
            raise FastmodelError(f"--prior: must be a finite number >= 0, 'cv' or 'auto', got {prior!r}")
        prior = weight
    from fastmodel.serve.records import file_has_serve_records

    if file_has_serve_records(runs):
        raise FastmodelError(f"{runs}: these are serving records (SERVE_RUNS.md); calibrate fits the training "
                             "model to run records (RUNS.md: model, system, plan, measured step_time_s)")
    records, skipped = with_measurements(read_records(runs), runs)   # measured is read only here
    for line in skipped:
        click.echo(line, err=True)
    records = _finite_records(records, runs)
    if folds is None:
        folds = min(5, len(records)) if len(records) >= 2 else 0
    if folds and not 2 <= folds <= len(records):
        raise FastmodelError(f"--folds: must be 0 or between 2 and the number of runs ({len(records)}), "
                             f"got {folds}")
    result = fit_runs(records, loss=loss, prior=prior, seed=seed)
    cal = result.calibration()
    before, after = rows(records), rows(apply_calibration(records, cal))
    cv = cross_validate(records, folds, loss=loss, prior=prior, seed=seed) if folds else None
    click.echo(format_report(result, before, after, cv, folds))
    if not output:
        return

    def mape(table):
        return round(group_scores(table, None)[0][1].mape, 6)

    header = {
        "format": FORMAT, "fitted_on": str(runs), "runs": len(records),
        "sha256": hashlib.sha256(Path(runs).read_bytes()).hexdigest(),
        "fitted_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fastmodel": __version__,
        "objective": objective_text(loss, prior=result.prior) + (f", {result.prior_rule}" if result.prior_rule else ""),
        "step_time_mape_before": mape(before), "step_time_mape_after": mape(after),
    }
    if cv:
        header.update(folds=folds, cv_step_time_mape=mape(cv))
    comments, notes = toml_annotations(result)
    text = to_toml(result.calibration(header), comments, notes, result.precision_names)
    with claim_output(output, "toml", inputs=(runs,), force=force, what="calibration"):
        write_calibration(text, output)
    click.echo(f"\nwrote {output}")


def _finite_records(records: list, runs: str) -> list:
    """The records ``validate`` scores (a finite prediction at physical values); one warning line names each
    one left out, a one-line error when none is left."""
    from fastmodel.errors import FastmodelError
    from fastmodel.lm.validate import rows, skipped_lines

    table = rows(records)
    for line in skipped_lines(table):
        click.echo(f"warning: {runs}: {line.replace('the scores', 'the fit')}", err=True)
    kept = [record for record, row in zip(records, table) if row["status"] == "ok"]
    if not kept:
        raise FastmodelError(f"{runs}: no run record can be predicted; nothing to calibrate")
    return kept
