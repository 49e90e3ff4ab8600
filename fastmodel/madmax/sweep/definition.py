"""A MAD-Max sweep: base specs, semantics and axes; their checks; its JSON round trip.

:class:`Sweep` is the MAD-Max engine's sweep plan (``fastmodel.sweeps.plan.SweepPlan``): it resolves the
axes (every value must make a valid spec, before any work) and evaluates a unit through the kernels
(:mod:`.evaluation`, its other base class); the shared runners (``fastmodel.sweeps``) cut it into units, keep
it in memory or stream it into a zarr store, on Dask workers too.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest
from fastmodel.madmax.families import FAMILIES
from fastmodel.madmax.parallel.rules import check_plan_shape
from fastmodel.madmax.spec.loader import load_model, load_system, load_task
from fastmodel.madmax.sweep.axes import (
    FIELDS,
    NUM_DEVICES,
    SPEC_AXES,
    STRUCTURAL,
    axis_dim,
    axis_path,
    axis_values,
    plan_values,
)
from fastmodel.madmax.sweep.evaluation import UnitEvaluation, set_path
from fastmodel.semantics import get_semantics
from fastmodel.spec.loader import validate
from fastmodel.sweeps.plan import Axis, SweepPlan

#: default size of a unit of work, in configurations
UNIT_CONFIGS = SweepPlan.UNIT_CONFIGS
#: most combinations of structural axes (plans x models x layer counts ...), each checked and lowered up front
MAX_STRUCTURAL_COMBINATIONS = 1_000_000
#: units of the spec quantities an axis may carry (``FieldInfo.quantity``), for its coordinate's attrs
_QUANTITY_UNITS = {"flop_per_s": "FLOP/s", "bytes_per_s": "B/s", "bytes": "bytes"}


class Sweep(SweepPlan, UnitEvaluation):
    """A MAD-Max sweep plan: base specs, semantics and axes (each value checked), and the evaluation of a
    unit (:class:`~fastmodel.madmax.sweep.evaluation.UnitEvaluation`)."""

    engine = "madmax"
    #: bench/bench_sweep.py streams about 1.1 M configurations/s into a zarr store
    ESTIMATE_CONFIGS_PER_S = 1e6

    def __init__(self, model: Any, system: Any, task: Any, axes: dict[str, Any],
                 semantics: Any = "default", unit_configs: int = UNIT_CONFIGS,
                 axis_specs: dict[str, list[dict]] | None = None):
        self.model = load_model(model)
        self.system = load_system(system)
        self.task = load_task(task)
        self.models = [self.model]      # one per value of a model axis
        self.systems = [self.system]    # one per value of a system axis
        self.semantics = get_semantics(semantics)
        self._axis_specs = axis_specs or {}  # model/system axes: the specs themselves (from a stored definition)
        if not isinstance(axes, dict) or not axes:
            raise SweepError("a sweep needs at least one axis (e.g. plan = 'all')")
        self.set_axes(self._resolve_axes(axes), unit_configs, MAX_STRUCTURAL_COMBINATIONS)
        for combo in self._combos:  # every structural combination must make valid specs, before any work
            self._combo_specs(combo)

    # --- definition -----------------------------------------------------------

    def _resolve_axes(self, axes: dict[str, Any]) -> list[Axis]:
        resolved: list[Axis] = []
        seen: dict[str, str] = {}
        plan_spec = None
        for name, spec in axes.items():
            path = axis_path(str(name))
            if path in seen:
                raise SweepError(f"axes {seen[path]!r} and {name!r} are the same field {path}")
            seen[path] = str(name)
            if path == "plan":
                plan_spec = spec
                resolved.append(Axis("plan", "plan", np.array([], dtype=object), True, {"field": "plan"}))
                continue
            if path in SPEC_AXES:
                resolved.append(Axis(path, path, self._load_spec_axis(path, spec), True, {"field": path}))
                continue
            if {NUM_DEVICES, "system.num_nodes"} <= set(seen):
                raise SweepError("give either a num_devices or a num_nodes axis, not both")
            values = axis_values(path, spec)
            self._validate_values(path, values)
            resolved.append(Axis(axis_dim(path), path, values, path in STRUCTURAL, _coordinate_attrs(path)))
        clusters = self._clusters(resolved)
        families = {m.family for m in self.models}
        want_three = any(FAMILIES[name].has_transformer_component for name in families)
        if want_three and len(families) > 1:
            three = sorted(name for name in families if FAMILIES[name].has_transformer_component)
            raise SweepError(f"a model axis cannot mix {', '.join(three)} (three plan components) with other families")
        if plan_spec is not None:
            plans = plan_values(plan_spec, clusters, transformer=want_three)
            self.plans = plans
            labels = np.array([p.shape if all(lv.degree is None for lv in p.levels) else p.label
                               for p in plans], dtype=object)
            resolved = [Axis("plan", "plan", labels, True, {"field": "plan"}) if a.path == "plan" else a
                        for a in resolved]
        else:
            if self.task.plan is None:
                raise SweepError(f"task {self.task.name!r} leaves the plan open: add a 'plan' axis (e.g. plan = 'all')")
            self.plans = [self.task.parsed_plan]
            try:
                check_plan_shape(self.plans[0])
            except FastmodelError as error:
                raise SweepError(f"task plan: {error}") from None
        for plan in self.plans:
            for family in sorted(families):
                try:
                    check_plan_shape(plan, family)  # the family's components (parallel.rules)
                except FastmodelError as error:
                    raise SweepError(f"plan {plan.label!r}: {error}") from None
        return resolved

    def _load_spec_axis(self, path: str, spec: Any) -> np.ndarray:
        """Names of a model or system axis, each loaded (and checked) now."""
        names = spec if isinstance(spec, (list, tuple)) else [spec]
        if not names:
            raise SweepError(f"axis {path} is empty")
        if len(set(map(str, names))) != len(names):
            raise SweepError(f"axis {path}: duplicate name")
        loader = load_model if path == "model" else load_system
        stored = self._axis_specs.get(path)
        if stored is not None and len(stored) != len(names):
            raise SweepError(f"axis {path}: {len(names)} names but {len(stored)} stored specs")
        try:
            specs = [loader(spec) for spec in (stored if stored is not None else names)]
        except FastmodelError as error:
            raise SweepError(f"axis {path}: {error}") from None
        if path == "model":
            self.models = specs
            self.model = specs[0]
        else:
            self.systems = specs
            self.system = specs[0]
        return np.array([str(name) for name in names], dtype=object)

    def _validate_values(self, path: str, values: np.ndarray) -> None:
        """Every axis value must make a valid spec on its own (ranges, units, rules)."""
        if path == NUM_DEVICES:
            if any(v < 1 for v in values):
                raise SweepError(f"axis num_devices: every value must be a positive integer (got {values.tolist()})")
            return
        root = path.split(".")[0]
        bases = {"model": self.models, "system": self.systems, "task": [self.task]}[root]
        for base in bases:
            cls = type(base)
            if root == "model" and path.split(".")[1] not in cls.model_fields:
                raise SweepError(f"axis {axis_dim(path)}: {base.family} model {base.name!r} has no field "
                                 f"{path.split('.', 1)[1]!r}{nearest(path.split('.')[1], cls.model_fields)}")
            for value in values:
                data = base.model_dump()
                value = value.item() if isinstance(value, np.generic) else value
                if path == "task.global_batch":
                    data["local_batch"] = None
                set_path(data, path, value)
                try:
                    validate(cls, data, None, root)
                except SpecError as error:
                    raise SweepError(f"axis {axis_dim(path)} = {value!r}: {error}") from None

    def _clusters(self, axes: list[Axis]) -> list[tuple[int, int]]:
        by_path = {a.path: a.values for a in axes}
        clusters = []
        for system in self.systems:
            per_node = by_path.get("system.devices_per_node", [system.devices_per_node])
            for d in per_node:
                if NUM_DEVICES in by_path:
                    nodes = [n // d for n in by_path[NUM_DEVICES] if n % d == 0 and n >= d]
                else:
                    nodes = by_path.get("system.num_nodes", [system.num_nodes])
                clusters += [(int(n), int(d)) for n in nodes]
        return clusters

    def definition(self) -> dict:
        """JSON-able definition that recreates this sweep (stored in the dataset attrs)."""
        axes = {}
        for axis in self.axes:
            values = axis.values.tolist()
            axes[axis.name if axis.path == "plan" or axis_path(axis.name) == axis.path else axis.path] = values
        definition = {
            "model": self.model.model_dump(),
            "system": self.system.model_dump(),
            "task": self.task.model_dump(),
            "semantics": self.semantics.model_dump(),
            "axes": axes,
            "unit_configs": self.unit_configs,
        }
        # model/system axes keep their names as coordinates and the specs themselves here, so a worker
        # or a resume rebuilds the same sweep wherever it runs, and an edited spec file is noticed
        specs = {axis.path: [spec.model_dump() for spec in (self.models if axis.path == "model" else self.systems)]
                 for axis in self.axes if axis.path in SPEC_AXES}
        if specs:
            definition["axis_specs"] = specs
        return definition

    def dataset_attrs(self) -> dict:
        from fastmodel import __version__

        return {
            "model": json.dumps(self.model.model_dump()),
            "system": json.dumps(self.system.model_dump()),
            "task": json.dumps(self.task.model_dump()),
            "semantics": json.dumps(self.semantics.model_dump()),
            "sweep": json.dumps(self.definition()),
            "fastmodel_version": __version__,
        }

    @classmethod
    def from_definition(cls, definition: dict) -> "Sweep":
        semantics = dict(definition["semantics"])
        semantics.pop("name", None)
        return cls(definition["model"], definition["system"], definition["task"], definition["axes"],
                   {"base": "madmax", **semantics}, definition.get("unit_configs", UNIT_CONFIGS),
                   definition.get("axis_specs"))


#: units of the numeric spec fields that are no count or fraction (those are '1'; madmax/spec/models.py)
_FIELD_UNITS = {"model.bytes_per_dense_param": "bytes", "model.bytes_per_emb_param": "bytes", "model.seq_len": "tokens",
                "model.image_size": "pixels", "model.patch_size": "pixels", "task.global_batch": "samples",
                "task.local_batch.dense": "samples", "task.local_batch.emb": "samples",
                "task.local_batch.transformer": "samples", "task.train_samples": "samples",
                "system.price_usd_per_device_hour": "USD/h", "system.node_tdp_watts": "W"}


def _coordinate_attrs(path: str) -> dict:
    """Attrs of a field axis' coordinate: the spec field it sets and, for a number, its units (a quantity's,
    :data:`_FIELD_UNITS`, else '1': a count or a fraction)."""
    info = FIELDS.get(path)
    if info is None or info.kind not in ("int", "float"):
        return {"field": path}
    units = _QUANTITY_UNITS.get(info.quantity) if info.quantity else _FIELD_UNITS.get(path, "1")
    return {"field": path, "units": units}
