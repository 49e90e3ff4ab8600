"""The Python API: evaluate one configuration into a labeled xarray Dataset."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from fastmodel import __version__
from fastmodel.config import Config, resolve
from fastmodel.engine import evaluate_configs
from fastmodel.loader import load_model, load_system, load_task
from fastmodel.results import NAMES, attrs
from fastmodel.semantics import Semantics, get_semantics

if TYPE_CHECKING:
    import xarray as xr


def make_config(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "madmax",
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


def evaluate(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "madmax",
             plan: str | None = None, num_nodes: int | None = None) -> "xr.Dataset":
    """Evaluate one configuration; a 0-d Dataset of every registry variable.

    ``model``, ``system``, ``task``: built-in name, path (.toml/.json), dict in
    fastmodel or MAD-Max format, or spec object. ``plan`` overrides the task's
    plan (``'DENSE/EMB'``); ``num_nodes`` the system's cluster size. Raises
    :class:`~fastmodel.errors.SpecError` or :class:`~fastmodel.errors.PlanError`.
    """
    return evaluate_config(make_config(model, system, task, semantics, plan, num_nodes))


def evaluate_config(config: Config) -> "xr.Dataset":
    """Evaluate one resolved :class:`~fastmodel.config.Config` (0-d Dataset)."""
    import xarray as xr  # here, not at the top: make_config must stay cheap to import (CLI start-up)

    results = evaluate_configs([config])
    data = {name: ((), np.float64(results[name][0]), attrs(name)) for name in NAMES}
    return xr.Dataset(data, attrs=config_attrs(config))
