"""Diagnostic: how the low-load TTFT error moves with TP, N and the model's own prefill parts
(docs/model_serving.md §S49). Nothing here feeds a prediction.

Three tables over the answered rows without attention DP or expert parallelism:

1. ``tp``: per (framework, GPU, precision, model, ISL) at N <= ``--max-n`` (default 4), the median measured and
   predicted TTFT at each TP, each fitted as ``a + b / TP`` (least squares over the TP values present). ``a`` is
   the part that does not shrink with TP, ``b`` the part that does; ``b`` measured / ``b`` model < 1 means the
   model's TP-sliced prefill is too slow, ``a`` measured > ``a`` model a time that does not shrink with TP and
   that the model lacks.
2. ``parts``: per (framework, GPU, precision, model) at N <= ``--max-n``, the measured TTFT fitted as
   ``f + c (TTFT_model - comm) + k comm`` with ``comm`` the model's prefill collectives (``prefill_comm``):
   ``k`` well above 1 would say the prefill allreduce is slower than modelled, ``c`` < 1 that the rest of the
   model's TTFT is too long, ``f`` a fixed time per request that the model lacks.
3. ``n``: per (framework, GPU, model, ISL) at one TP (``--tp``, default 8), the median excess
   (measured - model, ms) at each N. A one-off cost C (a first call, a lazy NCCL connection) spread over the
   ``10 N`` (kind A) or ``20 N`` (kind B) measured requests would add ``C / (10 N)``: falling as 1 / N.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_tp_split.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--max-n 4] [--tp 8]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_rows, records_by_id  # noqa: E402  (bench/ is not a package)


def plain_layout(s: dict) -> bool:
    """True for a record without attention DP or expert parallelism (its layout differs only in TP)."""
    return int(s.get("attention_dp") or 1) <= 1 and int(s.get("ep") or 1) <= 1


def tp_fit(tps, times) -> tuple[float, float, float]:
    """Least-squares ``(a, b, largest |residual|)`` of ``times ~ a + b / tp``."""
    A = np.c_[np.ones(len(tps)), 1.0 / np.asarray(tps, dtype=float)]
    y = np.asarray(times, dtype=float)
    coef = np.linalg.lstsq(A, y, rcond=None)[0]
    return float(coef[0]), float(coef[1]), float(np.abs(A @ coef - y).max())


def parts_fit(measured, predicted, comm) -> tuple[float, float, float, float]:
    """Least-squares ``(f, c, k, mean |relative residual|)`` of ``measured ~ f + c (predicted - comm) + k comm``."""
    m = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    c = np.asarray(comm, dtype=float)
    A = np.c_[np.ones(len(m)), p - c, c]
    coef = np.linalg.lstsq(A, m, rcond=None)[0]
    return float(coef[0]), float(coef[1]), float(coef[2]), float(np.mean(np.abs(A @ coef - m) / m))


def by_tp(csv_path: str, records_path: str, max_n: int) -> dict:
    """{(framework, gpu, precision, model, isl): {tp: (median measured s, median predicted s)}} at N <= max_n."""
    acc = defaultdict(lambda: defaultdict(list))
    for row, s in answered_rows(csv_path, records_path):
        if int(s.get("concurrency") or 0) > max_n or not plain_layout(s):
            continue
        key = (row["framework"], row["gpu"], row["precision"], row["model"], int(s["input_len"]))
        acc[key][int(s["tp"])].append((float(row["measured_ttft_s"]), float(row["predicted_ttft_s"])))
    return {k: {tp: (statistics.median(m for m, _ in v), statistics.median(p for _, p in v))
                for tp, v in sorted(d.items())} for k, d in acc.items()}


def by_n(csv_path: str, records_path: str, tp: int) -> dict:
    """{(framework, gpu, model, isl): {N: median (measured - predicted) s}} of the rows at ``tp``."""
    acc = defaultdict(lambda: defaultdict(list))
    for row, s in answered_rows(csv_path, records_path):
        if int(s["tp"]) != tp or not plain_layout(s):
            continue
        key = (row["framework"], row["gpu"], row["model"], int(s["input_len"]))
        acc[key][int(s.get("concurrency") or 0)].append(
            float(row["measured_ttft_s"]) - float(row["predicted_ttft_s"]))
    return {k: {n: statistics.median(v) for n, v in sorted(d.items())} for k, d in acc.items()}


def model_comm(record: dict) -> float:
    """The model's prefill collectives (s) of one record (``prefill_comm`` of ``evaluate_record``)."""
    from fastmodel.serve.api import evaluate_record
    return float(evaluate_record(record)["prefill_comm"])


def by_parts(csv_path: str, records_path: str, max_n: int, comm=model_comm) -> dict:
    """{(framework, gpu, precision, model): [(measured s, predicted s, comm s, tp)]} at N <= max_n."""
    records = records_by_id(records_path)
    out = defaultdict(list)
    for row, s in answered_rows(csv_path, records_path):
        if int(s.get("concurrency") or 0) > max_n or not plain_layout(s):
            continue
        out[(row["framework"], row["gpu"], row["precision"], row["model"])].append(
            (float(row["measured_ttft_s"]), float(row["predicted_ttft_s"]), comm(records[row["id"]]), int(s["tp"])))
    return out


def _print_tp(table: dict) -> None:
    print("framework | gpu | precision | model | isl | TPs | a meas / model (ms) | b meas / model (ms) | b ratio | "
          "resid meas (ms)")
    for key, cells in sorted(table.items()):
        if len(cells) < 3:
            continue
        tps = list(cells)
        am, bm, rm = tp_fit(tps, [m for m, _ in cells.values()])
        ap, bp, _ = tp_fit(tps, [p for _, p in cells.values()])
        print(" | ".join(str(k) for k in key) + f" | {','.join(map(str, tps))} | {am * 1e3:.1f} / {ap * 1e3:.1f} | "
              f"{bm * 1e3:.1f} / {bp * 1e3:.1f} | {bm / bp:.2f} | {rm * 1e3:.1f}")


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--max-n", type=int, default=4)
    ap.add_argument("--tp", type=int, default=8)
    args = ap.parse_args()
    _print_tp(by_tp(args.csv, args.records, args.max_n))
    print("\nframework | gpu | precision | model | rows | f (ms) | c | k | fit MAPE % | model MAPE %")
    for key, rows in sorted(by_parts(args.csv, args.records, args.max_n).items()):
        if len({tp for *_, tp in rows}) < 3:
            continue
        m, p, c, _ = zip(*rows)
        f, cr, k, err = parts_fit(m, p, c)
        model = statistics.mean(abs(pi - mi) / mi for mi, pi in zip(m, p))
        print(" | ".join(key) + f" | {len(rows)} | {f * 1e3:.1f} | {cr:.2f} | {k:.2f} | {err * 100:.1f} | "
              f"{model * 100:.1f}")
    print(f"\nframework | gpu | model | isl | median excess (ms) by N at TP {args.tp}")
    for key, cells in sorted(by_n(args.csv, args.records, args.tp).items()):
        print(" | ".join(str(k) for k in key) + " | "
              + ", ".join(f"N {n}: {g * 1e3:.0f}" for n, g in cells.items()))


if __name__ == "__main__":
    main()
