"""Diagnostic: the low-load TTFT excess (measured − model) by engine, GPU, model and TP (docs/model_serving.md §S27).

A cost of the benchmark harness (client, HTTP server, tokenizer, detokenizer) is the same at every TP when one
recipe only changes the TP size. So the excess at TP 1 bounds what the harness adds per request, and an excess
that grows with TP comes from the server's multi-rank path or from prefill work that scales worse than modelled.
The excess is also printed in units of the measured TPOT: a stream interval that held the first token back for
k iterations would show as a constant k. Rows with attention DP or expert parallelism are left out (their
layouts differ in more than TP).

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_floor.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--max-n 8]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_rows  # noqa: E402  (bench/ is not a package)


def excess(csv_path: str, records_path: str, max_n: int) -> dict:
    """{(framework, gpu, model, tp): [(TTFT excess s, excess / measured TPOT)]} of the answered rows with
    N <= ``max_n``, no attention DP and no expert parallelism."""
    out = defaultdict(list)
    for row, s in answered_rows(csv_path, records_path):
        if int(s.get("concurrency") or 0) > max_n:
            continue
        if int(s.get("attention_dp") or 1) > 1 or int(s.get("ep") or 1) > 1:
            continue
        gap = float(row["measured_ttft_s"]) - float(row["predicted_ttft_s"])
        out[(row["framework"], row["gpu"], row["model"], int(s["tp"]))].append(
            (gap, gap / float(row["measured_tpot_s"])))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--max-n", type=int, default=8)
    args = ap.parse_args()
    print("framework | gpu | model | tp | rows | median excess (ms) | range (ms) | median excess / TPOT")
    for key, rows in sorted(excess(args.csv, args.records, args.max_n).items()):
        gaps = [g for g, _ in rows]
        print(" | ".join(str(k) for k in key) + f" | {len(rows)} | {statistics.median(gaps) * 1e3:6.1f} | "
              f"{min(gaps) * 1e3:.0f}..{max(gaps) * 1e3:.0f} | {statistics.median(k for _, k in rows):5.1f}")


if __name__ == "__main__":
    main()
