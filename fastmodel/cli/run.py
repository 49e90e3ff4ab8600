"""``fastmodel run``: one configuration, a run record or a serving record, as a report or JSON.

The engine comes from :mod:`fastmodel.engines`: a record file by its content, specs by the model's family
and the semantics. Each engine's report module (``fastmodel/<engine>/report.py``) makes the report; this
command prints it. Options that do not apply to the input are refused with one line, never ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import (
    Whole,
    calibration_option,
    friendly,
    memory_margin_option,
    read_calibration,
    semantics_option,
)
from fastmodel.cli.execution import execution_options
from fastmodel.errors import FastmodelError, SpecError

#: engine -> its report module (``run_one`` for specs, ``run_record`` for records)
REPORTS = {"madmax": "fastmodel.madmax.report", "lm": "fastmodel.lm.report", "serve": "fastmodel.serve.report"}


@main.command()
@click.option("--model", "-m", required=True,
              help="Built-in name, .toml/.json path (fastmodel or MAD-Max format), or a run or serving record "
              "(.json, RUNS.md / SERVE_RUNS.md).")
@click.option("--system", "-s", help="Built-in name or path (not with a record: it names its system).")
@click.option("--task", "-t", help="Built-in name or path (not with a record).")
@click.option("--nodes", "num_nodes", type=Whole(min=1), help="Cluster size in nodes (overrides the "
              "system's; not with a record).")
@click.option("--plan", "-p", help="MAD-Max specs: 'DENSE/EMB', e.g. 'fsdp/ddp' or 'tp8,ddp16/mp128' (overrides the "
              "task's); real-world specs: a mesh, e.g. 'tp8.pp4' or 'tp4.pp8.cp2' (dp fills the cluster); not with "
              "a record.")
@semantics_option
@execution_options
@calibration_option
@memory_margin_option("; real-world training models and run records")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the report.")
@friendly
def run(model, system, task, num_nodes, plan, semantics, execution_file, execution_sets, calibration, memory_margin,
        as_json):
    """Evaluate one configuration and print a report.

    Real-world training specs run as --execution FILE (an [execution] table) and -x/--set KEY=VALUE say, e.g.
    -x pipeline_schedule=dualpipe -x moe_a2a_overlap=dualpipe; a record's plan block states its own."""
    import importlib

    from fastmodel import engines
    from fastmodel.analysis.margin import gib_margin
    from fastmodel.cli import execution as ex
    from fastmodel.lm.calibrate.use import cli_warnings

    cal = read_calibration(calibration)
    margin = gib_margin(memory_margin)
    record = _record_in(model)
    with cli_warnings():
        if record is not None:
            engine = engines.for_record(record)
            _refuse_with_record(model, system=system, task=task, nodes=num_nodes, plan=plan, semantics=semantics)
            ex.refuse_with_record(model, execution_file, execution_sets)
            report = importlib.import_module(REPORTS[engine.name]).run_record(record, model, calibration=cal,
                                                                              **_margin_kwargs(engine, margin))
        else:
            engine = engines.for_specs(model, semantics, system)
            if system is None or task is None:
                raise click.UsageError("--system and --task are required (unless --model is a run or serving "
                                       "record)")
            execution = ex.read_execution(execution_file, execution_sets, engine.name)
            report = importlib.import_module(REPORTS[engine.name]).run_one(
                model, system, task, semantics=semantics, plan=plan, num_nodes=num_nodes, calibration=cal,
                **_margin_kwargs(engine, margin), **({} if execution is None else {"execution": execution}))
    if not report.ok:
        raise FastmodelError(report.text)
    click.echo(json.dumps(report.record) if as_json else report.text)


def _margin_kwargs(engine, margin: float | None) -> dict:
    """The report's ``memory_margin`` keyword (none when not given). --memory-margin is a real-world training
    option: refused (one line) for MAD-Max specs and serving."""
    if margin is None:
        return {}
    if engine.name != "lm":
        what = "a serving configuration" if engine.name == "serve" else "MAD-Max semantics (weights only)"
        raise FastmodelError(f"--memory-margin: applies to real-world training models and run records, not to "
                             f"{what}")
    return {"memory_margin": margin}


def _record_in(model: str) -> dict | None:
    """The run or serving record a ``.json`` file holds, else None (then ``model`` names a spec)."""
    if model.endswith(".jsonl") and Path(model).is_file():   # plot timeline / memory-timeline read it here too
        ctx = click.get_current_context(silent=True)
        # the root's name is "python -m fastmodel.cli" under python -m: drop it whole, not its first word
        command = ("fastmodel " + ctx.command_path.removeprefix(ctx.find_root().info_name).strip()
                   if ctx is not None else "fastmodel run")
        raise SpecError(model, None, f"a JSON-lines file (one record or case per line): '{command}' takes one "
                        "record (.json) or spec; evaluate every line with 'fastmodel batch' (or 'validate')")
    if not model.endswith(".json") or not Path(model).is_file():
        return None
    from fastmodel.spec.detect import is_run_record, is_serve_record, misshapen_record

    try:
        data = json.loads(Path(model).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):   # the spec loader says what is wrong with the file
        return None
    if is_run_record(data) or is_serve_record(data):
        return data
    problem = misshapen_record(data)     # a record with a block that is not an object ("plan": "tp8")
    if problem:
        wrong, reason = problem.split(": ", 1)
        raise SpecError(model, wrong, reason)
    return None


def _refuse_with_record(model: str, **given) -> None:
    """A record names its own system, task and plan: an option that would change them is refused."""
    if given.pop("semantics") not in ("default", None):
        raise FastmodelError(f"--semantics: {model} is a measured-run record, evaluated by the real-world "
                             "model ('default'); the MAD-Max presets take MAD-Max specs")
    flags = {"system": "--system", "task": "--task", "nodes": "--nodes", "plan": "--plan"}
    for name, value in given.items():
        if value is not None:
            raise FastmodelError(f"{flags[name]}: {model} is a measured-run record and carries its own system, "
                                 "cluster size and plan; edit the record (or give specs with --model) instead")
