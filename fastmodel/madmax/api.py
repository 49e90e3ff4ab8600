"""The MAD-Max engine's door: one configuration into a labeled 0-d ``xarray.Dataset``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from fastmodel import __version__
from fastmodel.errors import SpecError
from fastmodel.madmax.engine import evaluate_configs
from fastmodel.madmax.lowering.config import Config, resolve
from fastmodel.madmax.spec.loader import load_model, load_system, load_task
from fastmodel.registry import attrs
from fastmodel.registry.madmax import NAMES
from fastmodel.semantics import Semantics, get_semantics

if TYPE_CHECKING:
    import xarray as xr


def make_config(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
                plan: str | None = None, num_nodes: int | None = None) -> Config:
    """Load the three specs, apply overrides and resolve a legal configuration."""
    return resolve(
        load_model(model),
        load_system(system, num_nodes=num_nodes),
        load_task(task),
        get_semantics(semantics),
        plan,
    )


def config_attrs(config: Config) -> dict[str, str]:
    """Dataset attrs that make a result self-describing (specs as JSON)."""
    return {
        "model": json.dumps(config.model.model_dump()),
        "system": json.dumps(config.system.model_dump()),
        "task": json.dumps(config.task.model_dump()),
        "plan": config.plan.label,
        "semantics": json.dumps(config.semantics.model_dump()),
        "fastmodel_version": __version__,
    }


def evaluate(model: Any, system: Any, task: Any, *, semantics: "str | Semantics | dict" = "default",
             plan: str | None = None, num_nodes: int | None = None, execution: Any = None,
             calibration: Any = None) -> "xr.Dataset":
    """One MAD-Max configuration as a 0-d Dataset of every registry variable (``fastmodel.evaluate``).

    ``execution`` and ``calibration`` belong to the real-world model: given here, they are a SpecError.
    """
    if execution is not None:
        raise SpecError(None, "execution", "applies to real-world models (family = \"lm\") only; the MAD-Max "
                        "model reads how a run executes from its task and plan")
    if calibration is not None:
        raise SpecError(None, "calibration", "applies to the real-world model (family = \"lm\" specs and run "
                        "records); the MAD-Max model has no fitted efficiencies")
    return evaluate_config(make_config(model, system, task, semantics, plan, num_nodes))


def evaluate_config(config: Config) -> "xr.Dataset":
    """Evaluate one resolved :class:`~fastmodel.madmax.lowering.config.Config` (0-d Dataset)."""
    import xarray as xr  # here, not at the top: make_config must stay cheap to import (CLI start-up)

    from fastmodel.io.aliases import with_aliases

    results = evaluate_configs([config])
    data = {name: ((), np.bool_(results[name][0] > 0.5) if name == "fits_memory" else np.float64(results[name][0]),
                   attrs(name)) for name in NAMES}            # fits_memory a bool, as in sweeps
    return with_aliases(xr.Dataset(data, attrs={**config_attrs(config), "fastmodel_engine": "madmax"}))


def sweep_plan(model: Any, system: Any, task: Any, axes: dict, *, semantics: Any = "default",
               unit_configs: int | None = None, execution: Any = None, only_fitting: bool = False,
               calibration: Any = None):
    """The MAD-Max sweep plan of ``fastmodel.sweep`` (:class:`fastmodel.madmax.sweep.definition.Sweep`);
    ``execution``, ``only_fitting`` and ``calibration`` belong to the real-world model: given, a SpecError."""
    from fastmodel.madmax.sweep.definition import UNIT_CONFIGS, Sweep

    for name, value in (("execution", execution), ("calibration", calibration)):
        if value is not None:
            raise SpecError(None, name, "applies to real-world models (family = \"lm\") only; the MAD-Max "
                            "model has no execution spec or fitted efficiencies" if name == "execution" else
                            "applies to the real-world model (family = \"lm\" specs and run records); the "
                            "MAD-Max model has no fitted efficiencies")
    if only_fitting:
        raise SpecError(None, "only_fitting", "applies to real-world sweeps; MAD-Max sweeps keep every point "
                        "with fits_memory (filter with fastmodel best)")
    return Sweep(model, system, task, axes, semantics, unit_configs or UNIT_CONFIGS)


def sweep_plan_from_definition(definition: dict):
    """The MAD-Max sweep plan of a stored definition (resume, Dask workers)."""
    from fastmodel.madmax.sweep.definition import Sweep

    return Sweep.from_definition(definition)


def sweep_plan_from_file(source: str, data: dict, base, unit_configs: int | None = None, calibration: Any = None):
    """The MAD-Max sweep plan of a parsed sweep file (``fastmodel.sweeps.file``)."""
    from fastmodel.madmax.sweep.file import sweep_plan_from_file as from_file

    if calibration is not None:
        raise SpecError(None, "calibration", "applies to the real-world model (family = \"lm\" specs and run "
                        "records); the MAD-Max model has no fitted efficiencies")
    return from_file(source, data, base, unit_configs)


def timeline(model: Any = None, system: Any = None, task: Any = None, *, config: Config | None = None,
             record: Any = None, source: str | None = None, semantics: Any = "default", plan: str | None = None,
             num_nodes: int | None = None):
    """The engine's door for ``fastmodel.plot.timeline``: one configuration's scheduled Program, op by op, as a
    ``fastmodel.schedule.timeline.Timeline`` (a compute and a communication row, ops by category)."""
    from fastmodel.kernels.streams import CATEGORY_NAMES, STREAM_COMM, STREAM_COMPUTE
    from fastmodel.madmax.engine import trace
    from fastmodel.schedule.timeline import Timeline

    if config is None:
        config = make_config(model, system, task, semantics, plan, num_nodes)
    program, start, end = trace(config)
    barrier_ops = np.flatnonzero(program.op_barrier)
    rows = {STREAM_COMPUTE: 0, STREAM_COMM: 1}
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    return Timeline(("compute", "comm."), CATEGORY_NAMES, tuple(program.op_names),
                    np.array([rows[int(s)] for s in program.op_stream], dtype=np.int64),
                    np.asarray(program.op_category, dtype=np.int64), start, end,
                    float(end.max()) if end.size else 0.0, f"{config.model.name}, {config.plan.label}",
                    float(start[barrier_ops[0]]) if barrier_ops.size else None)
