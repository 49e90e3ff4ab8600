"""Diagnostic: which modelled component the H100 residual scales with (docs/model.md §11.30, issue 26).

Reads the CSV of ``fastmodel validate -o`` and, for every row on the named GPUs, prints E = measured - predicted
step time beside the modelled components (GEMM, attention, memory-bound, exposed communication, bubble) and
E / component. A component that E scales with shows a near-constant E / component across rows of different
shapes, stacks and scales; its mean and coefficient of variation (std / mean) are printed per GPU. This is a
diagnostic, not a fit: no constant is derived from it.

    fastmodel validate tests/data/runs_dev.jsonl --heldout -o /tmp/rd.csv
    python bench/h100_residual.py /tmp/rd.csv [more.csv ...] --gpu H100 A100 H200
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np

COMPONENTS = ("time_gemm", "time_attention", "time_memory_bound", "exposed_comm", "pipeline_bubble")
EXPOSED = ("exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "exposed_dp")


def gpu_family(name: str) -> str:
    """'H100', 'H200', 'A100', ... from a record's GPU name (its first token before '-')."""
    return name.split("-")[0]


def heldout_ids() -> set[str]:
    """The frozen held-out ids of every file (tests/data/heldout.json): listed, left out of the summary."""
    import json

    path = Path(__file__).resolve().parents[1] / "tests" / "data" / "heldout.json"
    return {i for ids in json.loads(path.read_text())["files"].values() for i in ids}


def component_rows(paths: list[str], families: set[str]) -> list[dict]:
    """One dict per answered row of the ``validate -o`` CSVs on ``families``: id, file, gpu, stack, measured,
    predicted, E and the components (s)."""
    out = []
    for path in paths:
        with open(path, newline="") as handle:
            for raw in csv.DictReader(handle):
                if raw["status"] != "ok" or gpu_family(raw["gpu"]) not in families:
                    continue
                row = {
                    "id": raw["id"],
                    "file": Path(path).name,
                    "gpu": gpu_family(raw["gpu"]),
                    "stack": raw["stack"],
                    "source": raw["source"],
                    "measured": float(raw["measured_step_time_s"]),
                    "predicted": float(raw["predicted_step_time_s"]),
                }
                row["E"] = row["measured"] - row["predicted"]
                for c in COMPONENTS:
                    names = EXPOSED if c == "exposed_comm" else (c,)
                    row[c] = sum(float(raw[n] or 0.0) for n in names)
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
    held = heldout_ids()
    short = {
        "time_gemm": "gemm",
        "time_attention": "attn",
        "time_memory_bound": "membd",
        "exposed_comm": "expcomm",
        "pipeline_bubble": "bubble",
    }
    print(
        "file | id | gpu | stack | measured s | error | E s | "
        + " | ".join(f"{short[c]} s" for c in COMPONENTS)
        + " | E/gemm | E/membd"
    )
    for r in rows:
        comps = " | ".join(f"{r[c]:.3g}" for c in COMPONENTS)
        eg = r["E"] / r["time_gemm"] if r["time_gemm"] > 0 else np.nan
        em = r["E"] / r["time_memory_bound"] if r["time_memory_bound"] > 0 else np.nan
        tag = " (held-out)" if r["id"] in held else ""
        print(
            f"{r['file']} | {r['id']}{tag} | {r['gpu']} | {r['stack']} | {r['measured']:.4g} | "
            f"{r['predicted'] / r['measured'] - 1:+.1%} | {r['E']:+.3g} | {comps} | {eg:+.2f} | {em:+.2f}"
        )
    print(
        "\ndev rows only (held-out left out)\ngpu | rows | median error | "
        + " | ".join(f"E/{short[c]} mean (cv)" for c in COMPONENTS)
    )
    for fam in args.gpu:
        sel = [r for r in rows if r["gpu"] == fam and r["id"] not in held]
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
