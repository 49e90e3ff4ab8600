"""CPU seconds of each stage of the dense real-world sweep of bench_lm_sweep.py, this tree beside --previous.

``--engine serve`` times the serving sweep of bench/bench_serve.py's grid (llama3.1-70b, 1,044,480 points: 5
devices x 3 precisions x 4 TP x 68 batch sizes x 16 input x 16 output lengths) the same way, as a serving sweep
file runs it (``ServeSweepPlan``, the fused kernel ``kernels/serve/fused.py`` ``serve_grid``), in the load mode
``--mode`` (batch; concurrency: the batch-size axis as a concurrency axis; max_throughput: the task's load mode).

``lm_sweep`` end to end is: load the specs (model, system, execution, task), build the sweep plan (axes, the
"all" meshes, the base column vector lowered once), allocate the result matrix and status, run the grid kernel
(``kernels/lm/grid.py`` ``evaluate_grid``, numba threads over ``prange`` chunks), and assemble the xarray
Dataset (views of the matrix, the bool ``fits_memory``, attrs with the JSON sweep definition, aliases). Each
stage is timed here in CPU seconds (``getrusage``: user + system of every thread of the process; the shared
2-core VM makes wall-clock swing with the other sessions' load) and in wall seconds.

The ``thread k`` rows are the CPU seconds each numba thread ran during the kernel stage (``schedstat`` of every
thread of the process, largest first). numba splits a ``prange`` statically, one contiguous 1/T of it per
thread, so on an otherwise idle machine the kernel's wall-clock is the busiest thread's CPU time, not the mean:
``balance`` (busiest / mean) is the wall-clock a T-core machine loses to the split.

The first sweep of each process (it loads or compiles the kernels) is a warm-up, not timed. Each tree runs in
its own process, the trees alternating in ABBA order (each runs first in every other round) so the load hits
both alike; every figure printed is the median over rounds x repeats.

    python bench/lm_sweep_stages.py [--rounds 3] [--repeats 2] [--previous 97eefc3] [--batches 128]
                                    [--model qwen3-30b-a3b --batches 8]   (the MoE sweep, a slice of it)
    python bench/lm_sweep_stages.py --engine serve [--mode batch|concurrency|max_throughput] [--rounds 3] ...

``--schedules`` compares instead, in one process on one compiled kernel, the two ways of dealing the kernel's
chunks to the threads: round-robin (lanes = numba's thread count, as the plans pass) and numba's contiguous static
split (lanes = 2**40: one chunk a lane, the schedule before lanes), --rounds sweeps of each, alternated ABBA,
each into a new result matrix as a sweep's (so its first-touch page faults are in the kernel's CPU).
Each thread's CPU seconds are summed by thread id over the sweeps (not the busiest of each sweep, which load
noise alone would lift above the mean), so ``balance`` is the split's, not the noise's.

    python bench/lm_sweep_stages.py --engine serve --mode batch --schedules --rounds 12
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import add_previous  # noqa: E402  (bench/ is not a package)
from bench_lm_sweep import MICRO, NODES  # noqa: E402  (the dense sweep's grid, timed here by stage)

MODEL, SYSTEM, TASK = "llama3.1-70b", "dgx-h100", "llm-pretrain"   # MODEL: the --model default
#: --engine serve: the device axis sets the device, the task the input and output lengths' defaults
SERVE_TASK = "serve-chat"
MODES = ("batch", "concurrency", "max_throughput")
#: stages in the order lm_sweep runs them
STAGES = ("specs", "plan", "buffers", "kernel", "assemble", "total")


class Clock:
    """CPU (user, system) and wall seconds of consecutive stages of one process."""

    def __init__(self):
        self.figures: dict[str, tuple[float, float, float]] = {}

    def __call__(self, name: str, call):
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = call()
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        self.figures[name] = (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, wall)
        return result


def _axes(batches: int) -> dict:
    return {"num_nodes": NODES, "global_batch": [64 * i for i in range(1, batches + 1)], "micro_batch": MICRO,
            "plan": "all"}


def thread_seconds() -> dict[int, float]:
    """CPU seconds each thread of this process has run (``/proc/self/task/*/schedstat``, nanoseconds: finer than
    getrusage's ticks); {} where there is no /proc."""
    found = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return found


def _lm_plan(clock: Clock, model_name: str, batches: int, mode: str):
    """The dense sweep's plan, as lm.sweep.sweep_plan builds it: its specs, then the plan (two stages)."""
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep import _task_global_batch
    from fastmodel.lm.sweep_plan import LMSweepPlan

    model, cluster, execution, batch = clock("specs", lambda: (load_lm_model(model_name), load_cluster(SYSTEM, None),
                                                                 load_execution(None), _task_global_batch(TASK)))
    return clock("plan", lambda: LMSweepPlan(model, cluster, execution, batch, _axes(batches)))


def _serve_plan(clock: Clock, model_name: str, batches: int, mode: str):
    """bench/bench_serve.py's grid in load mode ``mode`` as serve.sweep_file.serve_plan builds it: the serving
    model's columns and the task, then the plan."""
    from bench_serve import AXES

    from fastmodel.serve.models import serving_model
    from fastmodel.serve.spec import load_serve_task
    from fastmodel.serve.sweep_plan import ServeSweepPlan

    axes = {("concurrency" if name == "batch_size" and mode == "concurrency" else name): list(values)
            for name, values in AXES.items()}
    if mode == "max_throughput":
        del axes["batch_size"]

    def specs():
        task = load_serve_task(SERVE_TASK)
        if mode == "max_throughput":
            task = load_serve_task({**task.model_dump(exclude_none=True), "batch_size": None, "max_throughput": True})
        return serving_model(model_name, Path.cwd()), task

    (name, columns, notes), task = clock("specs", specs)
    return clock("plan", lambda: ServeSweepPlan(name, columns, axes["device"][0], task, axes, notes=notes))


#: the plan of each --engine, in the stages "specs" and "plan"
PLANS = {"lm": _lm_plan, "serve": _serve_plan}


def one_sweep(engine: str, model_name: str, batches: int, mode: str) -> tuple[dict, list[float]]:
    """Every stage of one sweep of ``engine`` timed (as lm.sweep.sweep_plan or serve.sweep_file.serve_plan build
    the plan and sweeps.run.run_in_memory runs it; require_ok=False as lm_sweep passes); (figures, each thread's
    CPU seconds in the kernel stage, largest first)."""
    import numpy as np

    from fastmodel.sweeps.assemble import assemble
    from fastmodel.sweeps.buffers import result_matrix
    from fastmodel.sweeps.size import check_memory

    clock = Clock()
    t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    plan = PLANS[engine](clock, model_name, batches, mode)

    def buffers():
        check_memory(plan)
        return result_matrix(plan.num_rows, plan.num_configs), np.zeros(plan.num_configs, dtype=np.int8)

    out, status = clock("buffers", buffers)
    threads_before = thread_seconds()
    clock("kernel", lambda: [plan.evaluate_unit(u, out, status, plan.unit_offset(u))
                             for u in plan.units(plan.MEMORY_UNIT_CONFIGS)])
    threads = sorted((t - threads_before.get(tid, 0.0) for tid, t in thread_seconds().items()), reverse=True)
    clock("assemble", lambda: assemble(plan, out, status))
    after = resource.getrusage(resource.RUSAGE_SELF)
    clock.figures["total"] = (after.ru_utime - t0[0].ru_utime, after.ru_stime - t0[0].ru_stime,
                              time.perf_counter() - t0[1])
    return {**clock.figures, "points": plan.num_configs}, threads


def _warm_up(engine: str, model: str) -> None:
    """One small sweep of ``engine``: it loads or compiles the kernels (not timed)."""
    if engine == "serve":
        from fastmodel.serve.api import sweep

        sweep(model, device=["H100"], tp=[1, 2], batch_size=[1, 2])
    else:
        from fastmodel.lm.sweep import lm_sweep

        lm_sweep(model, SYSTEM, TASK, axes={"plan": ["tp8"], "num_nodes": [4]})


def child(engine: str, model: str, repeats: int, batches: int, mode: str) -> dict:
    import numba

    _warm_up(engine, model)
    runs, parts = [], []
    count = numba.get_num_threads()
    for _ in range(repeats):
        figures, threads = one_sweep(engine, model, batches, mode)
        runs.append(figures)
        parts.append(threads[:count])
    return {"points": runs[0].pop("points"), "threads": count, "runs": runs, "shares": parts}


#: the grid kernel each engine's plan calls (module, name), its last argument the lane count
KERNELS = {"lm": ("fastmodel.kernels.lm.grid", "evaluate_grid"), "serve": ("fastmodel.kernels.serve.fused", "serve_grid")}


def schedules(engine: str, model: str, batches: int, mode: str, rounds: int) -> str:
    """The kernel stage of one plan under each schedule (round-robin, contiguous), alternated; a table."""
    import importlib
    import os

    import numba
    import numpy as np

    from fastmodel.sweeps.buffers import result_matrix

    _warm_up(engine, model)
    plan = PLANS[engine](Clock(), model, batches, mode)
    module, name = importlib.import_module(KERNELS[engine][0]), KERNELS[engine][1]
    kernel, count = getattr(module, name), numba.get_num_threads()
    runs: dict[str, list] = {"round-robin": [], "contiguous": []}
    try:
        for round_ in range(rounds):
            for which in list(runs)[::-1] if round_ % 2 else list(runs):
                lanes = count if which == "round-robin" else 1 << 40
                setattr(module, name, lambda *args, lanes=lanes: kernel(*args[:-1], lanes))   # the plan imports it
                out, status = result_matrix(plan.num_rows, plan.num_configs), np.zeros(plan.num_configs, np.int8)
                before, usage, t0 = thread_seconds(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                for unit in plan.units(plan.MEMORY_UNIT_CONFIGS):
                    plan.evaluate_unit(unit, out, status, plan.unit_offset(unit))
                wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
                runs[which].append(({tid: t - before.get(tid, 0.0) for tid, t in thread_seconds().items()},
                                    after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime, wall))
    finally:
        setattr(module, name, kernel)
    lines = [f"{engine} {model} ({mode if engine == 'serve' else f'{batches} batches'}): {plan.num_configs:,} points, "
             f"{count} numba threads, {rounds} sweeps a schedule, load average {os.getloadavg()[0]:.1f}; seconds"]
    for which, found in runs.items():
        per_thread: dict[int, float] = {}
        for threads, _, _ in found:
            for tid, t in threads.items():
                per_thread[tid] = per_thread.get(tid, 0.0) + t / len(found)
        busiest = sorted(per_thread.values(), reverse=True)[:count]
        lines.append(f"  {which:12s} threads {' / '.join(f'{t:.3f}' for t in busiest)}   balance "
                     f"{max(busiest) / statistics.mean(busiest):.3f}   cpu {_median([r[1] for r in found]):.3f}   "
                     f"wall {_median([r[2] for r in found]):.3f}")
    return "\n".join(lines)


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


def summary(results: list[dict]) -> dict:
    """Median over every run of one tree: per stage (user, sys, wall), and each thread's kernel CPU seconds."""
    runs = [r for result in results for r in result["runs"]]
    parts = [p for result in results for p in result["shares"] if p]
    stages = {s: tuple(_median([r[s][k] for r in runs]) for k in range(3)) for s in STAGES}
    share = [_median([p[k] for p in parts if k < len(p)]) for k in range(max(map(len, parts)))] if parts else []
    return {"points": results[0]["points"], "threads": results[0]["threads"], "stages": stages, "threads_s": share,
            "runs": len(runs)}


def table(summaries: list[tuple[str, dict]]) -> str:
    """Stages as rows, each tree's CPU (user + sys) and wall seconds as columns, then this / previous CPU."""
    nan = [float("nan")] * len(summaries)
    lines = [f"{'stage':14s}" + "".join(f" {name[:20]:>20s} cpu   wall" for name, _ in summaries)
             + ("   cpu ratio" if len(summaries) > 1 else "")]
    rows = [(s, [sm["stages"][s][0] + sm["stages"][s][1] for _, sm in summaries],
             [sm["stages"][s][2] for _, sm in summaries]) for s in STAGES]
    rows.append(("  kernel sys", [sm["stages"]["kernel"][1] for _, sm in summaries], nan))
    for k in range(max(len(sm["threads_s"]) for _, sm in summaries)):
        rows.append((f"  thread {k + 1}", [sm["threads_s"][k] if k < len(sm["threads_s"]) else float("nan")
                                           for _, sm in summaries], nan))
    rows.append(("  balance", [max(sm["threads_s"], default=float("nan")) / statistics.mean(sm["threads_s"] or [1])
                               for _, sm in summaries], nan))
    for name, cpu, wall in rows:
        line = f"{name:14s}" + "".join(f" {c:24.3f} {w:6.3f}" for c, w in zip(cpu, wall))
        lines.append(line + (f" {cpu[0] / cpu[1]:11.3f}" if len(cpu) > 1 and cpu[1] else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree, alternating the trees")
    parser.add_argument("--repeats", type=int, default=2, help="timed sweeps per process, after its warm-up")
    parser.add_argument("--batches", type=int, default=128, help="global batches 64, 128, ..., 64 x BATCHES")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--engine", choices=tuple(PLANS), default="lm")
    parser.add_argument("--mode", choices=MODES, default="batch", help="--engine serve: the load mode")
    parser.add_argument("--schedules", action="store_true", help="round-robin against contiguous, this tree")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_previous(parser)
    args = parser.parse_args()
    if args.schedules:
        print(schedules(args.engine, args.model, args.batches, args.mode, args.rounds))
        return
    if args.child:
        print(json.dumps(child(args.engine, args.model, args.repeats, args.batches, args.mode)))
        return
    from bench_batch import save_results
    from bench_batch import trees as bench_trees

    trees = bench_trees(args.previous)
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for round_ in range(args.rounds):
        for name, env in trees[::-1] if round_ % 2 else trees:     # ABBA: neither tree always runs first
            out = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(args.repeats),
                                  "--batches", str(args.batches), "--model", args.model, "--engine", args.engine,
                                  "--mode", args.mode],
                                 capture_output=True, text=True, check=True, env=env)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summaries = [(name, summary(found)) for name, found in results.items()]
    first = summaries[0][1]
    what = f"{args.model}/{SYSTEM}" if args.engine == "lm" else f"serving {args.model} ({args.mode})"
    print(f"{what} sweep: {first['points']:,} points, "
          f"{first['threads']} numba threads, median of {first['runs']} sweeps per tree; seconds")
    print(table(summaries))
    save_results("lm_sweep_stages" if args.engine == "lm" else f"serve_sweep_stages_{args.mode}",
                 {name: sm for name, sm in summaries})


if __name__ == "__main__":
    main()
