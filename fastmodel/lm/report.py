"""``fastmodel run`` of the real-world training model: one configuration or one run record as a report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastmodel.analysis.run_report import RunReport
from fastmodel.errors import PlanError
from fastmodel.lm.rules import locate_plan_error


def calibrated_suffix(cal) -> str:
    """Title suffix naming the calibration applied (empty without one)."""
    if cal is None:
        return ""
    return f", calibration {Path(cal.source).name} (sha256 {cal.fingerprint()[:12]})"


def execution_label(fields: Any) -> str:
    """Title suffix naming the execution fields given as a dict (empty without)."""
    if not isinstance(fields, dict) or not fields:
        return ""
    import json

    return ", execution " + " ".join(f"{key}={v if isinstance(v, str) else json.dumps(v)}" for key, v in fields.items())


def _report(values: dict, attrs: dict, title: str) -> RunReport:
    from fastmodel.lm.api import format_report

    record = {"title": title, **{name: float(v) for name, v in values.items()}}
    record.update({k: v for k, v in attrs.items() if k.startswith("calibration")})
    text = format_report(values, title)
    if "memory_margin" in attrs:   # --memory-margin: the fit is against HBM less it, not the usable HBM
        record["memory_margin"] = attrs["memory_margin"]
        text = text.replace(" in usable HBM)", f" in HBM {attrs['hbm_bytes'] / 2**30:.1f} GiB less the "
                            f"{attrs['memory_margin'] / 2**30:.1f} GiB --memory-margin)")
    return RunReport(text, record)


def run_one(model: Any, system: Any, task: Any, *, semantics: Any = "default", plan: str | None = None,
            num_nodes: int | None = None, calibration: Any = None, memory_margin: float | None = None,
            execution: Any = None) -> RunReport:
    """One real-world configuration (a task's mesh plan applies when ``plan`` is None), run as ``execution``
    (a dict of execution fields, as in ``fastmodel.evaluate``; the title names them) says; ``memory_margin``
    (bytes): the plan fits when memory_per_device <= HBM - margin (default: its own allocator cache)."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.task import load_train_task

    spec = load_lm_model(model)
    train = load_train_task(task)
    notes = device_notes(system)
    from_task = plan is None and train.plan is not None and isinstance(task, str)
    plan = train.mesh(plan)
    name = semantics if isinstance(semantics, str) else getattr(semantics, "name", "custom")
    title = (f"{spec.name} on {system}" + (f" x {num_nodes} nodes" if num_nodes else "")
             + f", plan {plan or 'dp'}, semantics {name}" + calibrated_suffix(calibration)
             + execution_label(execution))
    from fastmodel.lm.sweep import point_columns

    columns = None   # the configuration uncalibrated, lowered once for the numbers and the stage table
    try:
        if calibration is None:  # no xarray: the report needs only the numbers
            from fastmodel.lm.api import column_values

            columns = point_columns(spec, system, train, plan=plan, num_nodes=num_nodes, execution=execution,
                                    notes=notes)
            report = _report(*_margin(column_values(columns, plan), {}, _capacity(system), memory_margin), title)
        else:
            from fastmodel.lm.api import evaluate_lm, report_values

            ds = evaluate_lm(spec, system, train, plan=plan, num_nodes=num_nodes, calibration=calibration,
                             execution=execution)
            hbm = ds.attrs.get("hbm_bytes") or _capacity(system)
            report = _report(*_margin(report_values(ds), ds.attrs, hbm, memory_margin), title)
    except PlanError as error:   # the task file's plan, the model file's experts: say so (file, field, rule)
        raise locate_plan_error(error, model, f"{task}: task.plan" if from_task else None) from None
    if columns is None:   # calibrated: the sweep path lowered its own point
        columns = point_columns(spec, system, train, plan=plan, num_nodes=num_nodes, execution=execution,
                                notes=notes)
    # what the stack decided, as a record's report says it (vp "unknown": "vp unknown: 2 (rule)")
    return _with_notes(_with_stages(report, columns), list(dict.fromkeys(notes)))


def _with_stages(report: RunReport, columns) -> RunReport:
    """``report`` with, when pp > 1, the "memory by pipeline stage" table under its memory block and its JSON twin
    ``memory_by_stage`` (``fastmodel/lm/memory_stages.py``: each rank's peak moment of the memory timeline, fitting
    under the report's ``memory_margin`` where given). ``columns``: the configuration uncalibrated -- a calibration
    sets only time columns (the registry's ``fittable`` ones), never a memory term."""
    import math

    from fastmodel.registry.lm import COLUMN_INDEX

    if int(columns[COLUMN_INDEX["pp"]]) <= 1 or not math.isfinite(report.record.get("memory_per_device", math.nan)):
        return report
    from fastmodel.lm.memory_stages import stage_peaks, stage_record, stage_table

    peaks = stage_peaks(columns, memory_margin=report.record.get("memory_margin"))
    return RunReport("\n".join([report.text, *stage_table(peaks)]),
                     {**report.record, "memory_by_stage": stage_record(peaks)})


def _capacity(system: Any) -> float:
    """The HBM capacity the plan was lowered with: the system's (``cluster_values``; the built-in cluster files state
    their device's CUDA-visible total, docs/model_memory.md "One capacity per GPU (issue 23)")."""
    from fastmodel.lm.loader import load_cluster
    from fastmodel.lm.lowering import cluster_values

    return float(cluster_values(load_cluster(system))["hbm_bytes"])


def _margin(values: dict, attrs: dict, hbm: float, memory_margin: float | None) -> tuple[dict, dict]:
    """``values`` with ``fits_memory`` under the user's ``memory_margin`` (bytes, checked as ``best`` checks it:
    ``analysis.margin``), and the margin in the attrs; unchanged without one."""
    if memory_margin is None:
        return values, attrs
    from fastmodel.analysis.margin import user_margin_bytes

    margin = user_margin_bytes(memory_margin, hbm)
    fits = values["memory_per_device"] <= float(hbm) - margin
    return {**values, "fits_memory": bool(fits)}, {**attrs, "memory_margin": margin, "hbm_bytes": float(hbm)}


def device_notes(system: Any) -> list[str]:
    """A note when the cluster's GPU has no built-in device file (specs/devices): its efficiencies are then the
    registry's generic (H100-era) defaults, which the report must say (records say it through lower_record)."""
    from fastmodel.lm.loader import load_cluster
    from fastmodel.spec.devices import gpu_notes

    return gpu_notes(load_cluster(system).gpu)


def _with_notes(report: RunReport, notes: list[str]) -> RunReport:
    """``report`` with a ``note:`` line per note under its title (and the notes in its record)."""
    if not notes:
        return report
    lines = report.text.splitlines()
    text = "\n".join([lines[0], *(f"note: {note}" for note in notes), *lines[1:]])
    return RunReport(text, {**report.record, "notes": notes})


def stack_line(data: dict, stack: str) -> str:
    """The report line naming the stack profile a record was evaluated under (docs/model.md §11.8) and what picked
    it: the record's explicit ``stack``, or its ``framework`` text."""
    if data.get("stack"):
        return f"stack                {stack} (the record's stack)"
    framework = data.get("framework")
    return f"stack                {stack} " + (f"(from framework {framework!r})" if framework else "(no framework)")


def run_record(data: dict, source: str | None = None, calibration: Any = None,
               memory_margin: float | None = None) -> RunReport:
    """One run record (RUNS.md); its ``measured`` block is not read; ``memory_margin`` as in :func:`run_one`."""
    from fastmodel.lm.api import lowered_values
    from fastmodel.lm.records import lower_record

    lowered = lower_record(data, source)   # one lowering: the numbers (calibrated on a copy) and the stage table
    values, attrs = lowered_values(lowered, source, calibration=calibration)
    values, attrs = _margin(values, attrs, attrs["hbm_bytes"], memory_margin)
    title = f"{data.get('id') or source} (run record; measured values ignored)" + calibrated_suffix(calibration)
    report = _with_stages(_report(values, attrs, title), lowered.columns)
    report = RunReport(report.text.replace("\n", f"\n{stack_line(data, attrs['stack'])}\n", 1),
                       {**report.record, "stack": attrs["stack"]})
    # what the model assumed where the record is silent (an unknown GPU or framework, vp "unknown", ...)
    return _with_notes(report, [note for note in attrs.get("notes", "").split("; ") if note])
