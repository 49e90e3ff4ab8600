"""The Python API: evaluate one configuration into a labeled xarray Dataset."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from fastmodel import __version__
from fastmodel.errors import SpecError
from fastmodel.madmax.engine import evaluate_configs
from fastmodel.madmax.lowering.config import Config, resolve
from fastmodel.registry.madmax import NAMES, attrs
from fastmodel.semantics import Semantics, get_semantics
from fastmodel.spec.loader import load_model, load_system, load_task

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


def evaluate(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
             plan: str | None = None, num_nodes: int | None = None, execution: Any = None,
             calibration: Any = None) -> "xr.Dataset":
    """Evaluate one configuration; a 0-d Dataset of every registry variable.

    ``model``, ``system``, ``task``: built-in name, path (.toml/.json), dict in
    fastmodel or MAD-Max format, or spec object. ``plan`` overrides the task's
    plan (MAD-Max specs: ``'DENSE/EMB'``; real-world specs: a mesh ``'tp8.pp4'``);
    ``num_nodes`` the system's cluster size; ``execution`` (real-world specs) how the
    run executes (precision, sharding, recompute, micro_batch, ...). Under the
    ``default`` semantics a real-world model (``family = "lm"``) goes through the
    real-world model (docs/model.md §11); ``calibration`` (a ``fastmodel calibrate`` TOML path or
    ``Calibration``) applies to it only (a SpecError for a MAD-Max model). Raises
    :class:`~fastmodel.errors.SpecError` or :class:`~fastmodel.errors.PlanError`.
    """
    real = real_world_model(model, semantics)
    if real is not None:
        from fastmodel.lm.api import evaluate_lm

        return evaluate_lm(real, system, task, plan=plan, execution=execution, num_nodes=num_nodes,
                           calibration=calibration)
    from fastmodel.lm.calibrate.use import not_for_madmax

    not_for_madmax(calibration)
    return evaluate_config(make_config(model, system, task, semantics, plan, num_nodes))


def real_world_model(model: Any, semantics: "str | Semantics | dict"):
    """The LM spec when ``model`` is a real-world model and ``semantics`` evaluates those; else None.
    A real-world model under a MAD-Max-only preset is a SpecError naming the preset to use."""
    from fastmodel.lm.spec import LMSpec

    loaded = load_model(model)
    if not isinstance(loaded, LMSpec):
        return None
    chosen = get_semantics(semantics)
    if not chosen.real_world:
        raise SpecError(None, "semantics", f"model {loaded.name!r} is a real-world spec: evaluate it under "
                        f"semantics 'default' (not {chosen.name!r}, which is the MAD-Max model only)")
    return loaded


def evaluate_config(config: Config) -> "xr.Dataset":
    """Evaluate one resolved :class:`~fastmodel.madmax.lowering.config.Config` (0-d Dataset)."""
    import xarray as xr  # here, not at the top: make_config must stay cheap to import (CLI start-up)

    results = evaluate_configs([config])
    data = {name: ((), np.bool_(results[name][0] > 0.5) if name == "fits_memory" else np.float64(results[name][0]),
                   attrs(name)) for name in NAMES}            # fits_memory a bool, as in sweeps
    return xr.Dataset(data, attrs=config_attrs(config))
