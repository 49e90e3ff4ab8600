"""Benchmark: real-world (`default`) sweep throughput next to the `madmax` sweep, in one run.

The issue-10 bar: ``fm.sweep(model="llama3.1-70b", system="dgx-h100", task="llm-pretrain",
axes={"num_nodes": [...], "global_batch": [...], "plan": "all"})`` under the real-world model
evaluates >= 1,000,000 configurations per second end to end, in a grid of >= 1 M points.
Prints, each from its own subprocess (own peak RSS):

  (default) LLaMA-3.1-70B on DGX H100: num_nodes x global_batch x micro_batch x plan="all";
  (default) Qwen3-30B-A3B (128 experts, top-8) on DGX H100: the same axes, ep among the plans;
  (madmax)  LLaMA2-70B on DC-A: the 2,132,000-config grid of bench_sweep.py (a), madmax semantics;

each as configs/s (best and median of --repeats), legal share and peak RSS, after a
warm-up call that loads (or compiles) the kernels. With ``--previous COMMIT`` each sweep also runs, right
after, in that commit's tree (extracted with ``git archive``, as bench_sweep.py does) and the ratio is printed.
Writes bench/results/bench_lm_sweep.json.

    python bench/bench_lm_sweep.py [--repeats 3] [--previous 781bc61]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import add_previous  # noqa: E402  (bench/ is not a package)

NODES = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
BATCHES = [64 * i for i in range(1, 129)]
MICRO = [1, 2, 4, 8]


def _timed(times: list, call):
    """``call()``, appending (wall s, user CPU s, system CPU s) of it to ``times``. System time is the kernel's
    page handling of the result matrix (fastmodel/sweeps/buffers.py), which on a VM can outweigh the sweep."""
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = call()
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    times.append((wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime))
    return result


def _result(sweep: str, ds, warm: float, times: list) -> dict:
    n = int(ds.status.size)
    best = min(times)
    return {"sweep": sweep, "configs": n, "legal": int((ds.status == 0).sum()), "warmup_s": warm,
            "best_configs_per_s": n / best[0], "median_configs_per_s": n / sorted(times)[len(times) // 2][0],
            "user_s": best[1], "sys_s": best[2],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_default(repeats: int, model: str = "llama3.1-70b") -> dict:
    from fastmodel.lm.sweep import lm_sweep

    axes = {"num_nodes": NODES, "global_batch": BATCHES, "micro_batch": MICRO, "plan": "all"}
    t0 = time.perf_counter()
    lm_sweep(model, "dgx-h100", "llm-pretrain", axes={"plan": ["tp8"], "num_nodes": [4]})
    warm = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        ds = _timed(times, lambda: lm_sweep(model, "dgx-h100", "llm-pretrain", axes=axes))
    return _result(f"default {model}/dgx-h100", ds, warm, times)


def run_madmax(repeats: int) -> dict:
    from bench_sweep import AXES_A  # bench_sweep.py's sweep (a), the LLaMA2-70B grid

    import fastmodel

    axes = dict(AXES_A)
    t0 = time.perf_counter()
    fastmodel.sweep("llama2-70b", "dc-a", "llm-pretrain", {"plan": "all", "num_nodes": [16]}, semantics="madmax")
    warm = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        ds = _timed(times, lambda: fastmodel.sweep("llama2-70b", "dc-a", "llm-pretrain", axes, semantics="madmax"))
    return _result("madmax llama2-70b/dc-a", ds, warm, times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["default", "moe", "madmax"])
    add_previous(parser)
    args = parser.parse_args()
    if args.child:
        if args.child == "moe":       # issue 22: the MoE sweep (expert meshes, dispatch) beside the dense one
            result = run_default(args.repeats, "qwen3-30b-a3b")
        else:
            result = (run_default if args.child == "default" else run_madmax)(args.repeats)
        print(json.dumps(result))
        return
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}")
    from bench_batch import save_results
    from bench_batch import trees as bench_trees

    trees = bench_trees(args.previous)
    results = []
    for child in ("default", "moe", "madmax"):
        for name, env in trees:   # each sweep in both trees back to back, so the machine's load hits both alike
            out = subprocess.run([sys.executable, __file__, "--child", child, "--repeats", str(args.repeats)],
                                 capture_output=True, text=True, check=True, env=env)
            results.append({**json.loads(out.stdout.strip().splitlines()[-1]), "tree": name})
    print(f"{'sweep':34s} {'tree':18s} {'configs':>11s} {'legal':>10s} {'best/s':>12s} {'median/s':>12s} "
          f"{'user s':>7s} {'sys s':>6s} {'warm-up s':>10s} {'RSS MiB':>8s}")
    for r in results:
        print(f"{r['sweep']:34s} {r['tree'][:18]:18s} {r['configs']:11,d} {r['legal']:10,d} "
              f"{r['best_configs_per_s']:12,.0f} {r['median_configs_per_s']:12,.0f} {r.get('user_s', float('nan')):7.1f} "
              f"{r.get('sys_s', float('nan')):6.1f} {r['warmup_s']:10.1f} "
              f"{r['peak_rss_mib']:8.0f}")
    for now, before in zip(results[::len(trees)], results[1::len(trees)]) if len(trees) > 1 else ():
        print(f"{now['sweep']}: this tree / previous = {now['best_configs_per_s'] / before['best_configs_per_s']:.3f} "
              f"(best), {now['median_configs_per_s'] / before['median_configs_per_s']:.3f} (median)")
    save_results("bench_lm_sweep", results)


if __name__ == "__main__":
    main()
