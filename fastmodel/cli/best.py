"""``fastmodel best``: the top configurations of a result by one variable."""

from __future__ import annotations

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import flag_names, friendly, include_oom_option, memory_margin_option

#: each argument of ``fastmodel.analysis.best.best`` as ``fastmodel best`` spells it (``flag_names``)
BEST_FLAGS = {"by": "--by", "top": "--top", "where": "--where", "include_oom": "--include-oom",
              "memory_margin": "--memory-margin"}


@main.command("best")
@click.argument("result", type=click.Path())
@click.option("--by", required=True, help="Variable to rank by, e.g. throughput (an SLO search's disagg_* "
              "variables rank its disaggregated pools).")
@click.option("--top", default=10, show_default=True, type=int, help="How many rows.")
@click.option("--where", "where", multiple=True,
              help="Filter (repeatable): fits_memory, status=ok, num_nodes=256, throughput>100, plan=tp,ddp/mp.")
@click.option("--ascending/--descending", default=None,
              help="Smallest / largest first (default: best first: smallest for times, costs and memory, "
                   "largest for throughputs, from the variable's registry direction).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write the table as CSV (atomically; a name "
              "ending in another format's suffix, .json or .parquet, is refused; any other, e.g. .txt, is CSV).")
@click.option("--force", is_flag=True, help="Replace an existing CSV file.")
@include_oom_option("rank")
@memory_margin_option("; real-world training results")
@friendly
def best_command(result, by, top, where, ascending, csv_path, force, include_oom, memory_margin):
    """Top-k configurations of a sweep result by any variable, best first (real-world datasets: only plans that fit;
    an SLO search's, serve --search -o: only points within its GPU budget)."""
    from fastmodel.analysis.best import best, open_result
    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import check_output, claim_output, wrote

    if csv_path:
        check_output(csv_path, "csv", inputs=(result,), force=force, what="table")
    ds = open_result(result)
    from fastmodel.analysis.margin import describe, gib_margin

    margin = gib_margin(memory_margin)
    with flag_names(BEST_FLAGS):       # the API's errors name its arguments; here the flags
        table = best(ds, by, top, list(where), ascending, include_oom=include_oom, memory_margin=margin)
    from fastmodel.analysis.where_units import unit_slips

    for slip in unit_slips(ds, list(where)):       # tpot<13.8 is 13.8 s and keeps every point: say so
        click.echo(f"note: {slip}", err=True)
    fits = table.attrs["fits_filter"]
    if fits["dropped"] and fits.get("rule") == "disagg_fits_memory":     # an SLO search's pools: their own rule
        click.echo(f"only pools that fit: dropped {fits['dropped']:,} of {fits['of']:,} pools "
                   "(disagg_fits_memory false: a prefill or decode worker over its usable HBM); --include-oom keeps "
                   "them", err=True)
    elif fits["dropped"]:     # said only when a plan was left out, as the GPU budget's line below
        click.echo(f"only plans that fit: dropped {fits['dropped']:,} of {fits['of']:,} configurations "
                   f"(memory_per_device over {describe(fits['margin'])}); --include-oom keeps them", err=True)
    budget = table.attrs["budget_filter"]
    if budget["dropped"]:
        click.echo(f"only configurations within the search's GPU budget ({budget['gpus']} GPUs): dropped "
                   f"{budget['dropped']:,} of {budget['of']:,} (tp x attention_dp x pp over it; --where "
                   "'!within_budget' ranks them)", err=True)
    click.echo(table.to_string(index=False))
    if csv_path:
        with claim_output(csv_path, "csv", inputs=(result,), force=force, what="table"), \
                atomic_write(csv_path) as handle:
            table.to_csv(handle, index=False)
        click.echo(wrote(csv_path, "csv"), err=True)   # x.txt is written as CSV, and says so
