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

    results = evaluate_configs([config])
    data = {name: ((), np.bool_(results[name][0] > 0.5) if name == "fits_memory" else np.float64(results[name][0]),
                   attrs(name)) for name in NAMES}            # fits_memory a bool, as in sweeps
    return xr.Dataset(data, attrs=config_attrs(config))


def sweep(model: Any, system: Any, task: Any, axes: dict, *, semantics: Any = "default", execution: Any = None,
          only_fitting: bool = False, calibration: Any = None, **run) -> "xr.Dataset":
    """``fastmodel.sweep`` of a MAD-Max grid (``run``: store, resume, workers, scheduler, progress,
    unit_configs, overwrite; see :func:`fastmodel.sweep.api.sweep`)."""
    from fastmodel.sweep.api import grid_sweep

    for name, value in (("execution", execution), ("calibration", calibration)):
        if value is not None:
            raise SpecError(None, name, "applies to real-world models (family = \"lm\") only; the MAD-Max "
                            "model has no execution spec or fitted efficiencies" if name == "execution" else
                            "applies to the real-world model (family = \"lm\" specs and run records); the "
                            "MAD-Max model has no fitted efficiencies")
    if only_fitting:
        raise SpecError(None, "only_fitting", "applies to real-world sweeps; MAD-Max sweeps keep every point "
                        "with fits_memory (filter with fastmodel best)")
    return grid_sweep(model, system, task, axes, semantics=semantics, **run)
