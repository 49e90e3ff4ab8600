"""``fastmodel run``: one configuration, a run record or a serving record, as a report or JSON."""

from __future__ import annotations

import json

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import calibration_option, friendly, read_calibration, semantics_option
from fastmodel.errors import FastmodelError


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
@friendly
def run(model, system, task, num_nodes, plan, semantics, calibration, as_json):
    """Evaluate one configuration and print a report."""
    from fastmodel.lm.calibrate.use import cli_warnings

    cal = read_calibration(calibration)
    with cli_warnings():
        if _run_real_world(model, system, task, num_nodes, plan, semantics, as_json, cal):
            return
    from fastmodel.lm.calibrate.use import not_for_madmax

    not_for_madmax(cal)
    from fastmodel.api import make_config
    from fastmodel.madmax import report
    from fastmodel.madmax.engine import evaluate_configs

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
        from fastmodel.lm.records import is_run_record

        try:
            data = json.loads(Path(model).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            data = None
        from fastmodel.serve.records import is_serve_record

        if is_serve_record(data):
            if cal is not None:
                raise FastmodelError(f"--calibration: {model} is a serving record; calibrations apply to "
                                     "training runs (the real-world training model)")
            _run_serve_record(data, model, as_json)
            return True
        if is_run_record(data):
            from fastmodel.lm.api import record_values

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
        from fastmodel.lm.api import config_values

        _print_real_world(config_values(real, system, task, plan=plan, num_nodes=num_nodes), {}, title, as_json)
        return True
    from fastmodel.lm.api import evaluate_lm, report_values

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

    from fastmodel.cli.serve import render
    from fastmodel.registry.lm import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table
    from fastmodel.serve.records import lower_serve_record

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
    from fastmodel.lm.api import format_report

    if as_json:
        record = {name: float(v) for name, v in values.items()}
        record.update({k: v for k, v in attrs.items() if k.startswith("calibration")})
        click.echo(json.dumps({"title": title, **record}))
    else:
        click.echo(format_report(values, title))
