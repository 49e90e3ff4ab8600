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

import re

import numpy as np

from fastmodel.analysis.scores import Scores, score  # noqa: F401 - shared with serving's validate
from fastmodel.analysis.splits import HIT_TOLERANCE, NOT_GIVEN, SPLITS, hit_rate
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


def without_impossible_meshes(records: list[RunRecord], refused: list) -> list[RunRecord]:
    """The records whose expert mesh can exist; each other one is appended to ``refused`` (a
    ``fastmodel.spec.records.Refused``: named on stderr, a miss) with the line ``run`` gives it (``file:line: plan:
    illegal plan (experts_not_divisible): ...``). The one structural rule ``validate`` applies: no framework builds
    experts that ep does not divide, or an etp x ep that does not divide tp x cp x dp; the other rules stay
    unapplied (see :func:`rows`)."""
    from fastmodel.lm.rules import expert_mesh_refusal
    from fastmodel.spec.records import Refused

    kept = []
    mine = []
    for record in records:
        where = record.where or record.id
        error = expert_mesh_refusal(record.columns, f"{where}: plan")
        if error is None:
            kept.append(record)
        else:
            mine.append((Refused(where, record.raw, str(error)), _position(record.where)))
    # the refusals in the input's order, as read_records gave the others: merged by the line or index each was
    # read at; a record read from nowhere (no ``where``: its id is no position, review11 #8) keeps its order
    positions = [_position(item.where) for item in refused] + [position for _, position in mine]
    refused += [item for item, _ in mine]
    if mine and None not in positions:
        order = sorted(range(len(refused)), key=positions.__getitem__)
        refused[:] = [refused[i] for i in order]
    return kept


def _position(where: str) -> int | None:
    """The line (``file:12``) or index (``runs[3]``) a record was read at; None when ``where`` names none (an id
    such as ``llama3-8b`` is no line 8)."""
    found = re.search(r"(?::(\d+)|\[(\d+)\])$", where)
    return int(found.group(1) or found.group(2)) if found else None


def rows(records: list[RunRecord]) -> list[dict]:
    """One dict per record: ids, groups, status (``ok``, or ``not_finite``: no prediction, left out of the
    scores), measured and predicted step time, errors of model and baselines. A measured run is predicted
    even where its plan breaks a sweep rule (e.g. fewer micro-batches than stages): it ran. An expert mesh that
    cannot exist is no such rule: :func:`without_impossible_meshes` refuses it before."""
    from fastmodel.lm.validate_memory import memory_fields
    from fastmodel.lm.validate_moe import moe_fields
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
        row.update(memory_fields(r, results, i))
        row.update(moe_fields(r, results, i))
        row["notes"] = "; ".join(r.notes)
        table.append(row)
    return table


def refused_rows(refused: list) -> list[dict]:
    """One row per record the engine refused (``fastmodel.spec.records.Refused``): status ``refused``, no
    prediction, a miss in every hit rate."""
    from fastmodel.lm.validate_moe import refused_moe_fields

    table = []
    for item in refused:
        raw = item.raw
        system = raw.get("system") if isinstance(raw.get("system"), dict) else {}
        table.append({"id": item.id, "source": str(raw.get("source") or "(unreadable)"), "stack": "(refused)",
                      "gpu": str(system.get("gpu", NOT_GIVEN)),
                      "parallelism_kind": str(raw.get("parallelism_kind", NOT_GIVEN)),
                      "tier": str(raw.get("tier", NOT_GIVEN)), "status": "refused",
                      "measured_step_time_s": np.nan, "predicted_step_time_s": np.nan, "error": np.nan,
                      **{f"baseline_mfu{mfu:.2f}_error": np.nan for mfu in BASELINE_MFUS},
                      **refused_moe_fields(raw), "notes": item.reason})
    return table


def skipped_lines(table: list[dict]) -> list[str]:
    """One line per row left out of the scores (status other than ``ok``), naming its record and why."""
    from fastmodel.registry.lm import STATUS_CODES, STATUSES

    def why(row):
        return row["notes"] if row["status"] == "refused" else STATUSES[STATUS_CODES[row["status"]]].message

    return [f"{row['id']}: {row['status']}: {why(row)}; counted as a miss" for row in table if row["status"] != "ok"]


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


def group_summary(table: list[dict], key: str | None) -> dict[str, dict]:
    """The numbers of each score line of ``key`` (None: all rows), by group name: ``n`` answered, ``miss`` (refused
    or not finite), the model's ``mape``, ``median`` and ``bias`` (NaN when none is answered), ``hit_rate`` within
    HIT_TOLERANCE over every record of the group, and each baseline's MAPE (``baseline_mfu0.40_mape``, ...)."""
    members: dict[str, list[dict]] = {}
    for row in table:
        members.setdefault("all" if key is None else str(row[key]), []).append(row)
    scored = {name: rest for name, *rest in group_scores(table, key)}
    out = {}
    for name in sorted(members):
        rows_ = members[name]
        misses = sum(row["status"] != "ok" for row in rows_)
        hits = hit_rate([row["error"] for row in rows_ if row["status"] == "ok"], len(rows_))
        model, *baselines = scored.get(name, [score([])] * (1 + len(BASELINE_MFUS)))
        out[name] = {"n": model.n, "miss": misses, "mape": model.mape, "median": model.median, "bias": model.bias,
                     "hit_rate": hits, **{f"baseline_mfu{mfu:.2f}_mape": b.mape
                                          for mfu, b in zip(BASELINE_MFUS, baselines)}}
    return out


def _group_lines(table: list[dict], key: str | None, label: str) -> dict[str, str]:
    """One line (by group name) per group of ``key``: :func:`group_summary`'s numbers as the report prints them."""
    lines = {}
    for name, s in group_summary(table, key).items():
        title = f"{name} [{label}]" if label else name
        hits = s["hit_rate"]
        if s["n"] == 0:
            lines[name] = f"{title[:40]:40s} {0:4d} {s['miss']:4d} {'-':>7s} {'-':>7s} {'-':>7s} {100 * hits:5.0f}%"
            continue
        b40, b50 = (s[f"baseline_mfu{mfu:.2f}_mape"] for mfu in BASELINE_MFUS)
        lines[name] = (f"{title[:40]:40s} {s['n']:4d} {s['miss']:4d} {100 * s['mape']:6.1f}% "
                       f"{100 * s['median']:6.1f}% {100 * s['bias']:+6.1f}% {100 * hits:5.0f}%   "
                       f"{100 * b40:10.1f}% {100 * b50:10.1f}%")
    return lines


def summaries(table: list[dict], by_split: bool = False) -> list[dict]:
    """Every score line of the step-time tables of :func:`format_report` as a dict: ``metric`` (step_time),
    ``key`` (the group key, None for all runs), ``group``, ``split`` (``all``, or ``dev`` / ``held-out`` with
    ``by_split``) and :func:`group_summary`'s numbers."""
    out = []
    for key in (None, *GROUP_KEYS):
        for split in (SPLITS if by_split else ("all",)):
            chosen = table if split == "all" else [row for row in table if row["split"] == split]
            out += [{"metric": "step_time", "key": key, "group": name, "split": split, **numbers}
                    for name, numbers in group_summary(chosen, key).items()]
    return out


def score_header() -> str:
    """The header line of the score tables (``_group_lines``)."""
    return (f"{'group':40s} {'n':>4s} {'miss':>4s} {'MAPE':>7s} {'median':>7s} {'bias':>7s} "
            f"{'<=' + format(HIT_TOLERANCE, '.0%'):>6s}   {'MFU.40 MAPE':>11s} {'MFU.50 MAPE':>11s}")


def format_report(table: list[dict], by_split: bool = False) -> str:
    """The validation tables as text: overall, then by source, GPU, parallelism kind and tier; with
    ``by_split``, every group twice, in-sample (``dev``) and ``held-out`` (rows marked by
    ``fastmodel.analysis.splits.mark_split``); the MoE section (``fastmodel.lm.validate_moe``) when MoE runs are
    among them; the memory tables."""
    from fastmodel.lm.validate_moe import format_moe

    lines = []
    header = score_header()
    for key in (None, *GROUP_KEYS):
        lines.append("")
        lines.append(f"step time by {key or 'all runs'}")
        lines.append(header)
        if not by_split:
            lines += _group_lines(table, key, "").values()
            continue
        per_split = [_group_lines([row for row in table if row["split"] == split], key, split) for split in SPLITS]
        for name in sorted(set().union(*per_split)):
            lines += [split_lines[name] for split_lines in per_split if name in split_lines]
    lines.append("")
    lines.append(f"n: runs answered; miss: runs refused or without a finite prediction; <={HIT_TOLERANCE:.0%}: share "
                 "of all runs of the group predicted within that error (misses count against it)")
    moe = format_moe(table, by_split)
    if moe:
        lines.append(moe)
    from fastmodel.lm.validate_memory import format_memory

    lines.append(format_memory(table, by_split))
    return "\n".join(lines).lstrip("\n").rstrip("\n")
