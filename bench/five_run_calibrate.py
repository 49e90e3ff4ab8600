"""Calibration from a handful of runs (issue 26 item 6): fit on 5 runs of one stack, predict that stack's others.

For every (file, stack) group of measured runs in ``tests/data`` with at least 10 runs -- a stack as the
calibration keys it (``overlay.stack_key``: the resolved stack profile, ``default:TEXT`` for a framework text
naming none; ``--group profile``: the profile alone, so every unnamed stack of a file is one group) -- the 5
runs whose ids have the smallest SHA-256 are the calibration set (a choice made before any fit, blind to the errors), and
the rest of the group is predicted before and after. Printed per group: step-time MAPE and median |error| of
the predicted runs, uncalibrated and calibrated (default prior: chosen by leave-one-out on the five), the pull
chosen, which parameters 5 runs identified (``fitted``), and which they left at their physical values with the
reason the fit gives (those with no run of their kind, or too weak, counted). ``--detail``: per run of each
group (the five marked ``cal``), its error before and after and where its uncalibrated predicted step goes
(``fastmodel validate -o`` columns as shares of it: GEMM, attention, memory-bound, exposed TP / EP / DP), the
per-run reading docs/calibration.md quotes for the groups over 8%.

    python bench/five_run_calibrate.py [--runs 5] [--min-group 10] [--group key|profile] [--detail]
        [--files runs_moe_public.jsonl ...]
"""

from __future__ import annotations

import argparse
import hashlib
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
#: statuses summarised in a count, not listed: no run of the kind, or no run moved by the probe
QUIET = ("no ", "too weak")
#: ``--detail``: validate columns printed as shares of the uncalibrated predicted step
PARTS = {"time_gemm": "gemm", "time_attention": "attn", "time_memory_bound": "mem-bnd", "exposed_tp": "exp.tp",
         "exposed_ep": "exp.ep", "exposed_dp": "exp.dp"}
FILES = ("runs_dev.jsonl", "runs_dev_small.jsonl", "runs_dev_b200.jsonl", "runs_fsdp_public.jsonl",
         "runs_moe_public.jsonl", "runs_small_public.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs to calibrate on per stack")
    parser.add_argument("--min-group", type=int, default=10, help="smallest stack group scored")
    parser.add_argument("--group", choices=("key", "profile"), default="key",
                        help="group runs by the calibration's stack key (default) or by stack profile")
    parser.add_argument("--files", nargs="+", default=FILES, metavar="NAME",
                        help="files of tests/data to score (default: the six above)")
    parser.add_argument("--detail", action="store_true",
                        help="print every run of a group: error before and after, parts of its predicted step")
    args = parser.parse_args()

    import numpy as np

    from fastmodel.lm.calibrate.fit import calibrate
    from fastmodel.lm.calibrate.overlay import apply_calibration, record_stack_key
    from fastmodel.lm.records import read_records, with_measurements
    from fastmodel.lm.validate import rows

    def errors(records):
        return np.array([abs(r["error"]) if np.isfinite(r["error"]) else np.inf for r in rows(records)])

    print(f"calibrate on {args.runs} runs of a stack (smallest sha256 of id), predict the stack's other runs")
    print(f"{'file':24s} {'stack':16s} {'n':>4s}  {'MAPE before':>11s} {'after':>7s}  "
          f"{'median before':>13s} {'after':>7s}")
    for name in args.files:
        measured, _ = with_measurements(read_records(DATA / name, refused=[]), DATA / name)
        groups = defaultdict(list)
        for record, row in zip(measured, rows(measured)):
            groups[str(record_stack_key(record)) if args.group == "key" else row["stack"]].append(record)
        for stack, group in sorted(groups.items()):
            if len(group) < args.min_group:
                continue
            group.sort(key=lambda r: hashlib.sha256(r.id.encode()).hexdigest())
            train, test = group[:args.runs], group[args.runs:]
            result = calibrate(train)
            before, after = errors(test), errors(apply_calibration(test, result.calibration()))
            print(f"{name:24s} {stack:16s} {len(test):4d}  {100 * before.mean():10.1f}% {100 * after.mean():6.1f}%"
                  f"  {100 * np.median(before):12.1f}% {100 * np.median(after):6.1f}%")
            fitted = [f"{p.label} {p.start:g}->{p.value:.3g}" for p in result.parameters if p.fitted]
            print(f"{'':42s}pull {result.prior:g}: {result.prior_rule}")
            for line in result.selection:   # leave-one-out's factors kept and dropped, with its mean costs
                print(f"{'':42s}{line}")
            print(f"{'':42s}fitted: {', '.join(fitted) or 'none'}")
            kept = [p for p in result.parameters if not p.fitted]
            quiet = [p for p in kept if p.status.startswith(QUIET)]
            for p in kept:
                if not p.status.startswith(QUIET):
                    print(f"{'':42s}held: {p.label}: {p.status}")
            print(f"{'':42s}held: {len(quiet)} more (no run of their kind, or too weak)")
            if args.detail:
                print_detail(rows(group), rows(apply_calibration(group, result.calibration())), args.runs)


def print_detail(before: list[dict], after: list[dict], n_train: int) -> None:
    """One line per run (``validate.rows`` uncalibrated and calibrated): id, the five marked ``cal``, error
    before -> after, and the shares of its uncalibrated predicted step in ``PARTS``."""
    print(f"{'':6s}{'run':52s} {'':3s} {'before':>7s} {'after':>7s}  "
          + " ".join(f"{label:>8s}" for label in PARTS.values()))
    for i, (b, a) in enumerate(zip(before, after)):
        step = b["predicted_step_time_s"]
        shares = " ".join(f"{100 * b[name] / step:7.1f}%" for name in PARTS)
        print(f"{'':6s}{str(b['id'])[:52]:52s} {'cal' if i < n_train else '':3s} {100 * b['error']:+6.1f}% "
              f"{100 * a['error']:+6.1f}%  {shares}")


if __name__ == "__main__":
    main()
