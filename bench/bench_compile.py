"""Benchmark: cold compile time of each engine's kernels, beside its budget.

Each engine is compiled by ``fastmodel warmup ENGINE`` in a fresh interpreter whose ``NUMBA_CACHE_DIR`` is an
empty folder, so nothing is loaded from a cache: the seconds are what a new user waits on the first command
of that engine (the shared scheduling kernels an engine uses are compiled with it). A second run in the same
folder shows the warm load. Budgets (issue 25 item 7): serving <= 30 s on the project's 2-core VM. Writes
bench/results/bench_compile.json.

Beside each wall figure the child's CPU seconds (user + sys, ``resource.getrusage(RUSAGE_CHILDREN)`` before
and after) are printed: CPU seconds are the load-robust figure (the VM is shared, so other work on its two
cores stretches wall time but hardly the CPU time the compile itself spends); the budget is checked on wall.

    python bench/bench_compile.py [--engines madmax,lm,serve] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: seconds each engine may take to compile on an empty cache (2-core VM)
BUDGET_S = {"serve": 30.0, "lm": 90.0, "madmax": 90.0}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_warmup(engine: str, cache: str) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of ``fastmodel warmup engine`` in a child process."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "FASTMODEL_COMPILE_NOTE": "0"}
    env.pop("FASTMODEL_JIT", None)
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fastmodel.cli", "warmup", engine], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, _children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="madmax,lm,serve")
    parser.add_argument("--repeats", type=int, default=1, help="cold compiles per engine (best is kept)")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}   load average (1 min): {load:.1f}")
    results = {}
    for engine in args.engines.split(","):
        cold, warm, cold_cpu, warm_cpu = [], [], [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix=f"fastmodel-compile-{engine}-") as cache:
                for walls, cpus in ((cold, cold_cpu), (warm, warm_cpu)):
                    wall, cpu = timed_warmup(engine, cache)
                    walls.append(wall)
                    cpus.append(cpu)
        budget = BUDGET_S.get(engine)
        verdict = "" if budget is None else (f"budget {budget:.0f} s: {'within' if min(cold) <= budget else 'OVER'}")
        print(f"{engine:7s} cold compile {min(cold):6.1f} s wall {min(cold_cpu):6.1f} s CPU   "
              f"warm load {min(warm):5.1f} s wall {min(warm_cpu):5.1f} s CPU   {verdict}")
        results[engine] = {"cold_s": cold, "warm_s": warm, "cold_cpu_s": cold_cpu, "warm_cpu_s": warm_cpu,
                           "budget_s": budget}
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_batch import save_results

    save_results("bench_compile", {"load_average": load, "engines": results})


if __name__ == "__main__":
    main()
