"""Benchmark: the memory kernel alone (kernels/lm/memory.py), configurations per second.

Evaluates ``memory_table`` on a grid of Llama-3-70B-shaped training configurations that vary the plan
degrees, pipeline schedule, sharding stage, recompute mode and micro-batch (so every branch of the
kernel is taken), best of ``--repeat`` runs, with one thread and with all numba threads: configurations
per second of wall time and CPU nanoseconds per configuration (the steadier figure on a shared machine).
Prints the load average next to the figures: on a shared machine the wall figures are a lower bound.

    python bench/bench_memory.py [--configs 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from fastmodel.kernels.lm.memory import memory_table
from fastmodel.lm.table import table


def grid(n: int) -> np.ndarray:
    i = np.arange(n)
    return table(
        n, layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=128256, seq_len=8192,
        tp=np.array([1, 2, 4, 8])[i % 4], pp=np.array([1, 2, 4, 8])[(i // 4) % 4],
        vp=np.array([1, 2])[(i // 16) % 2], pipeline_schedule=np.array([0, 1, 2])[(i // 32) % 3],
        sharding=np.array([0, 1, 2, 3])[(i // 96) % 4], recompute=np.array([0, 1, 2, 3])[(i // 384) % 4],
        recompute_fraction=0.5, micro_batch=np.array([1, 2, 4])[(i // 1536) % 3], dp=16, global_batch=1024)


def best_time(params: np.ndarray, repeat: int) -> tuple[float, float]:
    """Best wall time and best process CPU time (all threads) of ``repeat`` runs."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        memory_table(params)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    params = grid(args.configs)
    start = time.perf_counter()
    memory_table(params[:, :8])
    print(f"compile or cache load: {time.perf_counter() - start:.2f} s")
    threads = numba.get_num_threads()
    for n_threads in sorted({1, threads}):
        numba.set_num_threads(n_threads)
        wall, cpu = best_time(params, args.repeat)
        print(f"memory_table, {args.configs:,} configs, {n_threads} thread(s): {args.configs / wall / 1e6:.2f} M "
              f"configs/s wall, {cpu / args.configs * 1e9:.0f} ns CPU per config")
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
