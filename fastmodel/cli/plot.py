"""``fastmodel plot ...``: figures from sweep results (heatmap, breakdown, memory, pareto, scaling) and configs
(timeline).

Every command writes one figure (format from the ``-o`` suffix: .png, .pdf or
.svg) atomically; an existing file is replaced only with ``--force`` and only if
it is a figure of that format (fastmodel/io/outputs.py); bad input is one line
naming what is wrong, exit 2.
"""

from __future__ import annotations

import re

import click

from fastmodel.cli.common import (
    Choice,
    OneLineGroup,
    Whole,
    figure_size_options,
    flag_names,
    friendly,
    include_oom_option,
    memory_margin_option,
)
from fastmodel.cli.common import figure_size as _size
from fastmodel.cli.execution import execution_options


def _remember_force(ctx, param, value):
    ctx.meta["fastmodel.plot.force"] = bool(value)


def _output_rule() -> tuple[bool, tuple]:
    """(--force, the command's inputs) of the running plot command, for fastmodel.io.outputs."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    return bool(meta.get("fastmodel.plot.force")), tuple(meta.get("fastmodel.plot.inputs", ()))


def _figure_options(size_default: str):
    def decorate(func):
        for option in reversed([
            click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
                         help="Figure file: .png, .pdf or .svg (written atomically)."),
            click.option("--force", is_flag=True, expose_value=False, callback=_remember_force,
                         help="Replace an existing figure of the same format (never a file of another kind)."),
            *figure_size_options(size_default),
            click.option("--title", help="Title (default: the fixed coordinates or the configuration)."),
        ]):
            func = option(func)
        return func

    return decorate


class _ResultGiven(click.Argument):
    """A positional argument a timeline takes none of (``plot timeline RESULT.nc``): caught first (eager), before
    click's "Missing option '--model'", and refused in one line by :func:`_no_result`; not in the usage line."""

    def get_usage_pieces(self, ctx):
        return []


def _no_result(ctx, param, values):
    if values:
        raise click.UsageError(f"{ctx.command_path.removeprefix(ctx.find_root().info_name + ' ')} draws one "
                               f"configuration, from -m/-s/-t (and --plan), not a result file ({values[0]}); "
                               "plot heatmap, pareto or scaling draw a sweep's result", ctx)


def _configuration_options(func):
    """--model, --system, --task and --nodes: the one configuration a timeline or memory-timeline draws, from
    specs or a run record (the record names its own system and task: :func:`_record_or_specs`); a positional
    argument, a sweep's result, is refused in one line (:func:`_no_result`)."""
    func = click.argument("result", nargs=-1, cls=_ResultGiven, is_eager=True, expose_value=False,
                          callback=_no_result)(func)
    for option in reversed([
        click.option("--model", "-m", required=True,
                     help="Built-in name or path, or a run record (.json, RUNS.md schema)."),
        click.option("--system", "-s", help="Built-in name or path (not needed for a run record)."),
        click.option("--task", "-t", help="Built-in name or path (not needed for a run record)."),
        click.option("--nodes", "num_nodes", type=Whole(min=1),
                     help="Cluster size in nodes (default: the system's)."),
    ]):
        func = option(func)
    return func


_sel_option = click.option("--sel", "sel", multiple=True, metavar="DIM=VALUE",
                           help="Fix a dimension (repeatable; repeat a DIM to keep several values).")
_reduce_option = click.option("--reduce", "reduce", multiple=True, metavar="HOW:DIM",
                              help="Reduce a dimension: max|min|argmax|argmin, e.g. max:global_batch (repeatable).")


def _open(path, memory_margin: str | None = None, include_oom: bool = False):
    """The result at ``path`` as the figure shows what fits: ``--memory-margin`` and ``--include-oom`` as
    ``best`` takes them (fastmodel.analysis.margin.fit_view)."""
    from fastmodel.analysis.best import open_result
    from fastmodel.analysis.margin import fit_view, gib_margin
    from fastmodel.errors import SweepError

    margin = gib_margin(memory_margin)      # a bad margin is refused before the result is read
    try:
        return fit_view(open_result(path), margin, include_oom)
    except SweepError as error:             # the result file named, as every other one-line error names its file
        raise SweepError(f"{path}: {error}") from None


def _sel(texts):
    from fastmodel.plot.data import parse_sel, sel_from_texts

    return sel_from_texts(parse_sel(texts))


def _save(fig, output, dpi):
    from fastmodel.io.outputs import claim_output
    from fastmodel.plot import save

    force, inputs = _output_rule()
    with claim_output(str(output), _figure_kind(output), inputs=inputs, force=force, what="figure"):
        save(fig, output, dpi)
    click.echo(f"wrote {output}", err=True)


def _figure_kind(output) -> str:
    from fastmodel.plot.data import PlotError

    if not str(output).lower().endswith((".png", ".pdf", ".svg")):
        raise PlotError(f"{output}: the figure must end in .png, .pdf or .svg")
    return str(output).lower()[-3:]


def _check_suffix(output, *inputs):
    """The figure's format from its suffix, checked before any work: an existing file is replaced only with
    --force, and only if it is a figure of that format (fastmodel/io/outputs.py)."""
    from fastmodel.io.outputs import check_output

    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta["fastmodel.plot.inputs"] = inputs
    check_output(str(output), _figure_kind(output), inputs=inputs, force=_output_rule()[0], what="figure")


@click.group("plot", cls=OneLineGroup)
def plot():
    """Figures for papers: heatmap, timeline, memory-timeline, breakdown, memory, pareto, scaling."""


#: the throughput variable of each engine's results, in the order looked for: MAD-Max, real-world, serving
DEFAULT_VARS = ("throughput", "tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu")
_VAR_HELP = ", ".join(DEFAULT_VARS)


def _default_var(ds, var: str | None) -> str:
    """``var``, or the first of DEFAULT_VARS the result holds (each engine names its rate differently: MAD-Max's
    ``throughput`` is not in real-world or serving results)."""
    if var is not None:
        return var
    return next((name for name in DEFAULT_VARS if name in ds.data_vars), DEFAULT_VARS[0])


@plot.command("heatmap")
@click.argument("result", type=click.Path())
@click.option("--x", "x", required=True, help="Dimension along the columns, e.g. num_nodes.")
@click.option("--y", "y", required=True, help="Dimension along the rows, e.g. plan.")
@click.option("--var", help="Variable to colour by (default: the result's throughput: " + _VAR_HELP + ").")
@_sel_option
@_reduce_option
@click.option("--relative-to", "relative_to", metavar="PLAN", help="Show the gain over this plan (>1 better; diverging).")
@click.option("--annotate", is_flag=True, help="Write each cell's value.")
@click.option("--best", default="auto", show_default=True, type=Choice(["auto", "max", "min", "none"]),
              help="Mark the best cell (auto: max for rates, min for times, memory, cost).")
@click.option("--log/--linear", "log", default=None, help="Colour scale (default: log when values span 2 decades).")
@memory_margin_option("; real-world training results")
@include_oom_option("draw")
@_figure_options("single")
@friendly
def heatmap_command(result, x, y, var, sel, reduce, relative_to, annotate, best, log, memory_margin, include_oom,
                    output, dpi, size, title):
    """Heatmap of VAR over two dimensions of a sweep RESULT (.zarr or .nc)."""
    from fastmodel.plot import heatmap
    from fastmodel.plot.data import parse_reduce

    _check_suffix(output, result)
    ds = _open(result, memory_margin, include_oom)
    fig, _ = heatmap(ds, x, y, var=_default_var(ds, var), sel=_sel(sel), reduce=parse_reduce(reduce), relative_to=relative_to,
                     annotate=annotate, best=None if best == "none" else best, log=log, size=_size(size), title=title)
    _save(fig, output, dpi)


_TIME = re.compile(r"^\s*([0-9.eE+-]+)\s*(s|ms|us|µs)?\s*$")


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``'0.5:1.2'`` (seconds) or ``'100ms:300ms'`` -> (start, end) in seconds."""
    from fastmodel.plot.data import PlotError

    if text is None:
        return None
    parts = text.split(":")
    values = []
    for part in parts:
        match = _TIME.match(part)
        if len(parts) != 2 or not match:
            raise PlotError(f"cannot parse --window {text!r}; write START:END in seconds, e.g. 0:0.5 or 100ms:300ms")
        try:
            number = float(match.group(1))
        except ValueError:
            raise PlotError(f"cannot parse --window {text!r}: {part!r} is not a number") from None
        values.append(number * {"s": 1.0, None: 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[match.group(2)])
    return values[0], values[1]


@plot.command("timeline")
@_configuration_options
@click.option("--plan", "-p", help="MAD-Max specs: 'DENSE/EMB'; real-world models: a mesh like 'tp8.pp4' "
              "(overrides the task's).")
@click.option("--semantics", default="default", show_default=True, help="Modelling preset (default, madmax-fixed or madmax).")
@execution_options
@click.option("--window", metavar="START:END", help="Only this time window, e.g. 0:0.5 or 100ms:300ms.")
@click.option("--aggregate", is_flag=True, help="Merge back-to-back ops of one category into one bar.")
@_figure_options("double")
@friendly
def timeline_command(model, system, task, num_nodes, plan, semantics, execution_file, execution_sets, window, aggregate,
                     output, dpi, size, title):
    """Gantt chart of the compute and communication streams of one configuration.

    Real-world models (and run records) draw the busiest pipeline stage's step, op by op, with one row per
    process group (docs/model.md section 11.12); MAD-Max specs draw the MAD-Max schedule."""
    _check_suffix(output)
    from fastmodel.plot import timeline

    record = _record_or_specs(model, system, task)
    if record is not None:
        from fastmodel import engines

        if engines.for_record(record) is engines.SERVE:
            raise click.UsageError(f"{model} is a serving record: timelines are drawn for training steps")
    execution = _execution(model, record, semantics, system, execution_file, execution_sets)
    fig, _ = timeline(model=None if record is not None else model, system=system, task=task, record=record,
                      source=model if record is not None else None, semantics=semantics, plan=plan, num_nodes=num_nodes, window=parse_window(window),
                      aggregate=aggregate, size=_size(size), title=title, execution=execution)
    _save(fig, output, dpi)


@plot.command("memory-timeline")
@_configuration_options
@click.option("--plan", "-p", help="A mesh like 'tp8.pp4' (overrides the task's).")
@memory_margin_option()
@execution_options
@_figure_options("double")
@friendly
def memory_timeline_command(model, system, task, num_nodes, plan, memory_margin, execution_file, execution_sets, output,
                            dpi, size, title):
    """Memory over one training step per pipeline rank, by kind, with the HBM line (real-world models).

    Each panel is one pipeline rank's operations in schedule order (F j / B j: forward / backward of
    micro-batch j); its highest point is the rank's peak (docs/model_memory.md)."""
    _check_suffix(output)
    from fastmodel.plot.memory_timeline import memory_timeline

    record = _record_or_specs(model, system, task)
    from fastmodel.analysis.margin import gib_margin

    margin = gib_margin(memory_margin)
    execution = _execution(model, record, "default", system, execution_file, execution_sets)
    fig, _ = memory_timeline(model=None if record is not None else model, system=system, task=task, record=record,
                             source=model if record is not None else None, plan=plan, num_nodes=num_nodes,
                             memory_margin=margin, size=_size(size), title=title, execution=execution)
    _save(fig, output, dpi)


def _record_or_specs(model, system, task) -> dict | None:
    """The run record --model names (``fastmodel.cli.run._record_in``), else None: specs, which need --system and
    --task (a UsageError without them)."""
    from fastmodel.cli.run import _record_in

    record = _record_in(model)
    if record is None and (system is None or task is None):
        raise click.UsageError("--system and --task are required (unless --model is a run record)")
    return record


def _execution(model, record, semantics, system, path, sets) -> dict | None:
    """The execution of --execution / --set (fastmodel/cli/execution.py): refused beside a record and for specs
    of another engine than the real-world training model, each in one line."""
    from fastmodel.cli import execution as ex

    if path is None and not sets:
        return None
    if record is not None:
        ex.refuse_with_record(model, path, sets)
    from fastmodel import engines

    return ex.read_execution(path, sets, engines.for_specs(model, semantics, system).name)


@plot.command("breakdown")
@click.argument("result", type=click.Path())
@_sel_option
@click.option("--quantity", default="time", show_default=True, type=Choice(["time", "memory"]),
              help="Stack time (serialized vs overlapped) or memory per device by kind with the usable-HBM line "
              "(real-world results).")
@click.option("--memory", "memory", is_flag=True, help="Same as --quantity memory.")
@memory_margin_option("; real-world training results: the usable-HBM line of --quantity memory")
@_figure_options("single")
@friendly
def breakdown_command(result, sel, quantity, memory, memory_margin, output, dpi, size, title):
    """Where the time (or memory) of each configuration goes (one dimension may stay, e.g. several plans)."""
    from fastmodel.plot import breakdown

    _check_suffix(output, result)
    fig, _ = breakdown(_open(result, memory_margin), _sel(sel), quantity="memory" if memory else quantity, size=_size(size), title=title)
    _save(fig, output, dpi)


@plot.command("memory")
@click.argument("result", type=click.Path())
@_sel_option
@click.option("--dim", help="Dimension along the bars (default: the one left with several values, e.g. plan).")
@memory_margin_option("; the usable-HBM line is HBM - margin")
@_figure_options("single")
@friendly
def memory_command(result, sel, dim, memory_margin, output, dpi, size, title):
    """Memory per device by kind across plans (stacked bars) with the usable-HBM line; real-world results."""
    from fastmodel.plot.memory import memory_bars

    _check_suffix(output, result)
    fig, _ = memory_bars(_open(result, memory_margin), dim=dim, sel=_sel(sel), size=_size(size), title=title)
    _save(fig, output, dpi)


@plot.command("pareto")
@click.argument("result", type=click.Path())
@click.option("--x", "x", help="Variable or coordinate on x, e.g. iteration_time or cost (serving sweeps: "
              "default output_tokens_per_s_per_user).")
@click.option("--y", "y", help="Variable or coordinate on y (serving sweeps: default output_tokens_per_s_per_gpu).")
@click.option("--x-dir", type=Choice(["min", "max"]), help="Better direction on x (default by name).")
@click.option("--y-dir", type=Choice(["min", "max"]), help="Better direction on y (default by name).")
@_sel_option
@click.option("--where", "where", multiple=True, help="Keep points passing a filter, as in 'best' (repeatable).")
@click.option("--label", "label", multiple=True, help="Dimension(s) naming frontier points (default: plan).")
@click.option("--curve", help="One frontier per value of this dimension (e.g. device, tp, precision): the "
              "serving throughput-latency figure; the default for serving sweeps is device; on an SLO search, mode: agg "
              "against disagg.")
@memory_margin_option("; real-world training results")
@include_oom_option("draw")
@_figure_options("single")
@friendly
def pareto_command(result, x, y, x_dir, y_dir, sel, where, label, curve, memory_margin, include_oom, output, dpi,
                   size, title):
    """Pareto frontier of two variables; prints the frontier and draws every point.

    On a serving sweep (or with --curve): tokens/s per GPU against tokens/s per user, one frontier per
    value of --curve, points that do not fit or are illegal left out."""
    from fastmodel.analysis.best import where_mask
    from fastmodel.plot import pareto

    _check_suffix(output, result)
    ds = _open(result, memory_margin, include_oom)
    with flag_names({"where": "--where"}):      # where_mask names the API's where=; here the flag
        mask = where_mask(ds, list(where)) if where else None
    from fastmodel.analysis.where_units import unit_slips

    for slip in unit_slips(ds, list(where)):       # tpot<13.8 is 13.8 s and keeps every point: say so
        click.echo(f"note: {slip}", err=True)
    if curve is not None or ds.attrs.get("fastmodel_task") == "serve":
        if label:    # refused: the serving frontier names each point by the dimensions varying along its curve
            from fastmodel.plot.data import PlotError

            raise PlotError("--label: the serving frontier labels each point with the dimensions that vary along "
                            "its curve (e.g. batch_size=64); leave --label out (--curve picks the curves)")
        _serving_pareto(ds, curve, x, y, sel, mask, output, dpi, size, title, x_dir, y_dir)
        return
    if x is None or y is None:
        from fastmodel.plot.data import PlotError

        raise PlotError("give --x and --y (only serving sweeps have default axes)")
    fig, ax = pareto(ds, x, y, x_dir=x_dir, y_dir=y_dir, sel=_sel(sel), where=mask, label=list(label) or None,
                     size=_size(size), title=title)
    table = ax.frontier
    front = table[table.on_frontier].drop(columns="on_frontier").sort_values(x)
    click.echo(front.to_string(index=False))
    if table.attrs.get("left_out"):
        click.echo(table.attrs["left_out"], err=True)
    _save(fig, output, dpi)
    click.echo(f"{len(front)} of {len(table)} points on the frontier", err=True)


def _serving_pareto(ds, curve, x, y, sel, mask, output, dpi, size, title, x_dir=None, y_dir=None):
    from fastmodel.plot.serving import X, Y, serving_pareto

    agg = "status" in ds      # a --mode disagg search has only the disagg_* variables (one mode=disagg frontier)
    if curve is None:
        curve = "device" if "device" in ds.dims else next(iter(ds["status"].dims if agg else ()), "device")
    where = mask if mask is not None and agg else None     # filtered-out points leave the frontier, said so
    fig, ax = serving_pareto(ds, curve, x or X, y or Y, sel=_sel(sel), size=_size(size), title=title, where=where,
                             x_dir=x_dir, y_dir=y_dir)
    click.echo(f"  {'x':>12s} {'y':>12s}  configuration   (x: {x or X}, y: {y or Y})")
    for value, (xv, yv, labels) in ax.frontiers.items():
        click.echo(f"{value}:" if str(value) == "mode=disagg" else f"{curve} = {value}:")
        for a, b, text in zip(xv, yv, labels):
            click.echo(f"  {a:12.4g} {b:12.4g}  {text}")
    if ax.left_out:
        click.echo(ax.left_out, err=True)
    _save(fig, output, dpi)


@plot.command("scaling")
@click.argument("result", type=click.Path())
@click.option("--x", "x", required=True, help="Dimension on x, e.g. num_nodes or flops_util.")
@click.option("--var", help="Variable on y (default: the result's throughput: " + _VAR_HELP + ").")
@click.option("--hue", help="One line per value of this dimension, e.g. plan.")
@_sel_option
@_reduce_option
@click.option("--top", type=Whole(min=1), help="Keep the TOP lines with the best values (default: all "
              "up to 12, else the 12 best, the legend title saying so: 'plan: 12 best of 114').")
@memory_margin_option("; real-world training results")
@include_oom_option("draw")
@_figure_options("single")
@friendly
def scaling_command(result, x, var, hue, sel, reduce, top, memory_margin, include_oom, output, dpi, size, title):
    """A variable against one dimension, one line per value of another."""
    from fastmodel.plot import scaling
    from fastmodel.plot.data import parse_reduce

    _check_suffix(output, result)
    ds = _open(result, memory_margin, include_oom)
    fig, _ = scaling(ds, x, var=_default_var(ds, var), hue=hue, sel=_sel(sel), reduce=parse_reduce(reduce), top=top,
                     size=_size(size), title=title)
    _save(fig, output, dpi)
