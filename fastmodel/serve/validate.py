"""``fastmodel validate`` for serving records: predicted vs measured throughput and latencies.

For every serving record (``SERVE_RUNS.md``) with a ``measured`` block, the
serving model predicts ``output_tokens_per_s`` (whole instance), ``ttft`` and
``tpot``; the error is ``predicted / measured - 1``. The report gives MAPE,
median |error| and bias per metric, overall and by GPU and load mode.
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.scores import score
from fastmodel.errors import FastmodelError
from fastmodel.serve.records import ServeRecord

#: measured key -> predicted result
METRICS = {"output_tokens_per_s": "output_tokens_per_s", "ttft_s": "ttft", "tpot_s": "tpot"}
GROUP_KEYS = ("gpu", "load_mode")


def rows(records: list[ServeRecord]) -> list[dict]:
    """One dict per record: ids, groups, measured and predicted values and their errors."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX, SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table

    if not any(any(k in r.measured for k in METRICS) for r in records):
        raise FastmodelError("no serving record carries measured output_tokens_per_s, ttft_s or tpot_s")
    out, status = evaluate_table(np.stack([r.columns for r in records], axis=1))
    table = []
    for i, r in enumerate(records):
        mode = next(k for k in ("batch_size", "concurrency", "max_throughput") if r.raw["serve"].get(k))
        row = {"id": r.id, "source": r.source, "gpu": r.gpu, "load_mode": mode,
               "status": SERVE_STATUS_NAMES[int(status[i])]}
        for key, name in METRICS.items():
            measured = float(r.measured.get(key, np.nan))
            predicted = out[SERVE_RESULT_INDEX[name], i]
            row[f"measured_{key}"] = measured
            row[f"predicted_{key}"] = predicted
            row[f"error_{key}"] = predicted / measured - 1.0 if measured > 0 else np.nan
        row["batch_size"] = out[SERVE_RESULT_INDEX["batch_size"], i]
        row["memory_per_device"] = out[SERVE_RESULT_INDEX["memory_per_device"], i]
        row["notes"] = "; ".join(r.notes)
        table.append(row)
    return table


def format_report(table: list[dict]) -> str:
    """Error tables per metric: overall, then by GPU and by load mode."""
    lines = []
    for key in METRICS:
        errors_key = f"error_{key}"
        if not any(np.isfinite(r[errors_key]) for r in table):
            continue
        for group in (None, *GROUP_KEYS):
            lines.append("")
            lines.append(f"{key} by {group or 'all records'}")
            lines.append(f"{'group':34s} {'n':>4s} {'MAPE':>7s} {'median':>7s} {'bias':>7s}")
            groups: dict[str, list[float]] = {}
            for r in table:
                if np.isfinite(r[errors_key]):
                    groups.setdefault("all" if group is None else str(r[group]), []).append(r[errors_key])
            for name in sorted(groups):
                s = score(groups[name])
                lines.append(f"{name[:34]:34s} {s.n:4d} {100 * s.mape:6.1f}% {100 * s.median:6.1f}% "
                             f"{100 * s.bias:+6.1f}%")
    return "\n".join(lines).lstrip("\n")
