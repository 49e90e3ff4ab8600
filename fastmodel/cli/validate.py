"""``fastmodel validate RUNS.jsonl``: the real-world model against measured runs (see fastmodel.lm.validate)."""

from __future__ import annotations

from pathlib import Path

import click

from fastmodel.cli.common import friendly


@click.command("validate")
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write one row per run (.csv), atomically; never onto RUNS.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Draw predicted vs measured step time (.png/.pdf/.svg).")
@click.option("--force", is_flag=True, help="Replace existing outputs of the same kind (a CSV file, a figure).")
@click.option("--calibration", type=click.Path(dir_okay=False),
              help="Apply a calibration overlay (.toml from `fastmodel calibrate`); default: physical values.")
@click.option("--heldout", is_flag=True,
              help="Score the development rows and the frozen held-out rows (heldout.json beside RUNS) apart.")
@friendly
def validate(runs, output, plot_path, force, calibration, heldout):
    """Predict every run record of RUNS (JSONL, RUNS.md schema) and print the step-time error tables
    beside the constant-MFU baselines at 0.40 and 0.50. Serving records (SERVE_RUNS.md) with measurements
    get throughput, TTFT and TPOT error tables."""
    from fastmodel.errors import SpecError
    from fastmodel.io.outputs import check_output
    from fastmodel.lm.records import read_records, with_measurements
    from fastmodel.lm.validate import format_report, rows, skipped_lines

    if output:
        check_output(output, "csv", inputs=(runs,), force=force, what="table")
    if plot_path:
        check_output(plot_path, _figure_kind(plot_path), inputs=(runs,), force=force, what="figure")
    from fastmodel.serve.records import file_has_serve_records

    if file_has_serve_records(runs):      # serving records (SERVE_RUNS.md): fastmodel.serve.validate
        from fastmodel.serve.records import read_serve_records
        from fastmodel.serve.validate import format_report as serve_report
        from fastmodel.serve.validate import rows as serve_rows

        if plot_path:
            raise SpecError(plot_path, "", "--plot draws step times of run records, not serving records")
        if calibration:
            raise SpecError(calibration, "", "--calibration applies to run records, not serving records")
        from fastmodel.analysis.heldout import heldout_ids

        table = serve_rows(read_serve_records(runs, keep_refused=True), heldout_ids(runs) if heldout else None)
        click.echo(serve_report(table))
        if output:
            _write_rows(table, output, runs, force)
        return
    records, skipped = with_measurements(read_records(runs), runs)   # measured is read only here
    for line in skipped:
        click.echo(line, err=True)
    if calibration:  # nothing fitted is applied unless asked for
        from fastmodel.lm.calibrate import apply_calibration, read_calibration
        from fastmodel.lm.calibrate.use import check, cli_warnings, tiers_used

        cal = read_calibration(calibration)
        seen: dict[str, set] = {}
        for record in records:
            seen.setdefault(record.gpu, set()).update(tiers_used(record.columns))
        with cli_warnings():
            check(cal, seen, frameworks={record.raw.get("framework") for record in records})
        records = apply_calibration(records, cal)
        click.echo(cal.describe())
    table = rows(records)
    for line in skipped_lines(table):
        click.echo(f"warning: {runs}: {line}", err=True)
    if heldout:
        from fastmodel.analysis.heldout import heldout_ids

        held = heldout_ids(runs)
        for name, part in (("development rows", [r for r in table if r["id"] not in held]),
                           ("held-out rows", [r for r in table if r["id"] in held])):
            click.echo(f"== {name} ({len(part)})")
            click.echo(format_report(part) if part else "(none)")
    else:
        click.echo(format_report(table))
    if output:
        _write_rows(table, output, runs, force)
    if plot_path:
        from fastmodel.io.outputs import claim_output
        from fastmodel.plot.style import save
        from fastmodel.plot.validation import predicted_vs_measured

        fig, _ = predicted_vs_measured(table)
        with claim_output(plot_path, _figure_kind(plot_path), inputs=(runs,), force=force, what="figure"):
            save(fig, plot_path)


def _figure_kind(path: str) -> str:
    from fastmodel.errors import SpecError

    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".pdf", ".svg"):
        raise SpecError(path, None, "--plot: the figure must end in .png, .pdf or .svg")
    return suffix[1:]


def _write_rows(table: list[dict], path: str, runs: str, force: bool) -> None:
    import csv

    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import claim_output

    with claim_output(path, "csv", inputs=(runs,), force=force, what="table"), atomic_write(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
