"""Diagnostic: where the Qwen3-235B-A22B-FP8 and H100 TTFT error of serve_dev_load.jsonl lives, by the harness that
measured the rows, and how the error moves with the prompt (docs/model_serving.md §S53). Nothing here feeds a
prediction.

Three tables over the answered rows of a ``fastmodel validate -o`` CSV:

1. ``kind``: per (harness kind, model, framework, GPU) the TTFT MAPE and bias and the TPOT bias. Kind ``B`` is a
   record whose ``aic.provenance.source_file`` lies under ``aic-auto-gap-analysis/`` (aiconfigurator's generated
   Dynamo + aiperf benchmark, §S27, §S32, §S34), kind ``A`` every other row (§S27's InferenceX-like recipes).
2. ``slices``: the Qwen3-235B rows per (framework, GPU, TP, EP, N bucket, ISL): rows, median measured and predicted
   TTFT (ms), the median excess (measured - predicted, ms) and the TTFT bias.
3. ``isl``: per (framework, GPU, TP, EP, N, OSL) with at least two prompt lengths, the least-squares slope of the
   measured and of the predicted TTFT against ISL (ms per 1,000 prompt tokens). A prefill term the model lacks
   (expert compute, FP8 block scaling, a prefill collective, queued prefill work) grows with the prompt: its
   measured slope exceeds the model's. A measured slope at or below the model's with a larger TTFT says the
   missing time does not scale with the prompt.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_kind_split.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--model Qwen3-235B-A22B-FP8]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_records  # noqa: E402  (bench/ is not a package)

GAP_ANALYSIS = "aic-auto-gap-analysis"


def kind(record: dict) -> str:
    """``"B"`` for an aiconfigurator gap-analysis row (Dynamo front end, aiperf client), else ``"A"``."""
    src = ((record.get("aic") or {}).get("provenance") or {}).get("source_file") or ""
    return "B" if src.split("/")[0] == GAP_ANALYSIS else "A"


def n_bucket(n: int) -> str:
    """The load bucket of ``n`` requests in flight: ``"1-4"``, ``"5-8"``, ``"9-16"``, ``"17-32"`` or ``"33+"``."""
    for hi, label in ((4, "1-4"), (8, "5-8"), (16, "9-16"), (32, "17-32")):
        if n <= hi:
            return label
    return "33+"


def slope_per_k(isls, times) -> float:
    """Least-squares slope of ``times`` (s) against ``isls`` (tokens), in seconds per 1,000 prompt tokens."""
    x = np.asarray(isls, dtype=float) / 1000.0
    A = np.c_[np.ones(len(x)), x]
    return float(np.linalg.lstsq(A, np.asarray(times, dtype=float), rcond=None)[0][1])


def rows(csv_path: str, records_path: str):
    """(CSV row, record) of every answered row whose id is a record of ``records_path``."""
    yield from answered_records(csv_path, records_path)


def _err(row: dict, metric: str) -> float:
    return float(row[f"predicted_{metric}_s"]) / float(row[f"measured_{metric}_s"]) - 1.0


def by_kind(pairs) -> dict:
    """{(kind, model, framework, gpu): (rows, TTFT MAPE, TTFT bias, TPOT bias)}."""
    acc = defaultdict(list)
    for row, rec in pairs:
        acc[(kind(rec), row["model"], row["framework"], row["gpu"])].append((_err(row, "ttft"), _err(row, "tpot")))
    return {k: (len(v), statistics.mean(abs(t) for t, _ in v), statistics.mean(t for t, _ in v),
                statistics.mean(p for _, p in v)) for k, v in sorted(acc.items())}


def by_slice(pairs, model: str) -> dict:
    """{(framework, gpu, tp, ep, N bucket, isl): (rows, median measured s, median predicted s, median excess s,
    mean TTFT error)} of ``model``'s rows."""
    acc = defaultdict(list)
    for row, rec in pairs:
        if row["model"] != model:
            continue
        s = rec["serve"]
        key = (row["framework"], row["gpu"], int(s["tp"]), int(s.get("ep") or 1),
               n_bucket(int(s.get("concurrency") or 0)), int(s["input_len"]))
        m, p = float(row["measured_ttft_s"]), float(row["predicted_ttft_s"])
        acc[key].append((m, p))
    return {k: (len(v), statistics.median(m for m, _ in v), statistics.median(p for _, p in v),
                statistics.median(m - p for m, p in v), statistics.mean(p / m - 1.0 for m, p in v))
            for k, v in sorted(acc.items())}


def by_isl(pairs, model: str) -> dict:
    """{(framework, gpu, tp, ep, N, osl): (ISLs, measured slope, predicted slope)} (s per 1,000 tokens) of
    ``model``'s groups that hold at least two prompt lengths."""
    acc = defaultdict(list)
    for row, rec in pairs:
        if row["model"] != model:
            continue
        s = rec["serve"]
        key = (row["framework"], row["gpu"], int(s["tp"]), int(s.get("ep") or 1), int(s.get("concurrency") or 0),
               int(s["output_len"]))
        acc[key].append((int(s["input_len"]), float(row["measured_ttft_s"]), float(row["predicted_ttft_s"])))
    out = {}
    for key, v in sorted(acc.items()):
        isls = [i for i, _, _ in v]
        if len(set(isls)) < 2:
            continue
        out[key] = (sorted(set(isls)), slope_per_k(isls, [m for _, m, _ in v]), slope_per_k(isls, [p for *_, p in v]))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--model", default="Qwen3-235B-A22B-FP8")
    args = ap.parse_args()
    pairs = list(rows(args.csv, args.records))
    print("kind | model | framework | gpu | rows | TTFT MAPE % | TTFT bias % | TPOT bias %")
    for key, (n, mape, bias, tbias) in by_kind(pairs).items():
        print(" | ".join(key) + f" | {n} | {mape * 100:.1f} | {bias * 100:+.1f} | {tbias * 100:+.1f}")
    print("\nframework | gpu | tp | ep | N | isl | rows | measured / predicted (ms) | excess (ms) | bias %")
    for key, (n, m, p, ex, bias) in by_slice(pairs, args.model).items():
        print(" | ".join(map(str, key)) + f" | {n} | {m * 1e3:.0f} / {p * 1e3:.0f} | {ex * 1e3:+.0f} | "
              f"{bias * 100:+.1f}")
    print("\nframework | gpu | tp | ep | N | osl | ISLs | slope measured / predicted (ms per 1k tokens)")
    for key, (isls, sm, sp) in by_isl(pairs, args.model).items():
        print(" | ".join(map(str, key)) + f" | {','.join(map(str, isls))} | {sm * 1e3:.1f} / {sp * 1e3:.1f}")


if __name__ == "__main__":
    main()
