"""Diagnostic: is the NVFP4 prefill priced too fast against FP8? (docs/model_serving.md §S59). Nothing here feeds a
prediction.

For each (engine, gpu, model, TP, N, ISL, OSL) measured at both ``fp4`` and ``fp8`` in one split of a
``validate -o`` CSV, the paired ratio

    q = (predicted TTFT fp4 / predicted TTFT fp8) / (measured TTFT fp4 / measured TTFT fp8)

cancels every cost and error the two precisions share (attention, scheduler, host, the TP floor of §S49): q < 1
says the model's FP4 GEMMs run too fast relative to its FP8 ones (q = 1: the ratio is right). Per engine and per
ISL: the pairs, the median and the geometric mean of q.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_fp4_ttft_pairs.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--split dev]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_tpot_split import key_of, split_rows  # noqa: E402  (bench/ is not a package)

SHAPE = ("engine", "gpu", "model", "tp", "concurrency", "isl", "osl")


def paired_ratios(rows: list[tuple[dict, dict]]) -> dict[tuple, float]:
    """{shape: q} of the shapes (:data:`SHAPE`) measured at both precisions (the first row of a shape and
    precision if repeated)."""
    by_shape = defaultdict(dict)
    for row, s in rows:
        by_shape[key_of(row, s, SHAPE)].setdefault(
            row["precision"], (float(row["measured_ttft_s"]), float(row["predicted_ttft_s"])))
    return {k: (v["fp4"][1] / v["fp8"][1]) / (v["fp4"][0] / v["fp8"][0])
            for k, v in by_shape.items() if "fp4" in v and "fp8" in v}


def summary(ratios: dict[tuple, float], index: int) -> list[tuple[object, int, float, float]]:
    """[(group, pairs, median q, geometric-mean q)] grouped by the shape field at ``index`` (0 engine, 5 ISL)."""
    groups = defaultdict(list)
    for key, q in ratios.items():
        groups[key[index]].append(q)
    return [(g, len(v), statistics.median(v), statistics.geometric_mean(v)) for g, v in sorted(groups.items())]


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--split", default="dev")
    args = ap.parse_args()
    ratios = paired_ratios(split_rows(args.csv, args.records, args.split))
    for title, index in (("engine", 0), ("isl", 5)):
        print(f"{title} | pairs | median q | geomean q")
        for group, n, med, geo in summary(ratios, index):
            print(f"{group} | {n} | {med:.3f} | {geo:.3f}")
        print()


if __name__ == "__main__":
    main()
