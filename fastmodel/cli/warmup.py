"""``fastmodel warmup [ENGINE...]``: compile each engine's kernels ahead, into its cache folder (kernels/jit.py).

Numba compiles a kernel the first time it runs with a new signature and caches it on disk per engine
(``cache_dir(engine)``). Each engine's warmer runs the small workloads that reach every entry point the
commands use (single rows and tables, serial and parallel variants, grids, timelines), so a later command
loads the kernels instead of compiling them. An engine already compiled takes about a second.
"""

from __future__ import annotations

import time

import click

from fastmodel.cli.common import Choice, friendly

ENGINE_NAMES = ("madmax", "lm", "serve")


def warm_lm() -> None:
    """The real-world training kernels: one row and a table (serial, parallel), a grid, the rule table, a
    pipeline timeline."""
    import numpy as np

    from fastmodel.lm.engine import PARALLEL_MIN_ROWS, evaluate_table
    from fastmodel.lm.rules import plan_status
    from fastmodel.lm.sweep import lm_sweep, point_columns
    from fastmodel.lm.timeline import timeline

    lm_sweep("llama3.1-8b", "dgx-h100", global_batch=256, num_nodes=1, axes={"plan": ["dp", "tp8"]})
    columns = point_columns("llama3.1-8b", "dgx-h100", plan="tp2.pp2", num_nodes=1, global_batch=256)
    evaluate_table(columns[:, None])
    table = np.asfortranarray(np.repeat(columns[:, None], PARALLEL_MIN_ROWS, axis=1))
    evaluate_table(table)
    plan_status(table)
    timeline(columns)


def warm_serve() -> None:
    """The serving kernels: one configuration, a table (parallel) and a grid."""
    import numpy as np

    from fastmodel.serve.api import PARALLEL_MIN_ROWS, columns, evaluate, evaluate_table, sweep

    evaluate("llama3.1-8b", "H100", batch_size=1)
    one = columns("llama3.1-8b", "H100", batch_size=8)
    evaluate_table(np.repeat(one[:, None], PARALLEL_MIN_ROWS, axis=1))
    sweep("llama3.1-8b", device="H100", batch_size=[1, 8])


def warm_madmax() -> None:
    """The MAD-Max kernels: one configuration, a sweep (parallel) and a trace (the timeline)."""
    import fastmodel
    from fastmodel.api import make_config
    from fastmodel.madmax.engine import trace

    fastmodel.evaluate("llama-7b", "dc-a", "llm-pretrain-fsdp", semantics="madmax")
    fastmodel.sweep(model="llama-7b", system="dc-a", task="llm-pretrain-fsdp", semantics="madmax",
                    axes={"num_nodes": [1, 2, 4, 8], "flops_util": [0.2 + 0.01 * i for i in range(75)]})
    trace(make_config("llama-7b", "dc-a", "llm-pretrain-fsdp", "madmax"))


WARMERS = {"madmax": warm_madmax, "lm": warm_lm, "serve": warm_serve}


@click.command("warmup")
@click.argument("engines", nargs=-1, type=Choice(list(ENGINE_NAMES)))
@friendly
def warmup(engines):
    """Compile the kernels of ENGINES (madmax, lm, serve; default: all) ahead of their first use, into the
    per-user kernel cache; prints the seconds each took."""
    from fastmodel.kernels.jit import INTERPRETED, LABELS, cache_dir

    if INTERPRETED:
        from fastmodel.errors import FastmodelError

        raise FastmodelError("FASTMODEL_JIT=0: kernels run as plain Python, there is nothing to compile")
    from fastmodel.kernels import jit

    for engine in engines or ENGINE_NAMES:
        start = time.perf_counter()
        compiled_before = jit.compiled_engines().get(engine, 0)
        WARMERS[engine]()
        seconds = time.perf_counter() - start
        fresh = jit.compiled_engines().get(engine, 0) - compiled_before
        what = f"compiled {fresh} kernel signature(s)" if fresh else "already compiled"
        click.echo(f"{engine}: {LABELS[engine]} kernels ready in {seconds:.1f} s ({what}; cache {cache_dir(engine)})")
