"""``fastmodel sweep FILE.toml``: a grid of configurations to a ``.nc`` file or a resumable ``.zarr`` store."""

from __future__ import annotations

import os
import sys
import time

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import Whole, calibration_option, friendly, progress_option, read_calibration
from fastmodel.cli.interrupted import exit_interrupted


@main.command("sweep")
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(),
              help="Result: a .zarr store (streamed, resumable) or a .nc file (in memory, written atomically).")
@click.option("--resume", is_flag=True, help="Complete an interrupted .zarr store of the same sweep.")
@click.option("--force", is_flag=True, help="Replace an existing output of the same kind (a sweep store or .nc file).")
@click.option("--workers", type=Whole(min=1), help="Run units on a local Dask cluster of N worker processes.")
@click.option("--scheduler", help="Run units on an existing Dask cluster (tcp://host:port).")
@click.option("--unit-configs", type=Whole(min=1), help="Configurations per unit of work (and zarr chunk); "
              "default: the sweep file's unit_configs, else 262,144 (with --resume: the store's).")
@progress_option
@click.option("--yes", "confirm_large", is_flag=True,
              help="Run a sweep estimated as very large (over 10^10 configurations, or more disk than is free); "
              "a .nc grid over half the available memory is refused even then (-o out.zarr streams it).")
@calibration_option
@friendly
def sweep_command(sweep_file, output, resume, force, workers, scheduler, unit_configs, progress, confirm_large,
                  calibration):
    """Evaluate a sweep file (TOML) into a labeled dataset: MAD-Max, real-world training (family = "lm"
    model; --calibration applies to it) or serving (a kind = "serve" task), each into a .nc file or a resumable
    .zarr store, on Dask workers with --workers / --scheduler."""
    from pathlib import Path

    from fastmodel.errors import SweepError
    from fastmodel.io.outputs import check_output
    from fastmodel.io.store import is_sweep_store, lock_owner, nothing_to_resume
    from fastmodel.lm.calibrate.use import cli_warnings

    out = Path(output)
    is_zarr = out.suffix == ".zarr"
    if not is_zarr and out.suffix != ".nc":
        case = f" (lower case: {out.stem}{out.suffix.lower()})" if out.suffix.lower() in (".zarr", ".nc") else ""
        raise SweepError(f"{output or repr(output)}: the output must end in .zarr or .nc{case}")
    if resume and not is_zarr:
        raise SweepError("--resume needs a .zarr store (a .nc file is written whole at the end)")
    if resume and force:
        raise SweepError("give --resume (complete the store) or --force (replace it), not both")
    parent = out.absolute().parent
    if not parent.is_dir():   # as batch and validate say it (fastmodel/io/outputs.py)
        under_file = any(p.is_file() for p in (parent, *parent.parents))
        why = "Not a directory" if under_file else f"no such directory {parent}"
        raise SweepError(f"{output}: cannot write: {why}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SweepError(f"{output}: cannot write in {parent} (permission denied)")
    if (workers or scheduler) and not is_zarr:
        raise SweepError("a distributed sweep writes a .zarr store: use -o out.zarr")
    if workers and not scheduler:     # before the sweep file is read and its size printed: the first line
        from fastmodel.sweeps.cluster import check_local_workers
        check_local_workers(workers)
    owner = lock_owner(out)    # a .zarr store and a .nc file take the same writer lock (fastmodel/io/store.py)
    if owner:
        raise SweepError(f"{output} is being written by {owner}; wait for it to finish, or stop it")
    if not is_zarr:
        check_output(output, "netcdf", inputs=(sweep_file,), force=force, what="dataset")
    elif os.path.lexists(out) and not resume:
        if not is_sweep_store(out):
            raise SweepError(f"{output} exists and is not a fastmodel sweep store; "
                             "refusing to replace it (even with --force): choose another output")
        if not force:
            raise SweepError(f"{output} exists; pass --resume to complete it or --force to replace it")
    if resume and not os.path.lexists(out):
        raise SweepError(f"{output}: nothing to resume (no such store); run without --resume to create it")
    if resume and not is_sweep_store(out):
        raise nothing_to_resume(output)
    if resume and unit_configs is None and out.is_dir():
        from fastmodel.sweeps import stored_unit_configs

        unit_configs = stored_unit_configs(output)
    if scheduler:
        from fastmodel.sweeps import check_scheduler_address

        check_scheduler_address(scheduler)
    with cli_warnings():
        _run(sweep_file, output, is_zarr, resume, force, workers, scheduler, unit_configs, progress, confirm_large,
             read_calibration(calibration))


def _run(sweep_file, output, is_zarr, resume, force, workers, scheduler, unit_configs, progress, confirm_large,
         calibration):
    """Load the sweep file's plan (any engine), check its size (and a store to resume), run it; the summary."""
    from fastmodel.io.outputs import mark_written
    from fastmodel.sweeps import Progress, check_size, connect, open_store_for_resume, run_in_memory, run_to_store
    from fastmodel.sweeps.file import load_sweep_file

    plan = load_sweep_file(sweep_file, unit_configs, calibration)
    if calibration is not None:
        click.echo(calibration.describe(), err=True)
    if resume:  # a store of another sweep, or a damaged one, is reported before any work
        open_store_for_resume(plan, output)
    estimate = check_size(plan, output, is_zarr, confirm_large)
    from fastmodel.engines import ENGINES

    units = f"{plan.num_units:,} unit" + ("" if plan.num_units == 1 else "s")
    configs = f"{plan.num_configs:,} configuration" + ("" if plan.num_configs == 1 else "s")
    click.echo(f"{configs} in {units} ({ENGINES[plan.engine].title}) -> "
               f"{output} ({estimate})", err=True)
    for note in getattr(plan, "run_notes", ()):    # once per sweep, once it runs: the profile a default picked
        click.echo(f"note: {note}", err=True)
    client = cluster = None
    if workers or scheduler:
        client, cluster = connect(scheduler, workers)
    started = time.perf_counter()
    bar = Progress(plan.num_configs, enabled=progress)
    try:
        if is_zarr:
            try:
                ds = run_to_store(plan, output, resume, bar, client, overwrite=force, require_ok=False)
                mark_written(output)     # every unit: a Ctrl-C during the summary says the store is whole
            except KeyboardInterrupt:
                _interrupted(bar, output, resumable=True)
            finally:
                if client is not None:
                    client.close()
                if cluster is not None:
                    cluster.close()
        else:
            try:
                with _claim_netcdf(output, sweep_file, force):
                    ds = run_in_memory(plan, bar, require_ok=False)   # an all-illegal grid is written too
                    _write_netcdf(ds, output)
            except KeyboardInterrupt:
                _interrupted(bar, output, resumable=False)
    finally:
        bar.close()
    _done(ds, plan, output, time.perf_counter() - started, bar)


def _interrupted(bar, output, resumable: bool) -> None:
    """Ctrl-C: close the progress bar, say what is on disk, exit 130 (the shell's code for SIGINT). A .zarr
    store that exists holds every finished unit (--resume completes it); before it exists nothing was
    written; a .nc file is written whole at the end, so an interrupted one was not written."""
    from fastmodel.io.store import is_sweep_store

    bar.close()
    if resumable and is_sweep_store(output):
        said = f": {output} holds every finished unit; rerun with --resume to complete it"
    elif resumable:
        said = f" before {output} was created: nothing was written; rerun the same command to start again"
    else:
        said = f": {output} was not written (a .nc file is written whole at the end); rerun to start again"
    exit_interrupted(said)


def _claim_netcdf(output, source, force):
    """A .nc output's writer lock for the whole run (fastmodel/io/outputs.py)."""
    from fastmodel.io.outputs import claim_output

    return claim_output(output, "netcdf", inputs=(source,), force=force, what="dataset")


#: the exit status of a sweep whose output was written but holds no legal, feasible point (docs/usage.md)
NO_LEGAL_POINT_EXIT = 3


def _done(ds, plan, output, seconds: float, bar) -> None:
    """The summary line, ending with the run's wall time and configurations per second (the first line gives only
    the engine's assumed rate; the progress bar, the measured one, shows on a terminal only); on ``--resume`` the
    configurations this run evaluated (``bar.evaluated``) and their rate, not the store's (review8 #3). A grid
    without one ``ok`` point (written, each point with its status code) says so in one line, the most common
    status and its reason, and exits NO_LEGAL_POINT_EXIT (3; spec errors stay 2)."""
    from fastmodel.sweeps.run import COUNT_STATUS_CONFIGS, no_legal_point

    num_configs = plan.num_configs
    why = no_legal_point(plan, ds["status"].values) if num_configs <= COUNT_STATUS_CONFIGS else None
    if why is not None:
        click.echo(f"every point is illegal or infeasible: {why}; {output} holds the grid, each point's "
                   f"reason in its status variable (exit {NO_LEGAL_POINT_EXIT})", err=True)
        sys.exit(NO_LEGAL_POINT_EXIT)
    fits, too_big = fit_counts(ds)
    evaluated = bar.evaluated
    rate = f"{evaluated / max(seconds, 1e-9):,.0f} configurations/s (kernel loading and writing included)"
    if bar.skipped:
        timing = f"resumed: {evaluated:,} of {num_configs:,} configurations evaluated in this run, {seconds:,.1f} s" \
            + (f", {rate}" if evaluated else "")
    else:
        timing = f"{seconds:,.1f} s, {rate}"
    click.echo(f"done: {fits:,} of {num_configs:,} configurations legal and feasible (fit in memory), {too_big:,} "
               f"legal but over memory, {num_configs - fits - too_big:,} illegal or not evaluated; {timing}",
               err=True)


def fit_counts(ds) -> tuple[int, int]:
    """(legal points that fit in memory, legal points that do not) of a sweep result: status ``ok`` split by
    ``fits_memory`` where the dataset has it (real-world sweeps without ``only_fitting`` keep such points ok),
    plus the points of status ``does_not_fit``."""
    from fastmodel.registry import status_names

    status = ds["status"]
    names = status_names(status)
    ok = status == 0
    fits = ok & (ds["fits_memory"] > 0) if "fits_memory" in ds else ok
    over = int((ok & ~fits).sum())
    if "does_not_fit" in names:
        over += int((status == names.index("does_not_fit")).sum())
    return int(fits.sum()), over


def _write_netcdf(ds, path):
    """The dataset as netCDF-3, written atomically, each variable under its one name (no aliases)."""
    from fastmodel.io.aliases import without_aliases
    from fastmodel.io.atomic import atomic_path
    from fastmodel.io.outputs import mark_written

    with atomic_path(path) as tmp:
        without_aliases(ds).to_netcdf(tmp, engine="scipy")
    mark_written(path)    # serve --search writes it outside a claim: a Ctrl-C after it said "not written"
