"""Diagnostic: the gpt-oss-120b TTFT error split by engine x GPU x precision x concurrency (docs/model_serving.md §S46).

Reads a ``fastmodel validate -o`` CSV of ``serve_dev_load.jsonl`` and prints, per group, the row count, the TTFT
MAPE and bias (signed mean of (predicted - measured) / measured) and the mean gap (measured - predicted, ms), by
split; then the same by prompt length and TP inside each engine x GPU group.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_gptoss_ttft.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--model gpt-oss-120b] [--metric ttft]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_rows  # noqa: E402  (bench/ is not a package)


def error_stats(pairs: list[tuple[float, float]]) -> tuple[int, float, float, float]:
    """(count, MAPE %, bias %, mean measured - predicted in ms) of (measured, predicted) pairs in seconds."""
    if not pairs:
        return 0, 0.0, 0.0, 0.0
    rel = [(p - m) / m for m, p in pairs]
    n = len(pairs)
    return (n, 100.0 * sum(abs(r) for r in rel) / n, 100.0 * sum(rel) / n,
            1e3 * sum(m - p for m, p in pairs) / n)


def split_table(csv_path: str, records_path: str, model: str, metric: str, key_of, max_n: int = 1 << 30) -> dict:
    """{key: {split: [(measured, predicted)]}} of the answered rows of ``model`` with at most ``max_n`` requests in
    flight; ``key_of(row, serve)``."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for row, s in answered_rows(csv_path, records_path):
        if row["model"] != model or int(s.get("concurrency") or 0) > max_n:
            continue
        pair = (float(row[f"measured_{metric}_s"]), float(row[f"predicted_{metric}_s"]))
        key = key_of(row, s)
        out[key][row.get("split") or "all"].append(pair)
        if row.get("split"):
            out[key]["all"].append(pair)
    return out


def engine_group(row: dict, s: dict) -> tuple:
    return (row["framework"], row["gpu"], row["precision"], str(s.get("moe_backend", "-")))


def load_band(n: int) -> str:
    return "N<=8" if n <= 8 else ("N16-32" if n <= 32 else "N>=64")


def _print(title: str, table: dict) -> None:
    print(f"\n{title}\n{'group':90s} | split | rows | MAPE | bias | gap ms")
    for key in sorted(table, key=str):
        for split in ("dev", "held-out", "all"):
            pairs = table[key].get(split)
            if pairs:
                n, mape, bias, gap = error_stats(pairs)
                print(f"{' | '.join(str(k) for k in key):90s} | {split:8s} | {n:4d} | {mape:5.1f} | {bias:+6.1f} | "
                      f"{gap:+7.1f}")


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--metric", default="ttft", choices=("ttft", "tpot"))
    ap.add_argument("--max-n", type=int, default=1 << 30, help="only rows with at most this many requests in flight")
    args = ap.parse_args()
    t = (args.csv, args.records, args.model, args.metric)
    _print("engine x GPU x precision x MoE backend", split_table(*t, engine_group, args.max_n))
    _print("... x concurrency band", split_table(*t, lambda r, s: (*engine_group(r, s),
                                                                   load_band(int(s.get("concurrency") or 0))), args.max_n))
    _print("... x TP x prompt length", split_table(*t, lambda r, s: (*engine_group(r, s), f"tp{s['tp']}",
                                                                     f"I{s['input_len']}"), args.max_n))


if __name__ == "__main__":
    main()
