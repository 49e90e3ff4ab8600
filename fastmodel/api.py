"""The Python API: evaluate one configuration, or one measured-run record, into a labeled xarray Dataset.

Each call asks :mod:`fastmodel.engines` which engine evaluates its input and calls that engine's door;
no engine logic lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastmodel import engines
from fastmodel.errors import SpecError

if TYPE_CHECKING:
    import xarray as xr

    from fastmodel.semantics import Semantics


def evaluate(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
             plan: str | None = None, num_nodes: int | None = None, execution: Any = None,
             calibration: Any = None) -> "xr.Dataset":
    """Evaluate one configuration; a 0-d Dataset of every variable its engine produces.

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


def evaluate_record(record: dict, source: str | None = None, calibration: Any = None) -> "xr.Dataset":
    """Evaluate one measured-run record (a training run of RUNS.md or a serving record of SERVE_RUNS.md)
    into a 0-d Dataset; its ``measured`` block is not read."""
    engine = engines.for_record(record)
    if engine is None:
        raise SpecError(source, "record", "not a run record (RUNS.md: model, system and plan blocks) nor a "
                        "serving record (SERVE_RUNS.md: model, system and serve blocks)")
    return engine.evaluate_record(record, source, calibration)


def make_config(model: Any, system: Any, task: Any, semantics: "str | Semantics | dict" = "default",
                plan: str | None = None, num_nodes: int | None = None):
    """A resolved MAD-Max configuration (see :func:`fastmodel.madmax.api.make_config`)."""
    from fastmodel.madmax.api import make_config as madmax_config

    return madmax_config(model, system, task, semantics, plan, num_nodes)
