"""Benchmark: sweep throughput (configs/s) and peak memory, next to a plain-Python baseline.

Prints, in one run, for three in-memory sweeps under `madmax` semantics (grid
definition -> Dataset in memory; every plan shape of `plan = "all"`):
  (a)  LLaMA2-70B pretrain on DC-A: 52 plans x 5 cluster sizes x 8 global
       batches x 41 FLOP utilizations x 25 network bandwidths = 2,132,000 configs;
  (b)  DLRM-A pretrain on DC-A: 52 plans x 5 cluster sizes x 4 global batches x
       41 FLOP utilizations x 25 network bandwidths = 1,066,000 configs;
  (c') ViT-10B pretrain on DC-A: 52 plans x 5 cluster sizes x 4 global batches x
       41 FLOP utilizations x 25 network bandwidths = 1,066,000 configs;
and for each of them, side by side:
  * configs/s wall clock (best and median of --repeats runs), and configs/s
    without the machine's stalls (each unit of work at its fastest of
    --unit-repeats back-to-back runs, plus assembly);
  * the share of wall time this (shared, virtual) machine took away from a fixed
    single-threaded loop just before the timed runs;
  * (c) the baseline: the same programs evaluated per config in plain Python
    (the kernels' own code run by CPython via `.py_func`) on a sample of
    --baseline-sample configs, and the speed-up over it;
  * that sampled grid points equal single-config `fastmodel.evaluate` bit for bit;
  * peak RSS of the process that ran the sweep (each sweep runs in its own
    subprocess, so each figure is that sweep's own).
It also prints numba compile time (+ a small first sweep), measured first.

Next to the previous release (commit --previous, default 5fe7193; `none` skips
it): its files are extracted with `git archive` into a temp dir kept between
runs (bench_batch.previous_release) and its own bench_sweep.py measures each
sweep in a subprocess with PYTHONPATH pointing at it, right after this tree's
run of the same sweep. The script prints both configs/s (and their ratio), the
cold-cache numba compile time of both (each into an empty NUMBA_CACHE_DIR), and
checks that both give bit-identical datasets on small sweeps of the three
models (every plan shape; every result variable and the status codes).

With --zarr-configs N it also streams an N-configuration LLaMA2-70B sweep
into a zarr store in a subprocess and reports its configs/s and peak RSS.
Writes the figures to bench/results/bench_sweep.json.

    python bench/bench_sweep.py [--zarr-configs 200000000] [--only llama2-70b,dlrm-a,vit-10b] [--previous 5fe7193]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: the FLOP-utilization and network-bandwidth ranges every sweep crosses (41 x 25 points)
RANGES = {
    "flops_util": {"start": 0.4, "stop": 0.8, "num": 41},
    "port_bandwidth_bytes_per_s": {"start": 12.5e9, "stop": 50e9, "num": 25},
}
AXES_A = {"num_nodes": [16, 32, 64, 128, 256], "global_batch": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
          **RANGES, "plan": "all"}
AXES_B = {"plan": "all", "num_nodes": [8, 16, 32, 64, 128], "global_batch": [16384, 32768, 65536, 131072], **RANGES}
AXES_C = {"plan": "all", "num_nodes": [16, 32, 64, 128, 256], "global_batch": [1024, 2048, 4096, 8192], **RANGES}

#: the sweeps, in print order: key -> (label, model, system, task, axes, record prefix)
SWEEPS = {
    "llama2-70b": ("(a)  LLaMA2-70B pretrain", "llama2-70b", "dc-a", "llm-pretrain", AXES_A, "a"),
    "dlrm-a": ("(b)  DLRM-A pretrain", "dlrm-a", "dc-a", "dlrm-pretrain", AXES_B, "b"),
    "vit-10b": ("(c') ViT-10B pretrain", "vit-10b", "dc-a", "vit-pretrain", AXES_C, "c_prime"),
}

ZARR_CHILD = r"""
import json, resource, sys, time
import numpy as np
try:
    from fastmodel.madmax.sweep.definition import Sweep
    from fastmodel.sweeps import run_to_store
except ImportError:   # a release before issue 21's shared sweep machinery
    from fastmodel.sweep import Sweep, run_to_store
n_target, path = int(sys.argv[1]), sys.argv[2]
per_plan = max(1, n_target // 52)
util = max(1, per_plan // (5 * 8 * 25))
axes = {"num_nodes": [16, 32, 64, 128, 256], "global_batch": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        "flops_util": {"start": 0.3, "stop": 0.9, "num": util},
        "port_bandwidth_bytes_per_s": {"start": 12.5e9, "stop": 50e9, "num": 25}, "plan": "all"}
Sweep("llama2-70b", "dc-a", "llm-pretrain", {"num_nodes": [16], "flops_util": [0.5, 0.6], "plan": "all"})
s = Sweep("llama2-70b", "dc-a", "llm-pretrain", axes)
t = time.perf_counter()
run_to_store(s, path)
dt = time.perf_counter() - t
print(json.dumps({"configs": s.num_configs, "seconds": dt,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


#: cold-cache compile (+ one small sweep), run in a fresh process of either release
COMPILE_CHILD = r"""
import json, time
t = time.perf_counter()
try:   # this tree: the MAD-Max plan in its wing, the shared machinery in fastmodel.sweeps
    from fastmodel.madmax.sweep.definition import Sweep
    from fastmodel.sweeps import run_in_memory
except ImportError:   # a release before issue 21's shared sweep machinery
    from fastmodel.sweep import Sweep, run_in_memory
run_in_memory(Sweep("llama2-70b", "dc-a", "llm-pretrain", {"num_nodes": [16], "flops_util": [0.5], "plan": "all"},
                    semantics="madmax"))
print(json.dumps({"seconds": time.perf_counter() - t}))
"""

#: small sweeps of the three models whose every data variable is saved, to compare the releases bit for bit
IDENTITY_CHILD = r"""
import sys
import numpy as np
try:   # this tree: the MAD-Max plan in its wing, the shared machinery in fastmodel.sweeps
    from fastmodel.madmax.sweep.definition import Sweep
    from fastmodel.sweeps import run_in_memory
except ImportError:   # a release before issue 21's shared sweep machinery
    from fastmodel.sweep import Sweep, run_in_memory
arrays = {}
for model, task in (("llama2-70b", "llm-pretrain"), ("dlrm-a", "dlrm-pretrain"), ("vit-10b", "vit-pretrain")):
    axes = {"plan": "all", "num_nodes": [8, 64], "flops_util": [0.45, 0.7],
            "port_bandwidth_bytes_per_s": [12.5e9, 50e9]}
    ds = run_in_memory(Sweep(model, "dc-a", task, axes, semantics="madmax"))
    for name, var in ds.data_vars.items():
        arrays[model + "/" + name] = np.asarray(var.values)
np.savez(sys.argv[1], **arrays)
"""


def previous_tree(commit: str):
    """(environment, bench_sweep.py) of the previous release, its import location checked."""
    from bench_batch import Release, previous_release

    home = previous_release(commit)
    return Release(f"previous release {commit}", home).env, home / "tree" / "bench" / "bench_sweep.py"


def cold_compile_s(env: dict) -> float:
    """Seconds of COMPILE_CHILD in a fresh process with an empty numba cache."""
    with tempfile.TemporaryDirectory() as cache:
        result = subprocess.run([sys.executable, "-c", COMPILE_CHILD], env={**env, "NUMBA_CACHE_DIR": cache},
                                capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode:
        sys.stderr.write(result.stderr)
        raise SystemExit("cold compile run failed")
    return json.loads(result.stdout.strip().splitlines()[-1])["seconds"]


def identical_to_previous(previous_env: dict) -> tuple[int, int]:
    """(data variables, values) of IDENTITY_CHILD equal bit for bit in both releases; raises if any differs."""
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, env in (("current", _current_env()), ("previous", previous_env)):
            path = Path(tmp) / f"{name}.npz"
            subprocess.run([sys.executable, "-c", IDENTITY_CHILD, str(path)], env=env, check=True,
                           cwd=tempfile.gettempdir())
            files.append(np.load(path))
        now, before = files
        common = sorted(set(now.files) & set(before.files))
        values = 0
        for name in common:
            a, b = now[name], before[name]
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                raise SystemExit(f"{name}: this tree and the previous release differ")
            values += a.size
        return len(common), values


def _current_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def run_child(script: Path, key: str, flags: list[str], env: dict | None = None) -> dict:
    """The figures one bench_sweep.py --child run prints (this tree's script, or the previous release's)."""
    result = subprocess.run([sys.executable, str(script), "--child", key, *flags], capture_output=True, text=True,
                            env=env)
    if result.returncode:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"sweep {key} failed ({script})")
    return json.loads(result.stdout.strip().splitlines()[-1])


def machine_stalls(seconds: float = 5.0) -> tuple[float, float]:
    """Share of wall time this machine takes away from a fixed single-threaded loop.

    Runs a ~11 ms numba loop repeatedly; time beyond the median is time the
    (virtual) CPU was not ours. Returns (stall share, median loop seconds).
    """
    from fastmodel.kernels.jit import njit

    @njit(cache=True)
    def spin(a):
        total = 0.0
        for _ in range(20):
            for i in range(a.shape[0]):
                total += a[i] * 1.0000001
        return total

    a = np.random.default_rng(0).random(1_000_000)
    spin(a)
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        spin(a)
        times.append(time.perf_counter() - t)
    times = np.array(times)
    median = float(np.median(times))
    return float((times - median).clip(min=0).sum() / times.sum()), median


def stall_free_seconds(sweep, repeats: int) -> float:
    """Seconds of the same sweep when no unit is stalled: each unit of work (grid
    slice -> parameter table -> kernels -> its region of the result) is run
    ``repeats`` times back to back and its fastest run counted, plus the rest of
    run_in_memory (definition, assembly) timed once."""
    from fastmodel.kernels.madmax.layout import N_RESULTS

    out = np.empty((N_RESULTS, sweep.num_configs))
    status = np.zeros(sweep.num_configs, dtype=np.int8)
    total = 0.0
    for unit in sweep.units():
        offset = sweep.unit_offset(unit)
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            sweep.evaluate_unit(unit, out, status, offset)
            best = min(best, time.perf_counter() - t)
        total += best
    t = time.perf_counter()
    from fastmodel.sweeps.assemble import assemble

    assemble(sweep, out, status)
    return total + (time.perf_counter() - t)


def baseline(sweep, sample: int) -> float:
    """Configs/s of the same Programs evaluated per config by CPython (no numba)."""
    from fastmodel.kernels.madmax.costs import costs_row
    from fastmodel.kernels.madmax.layout import N_SCHEDULE_OUTPUTS, N_SLOTS, N_TERMS, N_WORK
    from fastmodel.kernels.schedule import schedule_row
    from fastmodel.madmax.engine import plan_codes
    from fastmodel.madmax.lowering.config import structure_key_for
    from fastmodel.madmax.lowering.graph import lower
    from fastmodel.madmax.lowering.params import param_table

    rng = np.random.default_rng(0)
    units = list(sweep.units())
    jobs = []
    for unit in rng.choice(len(units), size=min(sample, len(units)), replace=True):
        unit = units[int(unit)]
        model, system, task, plan = sweep._combo_specs(unit.structural)
        values = {sweep.axes[i].path: sweep.axes[i].values[b][0] for i, b in zip(sweep.numeric_axes, unit.blocks)}
        if "task.global_batch" in values and task.local_batch is not None:  # as Sweep.evaluate_unit
            task = task.model_copy(update={"local_batch": None, "global_batch": 1})
        table, status = param_table(model, system, task, plan, values)
        if status[0] == 0:
            jobs.append((structure_key_for(model, task, plan, sweep.semantics), table[:, 0]))
    if not jobs:
        raise RuntimeError("no legal configuration among the baseline sample")

    def one(key, row):
        program = lower(key)
        slots, terms = np.empty(N_SLOTS), np.empty(N_TERMS)
        costs_row.py_func(row, plan_codes(key, sweep.semantics), slots, terms)
        n = program.num_ops
        schedule_row.py_func(program.kernel_arrays, False, slots, np.empty(n), np.empty(n), np.empty(n),
                             np.empty(N_WORK), np.empty(N_SCHEDULE_OUTPUTS))

    one(*jobs[0])
    t = time.perf_counter()
    for job in jobs:
        one(*job)
    return len(jobs) / (time.perf_counter() - t)


def _with_field(spec, parts: list[str], value):
    """A copy of a pydantic spec with the dotted field ``parts`` set to ``value``."""
    if len(parts) == 1:
        return spec.model_copy(update={parts[0]: value})
    return spec.model_copy(update={parts[0]: _with_field(getattr(spec, parts[0]), parts[1:], value)})


def check_identical(ds, sweep, samples: int = 50) -> int:
    """Sampled grid points equal single-config evaluate() bit for bit; returns the number checked.

    Works for any sweep over plan, num_nodes, task.global_batch and numeric
    system/model fields: each point's values are set on the sweep's base specs.
    """
    import fastmodel
    from fastmodel.madmax.lowering.params import STATUS

    rng = np.random.default_rng(1)
    ok = np.argwhere(ds.status.values == STATUS["ok"])
    checked = 0
    for idx in ok[rng.choice(len(ok), size=min(samples, len(ok)), replace=False)]:
        point = ds.isel(dict(zip(ds.status.dims, idx)))
        model, system, task = sweep.model, sweep.system, sweep.task
        plan, num_nodes = None, None
        for axis in sweep.axes:
            value = point[axis.name].values.item()
            if axis.path == "plan":
                plan = str(value)
            elif axis.path == "model":
                model = sweep.models[list(axis.values).index(value)]
            elif axis.path == "system":
                system = sweep.systems[list(axis.values).index(value)]
            elif axis.path == "system.num_nodes":
                num_nodes = int(value)
            elif axis.path == "task.global_batch":
                task = task.model_copy(update={"global_batch": int(value), "local_batch": None})
            elif axis.path.startswith("system."):
                system = _with_field(system, axis.path.split(".")[1:], value)
            elif axis.path.startswith("model."):
                model = _with_field(model, axis.path.split(".")[1:], value)
            else:
                raise ValueError(f"check_identical: axis {axis.path} not handled")
        single = fastmodel.evaluate(model, system, task, sweep.semantics, plan=plan, num_nodes=num_nodes)
        for name in ("iteration_time", "throughput", "exposed_comm", "memory_per_device"):
            if float(single[name]) != float(point[name]):
                raise AssertionError(f"{sweep.model.name}: grid point {idx} differs from evaluate() in {name}: "
                                     f"{float(single[name])!r} != {float(point[name])!r}")
        checked += 1
    return checked


def grid_text(sweep) -> str:
    """'52 plan x 5 num_nodes x ...' of a sweep."""
    return " x ".join(f"{len(a.values)} {a.name}" for a in sweep.axes)


def bench_one(key: str, repeats: int, unit_repeats: int, baseline_sample: int, identical_samples: int) -> dict:
    """Every figure of one sweep of SWEEPS, measured in this process."""
    from fastmodel.madmax.sweep.definition import Sweep
    from fastmodel.sweeps import run_in_memory

    _, model, system, task, axes, _ = SWEEPS[key]
    t = time.perf_counter()  # kernels loaded from numba's cache (or compiled), program lowered once per plan
    small = {"plan": "all", "num_nodes": axes["num_nodes"][:2], "flops_util": {"start": 0.5, "stop": 0.6, "num": 3}}
    run_in_memory(Sweep(model, system, task, small, semantics="madmax"))
    warm_s = time.perf_counter() - t

    stall_share, spin_median = machine_stalls()
    times = []
    for r in range(repeats):
        t = time.perf_counter()
        sweep = Sweep(model, system, task, axes, semantics="madmax")
        ds = run_in_memory(sweep)
        times.append(time.perf_counter() - t)
        if r < repeats - 1:
            del ds
    stall_free_s = stall_free_seconds(sweep, unit_repeats)
    n = sweep.num_configs
    legal = int((ds.status == 0).sum())
    identical = check_identical(ds, sweep, identical_samples)
    base = baseline(sweep, baseline_sample)
    return {
        "model": sweep.model.name, "system": system, "task": task, "grid": grid_text(sweep),
        "configs": n, "legal_feasible": legal, "warm_up_s": warm_s,
        "machine_stall_share": stall_share, "machine_spin_median_s": spin_median,
        "seconds": times, "configs_per_s_best": n / min(times), "configs_per_s_median": n / float(np.median(times)),
        "stall_free_seconds": stall_free_s, "configs_per_s_stall_free": n / stall_free_s,
        "baseline_python_configs_per_s": base, "baseline_sample": baseline_sample,
        "identical_points_checked": identical,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def print_one(key: str, f: dict, unit_repeats: int) -> None:
    label = SWEEPS[key][0]
    n = f["configs"]
    print(f"{label} on {f['system']}, {n:,} configs ({f['legal_feasible']:,} legal and feasible), in memory")
    print(f"       grid {f['grid']}")
    print(f"       machine stalls {100 * f['machine_stall_share']:.0f} % of wall time just before the runs "
          f"(1-thread loop, median {f['machine_spin_median_s'] * 1e3:.1f} ms); kernel load + small sweep "
          f"{f['warm_up_s']:.2f} s")
    print(f"       {f['configs_per_s_best']:12,.0f} configs/s wall, best; {f['configs_per_s_median']:,.0f} median "
          f"(runs: {', '.join(f'{x:.2f}' for x in f['seconds'])} s)")
    print(f"       {f['configs_per_s_stall_free']:12,.0f} configs/s without the machine's stalls "
          f"({f['stall_free_seconds']:.2f} s: each unit at its fastest of {unit_repeats} back-to-back runs, "
          f"plus assembly)")
    print(f"   (c) {f['baseline_python_configs_per_s']:12,.1f} configs/s baseline, plain Python (same kernels' code "
          f"via .py_func, {f['baseline_sample']} sampled configs)")
    print(f"       speed-up over (c): {f['configs_per_s_best'] / f['baseline_python_configs_per_s']:,.0f}x wall, "
          f"{f['configs_per_s_stall_free'] / f['baseline_python_configs_per_s']:,.0f}x stall-free")
    print(f"       identical to evaluate(): {f['identical_points_checked']} sampled grid points, bit for bit")
    print(f"       peak RSS {f['peak_rss_mib']:.0f} MiB (this sweep's own process)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions of each sweep; the best is reported")
    parser.add_argument("--baseline-sample", type=int, default=200)
    parser.add_argument("--identical-samples", type=int, default=50)
    parser.add_argument("--unit-repeats", type=int, default=7, help="runs per unit for the stall-free figure")
    parser.add_argument("--zarr-configs", type=float, default=0, help="also stream a sweep of this size to zarr")
    parser.add_argument("--only", default=",".join(SWEEPS), help="comma-separated sweeps to run: " + ", ".join(SWEEPS))
    parser.add_argument("--previous", default="5fe7193",
                        help="commit of the previous release measured next to this tree ('none': skip)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run one sweep in this process, print its JSON
    args = parser.parse_args()

    if args.child:
        figures = bench_one(args.child, args.repeats, args.unit_repeats, args.baseline_sample, args.identical_samples)
        print(json.dumps(figures))
        return

    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    for k in keys:
        if k not in SWEEPS:
            parser.error(f"--only: unknown sweep {k!r} (choose from {', '.join(SWEEPS)})")

    from fastmodel.madmax.sweep.definition import Sweep
    from fastmodel.sweeps import run_in_memory

    t = time.perf_counter()
    run_in_memory(Sweep("llama2-70b", "dc-a", "llm-pretrain",
                        {"num_nodes": [16, 32], "flops_util": {"start": 0.5, "stop": 0.6, "num": 300}, "plan": "all"}))
    compile_s = time.perf_counter() - t

    record = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "numba_threads": __import__("numba").get_num_threads(),
        "compile_and_first_sweep_s": compile_s,
    }
    print(f"machine                         {record['machine']}, numba threads {record['numba_threads']}")
    print(f"compile (+ a small first sweep) {compile_s:8.2f} s")
    previous_env = previous_script = None
    if args.previous.lower() != "none":
        previous_env, previous_script = previous_tree(args.previous)
        record["previous"] = args.previous
        record["cold_compile_s"] = {"current": cold_compile_s(_current_env()), "previous": cold_compile_s(previous_env)}
        print(f"numba compile, cold cache (+ one small sweep): this tree {record['cold_compile_s']['current']:.2f} s, "
              f"previous release {args.previous} {record['cold_compile_s']['previous']:.2f} s")
        variables, values = identical_to_previous(previous_env)
        record["identical_to_previous"] = {"variables": variables, "values": values}
        print(f"identical to previous release {args.previous}: {variables} data variables, {values:,} values of "
              f"small sweeps of the three models, bit for bit")
    for key in keys:
        flags = ["--repeats", str(args.repeats), "--unit-repeats", str(args.unit_repeats),
                 "--baseline-sample", str(args.baseline_sample), "--identical-samples", str(args.identical_samples)]
        figures = run_child(Path(__file__), key, flags)
        if previous_env is not None:  # right after, same flags (fewer baseline and identity samples: not compared)
            flags_prev = ["--repeats", str(args.repeats), "--unit-repeats", str(args.unit_repeats),
                          "--baseline-sample", "20", "--identical-samples", "0"]
            old = run_child(previous_script, key, flags_prev, previous_env)
            figures["previous"] = {k: old[k] for k in ("seconds", "configs_per_s_best", "configs_per_s_median",
                                                       "configs_per_s_stall_free", "machine_stall_share")}
        prefix = SWEEPS[key][5]
        if prefix == "a":  # flat keys, as before, so older results stay comparable
            record.update({
                "a_configs": figures["configs"], "a_legal_feasible": figures["legal_feasible"],
                "machine_stall_share": figures["machine_stall_share"],
                "machine_spin_median_s": figures["machine_spin_median_s"],
                "a_seconds": figures["seconds"], "a_configs_per_s_best": figures["configs_per_s_best"],
                "a_configs_per_s_median": figures["configs_per_s_median"],
                "a_stall_free_seconds": figures["stall_free_seconds"],
                "a_configs_per_s_stall_free": figures["configs_per_s_stall_free"],
                "c_baseline_python_configs_per_s": figures["baseline_python_configs_per_s"],
                "identical_points_checked": figures["identical_points_checked"],
                "peak_rss_mib": figures["peak_rss_mib"],
            })
        record[{"a": "a_llama2_70b", "b": "b_dlrm_a", "c_prime": "c_prime_vit_10b"}[prefix]] = figures
        print_one(key, figures, args.unit_repeats)
        if previous_env is not None:
            p = figures["previous"]
            print(f"       previous release {args.previous}: {p['configs_per_s_best']:,.0f} configs/s wall, best; "
                  f"{p['configs_per_s_median']:,.0f} median; {p['configs_per_s_stall_free']:,.0f} stall-free "
                  f"(runs: {', '.join(f'{x:.2f}' for x in p['seconds'])} s; machine stalls "
                  f"{100 * p['machine_stall_share']:.0f} %)")
            print(f"       this tree / previous release: {figures['configs_per_s_best'] / p['configs_per_s_best']:.3f} "
                  f"best, {figures['configs_per_s_median'] / p['configs_per_s_median']:.3f} median, "
                  f"{figures['configs_per_s_stall_free'] / p['configs_per_s_stall_free']:.3f} stall-free")

    if args.zarr_configs:
        with tempfile.TemporaryDirectory(dir=os.environ.get("FASTMODEL_BENCH_TMP")) as tmp:
            result = subprocess.run([sys.executable, "-c", ZARR_CHILD, str(int(args.zarr_configs)),
                                     str(Path(tmp) / "big.zarr")], check=True, capture_output=True, text=True)
            z = json.loads(result.stdout.strip().splitlines()[-1])
        record["zarr"] = z
        print(f"zarr stream, {z['configs']:,} configs  {z['configs'] / z['seconds']:12,.0f} configs/s "
              f"({z['seconds']:.0f} s), peak RSS {z['peak_rss_mib']:.0f} MiB")

    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_sweep.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
