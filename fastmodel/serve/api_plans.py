"""The serving engine's doors for ``fastmodel.sweep``: the plan of a serving task's grid given as specs
(:func:`sweep_plan`), of a serving sweep file (:func:`sweep_plan_from_file`) and of a stored definition
(:func:`sweep_plan_from_definition`: resume, Dask workers), run by the shared sweep machinery.

Moved out of ``fastmodel/serve/api.py`` (which re-exports the three, the engine's door) when that module reached
the 450-line limit; no change to any function.
"""

from __future__ import annotations

from typing import Any

from fastmodel.errors import SpecError


def sweep_plan(model: Any, system: Any, task: Any, axes: dict, *, semantics: Any = "default",
               unit_configs: int | None = None, execution: Any = None, only_fitting: bool = False,
               calibration: Any = None):
    """The engine's door for ``fastmodel.sweep`` of a serving task (``kind = "serve"``): the plan of its grid
    (axes: device, precision, kv_precision, concurrency or any column), run by the shared machinery."""
    from pathlib import Path

    from fastmodel.semantics import get_semantics
    from fastmodel.serve.sweep_file import serve_plan, training_only

    for name, value in (("execution", execution), ("calibration", calibration)):
        if value is not None:
            raise training_only(None, name)
    if only_fitting:
        raise SpecError(None, "only_fitting", "applies to training sweeps; serving sweeps keep fits_memory for "
                        "every point (filter with fastmodel best)")
    if not get_semantics(semantics).real_world:
        raise training_only(None, "semantics")
    return serve_plan(None, model, system, task, axes, Path.cwd(), unit_configs)


def sweep_plan_from_file(source: str, data: dict, base, unit_configs: int | None = None, calibration: Any = None):
    """The plan of a serving sweep file (``fastmodel.sweeps.file``); errors name the file."""
    from fastmodel.serve.sweep_file import sweep_plan_from_file as from_file

    return from_file(source, data, base, unit_configs, calibration)


def sweep_plan_from_definition(definition: dict):
    """The plan of a stored definition (a zarr store's ``sweep`` attr: resume, Dask workers)."""
    from fastmodel.serve.sweep_plan import ServeSweepPlan

    return ServeSweepPlan.from_definition(definition)
