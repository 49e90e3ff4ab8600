"""Benchmark: time to calibrate on 100 measured runs.

The 65 dev runs (tests/data/runs_dev.jsonl) are replicated to 100: each copy
beyond the first 65 is a dev run with its global batch doubled (grad_accum
doubled when given) and its measured step time doubled, times a random factor
in [0.95, 1.05] -- a different configuration of the same cluster. Prints:
  * engine warm-up (numba cache load) -- excluded from the figures below;
  * the fit alone (identifiability, coarse stages, refinement), its engine calls and parameters fitted;
  * the whole `fastmodel calibrate` work: fit + before/after tables + 5-fold cross-validation, grouped by the
    original run (a dev run and its copies share a fold: no copy of a held-out run is fitted on);
  * the in-sample and cross-validated step-time MAPE.
Best of ``--repeat`` runs (default 3).

    python bench/bench_calibrate.py [--runs 100] [--folds 5] [--repeat 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time
from pathlib import Path

DEV = Path(__file__).resolve().parent.parent / "tests" / "data" / "runs_dev.jsonl"


def replicated(n: int, seed: int) -> list[dict]:
    base = [json.loads(line) for line in DEV.read_text().splitlines() if line.strip()]
    rng = random.Random(seed)
    out = list(base[:n])
    while len(out) < n:
        run = copy.deepcopy(base[len(out) % len(base)])
        run["id"] = f"{run['id']}-x2-{len(out)}"
        run["plan"]["global_batch"] *= 2
        if run["plan"].get("grad_accum"):
            run["plan"]["grad_accum"] *= 2
        run["measured"] = {"step_time_s": run["measured"]["step_time_s"] * 2 * rng.uniform(0.95, 1.05)}
        out.append(run)
    return out


def original_id(run_id: str) -> str:
    """The dev run a synthetic copy ``<id>-x2-N`` was made from (the id itself for a dev run): the CV's group, so
    a run and its copies share a fold (group k-fold) and no copy of a held-out run is fitted on."""
    return run_id.split("-x2-")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from fastmodel.lm.calibrate.fit import fit
    from fastmodel.lm.calibrate.overlay import apply_calibration
    from fastmodel.lm.calibrate.report import cross_validate
    from fastmodel.lm.records import lower_record
    from fastmodel.lm.validate import group_scores, rows

    runs = replicated(args.runs, args.seed)
    records = [lower_record(run, f"run {i}") for i, run in enumerate(runs)]
    originals = [original_id(run["id"]) for run in runs]
    start = time.perf_counter()
    rows(records[:2])
    warm = time.perf_counter() - start
    fit_times, total_times = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = fit(records)
        fit_times.append(time.perf_counter() - start)
        cal = result.calibration()
        before, after = rows(records), rows(apply_calibration(records, cal))
        cv = cross_validate(records, args.folds, groups=originals) if args.folds else None
        total_times.append(time.perf_counter() - start)

    def mape(table):
        return 100 * group_scores(table, None)[0][1].mape

    n_fit = sum(p.fitted for p in result.parameters)
    print(f"machine: {os.cpu_count()} CPUs; runs: {len(records)} ({min(args.runs, 65)} dev + "
          f"{max(0, args.runs - 65)} perturbed copies)")
    print(f"engine warm-up (numba cache load): {warm:.2f} s")
    print(f"fit: {min(fit_times):.2f} s (best of {args.repeat}); {result.evaluations} engine calls, "
          f"{n_fit} of {len(result.parameters)} parameters fitted")
    print(f"calibrate (fit + error tables + {args.folds}-fold CV): {min(total_times):.2f} s (best of {args.repeat})")
    print(f"step-time MAPE: before {mape(before):.1f}%, after {mape(after):.1f}%"
          + (f", {args.folds}-fold CV {mape(cv):.1f}%" if cv else ""))


if __name__ == "__main__":
    main()
