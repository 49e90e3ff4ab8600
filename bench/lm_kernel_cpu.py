"""CPU seconds of the lm grid kernel alone on the dense sweep of bench_lm_sweep.py, and a hash of its results.

On the shared 2-core VM wall-clock configs/s swing with the other sessions' load; the user CPU seconds of the
kernel call (``kernels/lm/grid.py`` ``evaluate_grid``, timed by ``getrusage`` around it, one numba thread) are
the steadier figure, and the sha256 of its status and result arrays says whether two trees computed the same
bits. Run it in each tree to compare, alternating the trees round by round so the load hits both alike, e.g.

    for round in 1 2 3; do
      for tree in /tmp/old-tree .; do (cd $tree && NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD python $OLDPWD/bench/lm_kernel_cpu.py); done
    done

Prints one JSON line: the tree, each repeat's user and wall seconds of the kernel call, the legal points and the
hash. ``--model``/``--batches`` narrow the grid (the MoE model's full grid holds a 3.7 GB result matrix).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import time

NODES = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
MICRO = [1, 2, 4, 8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="llama3.1-70b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=128, help="global batches 64, 128, ..., 64 x BATCHES")
    args = parser.parse_args()

    import numpy as np

    import fastmodel.kernels.lm.grid as grid
    from fastmodel.lm.sweep import lm_sweep

    calls = []
    kernel = grid.evaluate_grid

    def timed(*call_args):
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        kernel(*call_args)
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        status, out = call_args[6], call_args[7]
        digest = hashlib.sha256(status.tobytes() + np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
        calls.append((after.ru_utime - before.ru_utime, wall, digest))

    grid.evaluate_grid = timed     # sweep_plan.evaluate_unit imports it from the module at each call
    lm_sweep(args.model, "dgx-h100", "llm-pretrain", axes={"plan": ["tp8"], "num_nodes": [4]})   # load or compile
    calls.clear()
    axes = {"num_nodes": NODES, "global_batch": [64 * i for i in range(1, args.batches + 1)], "micro_batch": MICRO,
            "plan": "all"}
    for _ in range(args.repeats):
        ds = lm_sweep(args.model, "dgx-h100", "llm-pretrain", axes=axes)
    print(json.dumps({"tree": os.getcwd(), "model": args.model, "points": int(ds.status.size),
                      "legal": int((ds.status == 0).sum()), "user_s": [round(c[0], 3) for c in calls],
                      "wall_s": [round(c[1], 3) for c in calls], "hash": sorted({c[2] for c in calls})}))


if __name__ == "__main__":
    main()
