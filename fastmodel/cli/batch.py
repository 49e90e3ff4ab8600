"""``fastmodel batch``: a JSONL file of configurations and records, evaluated in chunks, written in order."""

from __future__ import annotations

import io
import sys

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import (
    ConsoleState,
    calibration_option,
    friendly,
    progress_option,
    read_calibration,
    semantics_option,
)
from fastmodel.errors import FastmodelError


@main.command()
@click.argument("cases", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--output", "-o", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Output by extension: .csv, .parquet, else JSONL ('-' for stdout); written atomically.")
@click.option("--force", is_flag=True, help="Replace an existing output file of the same kind (never the input).")
@semantics_option
@calibration_option
@progress_option
@friendly
def batch(cases, output, force, semantics, calibration, progress):
    """Evaluate every line of a JSONL file; one result per input line, in order. --calibration applies to
    run-record lines (the real-world model); a file with none gets a warning that it applied to no line. Exit 0
    when any line is ok; exit 3 when every line is an error (the output is still written, as an all-illegal
    sweep's)."""
    if ConsoleState.console:  # few distinct lines: interpret the kernels rather than load numba (fastmodel/io/batch_jit.py)
        from fastmodel.io.batch_jit import interpret_if_few

        interpret_if_few(cases)
    from fastmodel.io.batch_output import run_to_output
    from fastmodel.io.outputs import check_output, claim_output
    from fastmodel.lm.calibrate.use import cli_warnings

    kind = "parquet" if str(output).lower().endswith(".parquet") else "text"
    check_output(output, kind, inputs=(cases,), force=force, stdout=True)
    cal = read_calibration(calibration)
    if cal is not None:
        click.echo(cal.describe(), err=True)
    source = sys.stdin.buffer if cases == "-" else _open_input(cases)
    if not hasattr(source, "peek"):  # a test runner's in-memory stdin
        source = io.BufferedReader(source)
    if not source.peek(1):  # nothing to evaluate is bad input, like an empty sweep axis: refused, no output written
        source.close()
        raise FastmodelError(f"{cases}: no records: {'standard input' if cases == '-' else 'the file'} is empty "
                             "(batch reads one configuration or record per line)")
    _refuse_another_kind(source, cases)
    with source, cli_warnings(), claim_output(output, kind, inputs=(cases,), force=force, stdout=True):  # io/outputs.py
        ok, bad = run_to_output(source, output, semantics, progress, calibration=cal)
    if ok == 0 and bad:  # nothing evaluated: a script sees it without reading the file, as a sweep's exit 3
        from fastmodel.cli.sweep import NO_LEGAL_POINT_EXIT

        click.echo(f"0 ok, {bad} errors: every line is an error, each line's reason in its status; "
                   f"{'standard output' if output == '-' else output} holds them (exit {NO_LEGAL_POINT_EXIT})", err=True)
        sys.exit(NO_LEGAL_POINT_EXIT)
    click.echo(f"{ok} ok, {bad} errors", err=True)


def _refuse_another_kind(source, cases: str) -> None:
    """A CSV or TOML file given as the cases: one line, exit 2, no output (``fastmodel.io.batch.refuse_another_kind``
    on the peeked head, before the output is claimed; the one check on this path: ``run_to_output`` runs the chunks
    without ``run_batch``, which checks its own lines' head for the API)."""
    from fastmodel.io.batch import HEAD_BYTES, refuse_another_kind

    try:
        refuse_another_kind(source.peek(HEAD_BYTES), "standard input" if cases == "-" else cases)
    except FastmodelError:
        source.close()
        raise


def _open_input(path: str):
    try:
        return open(path, "rb")
    except OSError as error:
        raise FastmodelError(f"{path}: cannot read: {error.strerror}") from None
