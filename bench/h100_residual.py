"""Diagnostic: which modelled component the H100 residual scales with (docs/model.md §11.30, issue 26).

For every row of the given run files on the named GPUs, E = measured - predicted step time is printed beside the
modelled components (GEMM, attention, memory-bound, optimizer, exposed communication, bubble, host wait) and
E / component. A component that E scales with shows a near-constant E / component across rows of different
shapes, stacks and scales; its coefficient of variation (std / mean) is printed per GPU. This is a
diagnostic, not a fit: no constant is derived from it.

    python bench/h100_residual.py tests/data/runs_dev.jsonl tests/data/runs_fsdp_public.jsonl --gpu H100 A100
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

COMPONENTS = ("time_gemm", "time_attention", "time_memory_bound", "time_optimizer", "exposed_comm",
              "pipeline_bubble", "time_host_wait")
EXPOSED = ("exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "exposed_dp")


def gpu_family(name: str) -> str:
    """'H100', 'H200', 'A100', ... from a record's GPU name (its first token before '-')."""
    return name.split("-")[0]


def component_rows(paths: list[str], families: set[str]) -> list[dict]:
    """One dict per predicted record on ``families``: id, file, gpu, measured, predicted, E and components (s)."""
    from fastmodel.lm.records import read_records, with_measurements
    from fastmodel.lm.validate import predict_records

    out = []
    for path in paths:
        records = [r for r in with_measurements(read_records(path), path)[0] if gpu_family(r.gpu) in families]
        if not records:
            continue
        res = predict_records(records)
        for i, r in enumerate(records):
            measured = float(r.measured["step_time_s"])
            row = {"id": r.id, "file": Path(path).name, "gpu": gpu_family(r.gpu), "stack": r.stack,
                   "measured": measured, "predicted": float(res["step_time"][i])}
            row["E"] = row["measured"] - row["predicted"]
            for c in COMPONENTS:
                row[c] = float(sum(res[e][i] for e in EXPOSED)) if c == "exposed_comm" else float(res[c][i])
            out.append(row)
    return out


def ratio_spread(rows: list[dict], component: str) -> tuple[float, float]:
    """(mean, coefficient of variation) of E / component over ``rows`` whose component is > 1% of the step."""
    ratios = [r["E"] / r[component] for r in rows if r[component] > 0.01 * r["predicted"]]
    if len(ratios) < 2:
        return float("nan"), float("nan")
    mean = statistics.fmean(ratios)
    return mean, statistics.pstdev(ratios) / abs(mean) if mean else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--gpu", nargs="+", default=["H100", "A100"])
    args = ap.parse_args()
    rows = component_rows(args.files, set(args.gpu))
    short = {"time_gemm": "gemm", "time_attention": "attn", "time_memory_bound": "membd", "time_optimizer": "opt",
             "exposed_comm": "expcomm", "pipeline_bubble": "bubble", "time_host_wait": "host"}
    print("file | id | gpu | stack | measured s | error | E s | " + " | ".join(f"{short[c]} s" for c in COMPONENTS)
          + " | E/gemm | E/membd")
    for r in rows:
        comps = " | ".join(f"{r[c]:.3g}" for c in COMPONENTS)
        eg = r["E"] / r["time_gemm"] if r["time_gemm"] > 0 else np.nan
        em = r["E"] / r["time_memory_bound"] if r["time_memory_bound"] > 0 else np.nan
        print(f"{r['file']} | {r['id']} | {r['gpu']} | {r['stack']} | {r['measured']:.4g} | "
              f"{r['predicted'] / r['measured'] - 1:+.1%} | {r['E']:+.3g} | {comps} | {eg:+.2f} | {em:+.2f}")
    print("\ngpu | rows | median error | " + " | ".join(f"E/{short[c]} mean (cv)" for c in COMPONENTS))
    for fam in args.gpu:
        sel = [r for r in rows if r["gpu"] == fam]
        if not sel:
            continue
        cells = []
        for c in COMPONENTS:
            mean, cv = ratio_spread(sel, c)
            cells.append(f"{mean:+.2f} ({cv:.2f})")
        med = statistics.median(r["predicted"] / r["measured"] - 1 for r in sel)
        print(f"{fam} | {len(sel)} | {med:+.1%} | " + " | ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
