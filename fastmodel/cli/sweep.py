"""``fastmodel sweep FILE.toml``: a grid of configurations to a ``.nc`` file or a resumable ``.zarr`` store."""

from __future__ import annotations

import os
import sys

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import calibration_option, friendly, read_calibration


@main.command("sweep")
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(),
              help="Result: a .zarr store (streamed, resumable) or a .nc file (in memory, written atomically).")
@click.option("--resume", is_flag=True, help="Complete an interrupted .zarr store of the same sweep.")
@click.option("--force", is_flag=True, help="Replace an existing output of the same kind (a sweep store or .nc file).")
@click.option("--workers", type=click.IntRange(min=1), help="Run units on a local Dask cluster of N worker processes.")
@click.option("--scheduler", help="Run units on an existing Dask cluster (tcp://host:port).")
@click.option("--unit-configs", type=click.IntRange(min=1), help="Configurations per unit of work (and zarr chunk).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@click.option("--yes", "confirm_large", is_flag=True,
              help="Run a sweep estimated as very large (over 10^10 configurations, or more disk than is free).")
@calibration_option
@friendly
def sweep_command(sweep_file, output, resume, force, workers, scheduler, unit_configs, progress, confirm_large,
                  calibration):
    """Evaluate a sweep file (TOML) into a labeled dataset. A real-world sweep (family = "lm" model) runs in
    memory into a .nc file; --calibration applies to it."""
    from pathlib import Path

    from fastmodel.errors import SweepError
    from fastmodel.io.outputs import check_output, claim_output
    from fastmodel.io.store import is_sweep_store, lock_owner
    from fastmodel.sweep import Progress, check_size, run_in_memory, run_to_store
    from fastmodel.sweep.file import load_sweep_file

    out = Path(output)
    is_zarr = out.suffix == ".zarr"
    if not is_zarr and out.suffix != ".nc":
        raise SweepError(f"{output}: the output must end in .zarr or .nc")
    if resume and not is_zarr:
        raise SweepError("--resume needs a .zarr store (a .nc file is written whole at the end)")
    if resume and force:
        raise SweepError("give --resume (complete the store) or --force (replace it), not both")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise SweepError(f"{output}: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SweepError(f"{output}: cannot write in {parent} (permission denied)")
    if (workers or scheduler) and not is_zarr:
        raise SweepError("a distributed sweep writes a .zarr store: use -o out.zarr")
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
        raise SweepError(f"{output} is not a fastmodel sweep store, so there is nothing to resume; choose another "
                         "output (fastmodel never deletes it, even with --force)")
    if resume and unit_configs is None and out.is_dir():
        from fastmodel.sweep import stored_unit_configs

        unit_configs = stored_unit_configs(output)
    if scheduler:
        from fastmodel.sweep import check_scheduler_address

        check_scheduler_address(scheduler)
    from fastmodel.sweep.real_run import load_real_sweep_file

    real = load_real_sweep_file(sweep_file, unit_configs)
    if real is not None:  # real-world LM or serving sweep (fastmodel.sweep.real)
        _run_real_sweep(real, output, is_zarr, resume, force, progress, confirm_large, workers or scheduler,
                        calibration)
        return
    if calibration is not None:
        from fastmodel.lm.calibrate.use import not_for_madmax

        not_for_madmax(read_calibration(calibration))
    sweep = load_sweep_file(sweep_file, unit_configs)
    if resume:  # a store of another sweep, or a damaged one, is reported before any work
        from fastmodel.sweep import open_store_for_resume

        open_store_for_resume(sweep, output)
    estimate = check_size(sweep, output, is_zarr, confirm_large)
    client = cluster = None
    if workers or scheduler:
        from fastmodel.sweep import connect

        client, cluster = connect(scheduler, workers)
    click.echo(f"{sweep.num_configs:,} configurations in {sweep.num_units:,} units -> {output} ({estimate})", err=True)
    bar = Progress(sweep.num_configs, enabled=progress)
    try:
        if is_zarr:
            try:
                ds = run_to_store(sweep, output, resume, bar, client, overwrite=force)
            except KeyboardInterrupt:
                _interrupted(bar, output, resumable=True)
            finally:
                if client is not None:
                    client.close()
                if cluster is not None:
                    cluster.close()
        else:
            try:
                with claim_output(output, "netcdf", inputs=(sweep_file,), force=force, what="dataset"):
                    ds = run_in_memory(sweep, bar)
                    _write_netcdf(ds, out)
            except KeyboardInterrupt:
                _interrupted(bar, output, resumable=False)
    finally:
        bar.close()
    _done(ds, sweep.num_configs)


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
    click.echo(f"interrupted{said}", err=True)
    sys.exit(130)


def _claim_netcdf(output, is_zarr, source, force):
    """A .nc output's writer lock for the whole run (fastmodel/io/outputs.py); a .zarr store takes its own."""
    import contextlib

    from fastmodel.io.outputs import claim_output

    if is_zarr:
        return contextlib.nullcontext()
    return claim_output(output, "netcdf", inputs=(source,), force=force, what="dataset")


def _done(ds, num_configs: int) -> None:
    fits, too_big = fit_counts(ds)
    click.echo(f"done: {fits:,} of {num_configs:,} configurations legal and feasible (fit in memory), {too_big:,} "
               f"legal but over memory, {num_configs - fits - too_big:,} illegal or not evaluated", err=True)


def fit_counts(ds) -> tuple[int, int]:
    """(legal points that fit in memory, legal points that do not) of a sweep result: status ``ok`` split by
    ``fits_memory`` where the dataset has it (real-world sweeps without ``only_fitting`` keep such points ok),
    plus the points of status ``does_not_fit``."""
    status = ds["status"]
    names = str(status.attrs.get("flag_meanings", "")).split()
    ok = status == 0
    fits = ok & (ds["fits_memory"] > 0) if "fits_memory" in ds else ok
    over = int((ok & ~fits).sum())
    if "does_not_fit" in names:
        over += int((status == names.index("does_not_fit")).sum())
    return int(fits.sum()), over


def _run_real_sweep(real, output, is_zarr, resume, force, progress, confirm_large, distributed, calibration):
    from fastmodel.errors import SweepError
    from fastmodel.lm.calibrate.use import cli_warnings
    from fastmodel.sweep import Progress
    from fastmodel.sweep.real_run import check_real_size, run_real

    if distributed:
        raise SweepError("real-world and serving sweeps run in this process: leave out --workers/--scheduler")
    cal = read_calibration(calibration)
    if cal is not None:
        if real.kind != "lm":
            raise SweepError("--calibration applies to training sweeps of the real-world model, not to serving")
        real.calibration = cal
        click.echo(cal.describe(), err=True)
    if resume:  # a store of another sweep is reported before any work
        from fastmodel.sweep.real_run import check_resumable

        check_resumable(real, os.path.abspath(output))
    estimate = check_real_size(real, output, is_zarr, confirm_large)
    click.echo(f"{real.num_configs:,} configurations ({real.kind}) -> {output} ({estimate})", err=True)
    bar = Progress(real.num_configs, enabled=progress)
    try:
        with cli_warnings(), _claim_netcdf(output, is_zarr, real.source, force):
            ds = run_real(real, output, is_zarr, resume, force, bar)
    except KeyboardInterrupt:
        _interrupted(bar, output, resumable=is_zarr)
    finally:
        bar.close()
    _done(ds, real.num_configs)


def _write_netcdf(ds, path):
    from fastmodel.io.atomic import atomic_path

    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="scipy")
