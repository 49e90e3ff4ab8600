"""``fastmodel validate``: predict measured runs and score the model against constant-MFU baselines.

For every run record (``RUNS.md``) the real-world model predicts the step time;
the error is ``(predicted - measured) / measured``. Beside it, the one-line
baseline ``step = flops_per_token x tokens / (n_gpus x peak x MFU)`` at a
constant MFU of 0.40 and 0.50 (FLOPs per token in the record's ``mfu_std``
convention, peak of the record's precision) shows whether the model earns its
keep. Groups: source, software stack (``fastmodel.lm.stacks``), GPU, parallelism kind and tier. Records whose
``measured`` block has no positive, finite step time are skipped by name (``records.with_measurements``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.scores import Scores, score  # noqa: F401 - shared with serving's validate
from fastmodel.lm.records import RunRecord

BASELINE_MFUS = (0.40, 0.50)
GROUP_KEYS = ("source", "stack", "gpu", "parallelism_kind", "tier")


def predict_records(records: list[RunRecord], status: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every result variable of the real-world model for ``records`` (arrays by registry name); ``status``
    (int8, zeros), if given, receives ``not_finite`` for records whose results are not finite (NaN)."""
    from fastmodel.lm.engine import evaluate_table

    params = np.stack([r.columns for r in records], axis=1)
    return evaluate_table(params, status)


def baseline_step_time(records: list[RunRecord], flops_per_token: np.ndarray, mfu: float) -> np.ndarray:
    """Step time of the constant-MFU formula: flops_per_token x tokens / (n_gpus x peak x mfu)."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    out = np.empty(len(records))
    for i, r in enumerate(records):
        col = r.columns
        fp8 = col[C["precision"]] == 1 and col[C["peak_flops_8"]] > 0
        peak = col[C["peak_flops_8"]] if fp8 else col[C["peak_flops_16"]]
        tokens = col[C["global_batch"]] * col[C["seq_len"]]
        out[i] = flops_per_token[i] * tokens / (col[C["n_gpus"]] * peak * mfu)
    return out


def rows(records: list[RunRecord]) -> list[dict]:
    """One dict per record: ids, groups, status (``ok``, or ``not_finite``: no prediction, left out of the
    scores), measured and predicted step time, errors of model and baselines. A measured run is predicted
    even where its plan breaks a sweep rule (e.g. fewer micro-batches than stages): it ran."""
    from fastmodel.registry.lm import STATUSES

    status = np.zeros(len(records), dtype=np.int8)
    results = predict_records(records, status)
    measured = np.array([float(r.measured.get("step_time_s", np.nan)) for r in records])
    predicted = results["step_time"]
    table = []
    baselines = {mfu: baseline_step_time(records, results["flops_per_token"], mfu) for mfu in BASELINE_MFUS}
    for i, r in enumerate(records):
        row = {
            "id": r.id, "source": r.source, "stack": r.stack, "gpu": r.gpu, "parallelism_kind": r.parallelism_kind,
            "tier": str(r.raw.get("tier", "")), "status": STATUSES[status[i]].name,
            "measured_step_time_s": measured[i], "predicted_step_time_s": predicted[i],
            "error": predicted[i] / measured[i] - 1.0,
        }
        for mfu, values in baselines.items():
            row[f"baseline_mfu{mfu:.2f}_error"] = values[i] / measured[i] - 1.0
        for name in ("mfu", "time_gemm", "time_attention", "time_memory_bound", "pipeline_bubble",
                     "exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "exposed_dp", "memory_per_device"):
            row[name] = results[name][i]
        row["notes"] = "; ".join(r.notes)
        table.append(row)
    return table


def skipped_lines(table: list[dict]) -> list[str]:
    """One line per row left out of the scores (status other than ``ok``), naming its record and why."""
    from fastmodel.registry.lm import STATUS_CODES, STATUSES

    return [f"{row['id']}: {row['status']}: {STATUSES[STATUS_CODES[row['status']]].message}; left out of the "
            "scores" for row in table if row["status"] != "ok"]


def group_scores(table: list[dict], key: str | None) -> list[tuple[str, Scores, Scores, Scores]]:
    """(group, model, baseline 0.40, baseline 0.50) scores per value of ``key`` (None: all rows)."""
    groups: dict[str, list[dict]] = {}
    for row in table:
        if row["status"] != "ok" or not np.isfinite(row["error"]):
            continue
        groups.setdefault("all" if key is None else str(row[key]), []).append(row)
    out = []
    for name in sorted(groups):
        members = groups[name]
        out.append((name, score([m["error"] for m in members]),
                    *(score([m[f"baseline_mfu{mfu:.2f}_error"] for m in members]) for mfu in BASELINE_MFUS)))
    return out


def format_report(table: list[dict]) -> str:
    """The validation tables as text: overall, then by source, GPU, parallelism kind and tier."""
    lines = []
    header = (f"{'group':34s} {'n':>4s} {'MAPE':>7s} {'median':>7s} {'bias':>7s}   "
              f"{'MFU.40 MAPE':>11s} {'MFU.50 MAPE':>11s}")
    for key in (None, *GROUP_KEYS):
        lines.append("")
        lines.append(f"step time by {key or 'all runs'}")
        lines.append(header)
        for name, model, b40, b50 in group_scores(table, key):
            lines.append(f"{name[:34]:34s} {model.n:4d} {100 * model.mape:6.1f}% {100 * model.median:6.1f}% "
                         f"{100 * model.bias:+6.1f}%   {100 * b40.mape:10.1f}% {100 * b50.mape:10.1f}%")
    return "\n".join(lines).lstrip("\n")
