"""The ``fastmodel`` command line: thin wrappers over the Python API.

User errors print one line (``error: ...``) and exit 2; Ctrl-C exits 130;
anything else is an internal bug and shows a traceback (exit 1).
"""

from __future__ import annotations

import functools
import json
import sys

import click

from fastmodel import __version__
from fastmodel.errors import FastmodelError
from fastmodel.semantics import PRESETS

KIND_CHOICE = click.Choice(["model", "system", "task"])


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

    return wrapper


semantics_option = click.option(
    "--semantics", default="madmax", show_default=True, type=click.Choice(sorted(PRESETS)),
    help="Modelling preset: 'madmax' reproduces the reference, 'default' fixes its bugs.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fastmodel")
def main():
    """Predict iteration time and memory of large models on GPU clusters (MAD-Max model)."""


@main.command()
@click.option("--model", "-m", required=True, help="Built-in name, .toml/.json path (fastmodel or MAD-Max format).")
@click.option("--system", "-s", required=True, help="Built-in name or path.")
@click.option("--task", "-t", required=True, help="Built-in name or path.")
@click.option("--nodes", "num_nodes", type=click.IntRange(min=1), help="Cluster size in nodes (overrides the system's).")
@click.option("--plan", "-p", help="Plan 'DENSE/EMB', e.g. 'fsdp/ddp' or 'tp8,ddp16/mp128' (overrides the task's).")
@semantics_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the report.")
@_friendly
def run(model, system, task, num_nodes, plan, semantics, as_json):
    """Evaluate one configuration and print a report."""
    from fastmodel import report
    from fastmodel.api import evaluate_config, make_config

    config = make_config(model, system, task, semantics, plan, num_nodes)
    ds = evaluate_config(config)
    if as_json:
        click.echo(json.dumps(report.summary(config, ds)))
    else:
        click.echo(report.render(config, ds))


@main.command()
@click.argument("cases", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--output", "-o", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Output JSONL ('-' for stdout); written atomically.")
@semantics_option
@_friendly
def batch(cases, output, semantics):
    """Evaluate every case of a JSONL file; one result line per input line."""
    from fastmodel.atomic import atomic_write
    from fastmodel.batch import run_batch, write_records

    source = sys.stdin if cases == "-" else _open_input(cases)
    with source:
        lines = (line.rstrip("\n") for line in source)
        records = run_batch(lines, semantics)
        if output == "-":
            ok, bad = write_records(records, sys.stdout)
        else:
            with atomic_write(output) as out:
                ok, bad = write_records(records, out)
    click.echo(f"{ok} ok, {bad} errors", err=True)


def _open_input(path: str):
    try:
        return open(path)
    except OSError as error:
        raise FastmodelError(f"{path}: cannot read: {error.strerror}") from None


@main.group()
def specs():
    """List, show and describe spec files."""


@specs.command("list")
@click.argument("kind", required=False, type=KIND_CHOICE)
@_friendly
def specs_list(kind):
    """List built-in specs (of one KIND, or all)."""
    from fastmodel.loader import builtin_names

    for k in [kind] if kind else ["model", "system", "task"]:
        click.echo(f"{k}s:")
        for name in builtin_names(k):
            click.echo(f"  {name}")


@specs.command("show")
@click.argument("name")
@click.option("--kind", type=KIND_CHOICE, help="Which kind NAME is (needed only if ambiguous).")
@_friendly
def specs_show(name, kind):
    """Print a built-in spec file."""
    from fastmodel.errors import SpecError, nearest
    from fastmodel.loader import builtin_names, builtin_text

    kinds = [kind] if kind else [k for k in ("model", "system", "task") if name in builtin_names(k)]
    if not kinds:
        every = [n for k in ("model", "system", "task") for n in builtin_names(k)]
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
@_friendly
def plans(system, num_nodes):
    """List every legal 1-D/2-D plan of a system."""
    from fastmodel.loader import load_system
    from fastmodel.plans import enumerate_plans

    sys_spec = load_system(system, num_nodes=num_nodes)
    found = enumerate_plans(sys_spec.num_nodes, sys_spec.devices_per_node)
    if not found:
        raise FastmodelError(f"{sys_spec.name} with {sys_spec.num_devices} device(s) has no legal plan (every degree must be > 1)")
    for plan in found:
        click.echo(f"{plan.shape:<12} {plan.label}")


if __name__ == "__main__":  # pragma: no cover
    main()
