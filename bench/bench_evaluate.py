"""Benchmark: batch evaluation and single-config latency, next to a plain-Python baseline.

Prints, in one run:
  * numba compile time (cold cache, in a subprocess) and cache-load time;
  * configs/s of `fastmodel batch` (JSONL in -> JSONL out, in process) on 10,000
    LLaMA2-70B pretrain configurations varying plan, global batch, node count and
    system numbers (FLOP utilization, link and network bandwidth);
  * per-config latency of `run` (the Python API `evaluate`, after warm-up);
  * the same programs evaluated per config by the kernels' own Python code
    (`.py_func`, no numba) on a sample -- the baseline -- and the speed-up of
    batch over it;
  * the same three figures (batch configs/s, `run` latency, baseline) for 10,000
    DLRM-A pretrain configurations (plans, global batches 16,384-131,072, 8-128
    nodes, the same system what-ifs) on the DLRM-A line;
  * peak RSS.
It writes the figures to bench/results/bench_evaluate.json.

    python bench/bench_evaluate.py [--configs 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLD_COMPILE = """
import time, fastmodel
t = time.perf_counter()
fastmodel.evaluate("llama-7b", "dc-a", "llm-pretrain", plan="tp,ddp/mp", num_nodes=2)
print(time.perf_counter() - t)
"""


#: batch workloads: model, cluster sizes, global batches
WORKLOADS = {
    "llama2-70b": ([16, 32, 64, 128, 256], [2048, 4096, 8192]),
    "dlrm-a": ([8, 16, 32, 64, 128], [16384, 32768, 65536, 131072]),
}


def make_cases(n: int, seed: int, model: str = "llama2-70b") -> list[str]:
    """n JSONL lines: ``model`` pretrain with varied plans, batches and systems."""
    from fastmodel.madmax.parallel.plans import enumerate_plan_shapes
    from fastmodel.madmax.spec.loader import load_system

    rng = random.Random(seed)
    base = load_system("dc-a").model_dump()
    systems = []
    for _ in range(64):  # a pool of hardware what-ifs
        s = json.loads(json.dumps(base))
        s["device"]["flops_util"] = round(rng.uniform(0.4, 0.8), 3)
        s["node"]["link_bandwidth_bytes_per_s"] = rng.choice([25e9, 50e9, 100e9])
        s["network"]["port_bandwidth_bytes_per_s"] = rng.choice([12.5e9, 25e9, 50e9])
        systems.append(s)
    shapes = [p.shape for p in enumerate_plan_shapes(2, 8)]
    lines = []
    for i in range(n):
        nodes = rng.choice(WORKLOADS[model][0])
        lines.append(json.dumps({
            "case": i,
            "model": model,
            "system": rng.choice(systems),
            "num_nodes": nodes,
            "task": {"name": "pretrain", "kind": "pretrain", "global_batch": rng.choice(WORKLOADS[model][1])},
            "plan": rng.choice(shapes),
        }))
    return lines


def python_baseline(configs) -> float:
    """Seconds per config with the kernels' code run by the Python interpreter."""
    import numpy as np

    from fastmodel.kernels.madmax.costs import costs_row
    from fastmodel.kernels.madmax.layout import N_SCHEDULE_OUTPUTS, N_SLOTS, N_TERMS, N_WORK
    from fastmodel.kernels.schedule import schedule_row
    from fastmodel.madmax.engine import plan_codes
    from fastmodel.madmax.lowering.config import param_row, structure_key
    from fastmodel.madmax.lowering.graph import lower

    def one(config):
        key = structure_key(config)
        program = lower(key)
        slots, terms = np.empty(N_SLOTS), np.empty(N_TERMS)
        costs_row.py_func(param_row(config), plan_codes(key, config.semantics), slots, terms)
        n_ops = program.num_ops
        schedule_row.py_func(program.kernel_arrays, False, slots, np.empty(n_ops), np.empty(n_ops), np.empty(n_ops),
                             np.empty(N_WORK), np.empty(N_SCHEDULE_OUTPUTS))

    one(configs[0])  # warm-up: helper kernels called from Python compile or load once
    t = time.perf_counter()
    for config in configs:
        one(config)
    return (time.perf_counter() - t) / len(configs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=10_000)
    parser.add_argument("--baseline-sample", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        cold = float(subprocess.run([sys.executable, "-c", COLD_COMPILE], env=env, check=True,
                                    capture_output=True, text=True).stdout.strip())

    t = time.perf_counter()
    import fastmodel
    from fastmodel.io.batch import run_batch, write_records
    from fastmodel.madmax.batch import parse_case
    from fastmodel.semantics import get_semantics
    import_s = time.perf_counter() - t

    t = time.perf_counter()
    fastmodel.evaluate("llama-7b", "dc-a", "llm-pretrain", plan="tp,ddp/mp", num_nodes=2)
    warm_load = time.perf_counter() - t

    from fastmodel.errors import FastmodelError
    from fastmodel.madmax.api import evaluate_config

    sem = get_semantics("madmax")

    def measure(model: str, task: str, num_nodes: int) -> dict:
        """Batch configs/s, run latency and the plain-Python baseline for one model."""
        lines = make_cases(args.configs, args.seed, model)
        list(run_batch(lines[:200]))  # warm-up: every program structure of the sample lowered once
        t = time.perf_counter()
        sink = io.StringIO()
        ok, bad = write_records(run_batch(lines), sink)
        batch_s = time.perf_counter() - t

        evaluate_config(fastmodel.make_config(model, "dc-a", task, num_nodes=num_nodes))
        reps = 200
        t = time.perf_counter()
        for _ in range(reps):
            fastmodel.evaluate(model, "dc-a", task, num_nodes=num_nodes)
        run_latency = (time.perf_counter() - t) / reps

        sample = []
        for line in lines:  # the first baseline_sample legal cases
            if len(sample) == args.baseline_sample:
                break
            try:
                sample.append(parse_case(line, sem))
            except FastmodelError:
                pass
        baseline = python_baseline(sample)
        return {"batch_ok": ok, "batch_errors": bad, "batch_s": batch_s, "batch_configs_per_s": args.configs / batch_s,
                "run_latency_s": run_latency, "run_config": f"{model} dc-a {task} num_nodes={num_nodes}",
                "baseline_python_s_per_config": baseline, "baseline_python_configs_per_s": 1 / baseline,
                "baseline_sample": len(sample)}

    llm = measure("llama2-70b", "llm-pretrain-fsdp", 256)
    dlrm = measure("dlrm-a", "dlrm-pretrain", 16)
    ok, bad, batch_s, run_latency, baseline = (llm["batch_ok"], llm["batch_errors"], llm["batch_s"],
                                               llm["run_latency_s"], llm["baseline_python_s_per_config"])

    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "numba_threads": __import__("numba").get_num_threads(),
        "compile_cold_s": cold,
        "import_s": import_s,
        "kernel_cache_load_s": warm_load,
        "batch_configs": args.configs,
        "batch_ok": ok,
        "batch_errors": bad,
        "batch_s": batch_s,
        "batch_configs_per_s": args.configs / batch_s,
        "run_latency_s": run_latency,
        "baseline_python_s_per_config": baseline,
        "baseline_python_configs_per_s": 1 / baseline,
        "dlrm_a": dlrm,
        "peak_rss_mib": peak_rss_mib,
    }
    print(f"machine                      {record['machine']}, numba threads {record['numba_threads']}")
    print(f"numba compile (cold cache)   {cold:8.2f} s     (import {import_s:.2f} s, cached kernel load {warm_load:.2f} s)")
    print(f"batch, {args.configs:,} configs       {args.configs / batch_s:10,.0f} configs/s   ({batch_s:.2f} s; {ok} ok, {bad} errors)")
    print(f"run (evaluate), one config   {run_latency * 1e3:8.2f} ms/config  ({1 / run_latency:,.0f} configs/s)")
    print(f"baseline: plain Python       {1 / baseline:10,.0f} configs/s   (same kernels' code run by CPython via "
          f".py_func; evaluation only, no JSON parsing; {llm['baseline_sample']} configs)")
    print(f"speed-up of batch over baseline  {baseline * args.configs / batch_s:6.1f}x")
    d = dlrm
    print(f"DLRM-A: batch, {args.configs:,} configs {d['batch_configs_per_s']:8,.0f} configs/s   ({d['batch_s']:.2f} s; "
          f"{d['batch_ok']} ok, {d['batch_errors']} errors); run {d['run_latency_s'] * 1e3:.2f} ms/config; "
          f"baseline {d['baseline_python_configs_per_s']:,.0f} configs/s ({d['baseline_sample']} configs); "
          f"speed-up {d['baseline_python_s_per_config'] * args.configs / d['batch_s']:.1f}x")
    print(f"peak RSS                     {peak_rss_mib:8.0f} MiB")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_evaluate.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
