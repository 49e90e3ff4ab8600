"""Sweep axes: which spec fields can be swept, by which names, with which values.

Any numeric or categorical leaf field of the model, system or task spec is an
axis, by full path (``system.network.port_bandwidth_bytes_per_s``) or by its
leaf name when that is unambiguous (``port_bandwidth_bytes_per_s``,
``num_nodes``, ``flops_util``). ``plan`` is the plan axis; ``model`` and
``system`` take spec names (built-in or files), e.g. the cloud instances of a
study; ``num_devices`` sets the cluster size in devices (``num_nodes`` =
devices / devices per node of each system). Fields that change the op graph
(layer counts, precision, task kind, freezing, plan, model, system) are
*structural*: the engine loops over them; the others are evaluated as vectors.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

import numpy as np
from pydantic import BaseModel

from fastmodel.errors import PlanError, SweepError, nearest
from fastmodel.madmax.families import MODEL_FAMILIES
from fastmodel.madmax.parallel.plans import DENSE_STRATEGIES, EMB_STRATEGIES, Level, Plan, enumerate_plan_shapes
from fastmodel.madmax.parallel.rules import check_plan_shape
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec
from fastmodel.spec.quantity import parse_quantity
from fastmodel.sweeps.ranges import MAX_AXIS_VALUES, expand  # noqa: F401 - MAX_AXIS_VALUES: this module's API

#: fields whose value changes the Program (looped over, not vectorized)
STRUCTURAL = {
    "model.num_layers", "model.num_bottom_layers", "model.num_top_layers", "model.bytes_per_dense_param",
    "task.kind", "task.freeze_emb", "task.freeze_dense", "task.freeze_top_mlp", "task.freeze_bottom_mlp",
    "task.min_frozen_layer", "model", "system",
}
#: axes that are not a single spec field
SPEC_AXES = ("model", "system")    # values: spec names or paths
NUM_DEVICES = "system.num_devices"  # devices in the cluster; sets num_nodes per system
#: fields that are labels, not quantities
_NOT_SWEEPABLE = {"family", "name"}


@dataclass(frozen=True)
class FieldInfo:
    path: str
    kind: str          # "int" | "float" | "bool" | "choice"
    choices: tuple = ()
    quantity: str | None = None   # unit kind for strings with units


def _leaves(cls: type[BaseModel], prefix: str):
    for name, field in cls.model_fields.items():
        if name in _NOT_SWEEPABLE or field.exclude:  # excluded: an input spelling (SystemSpec.tiers), not a field
            continue
        annotation = field.annotation
        is_union = get_origin(annotation) in (Union, types.UnionType)
        args = [a for a in get_args(annotation) if a is not type(None)] if is_union else []
        inner = args[0] if len(args) == 1 else annotation
        if get_origin(inner) is Annotated:
            inner = get_args(inner)[0]
        path = f"{prefix}.{name}"
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _leaves(inner, path)
            continue
        if inner is bool:
            yield FieldInfo(path, "bool")
        elif get_origin(inner) is not None and str(get_origin(inner)).endswith("Literal"):
            choices = get_args(inner)
            yield FieldInfo(path, "int" if all(isinstance(c, int) for c in choices) else "choice", choices)
        elif inner is int:
            yield FieldInfo(path, "int")
        elif inner is str:
            continue
        else:
            if "peak_flop_per_s" in path:
                quantity = "flop_per_s"
            elif name.endswith("_bytes_per_s"):
                quantity = "bytes_per_s"
            elif name.endswith("_bytes"):
                quantity = "bytes"
            else:
                quantity = None
            yield FieldInfo(path, "float", quantity=quantity)


def _registry() -> dict[str, FieldInfo]:
    fields = {}
    classes = [(cls, "model") for cls in MODEL_FAMILIES.values()] + [(SystemSpec, "system"), (TaskSpec, "task")]
    for cls, root in classes:
        for info in _leaves(cls, root):
            fields.setdefault(info.path, info)
    fields.pop("task.plan", None)
    fields[NUM_DEVICES] = FieldInfo(NUM_DEVICES, "int")
    return fields


FIELDS: dict[str, FieldInfo] = _registry()
_SHORT: dict[str, list[str]] = {}
for _path in FIELDS:
    _SHORT.setdefault(_path.rsplit(".", 1)[1], []).append(_path)
SHORT_NAMES = {short: paths[0] for short, paths in _SHORT.items() if len(paths) == 1}


def axis_path(name: str) -> str:
    """Full field path of axis ``name`` (short or full); SweepError with suggestions if unknown."""
    if name in ("plan", *SPEC_AXES) or name in FIELDS:
        return name
    if name in SHORT_NAMES:
        return SHORT_NAMES[name]
    if name in _SHORT:
        raise SweepError(f"axis {name!r} is ambiguous: use one of {', '.join(_SHORT[name])}")
    near = nearest(name, ["plan", *SPEC_AXES, *SHORT_NAMES, *FIELDS])
    raise SweepError(f"unknown axis {name!r}" + (near or ": an axis is plan, model, system or a field of the model, "
                     "system or task spec by its name or path (fields: `fastmodel specs schema model|system|task`; "
                     "docs/usage.md, `fastmodel sweep`)"))


def axis_dim(path: str) -> str:
    """The dataset dimension name of an axis: its short name when unambiguous."""
    if path in ("plan", *SPEC_AXES):
        return path
    short = path.rsplit(".", 1)[1]
    return short if SHORT_NAMES.get(short) == path else path.replace(".", "_")


def axis_values(path: str, spec: Any) -> np.ndarray:
    """Validated, typed values of a field axis (SweepError on bad input)."""
    info = FIELDS[path]
    raw = expand(path, spec)
    if not raw:
        raise SweepError(f"axis {axis_dim(path)} is empty")
    out = []
    for value in raw:
        if isinstance(value, np.generic):
            value = value.item()
        if info.kind == "bool":
            if not isinstance(value, bool):
                raise SweepError(f"axis {axis_dim(path)}: {value!r} is not true/false")
        elif info.kind == "choice":
            if value not in info.choices:
                raise SweepError(f"axis {axis_dim(path)}: {value!r} is not one of {', '.join(map(str, info.choices))}")
        else:
            if isinstance(value, str) and info.quantity:
                try:
                    value = parse_quantity(value, info.quantity)
                except ValueError as error:
                    raise SweepError(f"axis {axis_dim(path)}: {error}") from None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SweepError(f"axis {axis_dim(path)}: {value!r} is not a number")
            if not math.isfinite(value):
                raise SweepError(f"axis {axis_dim(path)}: {value!r} is not finite")
            if info.kind == "int":
                if value != int(value):
                    raise SweepError(f"axis {axis_dim(path)}: {value!r} is not an integer")
                if abs(value) >= 2**53:     # beyond exact float64 and any count of hardware or data
                    raise SweepError(f"axis {axis_dim(path)}: {value:.6g} is implausibly large for an integer field")
                value = int(value)
                if info.choices and value not in info.choices:
                    raise SweepError(f"axis {axis_dim(path)}: {value!r} is not one of {', '.join(map(str, info.choices))}")
        out.append(value)
    if len(set(out)) != len(out):
        dup = next(v for v in out if out.count(v) > 1)
        raise SweepError(f"axis {axis_dim(path)}: duplicate value {dup!r}")
    if info.kind in ("int",):
        return np.array(out, dtype=np.int64)
    if info.kind == "float":
        return np.array(out, dtype=np.float64)
    return np.array(out, dtype=object if info.kind == "choice" else bool)


def plan_values(spec: Any, clusters: list[tuple[int, int]], transformer: bool = False) -> list[Plan]:
    """Plans of the plan axis: 'all', a list of plan strings, or a rule set.

    ``clusters`` are the (num_nodes, devices_per_node) pairs of the grid;
    'all' and rule sets give the plan shapes legal on at least one of them
    (``transformer``: with the third component of dlrm-transformer).
    """
    if spec == "all" or isinstance(spec, dict):
        rules = {} if spec == "all" else dict(spec)
        unknown = set(rules) - {"dense", "emb", "max_levels"}
        if unknown:
            key = sorted(unknown)[0]
            raise SweepError(f"plan rule {key!r} unknown{nearest(key, ['dense', 'emb', 'max_levels'])}; "
                             "use dense = [...], emb = [...], max_levels = 1|2")
        dense_ok = set(rules.get("dense", DENSE_STRATEGIES))
        emb_ok = set(rules.get("emb", EMB_STRATEGIES))
        for name, allowed, pool in (("dense", dense_ok, DENSE_STRATEGIES), ("emb", emb_ok, EMB_STRATEGIES)):
            for strategy in allowed:
                if strategy not in pool:
                    raise SweepError(f"plan rule {name}: unknown strategy {strategy!r}{nearest(str(strategy), pool)}")
        max_levels = rules.get("max_levels", 2)
        if max_levels not in (1, 2):
            raise SweepError(f"plan rule max_levels must be 1 or 2 (got {max_levels!r})")
        shapes: dict[str, Plan] = {}
        # enumerate_plan_shapes reads only whether the cluster has several devices and several multi-device
        # nodes: one cluster of each kind, in grid order, gives the same shapes as all of them
        first_of_kind: dict[tuple[bool, bool], tuple[int, int]] = {}
        for n, d in clusters:
            first_of_kind.setdefault((n * d > 1, n > 1 and d > 1), (n, d))
        for nodes, per_node in first_of_kind.values():
            for plan in enumerate_plan_shapes(nodes, per_node, transformer):
                if (set(plan.dense_strategies) <= dense_ok and set(plan.emb_strategies) <= emb_ok
                        and set(plan.transformer_strategies) <= dense_ok
                        and all(len(levels) <= max_levels for _, levels in plan.components)):
                    shapes.setdefault(plan.shape, plan)
        order = {s: i for i, s in enumerate(p.shape for p in enumerate_plan_shapes(2, 2, transformer))}
        plans = sorted(shapes.values(), key=lambda p: order.get(p.shape, 0))
        if not plans:
            raise SweepError("the plan rules admit no legal plan on any cluster of the sweep")
        return plans
    texts = expand("plan", spec)
    if not texts:
        raise SweepError("axis plan is empty")
    plans = []
    for text in texts:
        try:
            plan = Plan.parse(text)
            check_plan_shape(plan)
        except PlanError as error:
            raise SweepError(f"axis plan: {error}") from None
        plans.append(plan)
    labels = [p.label for p in plans]
    if len(set(labels)) != len(labels):
        raise SweepError(f"axis plan: duplicate plan {next(label for label in labels if labels.count(label) > 1)!r}")
    return plans


__all__ = ["FIELDS", "SHORT_NAMES", "STRUCTURAL", "axis_dim", "axis_path", "axis_values", "plan_values", "Level"]
