"""Sweep files of the real-world training model: a ``family = "lm"`` model on a ``kind = "cluster"`` system.

    model = "llama3-70b"
    system = "dgx-h100"
    task = "llm-pretrain"
    only_fitting = false                 # optional: mark points over usable HBM does_not_fit
    [execution]                          # optional: ExecutionSpec fields (precision, sharding, ...)
    sharding = "distopt"
    [axes]                               # any registry column, num_nodes, global_batch, plan
    num_nodes = [4, 8, 16]
    plan = "all"                         # or ["tp8.pp4", "tp4.pp2.cp2", ...]
    micro_batch = [1, 2]
    recompute = ["none", "selective", "full"]

The grid is the Cartesian product of the axes, in the order written; each axis a list, a scalar or a range
table ``{start, stop, num|step, scale}``. ``fastmodel.sweeps.file`` reads the file and chooses this engine;
every error names the file, the field and the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastmodel.errors import SpecError, SweepError, nearest
from fastmodel.sweeps.file import axis_values, check_keys, field_error, spec_ref

KEYS = ("model", "system", "task", "semantics", "axes", "execution", "only_fitting", "unit_configs", "description")


def _specs(source: str, data: dict, base: Path):
    """(model, cluster, execution, only_fitting, global batch) of the file, each error naming it."""
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep import _task_global_batch
    from fastmodel.semantics import get_semantics

    semantics = data.get("semantics", "default")
    try:
        real_world = get_semantics(semantics).real_world
    except SpecError as error:
        raise SpecError(source, "semantics", error.reason) from None
    if not real_world:
        raise SpecError(source, "semantics", f"real-world specs (family \"lm\" models, kind \"cluster\" "
                        f"systems) are evaluated under 'default', not {semantics!r} (the MAD-Max model only)")
    specs = []
    for key, loader in (("model", load_lm_model), ("system", load_cluster)):
        try:
            specs.append(loader(spec_ref(data[key], base)))
        except SpecError as error:  # this file's key, then the spec's own source, field and reason
            own = str(error) if error.source else error.reason     # a built-in name's error names the key once
            raise SpecError(source, key, own) from None
    if "execution" in data and not isinstance(data["execution"], dict):
        raise SpecError(source, "execution", "expected a table of execution fields (precision, sharding, ...)")
    try:
        execution = load_execution(data.get("execution"))
    except SpecError as error:
        raise SpecError(source, error.field, error.reason) from None
    only_fitting = data.get("only_fitting", False)
    if not isinstance(only_fitting, bool):
        raise SpecError(source, "only_fitting", f"expected true or false, got {only_fitting!r}")
    try:
        global_batch = _task_global_batch(spec_ref(data["task"], base))
    except SpecError as error:
        raise error if error.source else SpecError(source, error.field, error.reason) from None
    except SweepError as error:
        raise SpecError(source, "task", str(error)) from None
    return (*specs, execution, only_fitting, global_batch)


def _axes(source: str, axes: dict, model, cluster) -> dict[str, Any]:
    """The file's axes, each value checked (one-line errors naming ``axes.NAME``)."""
    from fastmodel.lm.sweep import MESH_AXIS, _axis_values, all_meshes, mesh_label, parse_mesh
    from fastmodel.registry.lm import COLUMN_INDEX

    names = [*COLUMN_INDEX, "num_nodes", MESH_AXIS]
    expanded = {}
    for name, spec in axes.items():
        if name == MESH_AXIS and isinstance(spec, str) and spec.strip().lower() == "all":
            spec = "all"                       # "ALL", " all": the keyword whatever its case
        if name in ("model", "system", "task"):   # was "unknown axis (did you mean 'num_nodes'?)"
            raise SpecError(source, f"axes.{name}", f"a real-world sweep takes one {name} (the file's {name} key; "
                            f"MAD-Max sweeps take a {name} axis): sweep its fields, or write one file per {name}")
        if name not in names:
            raise SpecError(source, f"axes.{name}", f"unknown axis{nearest(name, names)}")
        if name == MESH_AXIS and isinstance(spec, str) and spec != "all" and nearest(spec, ["all"]):
            raise SpecError(source, "axes.plan", f"{spec!r} is no mesh{nearest(spec, ['all'])}: \"all\" or a list "
                            "of meshes (tp8.pp4, ...)")
        expanded[name] = spec if name == MESH_AXIS and spec == "all" else axis_values(source, name, spec)
    nodes = expanded.get("num_nodes", [cluster.num_nodes])
    for value in nodes:     # whole numbers as floats too (2.0, 1e3, a log range's values), as the Python API's
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1 \
                or value != int(value):
            raise SpecError(source, "axes.num_nodes", f"every value must be a whole number of nodes >= 1 "
                            f"(got {value!r})")
    nodes = [int(value) for value in nodes]
    if "num_nodes" in expanded:
        expanded["num_nodes"] = nodes
    max_gpus = int(max(nodes)) * cluster.gpus_per_node
    for name, values in expanded.items():
        if name == MESH_AXIS:
            try:
                meshes = all_meshes(model, cluster, max_gpus) if values == "all" else [parse_mesh(str(v)) for v in values]
            except SweepError as error:
                raise field_error(source, "axes.plan", error) from None
            if not meshes:
                raise SpecError(source, "axes.plan", "no mesh of this model fits the cluster")
            labels = [mesh_label(m) for m in meshes]
            if len(set(labels)) != len(labels):
                twice = next(label for label in labels if labels.count(label) > 1)
                raise SpecError(source, "axes.plan", f"duplicate mesh {twice!r}")
            expanded[name] = labels
            continue
        try:
            _axis_values(name, values, model, cluster, max_gpus)
        except (SweepError, SpecError) as error:
            raise field_error(source, f"axes.{name}", error) from None
    return expanded


def sweep_plan_from_file(source: str, data: dict, base: Path, unit_configs: int | None = None,
                         calibration: Any = None):
    """The :class:`~fastmodel.lm.sweep_plan.LMSweepPlan` of a parsed sweep file; ``calibration`` (a
    ``Calibration``) overlays its fitted values."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.sweep import MESH_AXIS, task_name
    from fastmodel.lm.sweep_plan import LMSweepPlan
    from fastmodel.registry.lm import COLUMN_INDEX

    check_keys(source, data, KEYS, ("model", "system", "task"),
               ((ExecutionSpec.model_fields, "an execution field, under [execution]"),
                ((*COLUMN_INDEX, "num_nodes", MESH_AXIS), "an axis, under [axes]")))
    axes = data.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise SpecError(source, "axes", "required: a table of axis = values (e.g. plan = \"all\")")
    model, cluster, execution, only_fitting, global_batch = _specs(source, data, base)
    try:
        plan = LMSweepPlan(model, cluster, execution, global_batch, _axes(source, axes, model, cluster),
                           only_fitting, calibration, unit_configs or data.get("unit_configs"))
        plan.task_name = task_name(spec_ref(data["task"], base))
        return plan
    except SweepError as error:
        raise SweepError(f"{source}: {error}") from None
    except SpecError as error:
        if error.source != model.name:
            raise
        # the lowering names the model (its source outside a file); here the sweep file stated the execution
        raise type(error)(source, error.field, error.reason) from None
