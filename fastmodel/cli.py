"""The ``fastmodel`` command line: thin wrappers over the Python API.

User errors print one line (``error: ...``) and exit 2; Ctrl-C exits 130;
anything else is an internal bug and shows a traceback (exit 1).
"""

from __future__ import annotations

import functools
import json
import os
import sys

import click

from fastmodel import __version__
from fastmodel.errors import FastmodelError


class Choice(click.Choice):
    """click.Choice that suggests the nearest valid value."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            from fastmodel.errors import nearest

            self.fail(f"{value!r} is not one of {', '.join(map(str, self.choices))}{nearest(str(value), self.choices)}",
                      param, ctx)


class OneLineGroup(click.Group):
    """A group whose usage errors are one line (``error: ...``, exit 2) like every other error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            click.echo(error.ctx.get_help())
            sys.exit(0)
        except click.UsageError as error:
            hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            click.echo(f"error: {' '.join(error.format_message().split())}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as error:
            click.echo(f"error: {' '.join(error.format_message().split())}", err=True)
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as error:
            sys.exit(error.exit_code)


class PresetChoice(Choice):
    """The semantics presets, read from ``fastmodel.semantics`` (pydantic) only when parsed or shown."""

    def __init__(self):
        super().__init__([])

    @property
    def choices(self):
        from fastmodel.semantics import PRESETS

        return sorted(PRESETS)

    @choices.setter
    def choices(self, value):  # click.Choice.__init__ assigns it
        pass


KIND_CHOICE = Choice(["model", "system", "task"])
SHOW_CHOICE = Choice(["model", "system", "task", "sweep"])
LIST_CHOICE = Choice(["model", "system", "task", "sweep"])


def entry() -> None:
    """The ``fastmodel`` console script. ``fastmodel run`` evaluates one configuration with the kernels
    interpreted (``FASTMODEL_JIT=0``, kernels/jit.py): loading numba and the compiled kernels takes about 1.5 s,
    interpreting one row a few milliseconds, and the numbers are the same (tests/test_cli_run_fast.py). So does
    ``batch`` when its input file holds few distinct lines (fastmodel/batch_jit.py). Every other command uses
    the compiled kernels."""
    global _CONSOLE
    _CONSOLE = True
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        os.environ.setdefault("FASTMODEL_JIT", "0")
    main()


#: set by :func:`entry`: this process is the console command (``batch`` may then choose interpreted kernels)
_CONSOLE = False


def _friendly(func):
    """Turn user errors into one line + exit 2, and Ctrl-C into exit 130."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except FastmodelError as error:
            click.echo(f"error: {' '.join(str(error).split())}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # e.g. piped into `head`
            sys.stderr.close()
            sys.exit(0)
        except OSError as error:
            where = f"{error.filename}: " if error.filename else ""
            click.echo(f"error: {where}{error.strerror or error}", err=True)
            sys.exit(2)

    return wrapper


semantics_option = click.option(
    "--semantics", default="default", show_default=True, type=PresetChoice(),
    help="Modelling preset: 'default' (real-world model for real-world specs, the bug-fixed MAD-Max model "
    "otherwise), 'madmax-fixed', or 'madmax' (the reference, bugs included).",
)


calibration_option = click.option(
    "--calibration", type=click.Path(dir_okay=False),
    help="Apply a calibration overlay (.toml from 'fastmodel calibrate') to the real-world model "
    "(run records, family = \"lm\" specs); default: physical (datasheet) values.",
)


def _read_calibration(path):
    """The calibration file of ``--calibration`` (None without one); a bad file is a one-line error."""
    if path is None:
        return None
    from fastmodel.calibrate import read_calibration

    return read_calibration(path)


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fastmodel")
def main():
    """Predict iteration time and memory of large models on GPU clusters (MAD-Max model)."""


@main.command()
@click.option("--model", "-m", required=True,
              help="Built-in name, .toml/.json path (fastmodel or MAD-Max format), or a run record (.json, RUNS.md).")
@click.option("--system", "-s", help="Built-in name or path (not needed for a run record).")
@click.option("--task", "-t", help="Built-in name or path (not needed for a run record).")
@click.option("--nodes", "num_nodes", type=click.IntRange(min=1), help="Cluster size in nodes (overrides the system's).")
@click.option("--plan", "-p", help="MAD-Max specs: 'DENSE/EMB', e.g. 'fsdp/ddp' or 'tp8,ddp16/mp128' (overrides the "
              "task's); real-world specs: a mesh, e.g. 'tp8.pp4' or 'tp4.pp8.cp2' (dp fills the cluster).")
@semantics_option
@calibration_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the report.")
@_friendly
def run(model, system, task, num_nodes, plan, semantics, calibration, as_json):
    """Evaluate one configuration and print a report."""
    from fastmodel.calibrate.use import cli_warnings

    cal = _read_calibration(calibration)
    with cli_warnings():
        if _run_real_world(model, system, task, num_nodes, plan, semantics, as_json, cal):
            return
    from fastmodel.calibrate.use import not_for_madmax

    not_for_madmax(cal)
    from fastmodel import report
    from fastmodel.api import make_config
    from fastmodel.engine import evaluate_configs

    if system is None or task is None:
        raise click.UsageError("--system and --task are required (unless --model is a run record)")
    config = make_config(model, system, task, semantics, plan, num_nodes)
    ds = {name: values[0] for name, values in evaluate_configs([config]).items()}  # no xarray: start-up
    if as_json:
        click.echo(json.dumps(report.summary(config, ds)))
    else:
        click.echo(report.render(config, ds))


def _run_real_world(model, system, task, num_nodes, plan, semantics, as_json, cal=None) -> bool:
    """``fastmodel run`` of a run record or a real-world model under a real-world preset; False otherwise."""
    from pathlib import Path

    from fastmodel.semantics import get_semantics

    if not get_semantics(semantics).real_world:
        return False
    if model.endswith(".json") and Path(model).is_file():
        from fastmodel.runs import is_run_record

        try:
            data = json.loads(Path(model).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            data = None
        from fastmodel.serve_runs import is_serve_record

        if is_serve_record(data):
            if cal is not None:
                raise FastmodelError(f"--calibration: {model} is a serving record; calibrations apply to "
                                     "training runs (the real-world training model)")
            _run_serve_record(data, model, as_json)
            return True
        if is_run_record(data):
            from fastmodel.lm_api import record_values

            values, attrs = record_values(data, model, calibration=cal)
            title = f"{data.get('id') or model} (run record; measured values ignored)" + _calibrated(cal)
            _print_real_world(values, attrs, title, as_json)
            return True
    from fastmodel.api import real_world_model

    real = real_world_model(model, semantics)
    if real is None:
        return False
    if system is None or task is None:
        raise click.UsageError("--system and --task are required (unless --model is a run record)")
    title = (f"{real.name} on {system}" + (f" x {num_nodes} nodes" if num_nodes else "")
             + f", plan {plan or 'dp'}, semantics {semantics}" + _calibrated(cal))
    if cal is None:  # no xarray: the report needs only the numbers
        from fastmodel.lm_api import config_values

        _print_real_world(config_values(real, system, task, plan=plan, num_nodes=num_nodes), {}, title, as_json)
        return True
    from fastmodel.lm_api import evaluate_lm, report_values

    ds = evaluate_lm(real, system, task, plan=plan, num_nodes=num_nodes, calibration=cal)
    _print_real_world(report_values(ds), ds.attrs, title, as_json)
    return True


def _calibrated(cal) -> str:
    """Title suffix naming the calibration applied (empty without one)."""
    if cal is None:
        return ""
    from pathlib import Path

    return f", calibration {Path(cal.source).name} (sha256 {cal.fingerprint()[:12]})"


def _run_serve_record(data: dict, source: str, as_json: bool) -> None:
    """``fastmodel run`` of one serving record (SERVE_RUNS.md): the report of ``fastmodel serve``."""
    import math

    from fastmodel.cli_serve import render
    from fastmodel.serve_runs import lower_serve_record
    from fastmodel.serving import evaluate_table
    from fastmodel.variables import SERVE_RESULTS, SERVE_STATUS_NAMES

    record = lower_serve_record(data, source)
    out, status = evaluate_table(record.columns[:, None])
    result = {r.name: float(out[k, 0]) for k, r in enumerate(SERVE_RESULTS)}
    state = SERVE_STATUS_NAMES[int(status[0])]
    label = f"{record.id or source} (serving record; measured values ignored)"
    if as_json:
        click.echo(json.dumps({"id": label, "status": state,
                               **{k: (v if math.isfinite(v) else None) for k, v in result.items()}}))
    else:
        click.echo(render(label, state, result))


def _print_real_world(values: dict, attrs: dict, title: str, as_json: bool) -> None:
    from fastmodel.lm_api import format_report

    if as_json:
        record = {name: float(v) for name, v in values.items()}
        record.update({k: v for k, v in attrs.items() if k.startswith("calibration")})
        click.echo(json.dumps({"title": title, **record}))
    else:
        click.echo(format_report(values, title))


@main.command()
@click.argument("cases", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--output", "-o", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Output by extension: .csv, .parquet, else JSONL ('-' for stdout); written atomically.")
@click.option("--force", is_flag=True, help="Replace an existing output file of the same kind (never the input).")
@semantics_option
@calibration_option
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal only).")
@_friendly
def batch(cases, output, force, semantics, calibration, progress):
    """Evaluate every line of a JSONL file; one result per input line, in order. --calibration applies to
    run-record lines (the real-world model)."""
    if _CONSOLE:  # few distinct lines: interpret the kernels rather than load numba (fastmodel/batch_jit.py)
        from fastmodel.batch_jit import interpret_if_few

        interpret_if_few(cases)
    from fastmodel.batch_output import run_to_output
    from fastmodel.calibrate.use import cli_warnings
    from fastmodel.outputs import check_output

    kind = "parquet" if str(output).lower().endswith(".parquet") else "text"
    check_output(output, kind, inputs=(cases,), force=force)
    cal = _read_calibration(calibration)
    if cal is not None:
        click.echo(cal.describe(), err=True)
    source = sys.stdin.buffer if cases == "-" else _open_input(cases)
    with source, cli_warnings():
        ok, bad = run_to_output(source, output, semantics, progress, calibration=cal)
    click.echo(f"{ok} ok, {bad} errors", err=True)


def _open_input(path: str):
    try:
        return open(path, "rb")
    except OSError as error:
        raise FastmodelError(f"{path}: cannot read: {error.strerror}") from None


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
@_friendly
def sweep_command(sweep_file, output, resume, force, workers, scheduler, unit_configs, progress, confirm_large,
                  calibration):
    """Evaluate a sweep file (TOML) into a labeled dataset. A real-world sweep (family = "lm" model) runs in
    memory into a .nc file; --calibration applies to it."""
    from pathlib import Path

    from fastmodel.errors import SweepError
    from fastmodel.outputs import is_kind
    from fastmodel.store import is_sweep_store, lock_owner
    from fastmodel.sweep import Progress, check_size, run_in_memory, run_to_store
    from fastmodel.sweep_file import load_sweep_file

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
    owner = lock_owner(out) if is_zarr else None
    if owner:
        raise SweepError(f"{output} is being written by {owner}; wait for it to finish, or stop it")
    if os.path.lexists(out) and not resume:
        ours = is_sweep_store(out) if is_zarr else (out.is_file() and is_kind(out, "netcdf"))
        if not ours:
            raise SweepError(f"{output} exists and is not a {'fastmodel sweep store' if is_zarr else 'netCDF file'}; "
                             "refusing to replace it (even with --force): choose another output")
        if not force:
            hint = "pass --resume to complete it or --force to replace it" if is_zarr else "pass --force to replace it"
            raise SweepError(f"{output} exists; {hint}")
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
    from fastmodel.sweep_real_run import load_real_sweep_file

    real = load_real_sweep_file(sweep_file, unit_configs)
    if real is not None:  # real-world LM or serving sweep (fastmodel.sweep_real)
        _run_real_sweep(real, output, is_zarr, resume, force, progress, confirm_large, workers or scheduler,
                        calibration)
        return
    if calibration is not None:
        from fastmodel.calibrate.use import not_for_madmax

        not_for_madmax(_read_calibration(calibration))
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
                bar.close()
                click.echo(f"interrupted: {output} holds every finished unit; rerun with --resume to complete it",
                           err=True)
                sys.exit(130)
            finally:
                if client is not None:
                    client.close()
                if cluster is not None:
                    cluster.close()
        else:
            ds = run_in_memory(sweep, bar)
            _write_netcdf(ds, out)
    finally:
        bar.close()
    ok = int((ds["status"] == 0).sum())
    click.echo(f"done: {ok:,} of {sweep.num_configs:,} configurations legal and feasible", err=True)


def _run_real_sweep(real, output, is_zarr, resume, force, progress, confirm_large, distributed, calibration):
    from fastmodel.calibrate.use import cli_warnings
    from fastmodel.errors import SweepError
    from fastmodel.sweep import Progress
    from fastmodel.sweep_real_run import check_real_size, run_real

    if distributed:
        raise SweepError("real-world and serving sweeps run in this process: leave out --workers/--scheduler")
    cal = _read_calibration(calibration)
    if cal is not None:
        if real.kind != "lm":
            raise SweepError("--calibration applies to training sweeps of the real-world model, not to serving")
        real.calibration = cal
        click.echo(cal.describe(), err=True)
    if resume:  # a store of another sweep is reported before any work
        from fastmodel.sweep_real_run import check_resumable

        check_resumable(real, os.path.abspath(output))
    estimate = check_real_size(real, output, is_zarr, confirm_large)
    click.echo(f"{real.num_configs:,} configurations ({real.kind}) -> {output} ({estimate})", err=True)
    bar = Progress(real.num_configs, enabled=progress)
    try:
        with cli_warnings():
            ds = run_real(real, output, is_zarr, resume, force, bar)
    except KeyboardInterrupt:
        bar.close()
        click.echo(f"interrupted{f': {output} holds every finished unit; rerun with --resume' if is_zarr else ''}",
                   err=True)
        sys.exit(130)
    finally:
        bar.close()
    ok = int((ds["status"] == 0).sum())
    click.echo(f"done: {ok:,} of {real.num_configs:,} configurations legal and feasible", err=True)


def _write_netcdf(ds, path):
    from fastmodel.atomic import atomic_path

    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="scipy")


@main.command("best")
@click.argument("result", type=click.Path())
@click.option("--by", required=True, help="Variable to rank by, e.g. throughput.")
@click.option("--top", default=10, show_default=True, type=int, help="How many rows.")
@click.option("--where", "where", multiple=True,
              help="Filter (repeatable): fits_memory, status=ok, num_nodes=256, throughput>100, plan=tp,ddp/mp.")
@click.option("--ascending", is_flag=True, help="Smallest first (e.g. --by iteration_time).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write the table as CSV (atomically).")
@click.option("--force", is_flag=True, help="Replace an existing CSV file.")
@click.option("--include-oom", is_flag=True,
              help="Also rank plans that do not fit in usable HBM (real-world datasets rank only plans that fit).")
@_friendly
def best_command(result, by, top, where, ascending, csv_path, force, include_oom):
    """Top-k configurations of a sweep result by any variable (real-world datasets: only plans that fit)."""
    from fastmodel.atomic import atomic_write
    from fastmodel.best import best, open_result
    from fastmodel.outputs import check_output

    if csv_path:
        check_output(csv_path, "text", inputs=(result,), force=force, what="CSV")
    ds = open_result(result)
    table = best(ds, by, top, list(where), ascending, include_oom=include_oom)
    fits = table.attrs["fits_filter"]
    if fits["applied"]:
        usable = ds.attrs.get("usable_hbm_bytes")
        hbm = f" of {float(usable) / 2**30:.1f} GiB" if usable is not None else ""
        click.echo(f"only plans that fit: dropped {fits['dropped']:,} of {fits['of']:,} configurations "
                   f"(memory_per_device over usable HBM{hbm}); --include-oom keeps them", err=True)
    click.echo(table.to_string(index=False))
    if csv_path:
        with atomic_write(csv_path) as handle:
            table.to_csv(handle, index=False)


@main.group()
def specs():
    """List, show and describe spec files."""


@specs.command("list")
@click.argument("kind", required=False, type=LIST_CHOICE)
@_friendly
def specs_list(kind):
    """List built-in specs (of one KIND, or all)."""
    from fastmodel.loader import builtin_names

    for k in [kind] if kind else ["model", "system", "task", "sweep"]:
        click.echo(f"{k}s:")
        for name in builtin_names(k):
            click.echo(f"  {name}")


@specs.command("show")
@click.argument("name")
@click.option("--kind", type=SHOW_CHOICE, help="Which kind NAME is (needed only if ambiguous).")
@_friendly
def specs_show(name, kind):
    """Print a built-in spec file."""
    from fastmodel.errors import SpecError, nearest
    from fastmodel.loader import builtin_names, builtin_text

    kinds = [kind] if kind else [k for k in ("model", "system", "task", "sweep") if name in builtin_names(k)]
    if not kinds:
        every = [n for k in ("model", "system", "task", "sweep") for n in builtin_names(k)]
        raise SpecError(None, None, f"no built-in spec {name!r}{nearest(name, every)}")
    if len(kinds) > 1:
        raise SpecError(None, None, f"{name!r} is a {' and a '.join(kinds)}; pass --kind")
    if name not in builtin_names(kinds[0]):
        raise SpecError(None, None, f"no built-in {kinds[0]} {name!r}{nearest(name, builtin_names(kinds[0]))}")
    click.echo(builtin_text(kinds[0], name).rstrip())


@specs.command("schema")
@click.argument("kind", type=KIND_CHOICE)
@_friendly
def specs_schema(kind):
    """Print the JSON Schema of a spec KIND (for editor completion and checks)."""
    from fastmodel.schema import json_schema

    click.echo(json.dumps(json_schema(kind), indent=2))


@main.command()
@click.option("--system", "-s", required=True, help="Built-in name or path.")
@click.option("--nodes", "num_nodes", type=click.IntRange(min=1), help="Cluster size in nodes.")
@click.option("--model", "-m", help="Model (built-in name or path): plans of its family, e.g. the three "
              "components MLP/EMB/TRANSFORMER of dlrm-transformer, minus rules it breaks (DLRM tp with odd layers).")
@_friendly
def plans(system, num_nodes, model):
    """List every legal 1-D/2-D plan of a system."""
    from fastmodel.errors import PlanError
    from fastmodel.loader import load_model, load_system
    from fastmodel.plans import check_plan_for_model, enumerate_plans

    sys_spec = load_system(system, num_nodes=num_nodes)
    model_spec = load_model(model) if model else None
    three = model_spec is not None and model_spec.family == "dlrm-transformer"
    found = enumerate_plans(sys_spec.num_nodes, sys_spec.devices_per_node, transformer=three)
    if model_spec is not None:
        def legal(plan):
            try:
                check_plan_for_model(plan, model_spec)
                return True
            except PlanError:
                return False
        found = [plan for plan in found if legal(plan)]
    if not found:
        raise FastmodelError(f"{sys_spec.name} with {sys_spec.num_devices} device(s) has no legal plan (every degree must be > 1)")
    for plan in found:
        click.echo(f"{plan.shape:<{20 if three else 12}} {plan.label}")


from fastmodel.cli_plot import plot  # noqa: E402

main.add_command(plot)

from fastmodel.cli_validate import validate as _validate  # noqa: E402

_validate.callback = _friendly(_validate.callback)
main.add_command(_validate)

from fastmodel.cli_calibrate import calibrate as _calibrate  # noqa: E402

_calibrate.callback = _friendly(_calibrate.callback)
main.add_command(_calibrate)
from fastmodel.cli_serve import serve as _serve  # noqa: E402

_serve.callback = _friendly(_serve.callback)
main.add_command(_serve)


if __name__ == "__main__":  # pragma: no cover
    main()
