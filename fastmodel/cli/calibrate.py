"""``fastmodel calibrate RUNS.jsonl -o cal.toml``: fit device and network efficiencies to measured runs
(see fastmodel.lm.calibrate)."""

from __future__ import annotations

import click

from fastmodel.cli.common import Choice, Whole, flag_names, friendly

#: each argument of ``fastmodel.lm.calibrate.api.fit_runs`` as ``fastmodel calibrate`` spells it (``flag_names``)
CALIBRATE_FLAGS = {"folds": "--folds", "loss": "--loss", "prior": "--prior", "seed": "--seed"}


@click.command("calibrate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write the calibration overlay (.toml), atomically; never onto RUNS.")
@click.option("--force", is_flag=True, help="Replace an existing calibration file (a TOML file, never another kind).")
@click.option("--folds", "-k", type=int, default=None,
              help="k-fold cross-validated error in the report, each fold fitted by the rule the calibration on all "
                   "of RUNS uses (0: off)  [default: 5, or one fold per run below 5 runs]")
@click.option("--loss", type=Choice(["soft_l1", "linear"]), default="soft_l1", show_default=True,
              help="soft_l1: robust to runs the model misses; linear: plain least squares.")
@click.option("--prior", default="auto", show_default=True,
              help="Weight pulling each fitted value toward its physical one, per scale (0: none); 'cv': "
                   "chosen among 0, 0.5, 1, 2, 4 by 3-fold cross-validation on RUNS; 'auto': 0.5 from 10 runs, "
                   "below chosen among 0, 0.5, 1, 2, 4 and inf (nothing fitted) by leave-one-out, which then "
                   "drops factors while the left-out runs' mean cost stays within one standard error of the "
                   "best.")
@click.option("--seed", type=Whole(min=0), default=0, show_default=True, help="Seed of the coarse search's random points.")
@friendly
def calibrate(runs, output, force, folds, loss, prior, seed):
    """Fit the fittable efficiencies (GEMM by precision, attention, HBM, network tiers, step overhead) of
    every device, precision and network tier appearing in RUNS (JSONL, RUNS.md schema, with measured step
    times), and per software stack (the profile each run's framework or stack names) its share of the modelled
    kernel speed and its host time to issue a layer; print before / after / cross-validated errors and each
    parameter fitted or left physical with the reason (too few runs, not separable, too weak), and write them as
    a TOML overlay to apply with run, validate, sweep or batch --calibration."""
    from fastmodel.api import refuse_serving
    from fastmodel.io.outputs import check_output
    from fastmodel.lm.calibrate.api import fit_runs, write_fitted

    if output:   # before any work: an earlier calibration is never replaced without --force
        check_output(output, "toml", inputs=(runs,), force=force, what="calibration")
    refuse_serving(runs)
    with flag_names(CALIBRATE_FLAGS):      # the API's errors name its arguments; here the flags
        fitted = fit_runs(runs, folds=folds, loss=loss, prior=prior, seed=seed)
    for line in fitted.messages:
        click.echo(line, err=True)
    click.echo(fitted.report)
    if output:
        write_fitted(fitted, output, runs, force)
        click.echo(f"\nwrote {output}")
