"""``fastmodel validate`` for serving records: predicted vs measured throughput and latencies.

For every serving record (``SERVE_RUNS.md``) with a ``measured`` block, the
serving model predicts ``output_tokens_per_s`` (whole instance), ``ttft`` and
``tpot``; the error is ``predicted / measured - 1``. The report gives MAPE,
median |error| and bias per metric, overall and by GPU and load mode.
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.scores import score
from fastmodel.analysis.splits import HIT_TOLERANCE, hit_rate
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


def refused_rows(refused: list) -> list[dict]:
    """One row per serving record the engine refused (``fastmodel.spec.records.Refused``): its measured values,
    no prediction, a miss for every metric it measured."""
    table = []
    for item in refused:
        raw = item.raw
        serve = raw.get("serve") if isinstance(raw.get("serve"), dict) else {}
        measured = raw.get("measured") if isinstance(raw.get("measured"), dict) else {}
        system = raw.get("system") if isinstance(raw.get("system"), dict) else {}
        mode = next((k for k in ("batch_size", "concurrency", "max_throughput") if serve.get(k)), "")
        row = {"id": item.id, "source": str(raw.get("source", "")), "gpu": str(system.get("gpu", "")),
               "load_mode": mode, "status": "refused"}
        for key in METRICS:
            value = measured.get(key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value > 0
            row[f"measured_{key}"] = float(value) if ok else np.nan
            row[f"predicted_{key}"] = np.nan
            row[f"error_{key}"] = np.nan
        row["notes"] = item.reason
        table.append(row)
    return table


def format_report(table: list[dict], by_split: bool = False) -> str:
    """Error tables per metric: overall, then by GPU and by load mode; ``miss``: records that measured the
    metric but have no prediction (refused or not evaluated), counted against the hit rate; with
    ``by_split``, every group twice, in-sample (``dev``) and ``held-out``."""
    lines = []
    for key in METRICS:
        errors_key = f"error_{key}"
        measured = [r for r in table if r[f"measured_{key}"] > 0]
        if not measured:
            continue
        for group in (None, *GROUP_KEYS):
            lines.append("")
            lines.append(f"{key} by {group or 'all records'}")
            lines.append(f"{'group':40s} {'n':>4s} {'miss':>4s} {'MAPE':>7s} {'median':>7s} {'bias':>7s} "
                         f"{'<=' + format(HIT_TOLERANCE, '.0%'):>6s}")
            groups: dict[str, list[dict]] = {}
            for r in measured:
                name = "all" if group is None else str(r[group])
                groups.setdefault(f"{name} [{r['split']}]" if by_split else name, []).append(r)
            for name in sorted(groups):
                errors = [r[errors_key] for r in groups[name] if np.isfinite(r[errors_key])]
                misses = len(groups[name]) - len(errors)
                hits = 100 * hit_rate(errors, len(groups[name]))
                if not errors:
                    lines.append(f"{name[:40]:40s} {0:4d} {misses:4d} {'-':>7s} {'-':>7s} {'-':>7s} {hits:5.0f}%")
                    continue
                s = score(errors)
                lines.append(f"{name[:40]:40s} {s.n:4d} {misses:4d} {100 * s.mape:6.1f}% {100 * s.median:6.1f}% "
                             f"{100 * s.bias:+6.1f}% {hits:5.0f}%")
    return "\n".join(lines).lstrip("\n")
