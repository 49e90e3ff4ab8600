"""Benchmark: cold compile time of each engine's kernels, beside its budget.

Each engine is compiled by ``fastmodel warmup ENGINE`` in a fresh interpreter whose ``NUMBA_CACHE_DIR`` is an
empty folder, so nothing is loaded from a cache: the seconds are what a new user waits on the first command
of that engine (the shared scheduling kernels an engine uses are compiled with it). A second run in the same
folder shows the warm load. Budgets (issue 25 item 7): serving <= 30 s on the project's 2-core VM. Writes
bench/results/bench_compile.json.

    python bench/bench_compile.py [--engines madmax,lm,serve] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: seconds each engine may take to compile on an empty cache (2-core VM)
BUDGET_S = {"serve": 30.0, "lm": 90.0, "madmax": 90.0}


def timed_warmup(engine: str, cache: str) -> float:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "FASTMODEL_COMPILE_NOTE": "0"}
    env.pop("FASTMODEL_JIT", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fastmodel.cli", "warmup", engine], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="madmax,lm,serve")
    parser.add_argument("--repeats", type=int, default=1, help="cold compiles per engine (best is kept)")
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}   load average (1 min): {load:.1f}")
    results = {}
    for engine in args.engines.split(","):
        cold, warm = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix=f"fastmodel-compile-{engine}-") as cache:
                cold.append(timed_warmup(engine, cache))
                warm.append(timed_warmup(engine, cache))
        budget = BUDGET_S.get(engine)
        verdict = "" if budget is None else (f"budget {budget:.0f} s: {'within' if min(cold) <= budget else 'OVER'}")
        print(f"{engine:7s} cold compile {min(cold):6.1f} s   warm load {min(warm):5.1f} s   {verdict}")
        results[engine] = {"cold_s": cold, "warm_s": warm, "budget_s": budget}
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_batch import save_results

    save_results("bench_compile", {"load_average": load, "engines": results})


if __name__ == "__main__":
    main()
