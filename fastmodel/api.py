"""The Python API: evaluate one configuration or one measured-run record into a labeled xarray Dataset, or
sweep a grid of configurations.

Each call asks :mod:`fastmodel.engines` which engine evaluates its input and calls that engine's door;
no engine logic lives here (``validate`` hands run records to the training wing, serving records to the serving
wing; ``calibrate`` fits the training wing's calibration). ``fastmodel.sweep`` is :func:`sweep` (the shared machinery that runs it is the
package ``fastmodel.sweeps``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastmodel import engines
from fastmodel.errors import SpecError, SweepError, checked_arguments

if TYPE_CHECKING:
    import xarray as xr

    from fastmodel.analysis.validation import Validation
    from fastmodel.lm.calibrate import Calibration
    from fastmodel.semantics import Semantics


@checked_arguments
def evaluate(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
             plan: str | None = None, num_nodes: int | None = None, execution: Any = None,
             calibration: Any = None) -> "xr.Dataset":
    """Evaluate one configuration; a 0-d Dataset of every variable its engine produces, each with ``units``
    (SI: s, bytes, FLOP/s, tokens/s; ``1`` for ratios and flags), ``long_name`` and ``description`` in its attrs,
    and ``status`` (0 ok; ``flag_meanings`` names each code). ``num_nodes``: nodes of the system's size.

    ``model``, ``system``, ``task``: built-in name, path (.toml/.json), dict in fastmodel or MAD-Max format,
    or spec object. ``plan`` overrides the task's plan (MAD-Max specs: ``'DENSE/EMB'``; real-world specs: a
    mesh ``'tp8.pp4'``); ``num_nodes`` the system's cluster size; ``execution`` (real-world specs) how the run
    executes (precision, sharding, recompute, micro_batch, ...). Under the ``default`` semantics a
    real-world model (``family = "lm"``) goes through the real-world model (docs/model.md §11);
    ``calibration`` (a ``fastmodel calibrate`` TOML path or ``Calibration``) applies to it only (a SpecError
    for a MAD-Max model). Raises :class:`~fastmodel.errors.SpecError` or :class:`~fastmodel.errors.PlanError`.
    """
    engine = engines.for_specs(model, semantics, system)
    return engine.evaluate(model, system, task, semantics=semantics, plan=plan, num_nodes=num_nodes,
                           execution=execution, calibration=calibration)


@checked_arguments
def evaluate_record(record: dict, source: str | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one measured-run record (a training run of RUNS.md or a serving record of SERVE_RUNS.md, as a
    dict: one parsed JSON line) into a 0-d Dataset, each variable's ``units`` in its attrs as :func:`evaluate`'s;
    its ``measured`` block is not read. ``source`` names the record in errors (a file, a line)."""
    engine = engines.for_record(record)
    if engine is None:
        _refuse_record(record, source)
    return engine.evaluate_record(record, source, calibration)


def _refuse_record(record: Any, source: str | None) -> None:
    """The SpecError for what :func:`evaluate_record` cannot read: a path or JSON text where the parsed record
    goes, a record with a block missing or not an object (the block named), anything else."""
    from fastmodel.spec.detect import misshapen_record

    if isinstance(record, (str, Path)):
        raise SpecError(source, "record", f"expected one record as a dict (a parsed JSON line), got "
                        f"{type(record).__name__}: read a file of records with json.loads per line, or run "
                        "'fastmodel validate' / 'fastmodel batch' on it")
    if not isinstance(record, dict):
        raise SpecError(source, "record", f"expected one record as a dict, got {type(record).__name__}")
    if problem := misshapen_record(record):
        raise SpecError(source, None, problem)
    raise SpecError(source, "record", "not a run record (RUNS.md: model, system and plan blocks) nor a "
                    "serving record (SERVE_RUNS.md: model, system and serve blocks)")


@checked_arguments
def memory_by_stage(model: Any = None, system: Any = None, task: Any = None, *, record: dict | None = None,
                    source: str | None = None, plan: str | None = None, num_nodes: int | None = None,
                    memory_margin: float | None = None, execution: Any = None) -> "xr.Dataset":
    """Memory of a real-world training configuration (specs, or a run ``record``) by kind AND by pipeline stage:
    a Dataset with dims (``stage``, ``memory_kind``) holding each rank's peak moment of its memory timeline
    (``memory``; ``memory_allocated``, ``memory_reserved``, ``memory_per_device``, ``fits_memory``, ``peak_moment``
    per stage; attrs ``memory_peak_stage``, ``hbm_bytes``). ``memory_margin``: bytes of HBM kept free (default: each
    rank's own allocator cache). A SpecError for MAD-Max specs or a serving record (docs/model_memory.md
    "Memory by pipeline stage (report)")."""
    return engines.memory_by_stage(model=model, system=system, task=task, record=record, source=source, plan=plan,
                                   num_nodes=num_nodes, memory_margin=memory_margin, execution=execution)


@checked_arguments
def sweep(model: Any, system: Any, task: Any, axes: dict[str, Any], semantics: Any = "default",
          store: str | None = None, resume: bool = False, workers: int | None = None, scheduler: str | None = None,
          progress: bool | None = False, unit_configs: int | None = None, overwrite: bool = False,
          execution: Any = None, only_fitting: bool = False, calibration: Any = None) -> "xr.Dataset":
    """Evaluate a grid of configurations; a labeled Dataset with one dimension per axis (its coordinate the axis
    values, ``.sel(num_nodes=16, plan="tp8")``), the variables of :func:`evaluate` with their ``units`` attrs and
    a ``status`` per point (0 ok; ``flag_meanings`` names every code: an illegal point keeps its reason).

    ``axes`` maps axis names to values: a list, a scalar, or a range ``{start, stop, num|step,
    scale='linear'|'log'}`` (a generator is read as its list; ``None`` and a set are refused). Which axes exist
    is the engine's: MAD-Max specs sweep spec fields (short or dotted
    names), ``plan`` (``'all'``, plan strings, or rules ``{dense=[...], emb=[...], max_levels=1|2}``),
    ``model`` and ``system``; a real-world model (``family = "lm"``, under ``default``) sweeps registry columns,
    ``num_nodes``, ``global_batch`` and ``plan`` meshes (``execution``, ``only_fitting`` and ``calibration`` --
    a ``fastmodel calibrate`` TOML path or ``Calibration`` -- apply to it); a serving task (``kind = "serve"``)
    sweeps ``device``, ``precision``, ``kv_precision``, ``concurrency`` and columns.

    Every engine runs on the same machinery (``fastmodel.sweeps``): in memory, or with ``store`` (a ``.zarr``
    path) streamed to disk unit by unit (``resume`` completes an interrupted store, ``overwrite`` replaces an
    existing sweep store and nothing else); ``workers`` / ``scheduler`` run the units on a Dask distributed
    cluster (needs ``store``); ``unit_configs`` points per unit (and zarr chunk).
    """
    from fastmodel.sweeps.run import run

    if axes is not None and not isinstance(axes, Mapping):
        raise SweepError(f"axes: expected a dict of axis name -> values (e.g. {{'num_nodes': [16, 32]}}), got "
                         f"{type(axes).__name__}")
    axes = _axis_lists(axes)
    plan = (axes or {}).get("plan")
    if isinstance(plan, str) and plan.strip().lower() == "all":    # "ALL", " all": the keyword, as sweep files read it
        axes = {**axes, "plan": "all"}
    if store is None:
        _refuse_over_memory(axes)
    elif not isinstance(store, (str, Path)) or Path(store).suffix != ".zarr":
        raise SweepError(f"store: a zarr store's path, ending in .zarr (got {store!r}); for a .nc file sweep in "
                         "memory (store=None) and call ds.to_netcdf('out.nc')")
    engine = engines.for_sweep(model, system, task, semantics)
    plan = engine.door().sweep_plan(model, system, task, axes, semantics=semantics, unit_configs=unit_configs,
                                    execution=execution, only_fitting=only_fitting, calibration=calibration)
    return run(plan, store, resume, workers, scheduler, progress, overwrite)


def _axis_lists(axes: Mapping | None) -> dict | None:
    """``axes`` with each name a string and each axis values a sweep reads: a generator (``range`` mapped, a
    comprehension without brackets) and a 1-d numpy array of strings (``df.plan.unique()``) are read as lists; a
    name that is no string, ``None`` and a set (no order to lay the axis in) are one line each (an int name was an
    AttributeError, ``plan=None`` a TypeError)."""
    if axes is None:
        return None
    out = {}
    for name, values in axes.items():
        if not isinstance(name, str):
            raise SweepError(f"axes: an axis name is a string, e.g. 'num_nodes' (got {name!r})")
        if values is None or isinstance(values, (set, frozenset)):
            what = "None" if values is None else "a set, which has no order to lay the axis in"
            raise SweepError(f"axes.{name}: {what}; give a list, a scalar or a range {{'start', 'stop', 'num'}}")
        if getattr(values, "dtype", None) is not None and values.dtype.kind in "OSU" and values.ndim == 1:
            values = values.tolist()    # plan=np.array(["dp", "tp2"]): values == "all" was an ambiguous truth value
        out[name] = list(values) if isinstance(values, Iterator) else values
    return out


#: the fewest bytes an in-memory grid point of any engine holds (a few of its result variables and its status): a
#: lower bound, so that the check below refuses only grids that cannot fit whatever the engine
MIN_BYTES_PER_POINT = 8 * 8 + 1


def _refuse_over_memory(axes: dict) -> None:
    """A SweepError (one line) for an in-memory sweep whose axes' lengths alone (a list, tuple, array or range;
    ``len`` of a range is free) make a grid that cannot fit: before an engine builds and checks every value of an
    axis of 10^9 (the engine's own check, from its result variables, follows once the axes are built)."""
    from fastmodel.sweeps.size import axes_points, check_grid_memory

    total = axes_points((axes or {}).values())
    check_grid_memory(total, total * MIN_BYTES_PER_POINT, "write it to a zarr store with store='out.zarr'")


@checked_arguments
def validate(runs: Any, *, heldout: Any = None, calibration: Any = None) -> "Validation":
    """Predict every measured record of ``runs`` (a JSON-lines file's path, or a list of record dicts: training
    runs of RUNS.md or serving records of SERVE_RUNS.md, told apart by content) and score the predictions as
    ``fastmodel validate`` prints them: a :class:`~fastmodel.analysis.validation.Validation` (``rows`` as ``-o``
    writes them, ``scores`` one dict per printed score line, ``messages`` the stderr lines, ``report`` the tables).
    ``heldout``: ``True`` (heldout.json beside ``runs``, as ``--heldout``), a split file's path, or a set of
    held-out ids: every score twice, ``dev`` and ``held-out``. ``calibration`` (run records only): a ``fastmodel
    calibrate`` TOML path or ``Calibration``; its mismatches with the records are CalibrationWarnings. A refused
    record is a row with status ``refused``, a miss in every score."""
    from fastmodel.analysis.validation import heldout_of, is_serving

    ids = heldout_of(runs, heldout)
    if is_serving(runs):
        if calibration is not None:
            raise SpecError(None, "calibration", "applies to run records, not serving records")
        from fastmodel.serve.validate import validation

        return validation(runs, ids)
    from fastmodel.lm.validate_run import validation

    return validation(runs, ids, calibration)


@checked_arguments
def calibrate(runs: Any, *, folds: int | None = None, loss: str = "soft_l1", prior: Any = "auto", seed: int = 0,
              output: str | None = None, force: bool = False) -> "Calibration":
    """Fit the fittable efficiencies of every device, precision, network tier and software stack of ``runs`` (a
    JSON-lines path or a list of run-record dicts with measured step times) as ``fastmodel calibrate`` does
    (``folds``, ``loss``, ``prior``, ``seed``: its options; docs/calibration.md); the fitted
    :class:`~fastmodel.lm.calibrate.Calibration`, to pass as ``calibration=`` to :func:`evaluate`, :func:`sweep`,
    :func:`evaluate_record` or :func:`validate`. Nothing is written unless ``output`` names a ``.toml`` file (as
    ``-o``; an existing one replaced only with ``force``; then the file as read back). The report the command
    prints: ``fastmodel.lm.calibrate.api.fit_runs(runs).report``."""
    from fastmodel.io.outputs import check_output
    from fastmodel.lm.calibrate.api import fit_runs, write_fitted
    from fastmodel.lm.calibrate.overlay import read_calibration

    if output is not None:   # before any work: an earlier calibration is never replaced without force
        check_output(output, "toml", inputs=_inputs(runs), force=force, what="calibration")
    refuse_serving(runs)
    fitted = fit_runs(runs, folds, loss, prior, seed)
    if output is None:
        return fitted.calibration
    write_fitted(fitted, output, runs, force)
    return read_calibration(output)     # as --calibration reads it: its source and sha256 the file's


def _inputs(runs: Any) -> tuple:
    return (runs,) if isinstance(runs, (str, Path)) else ()


def refuse_serving(runs: Any) -> None:
    """A one-line error for serving records given to calibrate (it fits the training model to run records)."""
    from fastmodel.analysis.validation import is_serving, source_of
    from fastmodel.errors import FastmodelError

    if is_serving(runs):
        raise FastmodelError(f"{source_of(runs)}: these are serving records (SERVE_RUNS.md); calibrate fits the "
                             "training model to run records (RUNS.md: model, system, plan, measured step_time_s)")


@checked_arguments
def make_config(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
                plan: str | None = None, num_nodes: int | None = None):
    """A resolved MAD-Max configuration (see :func:`fastmodel.madmax.api.make_config`)."""
    from fastmodel.madmax.api import make_config as madmax_config

    return madmax_config(model, system, task, semantics, plan, num_nodes)
