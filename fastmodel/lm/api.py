"""Python API of the real-world model for one configuration: specs or a run record -> 0-d Dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from fastmodel.errors import PlanError
from fastmodel.registry.lm import MEMORY_KINDS, MEMORY_RESULTS, RESULTS, STATUS_CODES, STATUSES

if TYPE_CHECKING:
    import xarray as xr


def evaluate(model: Any, system: Any, task: Any, *, semantics: Any = "default", plan: str | None = None,
             num_nodes: int | None = None, execution: Any = None, calibration: Any = None) -> "xr.Dataset":
    """The engine's door for ``fastmodel.evaluate``: one real-world configuration (``semantics`` was checked
    by ``fastmodel.engines``; the task's mesh plan applies when ``plan`` is None)."""
    from fastmodel.lm.task import load_train_task

    if plan is None and task is not None:
        plan = load_train_task(task).plan
    return evaluate_lm(model, system, task, plan=plan, execution=execution, num_nodes=num_nodes,
                       calibration=calibration)


def evaluate_lm(model: Any, system: Any, task: Any = None, plan: str | None = None, execution: Any = None,
                num_nodes: int | None = None, global_batch: int | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one real-world configuration (``plan``: a mesh like ``"tp8.pp4"``; dp fills the cluster).

    ``calibration``: a calibration overlay (TOML path or ``Calibration``) applied as in ``lm_sweep``.
    Raises PlanError for an illegal plan, SpecError for bad specs, NotFiniteError when a result is not a
    finite number. Same path as a sweep of one point.
    """
    from fastmodel.lm.sweep import lm_sweep

    ds = lm_sweep(model, system, task, axes={"plan": ["dp" if plan is None else plan]}, execution=execution,
                  global_batch=global_batch, num_nodes=num_nodes, calibration=calibration).isel(plan=0)
    code = int(ds.status)
    if code == STATUS_CODES["not_finite"]:
        from fastmodel.errors import NotFiniteError

        raise NotFiniteError(f"plan {plan or 'dp'!r}", STATUSES[code].message)
    if code:
        raise PlanError(STATUSES[code].name, STATUSES[code].message, f"plan {'dp' if plan is None else plan!r}")
    return ds


def record_values(record: dict, source: str | None = None, calibration: Any = None) -> tuple[dict, dict]:
    """(results, attrs) of one run record without xarray: every result name (``memory_*`` by kind included)
    -> a float (``fits_memory`` a bool), and the record's id, notes and calibration attrs. See evaluate_record."""
    from fastmodel.lm.calibrate.overlay import apply_calibration, as_calibration
    from fastmodel.lm.engine import evaluate_one
    from fastmodel.lm.records import lower_record
    from fastmodel.lm.rules import check_plan

    lowered = lower_record(record, source)
    cal = as_calibration(calibration)
    if cal is not None:
        from fastmodel.lm.calibrate import use

        use.check(cal, {lowered.gpu: use.tiers_used(lowered.columns)},
                  frameworks=[lowered.raw.get("framework")])
        lowered = apply_calibration([lowered], cal)[0]
    check_plan(lowered.columns, f"{source + ': ' if source else ''}plan")
    results = evaluate_one(lowered.columns, f"{source + ': ' if source else ''}{lowered.id or 'run record'}")
    results["fits_memory"] = results["fits_memory"] == 1.0
    attrs = {"id": lowered.id, "semantics": "default", "notes": "; ".join(lowered.notes)}
    if cal is not None:
        attrs.update(use.attrs(cal, [lowered.gpu], [lowered.raw.get("framework")]))
    return results, attrs


def config_values(model: Any, system: Any, task: Any = None, plan: str | None = None,
                  num_nodes: int | None = None) -> dict:
    """Results of one real-world configuration without xarray (as :func:`record_values`); the same point a
    sweep evaluates (``lm_sweep.point_columns``); a PlanError for an illegal plan."""
    from fastmodel.lm.engine import evaluate_one
    from fastmodel.lm.sweep import point_columns

    columns = point_columns(model, system, task, plan=plan, num_nodes=num_nodes)
    results = evaluate_one(columns, f"plan {plan or 'dp'!r}")
    results["fits_memory"] = results["fits_memory"] == 1.0
    return results


def evaluate_record(record: dict, source: str | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one run record (RUNS.md schema; ``measured`` is ignored) into a 0-d Dataset.

    ``calibration``: a calibration overlay (TOML path or ``Calibration``) for the record's device; the attrs
    record it; a device or tier it does not cover is a ``CalibrationWarning``."""
    import xarray as xr

    results, attrs = record_values(record, source, calibration)
    data = {r.name: ((), np.float64(results[r.name]), {"units": r.units, "description": r.doc})
            for r in RESULTS if r.name not in MEMORY_RESULTS}
    data["fits_memory"] = ((), bool(results["fits_memory"]), data["fits_memory"][2])
    data["memory"] = (("memory_kind",), np.array([results[name] for name in MEMORY_RESULTS]),
                      {"units": "bytes", "description": "Bytes per device by kind; they sum to memory_per_device."})
    return xr.Dataset(data, coords={"memory_kind": list(MEMORY_KINDS)}, attrs=attrs)


def report_values(ds: "xr.Dataset") -> dict:
    """A 0-d real-world Dataset as :func:`record_values`' plain mapping (``memory_*`` by kind)."""
    values = {name: float(ds[name]) for name in ds.data_vars if ds[name].ndim == 0 and ds[name].dtype.kind in "fiu"}
    values["fits_memory"] = bool(ds["fits_memory"])
    if "memory" in ds:
        values.update({f"memory_{k}": float(v) for k, v in zip(ds.memory_kind.values, ds.memory.values)})
    return values


def format_report(values: Mapping, title: str = "") -> str:
    """The one-configuration report of ``fastmodel run`` under the real-world model, from
    :func:`record_values` / :func:`config_values` (or :func:`report_values` of a Dataset)."""
    def value(name):
        return float(values[name])

    step = value("step_time")
    lines = [title] if title else []
    lines += [
        f"step time            {step:,.3f} s",
        f"tokens/s             {value('tokens_per_s'):,.0f}  ({value('tokens_per_s_per_gpu'):,.0f} per GPU)",
        f"MFU / HFU            {100 * value('mfu'):.1f}% / {100 * value('hfu'):.1f}%",
        "compute (busiest stage, whole step)",
    ]
    for name, label in (("time_gemm", "GEMMs"), ("time_attention", "attention"),
                        ("time_memory_bound", "memory-bound"), ("time_recompute", "  of which recompute"),
                        ("time_optimizer", "optimizer"), ("pipeline_bubble", "pipeline bubble")):
        lines.append(f"  {label:20s} {value(name):10.3f} s  {100 * value(name) / step:5.1f}%")
    lines.append("communication: total / exposed")
    for group in ("tp", "cp", "ep", "pp", "dp"):
        total, exposed = value(f"comm_{group}"), value(f"exposed_{group}")
        if total > 0:
            lines.append(f"  {group:20s} {total:10.3f} s  {exposed:8.3f} s exposed ({100 * exposed / step:.1f}%)")
    if np.isfinite(value("memory_per_device")):
        fits = "fits" if values["fits_memory"] else "does NOT fit"
        lines.append(f"memory per device    {value('memory_per_device') / 2**30:,.1f} GiB ({fits} in usable HBM)")
        for kind in MEMORY_KINDS:
            amount = value(f"memory_{kind}")
            if amount > 0:
                lines.append(f"  {str(kind):20s} {amount / 2**30:10.2f} GiB")
    return "\n".join(lines)


def sweep(model: Any, system: Any, task: Any, axes: dict, *, semantics: Any = "default", store: str | None = None,
          resume: bool = False, workers: int | None = None, scheduler: str | None = None, progress: Any = False,
          unit_configs: Any = None, overwrite: bool = False, execution: Any = None, only_fitting: bool = False,
          calibration: Any = None) -> "xr.Dataset":
    """``fastmodel.sweep`` of a real-world model: in memory (``fastmodel.lm.sweep.lm_sweep``)."""
    from fastmodel.errors import SweepError
    from fastmodel.lm.sweep import lm_sweep

    if store is not None or workers is not None or scheduler is not None:
        raise SweepError("real-world sweeps run in memory: leave out store/workers/scheduler and save the "
                         "result with ds.to_netcdf(...)")
    return lm_sweep(model, system, task, axes=axes, execution=execution, only_fitting=only_fitting,
                    calibration=calibration)
