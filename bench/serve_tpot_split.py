"""Diagnostic: where the TPOT error of the aggregated serving rows lives (docs/model_serving.md §S50). Nothing here
feeds a prediction.

Three tables over the answered rows of one split (default ``dev``) of a ``validate -o`` CSV:

1. ``slices``: the rows grouped by any of engine, framework, model, gpu, precision, concurrency, tp, isl, osl
   (``--by``), ranked by the MAPE points each group contributes to the split's TPOT MAPE
   (``sum |error| / rows of the split``), with its mean (bias) and median signed error.
2. ``pairs``: the FP4-minus-FP8 excess. For each (engine, gpu, model, TP, N, ISL, OSL) measured at both ``fp4``
   and ``fp8``, ``(measured - predicted)`` at FP4 minus the same at FP8 (ms): a cost the model lacks at NVFP4 only
   (the two rows share the engine, shape, layout and load). Per (engine, gpu, model, TP) the median.
3. The excess fitted per (engine, gpu, model) as ``a + b / TP`` over the TP medians: ``a`` a time per decode step
   that does not shrink with TP (kernels per layer, launches), ``b`` one that shrinks as the weight slice does
   (the GEMMs' streaming rate).

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_tpot_split.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--by engine,model,gpu,precision]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_rows  # noqa: E402  (bench/ is not a package)
from serve_tp_split import tp_fit  # noqa: E402  (bench/ is not a package): a + b / tp, least squares

#: the fields ``--by`` may name: CSV columns, then the record's ``serve`` block
CSV_FIELDS = ("engine", "framework", "model", "gpu", "precision")
SERVE_FIELDS = {"concurrency": "concurrency", "tp": "tp", "isl": "input_len", "osl": "output_len"}


def split_rows(csv_path: str, records_path: str, split: str = "dev") -> list[tuple[dict, dict]]:
    """:func:`answered_rows` of one split (``dev``, ``held-out``; ``all``: both)."""
    return [(r, s) for r, s in answered_rows(csv_path, records_path) if split == "all" or r.get("split") == split]


def key_of(row: dict, serve: dict, fields: tuple[str, ...]) -> tuple:
    """The values of ``fields`` for one row (CSV columns, else the record's ``serve`` entries)."""
    return tuple(row[f] if f in CSV_FIELDS else int(serve.get(SERVE_FIELDS[f]) or 0) for f in fields)


def slices(rows: list[tuple[dict, dict]], fields: tuple[str, ...]) -> list[tuple[float, tuple, int, float, float]]:
    """[(MAPE points, key, rows, mean signed error, median signed error)] per group, largest points first; the
    points of a group are ``100 sum |error| / len(rows)``, so the groups' points add up to the MAPE."""
    groups = defaultdict(list)
    for row, s in rows:
        groups[key_of(row, s, fields)].append(float(row["error_tpot_s"]))
    out = [(100.0 * sum(abs(e) for e in v) / len(rows), k, len(v), 100.0 * statistics.mean(v),
            100.0 * statistics.median(v)) for k, v in groups.items()]
    return sorted(out, key=lambda t: -t[0])


def gap_ms(row: dict) -> float:
    """Measured minus predicted TPOT of one row, ms."""
    return 1e3 * (float(row["measured_tpot_s"]) - float(row["predicted_tpot_s"]))


def paired_excess(rows: list[tuple[dict, dict]]) -> dict[tuple, dict[int, float]]:
    """{(engine, gpu, model): {TP: median over (N, ISL, OSL) of gap(fp4) - gap(fp8), ms}} of the shapes measured
    at both precisions (the first row of a shape and precision if repeated)."""
    by_shape = defaultdict(dict)
    for row, s in rows:
        shape = key_of(row, s, ("engine", "gpu", "model", "tp", "concurrency", "isl", "osl"))
        by_shape[shape].setdefault(row["precision"], gap_ms(row))
    acc = defaultdict(lambda: defaultdict(list))
    for (engine, gpu, model, tp, *_), gaps in by_shape.items():
        if "fp4" in gaps and "fp8" in gaps:
            acc[(engine, gpu, model)][tp].append(gaps["fp4"] - gaps["fp8"])
    return {k: {tp: statistics.median(v) for tp, v in sorted(d.items())} for k, d in acc.items()}


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--by", default="engine,model,gpu,precision")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = split_rows(args.csv, args.records, args.split)
    fields = tuple(args.by.split(","))
    total = sum(p for p, *_ in slices(rows, fields))
    print(f"{len(rows)} {args.split} rows, TPOT MAPE {total:.1f} %\npoints | rows | bias % | median % | "
          + " | ".join(fields))
    for pts, key, n, bias, med in slices(rows, fields)[:args.top]:
        print(f"{pts:.2f} | {n} | {bias:+.1f} | {med:+.1f} | " + " | ".join(map(str, key)))
    print("\nengine | gpu | model | median gap(fp4) - gap(fp8) (ms) by TP | a (ms) | b (ms) | resid (ms)")
    for key, cells in sorted(paired_excess(rows).items()):
        line = " | ".join(key) + " | " + ", ".join(f"TP {tp}: {g:+.2f}" for tp, g in cells.items())
        if len(cells) >= 3:
            a, b, r = tp_fit(list(cells), list(cells.values()))
            line += f" | {a:+.2f} | {b:+.2f} | {r:.2f}"
        print(line)


if __name__ == "__main__":
    main()
