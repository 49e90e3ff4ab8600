"""Held-out check of calibration on the dev runs: fit on one half of tests/data/runs_dev.jsonl, predict the other.

The halves alternate over the runs sorted by id (as tests/test_calibrate.py); both directions are printed.
For each: step-time MAPE and median |error| of the held-out half before and after, under the default fit and
under ``--prior`` values given; then, for the default fit, the held-out MAPE by framework x GPU, which shows
where a per-device overlay fitted on other frameworks' runs helps and where it hurts.

    python bench/half_split_calibrate.py [--prior 0.5 2 cv]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

DEV = Path(__file__).resolve().parent.parent / "tests" / "data" / "runs_dev.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prior", nargs="*", default=[], help="extra pulls toward physical values (or 'cv')")
    args = parser.parse_args()

    import numpy as np

    from fastmodel.lm.calibrate.fit import calibrate
    from fastmodel.lm.calibrate.overlay import apply_calibration
    from fastmodel.lm.records import read_records
    from fastmodel.lm.validate import group_scores, rows

    def score(records):
        s = group_scores(rows(records), None)[0][1]
        return f"MAPE {100 * s.mape:5.2f}%  median {100 * s.median:5.2f}%"

    records = sorted(read_records(DEV), key=lambda r: r.id)
    halves = {"fit odd rows, predict even": (records[1::2], records[0::2]),
              "fit even rows, predict odd": (records[0::2], records[1::2])}
    for name, (train, test) in halves.items():
        print(f"{name} ({len(train)} / {len(test)} runs)")
        print(f"  before                  {score(test)}")
        for prior in ["0.5 (default)", *args.prior]:
            value = prior.split()[0]
            result = calibrate(train, prior=value if value == "cv" else float(value))
            print(f"  after, prior {prior:10s} {score(apply_calibration(test, result.calibration()))}"
                  + (f"  (cv chose {result.prior:g})" if value == "cv" else ""))
        cal = calibrate(train).calibration()
        before, after = rows(test), rows(apply_calibration(test, cal))
        groups = defaultdict(list)
        for record, b, a in zip(test, before, after):
            framework = str(record.raw.get("framework") or "(not stated)").split(" (")[0].split(",")[0]
            groups[(framework, b["gpu"])].append((abs(b["error"]), abs(a["error"])))
        for (framework, gpu), errors in sorted(groups.items()):
            e = np.array(errors)
            print(f"    {framework[:28]:28s} {gpu:15s} n={len(e):2d}  MAPE {100 * e[:, 0].mean():5.1f}% -> "
                  f"{100 * e[:, 1].mean():5.1f}%")
        fitted = [p for p in calibrate(train).parameters if p.fitted]
        print("    fitted: " + ", ".join(f"{p.label} {p.start:g}->{p.value:.3g}" for p in fitted))


if __name__ == "__main__":
    main()
