"""Benchmark: serving-sweep throughput (configs/s) of ``fastmodel.serve.api.sweep``.

One in-memory sweep (grid definition -> labeled Dataset) of Llama-3.1-70B serving:
5 devices (A100-80GB, H100, H200, GH200, L40S) x 3 precisions (bf16, fp8, int4) x
4 TP degrees (1, 2, 4, 8) x 68 batch sizes (1..32, then geometric to 2048) x 16 input lengths
(128..20000) x 16 output lengths (128..20000) = 1,044,480 configs, in each of the
three load modes (batch, concurrency, max_throughput). Prints compile time (first,
small sweep), then per mode the best and median wall-clock configs/s of --repeats
runs, the CPU time per config (summed over threads: what an idle machine's cores would each
deliver), the share of points with status ok, and that a sampled grid point equals the
single-config ``fastmodel.serve.api.evaluate`` exactly. Then the same grid from a serving sweep file, as
``fastmodel sweep`` runs it (the shared sweep machinery in this tree: ``fastmodel.sweeps``), in the ``batch``
load mode. With ``--previous COMMIT`` every figure is measured again, right after, in that commit's tree
(extracted with ``git archive``, as bench_sweep.py does) and the ratios are printed. Writes
bench/results/bench_serve.json.

    python bench/bench_serve.py [--repeats 3] [--modes batch,concurrency,max_throughput] [--previous 781bc61]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import add_previous  # noqa: E402  (bench/ is not a package)

AXES = {
    "device": ["A100-80GB", "H100", "H200", "GH200", "L40S"],
    "precision": ["bf16", "fp8", "int4"],
    "tp": [1, 2, 4, 8],
    "batch_size": list(range(1, 33)) + np.geomspace(36, 2048, 36).round().astype(int).tolist(),
    "input_len": np.geomspace(128, 20000, 16).round().tolist(),
    "output_len": np.geomspace(128, 20000, 16).round().tolist(),
}


SWEEP_FILE = """model = "llama3.1-70b"
system = "H100"
task = "serve-chat"
[axes]
""" + "".join(f"{name} = {json.dumps(list(values))}\n" for name, values in AXES.items())


def sweep_file_rate(repeats: int) -> dict:
    """Configs/s of the grid as a serving sweep file, loaded and run in memory the way ``fastmodel sweep`` does
    (this tree: ``fastmodel.sweeps``; an older tree: its real-world sweep-file runner)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "serve.toml"
        path.write_text(SWEEP_FILE)
        try:
            from fastmodel.sweeps import run_in_memory
            from fastmodel.sweeps.file import load_sweep_file

            def run():
                return run_in_memory(load_sweep_file(str(path)))
        except ImportError:   # a tree before the shared sweep machinery
            from fastmodel.sweep.real_run import load_real_sweep_file

            def run():
                return load_real_sweep_file(str(path)).evaluate()
        run()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            ds = run()
            times.append(time.perf_counter() - start)
    size = int(ds.status.size)
    return {"best_configs_per_s": size / min(times), "median_configs_per_s": size / float(np.median(times)),
            "times_s": times}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="batch,concurrency,max_throughput")
    add_previous(parser)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:
        compare(args)
        return
    from fastmodel.serve.api import evaluate, sweep

    axes = AXES
    size = int(np.prod([len(v) for v in axes.values()]))
    start = time.perf_counter()
    sweep("llama3.1-70b", device=["H100"], precision=["bf16"], tp=[1, 2], batch_size=[1, 2], input_len=[128],
          output_len=[128])
    compile_s = time.perf_counter() - start
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"compile + first small sweep: {compile_s:.1f} s   cores: {os.cpu_count()}   load average (1 min): "
          f"{load:.1f}")
    print(f"grid: {' x '.join(str(len(v)) for v in axes.values())} = {size:,} configs "
          f"({', '.join(axes)})")
    results = {"configs": size, "compile_s": compile_s, "modes": {}}
    for mode in args.modes.split(","):
        times = []
        cpu = []
        for _ in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            ds = sweep("llama3.1-70b", load_mode=mode, **axes)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        ok = float((ds.status.values == 0).mean())
        point = dict(device="H200", precision="fp8", tp=4, batch_size=axes["batch_size"][40],
                     input_len=axes["input_len"][5], output_len=axes["output_len"][9])
        load = {"batch": {"batch_size": point["batch_size"]}, "concurrency": {"concurrency": point["batch_size"]},
                "max_throughput": {"max_throughput": True}}[mode]
        single = evaluate("llama3.1-70b", point["device"], precision="fp8", tp=4, input_len=point["input_len"],
                          output_len=point["output_len"], **load)
        swept = ds.sel(**point)
        same = all(float(swept[k]) == single[k] for k in ("ttft", "tpot", "output_tokens_per_s"))
        best, median = size / min(times), size / float(np.median(times))
        per_cpu = size / min(cpu)
        print(f"{mode:15s} best {best:,.0f} configs/s   median {median:,.0f} configs/s   "
              f"({min(times):.2f} s best of {len(times)})   {per_cpu:,.0f} configs per CPU-second (all threads)   "
              f"ok {100 * ok:.1f}%   sampled point == evaluate: {same}")
        results["modes"][mode] = {"best_configs_per_s": best, "median_configs_per_s": median,
                                  "configs_per_cpu_s": per_cpu, "times_s": times, "cpu_s": cpu, "ok_share": ok,
                                  "sample_equal": same}
    results["sweep_file"] = sweep_file_rate(args.repeats)
    print(f"{'sweep file':15s} best {results['sweep_file']['best_configs_per_s']:,.0f} configs/s   median "
          f"{results['sweep_file']['median_configs_per_s']:,.0f} configs/s (load mode batch, in memory)")
    print("RESULT " + json.dumps(results))


def compare(args) -> None:
    """This tree's figures and, with ``--previous``, that commit's, each sweep measured in its own process."""
    from bench_batch import save_results
    from bench_batch import trees as bench_trees

    trees = bench_trees(args.previous)
    figures = {}
    for name, env in trees:
        print(f"--- {name}")
        out = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(args.repeats), "--modes",
                              args.modes], capture_output=True, text=True, check=True, env=env)
        lines = out.stdout.strip().splitlines()
        print("\n".join(line for line in lines if not line.startswith("RESULT ")))
        figures[name] = json.loads(next(line for line in lines if line.startswith("RESULT "))[len("RESULT "):])
    if len(trees) > 1:
        now, before = (figures[name] for name, _ in trees)
        for key in [*now["modes"], "sweep_file"]:
            a = now["modes"][key] if key in now["modes"] else now[key]
            b = before["modes"][key] if key in before["modes"] else before[key]
            print(f"{key:15s} this tree / previous = {a['best_configs_per_s'] / b['best_configs_per_s']:.3f} (best), "
                  f"{a['median_configs_per_s'] / b['median_configs_per_s']:.3f} (median)")
    save_results("bench_serve", figures)


if __name__ == "__main__":
    main()
