"""Python API of the real-world model for one configuration: specs or a run record -> 0-d Dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from fastmodel.errors import PlanError, SpecError
from fastmodel.registry.lm import COLUMN_INDEX, MEMORY_KINDS, STATUS_CODES, STATUSES

if TYPE_CHECKING:
    import xarray as xr


def evaluate(model: Any, system: Any, task: Any, *, semantics: Any = "default", plan: str | None = None,
             num_nodes: int | None = None, execution: Any = None, calibration: Any = None) -> "xr.Dataset":
    """The engine's door for ``fastmodel.evaluate``: one real-world configuration (``semantics`` was checked
    by ``fastmodel.engines``; the task's mesh plan applies when ``plan`` is None)."""
    from fastmodel.lm.task import load_train_task

    if plan is None and task is not None:
        plan = load_train_task(task).mesh()
    return evaluate_lm(model, system, task, plan=plan, execution=execution, num_nodes=num_nodes,
                       calibration=calibration)


def evaluate_lm(model: Any, system: Any, task: Any = None, plan: str | None = None, execution: Any = None,
                num_nodes: int | None = None, global_batch: int | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one real-world configuration (``plan``: a mesh like ``"tp8.pp4"``; dp fills the cluster).

    ``calibration``: a calibration overlay (TOML path or ``Calibration``) applied as in ``lm_sweep``.
    Raises PlanError for an illegal plan, SpecError for bad specs, NotFiniteError when a result is not a
    finite number. Same path as a sweep of one point.
    """
    from fastmodel.lm.sweep import sweep_plan
    from fastmodel.sweeps.run import run_in_memory

    point = sweep_plan(model, system, task, axes={"plan": ["dp" if plan is None else plan]}, execution=execution,
                       global_batch=global_batch, num_nodes=num_nodes, calibration=calibration)
    ds = run_in_memory(point, require_ok=False).isel(plan=0)      # lm_sweep of one point
    code = int(ds.status)
    label = f"plan {plan or 'dp'!r}"
    if code == STATUS_CODES["not_finite"]:
        from fastmodel.errors import NotFiniteError

        raise NotFiniteError(label, STATUSES[code].message)
    if code:      # the refusal, with its numbers where the rule has them (``status_reason``), from the lowered point
        from fastmodel.lm.rules import locate_plan_error, status_reason
        from fastmodel.lm.sweep import mesh_columns

        columns = mesh_columns(point.base, plan, point.execution.shard_degree is None)
        raise locate_plan_error(PlanError(STATUSES[code].name, status_reason(code, columns), label), model)
    return ds


def record_values(record: dict, source: str | None = None, calibration: Any = None) -> tuple[dict, dict]:
    """(results, attrs) of one run record without xarray: every result name (``memory_*`` by kind included)
    -> a float (``fits_memory`` a bool), and the record's id, notes and calibration attrs. See evaluate_record."""
    from fastmodel.lm.records import lower_record

    return lowered_values(lower_record(record, source), source, calibration)


def lowered_values(lowered, source: str | None = None, calibration: Any = None) -> tuple[dict, dict]:
    """:func:`record_values` of a record already lowered (``fastmodel.lm.records.lower_record``): the calibration
    checked and applied to a copy of its columns, its plan checked, then evaluated."""
    from fastmodel.lm.calibrate.overlay import apply_calibration, as_calibration
    from fastmodel.lm.engine import evaluate_one
    from fastmodel.lm.rules import check_plan

    cal = as_calibration(calibration)
    if cal is not None:
        from fastmodel.lm.calibrate import use

        use.check(cal, {lowered.gpu: use.tiers_used(lowered.columns)},
                  software=[use.record_software(lowered)])
        lowered = apply_calibration([lowered], cal)[0]
    check_plan(lowered.columns, f"{source + ': ' if source else ''}plan")
    results = evaluate_one(lowered.columns, f"{source + ': ' if source else ''}{lowered.id or 'run record'}")
    results["fits_memory"] = results["fits_memory"] == 1.0
    attrs = {"id": lowered.id, "semantics": "default", "notes": "; ".join(lowered.notes),
             "hbm_bytes": float(lowered.columns[COLUMN_INDEX["hbm_bytes"]]), "stack": lowered.stack}
    if cal is not None:
        attrs.update(use.attrs(cal, [lowered.gpu], [use.record_software(lowered)]))
    return results, attrs


def config_values(model: Any, system: Any, task: Any = None, plan: str | None = None,
                  num_nodes: int | None = None, execution: Any = None) -> dict:
    """Results of one real-world configuration without xarray (as :func:`record_values`); the same point a
    sweep evaluates (``lm_sweep.point_columns``, run as ``execution`` says); a PlanError for an illegal plan."""
    from fastmodel.lm.sweep import point_columns

    return column_values(point_columns(model, system, task, plan=plan, num_nodes=num_nodes, execution=execution), plan)


def column_values(columns: np.ndarray, plan: str | None = None) -> dict:
    """:func:`config_values` of a configuration already lowered (``lm_sweep.point_columns`` of ``plan``)."""
    from fastmodel.lm.engine import evaluate_one

    results = evaluate_one(columns, f"plan {plan or 'dp'!r}")
    results["fits_memory"] = results["fits_memory"] == 1.0
    return results


def evaluate_record(record: dict, source: str | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one run record (RUNS.md schema; ``measured`` is ignored) into a 0-d Dataset.

    ``calibration``: a calibration overlay (TOML path or ``Calibration``) for the record's device; the attrs
    record it; a device or tier it does not cover is a ``CalibrationWarning``."""
    import xarray as xr

    from fastmodel.io.aliases import with_aliases
    from fastmodel.registry import coordinate_attrs, dataset_variables

    results, attrs = record_values(record, source, calibration)
    data = {}
    for var, rows in dataset_variables("lm"):
        if var.dims:
            data[var.name] = (var.dims, np.array([results[row] for row in rows]), var.attrs())
        else:
            value = bool(results[var.name]) if var.dtype == "bool" else np.float64(results[var.name])
            data[var.name] = ((), value, var.attrs())
    from fastmodel import __version__

    kinds = ("memory_kind", list(MEMORY_KINDS), coordinate_attrs("memory_kind"))
    made = {"fastmodel_version": __version__, "fastmodel_engine": "lm"}     # as a sweep's Dataset says
    return with_aliases(xr.Dataset(data, coords={"memory_kind": kinds}, attrs={**attrs, **made}))


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
        f"MFU / HFU            {100 * value('mfu'):.1f}% / {100 * value('hfu'):.1f}%  (MFU: the standard count, "
        "non-causal attention; HFU: the FLOPs run, causal, recompute included)",
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
        lines.append(f"memory allocated     {value('memory_allocated') / 2**30:,.2f} GiB, reserved "
                     f"{value('memory_reserved') / 2**30:,.2f} GiB (torch.cuda.max_memory_allocated / _reserved)")
    return "\n".join(lines)


def sweep_plan(model: Any, system: Any, task: Any, axes: dict, *, semantics: Any = "default",
               unit_configs: int | None = None, execution: Any = None, only_fitting: bool = False,
               calibration: Any = None):
    """The engine's door for ``fastmodel.sweep``: the plan of a real-world grid (``semantics`` was checked by
    ``fastmodel.engines``), run by the shared machinery in memory, into a zarr store or on Dask workers."""
    from fastmodel.lm.sweep import sweep_plan as make_plan

    return make_plan(model, system, task, axes, execution, only_fitting=only_fitting, calibration=calibration,
                     unit_configs=unit_configs)


def sweep_plan_from_definition(definition: dict):
    """The plan of a stored definition (a zarr store's ``sweep`` attr: resume, Dask workers)."""
    from fastmodel.lm.sweep_plan import LMSweepPlan

    return LMSweepPlan.from_definition(definition)


def sweep_plan_from_file(source: str, data: dict, base, unit_configs: int | None = None, calibration: Any = None):
    """The plan of a real-world sweep file (``fastmodel.sweeps.file``); errors name the file."""
    from fastmodel.lm.sweep_file import sweep_plan_from_file as from_file

    return from_file(source, data, base, unit_configs, calibration)


def model_columns(model: Any) -> tuple[str, dict[str, float]]:
    """(name, every model column) of a real-world model spec (``family = "lm"``: built-in name, path, dict or
    spec): the model in the column vector's terms, which the serving engine reads it by."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.lowering import model_values
    from fastmodel.registry.lm import COLUMNS

    spec = load_lm_model(model)
    values = model_values(spec)
    return spec.name, {c.name: float(values.get(c.name, c.default)) for c in COLUMNS if c.group == "model"}


def record_columns(record: dict, source: str | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
    """(column vector, fill-in notes) of a run record's model, system and plan blocks (RUNS.md; ``measured``
    is not read): the lowering the serving engine reads a serving record's model and system by."""
    from fastmodel.lm.records import lower_record

    lowered = lower_record(record, source)
    return lowered.columns, lowered.notes


def timeline(model: Any = None, system: Any = None, task: Any = None, *, record: dict | None = None,
             source: str | None = None, semantics: Any = "default", plan: str | None = None,
             num_nodes: int | None = None, execution: Any = None):
    """The engine's door for ``fastmodel.plot.timeline``: one configuration (specs, run as ``execution`` says,
    or a run ``record``; ``execution`` is refused beside it) laid out op by op (``fastmodel.lm.timeline``) as a
    ``fastmodel.schedule.timeline.Timeline``: the busiest stage's compute stream on top, one row per process
    group below."""
    from fastmodel.lm.timeline import KINDS, STREAMS, record_timeline, spec_timeline
    from fastmodel.schedule.timeline import Timeline

    if record is not None:
        _refuse_execution_beside_record(execution, source)
        tl, label = record_timeline(record, source)
    else:
        tl, label = spec_timeline(model, system, task, plan=plan, num_nodes=num_nodes, execution=execution)
    return Timeline(STREAMS, KINDS, tuple(tl.names), np.asarray(tl.stream, dtype=np.int64),
                    np.asarray(tl.kind, dtype=np.int64), np.asarray(tl.start, dtype=float),
                    np.asarray(tl.end, dtype=float), float(tl.step_time), label,
                    wait_row=STREAMS.index("compute"), wait_tol=1e-9)


def memory_timeline(model: Any = None, system: Any = None, task: Any = None, *, record: dict | None = None,
                    source: str | None = None, plan: str | None = None, num_nodes: int | None = None,
                    memory_margin: float | None = None, execution: Any = None):
    """The engine's door for ``fastmodel.plot.memory_timeline``: memory over one step on every pipeline rank, by
    kind (``fastmodel.lm.memory_timeline.MemoryTimeline``), of specs (run as ``execution`` says, as in
    :func:`evaluate_lm`) or a run ``record`` (its plan block; ``execution`` is refused beside it);
    ``memory_margin`` (bytes kept free of the HBM; default: the plan's own allocator cache,
    fastmodel/analysis/margin.py)."""
    from fastmodel.lm.memory_timeline import memory_timeline as build

    return build(*_one_configuration(model, system, task, record, source, plan, num_nodes, execution), memory_margin)


def memory_by_stage(model: Any = None, system: Any = None, task: Any = None, *, record: dict | None = None,
                    source: str | None = None, plan: str | None = None, num_nodes: int | None = None,
                    memory_margin: float | None = None, execution: Any = None) -> "xr.Dataset":
    """The engine's door for ``fastmodel.memory_by_stage``: every pipeline rank's peak moment of the memory
    timeline, by kind, as a Dataset with dims (``stage``, ``memory_kind``)
    (``fastmodel.lm.memory_stages.memory_by_stage``), of the configuration :func:`memory_timeline` takes."""
    from fastmodel.lm.memory_stages import memory_by_stage as build

    return build(*_one_configuration(model, system, task, record, source, plan, num_nodes, execution), memory_margin)


def _refuse_execution_beside_record(execution: Any, source: str | None) -> None:
    """A run record executes as its plan block says: an ``execution`` given beside it (:func:`timeline`,
    :func:`memory_timeline`, :func:`memory_by_stage`) is a one-line SpecError on ``execution``."""
    if execution is not None:
        raise SpecError(source, "execution", "a run record executes as its plan block says; edit the record")


def _one_configuration(model, system, task, record, source, plan, num_nodes, execution) -> tuple[np.ndarray, str]:
    """(column vector, title) of specs (run as ``execution`` says) or a run ``record`` (its plan block, checked;
    ``execution`` is refused beside it)."""
    from fastmodel.lm.records import lower_record
    from fastmodel.lm.rules import check_plan
    from fastmodel.lm.sweep import spec_point

    if record is not None:
        _refuse_execution_beside_record(execution, source)
        lowered = lower_record(record, source)
        check_plan(lowered.columns, f"{source}: plan" if source else "plan")
        return lowered.columns, lowered.id or "run record"
    spec, plan, columns = spec_point(model, system, task, plan, execution, num_nodes)
    return columns, f"{spec.name}, {plan or 'dp'}"
