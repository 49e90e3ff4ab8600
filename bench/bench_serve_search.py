"""Benchmark: SLO search throughput (configs/s) of ``fastmodel serve --search`` (``fastmodel.serve.search``).

Two searches of Llama-3.1-70B on H200 with TTFT <= 1 s and TPOT <= 50 ms, input and output 1024 tokens:

  readme: README's example, ``--gpus 8`` with bf16 and fp8 and concurrency 1, 2, 4 ... 1024:
          2 precisions x 4 TP x 3 PP x 11 concurrencies = 264 configs;
  large:  ``--gpus 64``, all 7 precisions, ``--search-concurrency 8192`` (every concurrency 1..8192):
          7 x 7 TP (1..64) x 3 PP x 8192 = 1,204,224 configs.

Each search is timed whole (sweep kernel, Dataset, budget and SLO masks, Pareto frontier, frontier rows, best
row) and, as its baseline in the same run, the search's kernel sweep alone (``fastmodel.serve.api.sweep`` of the
same grid in the concurrency load mode, steady state), and within each search the time after its sweep call
returned (masks, frontier, rows: what the search adds). Each figure comes from its own subprocess (own peak RSS)
after a warm-up search that loads (or compiles) the kernels: best and median wall-clock configs/s of --repeats
runs (20 times as many of the small search), configs per CPU-second (all threads), peak RSS. With ``--previous COMMIT``
every figure is measured again, right after, in that commit's tree (extracted with ``git archive``, as
bench_serve.py does), the ratios are printed and the two trees' frontiers and best configurations are compared
(the same rows and counts, values to solver tolerance, labels both trees' rows carry: ``same_answer``; a tree
without the ``concurrency`` option
gets the large grid through its module's ``CONCURRENCY``). Writes
bench/results/bench_serve_search.json.

    python bench/bench_serve_search.py [--repeats 5] [--cases readme,large] [--previous 3e67739]
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import add_previous  # noqa: E402  (bench/ is not a package)

SLO = dict(input_len=1024, output_len=1024, ttft=1.0, tpot=0.05)
CASES = {
    "readme": dict(gpus=8, precisions=("bf16", "fp8"), concurrency=tuple(2**k for k in range(11))),
    "large": dict(gpus=64, precisions=("bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4"),
                  concurrency=tuple(range(1, 8193))),
}
MODEL, DEVICE = "llama3.1-70b", "H200"


def search(case: dict):
    """``slo_search`` of the case; a tree whose search has no ``concurrency`` option gets it as its module's
    ``CONCURRENCY`` (the grid it sweeps)."""
    from fastmodel.serve import search as module

    kw = dict(SLO, gpus=case["gpus"], precisions=case["precisions"])
    if "concurrency" in inspect.signature(module.slo_search).parameters:
        return module.slo_search(MODEL, DEVICE, concurrency=case["concurrency"], **kw)
    module.CONCURRENCY = case["concurrency"]
    return module.slo_search(MODEL, DEVICE, **kw)


def sweep_alone(case: dict):
    """The search's kernel sweep by itself: the same grid, load mode and engine columns."""
    from fastmodel.serve.api import device_columns, sweep
    from fastmodel.serve.profiles import profile_columns

    fixed = profile_columns(None, None, device_columns(DEVICE)["hbm_bytes"])
    powers = [2**k for k in range(12) if 2**k <= case["gpus"]]
    return sweep(MODEL, device=DEVICE, precision=list(case["precisions"]), tp=powers,
                 pp=[p for p in (1, 2, 4) if p <= case["gpus"]], batch_size=list(case["concurrency"]),
                 input_len=SLO["input_len"], output_len=SLO["output_len"], load_mode="concurrency", client_rounds=0,
                 **fixed)


def child(name: str, kind: str, repeats: int) -> dict:
    import fastmodel.serve.api as api

    case = CASES[name]
    run = search if kind == "search" else sweep_alone
    run(dict(case, concurrency=case["concurrency"][:4]))      # warm-up: load (or compile) the kernels
    inner, swept = api.sweep, []

    def timed_sweep(*args, **kw):   # the search's own sweep call, timed (the search imports it when called)
        start = time.perf_counter()
        out = inner(*args, **kw)
        swept.append(time.perf_counter() - start)
        return out

    api.sweep = timed_sweep
    times, cpu = [], []
    for _ in range(repeats * (20 if case["gpus"] <= 8 else 1)):   # the small search: 20x the repeats
        start, start_cpu = time.perf_counter(), time.process_time()
        out = run(case)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    api.sweep = inner
    ds = out.dataset if kind == "search" else out
    size = int(ds.status.size)
    result = {"configs": size, "best_configs_per_s": size / min(times),
              "median_configs_per_s": size / float(np.median(times)), "times_s": times, "cpu_s": cpu,
              "configs_per_cpu_s": size / min(cpu), "after_sweep_s": min(t - k for t, k in zip(times, swept)),
              "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if kind == "search":
        answer = [out.frontier, out.best, out.evaluated, out.feasible]
        result.update(frontier=len(out.frontier), evaluated=out.evaluated, feasible=out.feasible, best=out.best,
                      answer=answer, answer_sha256=hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest())
    return result


def same_answer(now: dict, before: dict) -> str:
    """Whether two searches found the same frontier and best configuration: the same rows (grid coordinates,
    meets_slo) and counts, with their values (TTFT, TPOT, speeds) equal to within the closed loop's solver
    tolerance (1e-9 relative on the balance), and the largest relative difference of those values."""
    rows = [(a, b) for a, b in zip(now["answer"][0] + [now["answer"][1]], before["answer"][0] + [before["answer"][1]])
            if a is not None or b is not None]
    if len(now["answer"][0]) != len(before["answer"][0]) or now["answer"][2:] != before["answer"][2:] \
            or any(a is None or b is None for a, b in rows):
        return "False"
    # the labels both trees' rows carry (a newer search's rows add its axes: engine, ep, attention_dp, mode ...)
    labels = [{k: v for k, v in r.items() if not isinstance(v, float) and k in pair[0].keys() & pair[1].keys()}
              for pair in rows for r in pair]
    worst = max((abs(a[k] - b[k]) / max(abs(b[k]), 1e-300) for a, b in rows for k in a if isinstance(a[k], float)),
                default=0.0)
    same = labels[0::2] == labels[1::2] and worst <= 1e-6
    return f"{same} (values within {worst:.1e} relative)"


def measure(name: str, kind: str, repeats: int, env) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", f"{name}:{kind}", "--repeats", str(repeats)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{name} {kind} failed:\n{out.stderr[-3000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def show(tree: str, name: str, s: dict, k: dict) -> None:
    print(f"{tree:22s} {name:7s} {s['configs']:>10,} configs   search best {s['best_configs_per_s']:>10,.0f}/s "
          f"median {s['median_configs_per_s']:>10,.0f}/s   {s['configs_per_cpu_s']:>10,.0f} per CPU-s   peak "
          f"{s['peak_rss_mib']:,.0f} MiB   after its sweep {1e3 * s['after_sweep_s']:.1f} ms (best)")
    print(f"{'':22s} {name:7s} kernel sweep alone: best {k['best_configs_per_s']:>10,.0f}/s median "
          f"{k['median_configs_per_s']:>10,.0f}/s   {k['configs_per_cpu_s']:>10,.0f} per CPU-s   peak "
          f"{k['peak_rss_mib']:,.0f} MiB")
    print(f"{'':22s} {name:7s} frontier {s['frontier']} rows, {s['evaluated']:,} fit, {s['feasible']:,} meet the "
          f"SLOs; best: {s['best']['precision']} tp{s['best']['tp']} pp{s['best']['pp']} concurrency "
          f"{s['best']['batch_size']}, {s['best']['output_tokens_per_s_per_gpu']:.1f} tok/s per GPU")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default="readme,large")
    add_previous(parser)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, kind = args.child.split(":")
        print("RESULT " + json.dumps(child(name, kind, args.repeats)))
        return
    from bench_batch import save_results
    from bench_batch import trees as bench_trees

    trees = bench_trees(args.previous)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{MODEL} on {DEVICE}, TTFT <= {SLO['ttft']:g} s, TPOT <= {SLO['tpot'] * 1e3:g} ms; cores: "
          f"{os.cpu_count()}; load average (1 min): {load:.1f}")
    figures = {tree: {} for tree, _ in trees}
    for name in args.cases.split(","):
        for tree, env in trees:
            s = measure(name, "search", args.repeats, env)
            k = measure(name, "sweep", args.repeats, env)
            figures[tree][name] = {"search": s, "sweep": k}
            show(tree, name, s, k)
        if len(trees) > 1:
            now, before = (figures[tree][name]["search"] for tree, _ in trees)
            print(f"{'':22s} {name:7s} this tree / previous = "
                  f"{now['best_configs_per_s'] / before['best_configs_per_s']:.3f} (best), "
                  f"{now['median_configs_per_s'] / before['median_configs_per_s']:.3f} (median); after the sweep "
                  f"{before['after_sweep_s'] / now['after_sweep_s']:.1f}x faster; same frontier "
                  f"and best configuration: {same_answer(now, before)}")
    save_results("bench_serve_search", figures)


if __name__ == "__main__":
    main()
