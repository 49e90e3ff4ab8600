"""``fastmodel validate RUNS.jsonl``: the real-world model against measured runs (see fastmodel.lm.validate)."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from fastmodel.cli.common import figure_size, figure_size_options, friendly


def _plot_size_options(func):
    for option in reversed(figure_size_options("single")):
        func = option(func)
    return func


@click.command("validate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write one row per run (.csv), atomically; never onto RUNS.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Draw predicted vs measured step time (.png/.pdf/.svg); sized by --dpi, --size, --width as the "
                   "plot commands.")
@_plot_size_options
@click.option("--force", is_flag=True, help="Replace existing outputs of the same kind (a CSV file, a figure).")
@click.option("--calibration", type=click.Path(dir_okay=False),
              help="Apply a calibration overlay (.toml from `fastmodel calibrate`); default: physical values.")
@click.option("--heldout", "split_file", is_flag=False, flag_value="", default=None, metavar="[SPLIT.json]",
              help="Score the frozen held-out runs beside the in-sample (dev) ones, every group twice; the "
                   "split file defaults to heldout.json beside RUNS.")
@friendly
def validate(runs, output, plot_path, dpi, size, force, calibration, split_file):
    """Predict every run record of RUNS (JSONL, RUNS.md schema) and print the step-time error tables (all runs,
    then by source, software stack, GPU, parallelism kind and tier) beside the constant-MFU baselines at 0.40 and
    0.50. Serving records (SERVE_RUNS.md) with measurements get throughput, TTFT and TPOT error tables (by
    engine, GPU, precision, mode, model and load) beside a naive baseline. A record the model refuses is named on
    stderr and counted as a miss (column miss; the hit rate counts it against the model). Runs with routed experts
    add an MoE section (by dispatcher, overlap, routing and stack; one line per MoE run with its expert share, load
    factor and EP communication); runs that log memory add the peak memory errors (memory_allocated, or
    memory_reserved) and the runs predicted not to fit under the default margin."""
    from fastmodel.analysis.validation import is_serving
    from fastmodel.api import validate as validate_runs
    from fastmodel.errors import SpecError
    from fastmodel.io.outputs import check_output
    from fastmodel.lm.calibrate.use import CalibrationWarning

    if output is not None:
        check_output(output, "csv", inputs=(runs,), force=force, what="table")
    _sized_without_plot(plot_path)
    if plot_path is not None:
        check_output(plot_path, _figure_kind(plot_path), inputs=(runs,), force=force, what="figure")
    if is_serving(runs):      # serving records (SERVE_RUNS.md): fastmodel.serve.validate
        if plot_path:
            raise SpecError(plot_path, "", "--plot draws step times of run records, not serving records")
        if calibration:
            raise SpecError(calibration, "", "--calibration applies to run records, not serving records")
    heldout = None if split_file is None else (split_file or True)
    with warnings.catch_warnings():     # the calibration's mismatches are lines of result.messages
        warnings.simplefilter("ignore", CalibrationWarning)
        result = validate_runs(runs, heldout=heldout, calibration=calibration or None)
    for line in result.messages:
        click.echo(line, err=True)
    if result.calibration:
        click.echo(result.calibration)
    click.echo(result.report)
    if output:
        _write_rows(result.rows, output, runs, force)
    _none_answered(result.rows, runs, output, plot_path)
    if plot_path:
        from fastmodel.io.outputs import claim_output
        from fastmodel.plot.style import save
        from fastmodel.plot.validation import predicted_vs_measured

        fig, _ = predicted_vs_measured(result.rows, size=figure_size(size))
        with claim_output(plot_path, _figure_kind(plot_path), inputs=(runs,), force=force, what="figure"):
            save(fig, plot_path, dpi)
        click.echo(f"wrote {plot_path}", err=True)   # as validate -o and every plot command say it


def _none_answered(rows: list[dict], runs: str, output, plot_path) -> None:
    """Every record refused: one line after the tables, exit 3, as a batch whose every line is an error and a sweep
    with no legal point (``cli/sweep.NO_LEGAL_POINT_EXIT``); -o holds the rows, --plot has nothing to draw."""
    from fastmodel.cli.sweep import NO_LEGAL_POINT_EXIT

    if not rows or any(row.get("status") != "refused" for row in rows):
        return
    held = [f"{output} holds them"] if output else []
    held += ["--plot not drawn"] if plot_path else []
    click.echo(f"no record of {runs} could be predicted: {len(rows)} of {len(rows)} refused, each named above"
               f"{'; ' + ', '.join(held) if held else ''} (exit {NO_LEGAL_POINT_EXIT})", err=True)
    raise SystemExit(NO_LEGAL_POINT_EXIT)


def _sized_without_plot(plot_path) -> None:
    """--dpi, --size or --width without --plot is one line: there is no figure to size."""
    ctx = click.get_current_context()
    given = [f"--{name}" for name in ("dpi", "size", "width")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if plot_path is None and given:
        raise click.UsageError(f"{'/'.join(given)} size the --plot figure: give --plot FILE.png too")


def _figure_kind(path: str) -> str:
    from fastmodel.errors import SpecError

    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".pdf", ".svg"):
        raise SpecError(path, None, "--plot: the figure must end in .png, .pdf or .svg")
    return suffix[1:]


def _write_rows(table: list[dict], path: str, runs: str, force: bool) -> None:
    import csv

    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import claim_output, wrote

    with claim_output(path, "csv", inputs=(runs,), force=force, what="table"), atomic_write(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    click.echo(wrote(path, "csv"), err=True)
