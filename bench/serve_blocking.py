"""Diagnostic: how long a prompt's prefill blocks the other requests' decodes, measured against the model.

In a closed loop of ``N`` requests each request prefills once per cycle, so while one request decodes its
``O - 1`` tokens the other ``N - 1`` each prefill about once. An iteration that carries a prefill also carries
the decodes (TensorRT-LLM and vLLM in-flight batching), so every ``ΔT`` it adds over a decode-only iteration
is seen by all decoding requests:

    TPOT(O) ≈ T_d + (N - 1) ΔT / (O - 1)
    ΔT ≈ (TPOT(O1) - TPOT(O2)) / ((N - 1) (1/(O1 - 1) - 1/(O2 - 1)))        (O1 < O2, all else equal)

The same estimator is applied to the model's predicted TPOT (its ``ΔT`` and its context drift, T_d at the
longer mean context of O2, cancel in the comparison). A TTFT that is longer than predicted while the measured
``ΔT`` is no longer than the model's is latency outside the engine's iteration loop: no per-iteration cost
(host issue, a sync, a slow kernel) can explain it, because it would stall the decodes too
(docs/model_serving.md §S24). Noise: ``ΔT`` inherits the TPOT noise divided by ``(N - 1)(1/(O1-1) - 1/(O2-1))``.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_blocking.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--engine TensorRT-LLM] [--max-n 32]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_rows  # noqa: E402  (bench/ is not a package)


def blocking(tpot_short: float, tpot_long: float, n: int, o_short: int, o_long: int) -> float:
    """Seconds one prefill adds to the iterations the other requests decode in (module docstring)."""
    return (tpot_short - tpot_long) / ((n - 1) * (1.0 / (o_short - 1) - 1.0 / (o_long - 1)))


def groups(csv_path: str, records_path: str, engine: str, max_n: int) -> dict:
    """{(framework, gpu, model, precision, tp, ep, input_len, N): {output_len: (tpot, tpot_model, ttft,
    ttft_model)}} of the answered rows of ``engine`` with 2 <= N <= ``max_n``."""
    out = defaultdict(dict)
    for row, s in answered_rows(csv_path, records_path):
        if row["engine"] != engine:
            continue
        n = int(s.get("concurrency") or 0)
        if not 2 <= n <= max_n:
            continue
        key = (row["framework"], row["gpu"], row["model"], row["precision"], s["tp"], s.get("ep", 1),
               s["input_len"], n)
        out[key][int(s["output_len"])] = tuple(float(row[c]) for c in (
            "measured_tpot_s", "predicted_tpot_s", "measured_ttft_s", "predicted_ttft_s"))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--engine", default="TensorRT-LLM")
    ap.add_argument("--max-n", type=int, default=32)
    args = ap.parse_args()
    print("framework | gpu | model | prec | tp | ep | I | N | O1-O2 | dT measured | dT model | "
          "TTFT measured | TTFT model (at O2, ms)")
    for key, by_o in sorted(groups(args.csv, args.records, args.engine, args.max_n).items()):
        if len(by_o) < 2:
            continue
        o1, o2 = min(by_o), max(by_o)
        n = key[-1]
        dm = blocking(by_o[o1][0], by_o[o2][0], n, o1, o2)
        dp = blocking(by_o[o1][1], by_o[o2][1], n, o1, o2)
        print(" | ".join(str(k) for k in key) + f" | {o1}-{o2} | {dm * 1e3:7.1f} | {dp * 1e3:6.1f} | "
              f"{by_o[o2][2] * 1e3:6.0f} | {by_o[o2][3] * 1e3:5.0f}")


if __name__ == "__main__":
    main()
