"""Load the MAD-Max engine's specs from built-in names, TOML/JSON files or dicts, in either format.

``load_model`` / ``load_system`` / ``load_task`` accept a spec object, a dict (fastmodel keys or the MAD-Max
reference's keys, detected from the content), a path to a ``.toml`` or ``.json`` file, or the name of a
built-in spec in ``specs/``. A real-world spec (``family = "lm"``, ``kind = "cluster"``) or a serving task is
refused with a pointer to the engine that evaluates it (fastmodel/engines.py). Every error is a
:class:`SpecError` naming the source, the field path and the reason.
"""

from __future__ import annotations

import json
import numbers
from functools import lru_cache
from typing import Any

from fastmodel.errors import SpecError, nearest
from fastmodel.madmax.families import MODEL_FAMILIES, ModelSpec
from fastmodel.madmax.spec import madmax_format
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec
from fastmodel.spec import detect
from fastmodel.spec.loader import resolve_source, validate


def load_model(spec: Any) -> ModelSpec:
    """A model spec from a name, path, dict (either format) or spec object."""
    if isinstance(spec, tuple(MODEL_FAMILIES.values())):
        return spec
    data, source = resolve_source(spec, "model")
    if madmax_format.is_madmax_model(data):
        data = madmax_format.model_to_spec(data, source, validate)
    family = detect.field(data, "family")
    if family == detect.REAL_WORLD_FAMILY:
        raise SpecError(source, "semantics", f"model {detect.field(data, 'name')!r} is a real-world spec "
                        "(family = \"lm\"): evaluate it under semantics 'default', not the MAD-Max model")
    if family is None:
        raise SpecError(source, "model.family", f"required field missing (one of {', '.join(MODEL_FAMILIES)})"
                        + ("; the spec is empty" if not data else ""))
    if not isinstance(family, str) or family not in MODEL_FAMILIES:
        raise SpecError(source, "model.family", f"unknown family {family!r}; one of {', '.join(MODEL_FAMILIES)}"
                        f"{nearest(str(family), MODEL_FAMILIES)}")
    return validate(MODEL_FAMILIES[family], data, source, "model")


def load_system(spec: Any, num_nodes: int | None = None) -> SystemSpec:
    """A system spec; ``num_nodes`` overrides the cluster size."""
    if isinstance(spec, SystemSpec):
        system = spec
    else:
        data, source = resolve_source(spec, "system")
        if detect.is_cluster(data):
            raise SpecError(source, "semantics", f"system {detect.field(data, 'name')!r} is a real-world cluster "
                            "(kind = \"cluster\"): evaluate it under semantics 'default' with a real-world model")
        detect.check_system_kind(data, source)
        if madmax_format.is_madmax_system(data):
            data = madmax_format.system_to_spec(data, source, validate)
        system = validate(SystemSpec, data, source, "system")
    if num_nodes is not None:
        if isinstance(num_nodes, numbers.Integral) and not isinstance(num_nodes, bool):
            num_nodes = int(num_nodes)
        system = system.with_nodes(num_nodes)
    return system


def load_task(spec: Any) -> TaskSpec:
    """A task spec from a name, path, dict (either format) or spec object."""
    if isinstance(spec, TaskSpec):
        return spec
    data, source = resolve_source(spec, "task")
    if detect.is_serve_task(data):
        raise SpecError(source, "task.kind", "a serving task (kind = \"serve\"): sweep it from a sweep file "
                        "('fastmodel sweep FILE.toml') or evaluate one configuration with 'fastmodel serve'")
    if madmax_format.is_madmax_task(data):
        data = madmax_format.task_to_spec(data, source, validate)
    task = validate(TaskSpec, data, source, "task")
    task._source = source
    return task


@lru_cache(maxsize=256)
def load_cached(kind: str, text: str):
    """Load a spec given as JSON text or a name (memoised, for batch mode)."""
    value = json.loads(text) if text.startswith("{") else text
    return {"model": load_model, "system": load_system, "task": load_task}[kind](value)
