"""Parameter tables: specs (+ per-config overrides) -> the kernels' numeric columns.

:func:`param_table` is the one place where spec fields become kernel inputs, for
a single configuration and for a sweep chunk alike: it takes base specs, a
plan (degrees may be implied) and optional arrays of overridden field values,
and returns the parameter table with a status code per row. Legality that
depends on numbers (degrees vs. device counts, batch divisibility) is checked
here, vectorized; legality of the strategies themselves is checked once per
plan by :func:`fastmodel.parallel.plans.check_plan_static`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fastmodel.families import FAMILIES, ModelSpec
from fastmodel.kernels.layout import COLUMNS, N_COLUMNS
from fastmodel.parallel.plans import Level, Plan
from fastmodel.results import COLUMNS as PARAM_COLUMNS
from fastmodel.results import STATUS, STATUS_NAMES  # noqa: F401 (the registry; re-exported)
from fastmodel.spec.system import SystemSpec
from fastmodel.spec.task import TaskSpec

_PRECISION = {8: "fp64", 4: "fp32", 2: "fp16", 1: "int8"}


def spec_value(model: ModelSpec, system: SystemSpec, task: TaskSpec, path: str) -> Any:
    """The value of a dotted field path (``system.device.flops_util``) in the base specs."""
    root, *parts = path.split(".")
    obj: Any = {"model": model, "system": system, "task": task}[root]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _degrees(levels: tuple[Level, ...], num_devices, per_node, nodes):
    """Per-level degrees (broadcastable arrays), implying omitted degrees as Plan.resolve does."""
    known = [lv.degree for lv in levels]
    if len(levels) == 1:
        return [num_devices if known[0] is None else np.asarray(known[0])]
    if len(levels) == 2:
        if known[0] is None and known[1] is None:
            return [per_node, nodes]
        if known[0] is None:
            return [np.where(num_devices % known[1] == 0, num_devices // known[1], 0), np.asarray(known[1])]
        if known[1] is None:
            return [np.asarray(known[0]), np.where(num_devices % known[0] == 0, num_devices // known[0], 0)]
        return [np.asarray(known[0]), np.asarray(known[1])]
    return [np.asarray(k if k is not None else 0) for k in known]


def _flag(status, condition, name):
    """Set ``name`` where ``condition`` holds and no earlier rule failed (broadcasting)."""
    return np.where((status == 0) & condition, np.int8(STATUS[name]), status).astype(np.int8)


def _plan_status(degrees, num_devices, per_node, status):
    """Numeric legality of one component (docs/model.md §3.3), in rule order."""
    product = np.asarray(1)
    for degree in degrees:
        status = _flag(status, degree <= 1, "degree_le_1")
        product = product * degree
    status = _flag(status, product != num_devices, "product_ne_devices")
    first = degrees[0]
    return _flag(status, (first != per_node) & (first != num_devices), "first_degree")


def _replicas(levels, degrees):
    dup = np.asarray(1)
    for level, degree in zip(levels, degrees):
        if level.strategy in ("ddp", "fsdp"):
            dup = dup * degree
    return dup


#: columns read straight from a spec field by every family (bytes_per_dense_param: structural, put below)
_SPEC_COLUMNS = tuple((c.name, c.path) for c in PARAM_COLUMNS if c.needs == "all" and c.path)
#: columns read from a spec field by the families with the column's trait; the others write ``fill`` (if any)
_TRAIT_COLUMNS = tuple(c for c in PARAM_COLUMNS if c.needs != "all")
_COL = {name: i for i, name in enumerate(COLUMNS)}


def _degree_limit_arrays(model: ModelSpec, component: str, get_int):
    """plans.degree_limits with swept layer and head counts (arrays broadcasting over the block)."""
    layer_paths, head_path = FAMILIES[model.family].degree_limits.get(component, ((), None))
    layers = sum(get_int(path) for path in layer_paths) if layer_paths else None
    return layers, (get_int(head_path) if head_path else None)


def param_table(model: ModelSpec, system: SystemSpec, task: TaskSpec, plan: Plan,
                values: Mapping[str, Any] | None = None, shape: tuple[int, ...] = (1,),
                semantics=None) -> tuple[np.ndarray, np.ndarray]:
    """Parameter table (COLUMNS x n, one row per column) and status codes (int8) of a block of configs.

    The block is the C-ordered grid ``shape`` (n = its size). ``values`` maps
    dotted field paths to arrays that broadcast to ``shape`` (a sweep axis is
    shaped (1, .., k, .., 1)) and override the base specs. Every derived
    quantity and legality rule is computed on the broadcast shapes, so the
    per-config work is one broadcast copy per column. The plan's strategies are
    fixed; its omitted degrees are implied from the cluster size.
    """
    values = values or {}
    shape = tuple(shape)
    n = int(np.prod(shape))

    def get(path: str) -> np.ndarray:
        value = values[path] if path in values else spec_value(model, system, task, path)
        return np.asarray(np.nan if value is None else value)

    def get_int(path: str) -> np.ndarray:
        return get(path).astype(np.int64)

    # column-major: one contiguous row per column; columns the family never reads stay unset
    table = np.empty((N_COLUMNS, n))
    grid = table.reshape((N_COLUMNS, *shape))

    def put(name: str, value) -> None:
        grid[_COL[name]] = value

    family = FAMILIES[model.family]
    bytes_dense = int(get("model.bytes_per_dense_param").flat[0])  # structural: one value per table
    for name, path in _SPEC_COLUMNS:
        put(name, get(path))
    for column in _TRAIT_COLUMNS:  # the family's own columns (results.COLUMNS, Family.traits)
        if column.needs in family.traits:
            put(column.name, get(column.path))
        elif column.fill is not None:
            put(column.name, column.fill)
    if family.derive_columns is not None:
        for name, value in family.derive_columns(get).items():
            put(name, value)
    put("bytes_per_dense_param", bytes_dense)
    put("peak_flop_per_s", get(f"system.device.peak_flop_per_s.{_PRECISION[bytes_dense]}"))

    status = np.zeros((), dtype=np.int8)
    per_node = get_int("system.devices_per_node")
    if "system.num_devices" in values:  # cluster size in devices: nodes follow from each system's node size
        wanted = np.asarray(values["system.num_devices"]).astype(np.int64)
        status = _flag(status, wanted % per_node != 0, "devices_not_divisible")
        nodes = np.maximum(wanted // per_node, 1)
    else:
        nodes = get_int("system.num_nodes")
    num_devices = nodes * per_node
    put("num_nodes", nodes)
    put("devices_per_node", per_node)

    components = [(name, levels, _degrees(levels, num_devices, per_node, nodes)) for name, levels in plan.components]
    # an implied degree is 0 when the given one does not divide the devices (Plan.resolve's product rule)
    for _, _, degrees in components:
        for degree in degrees:
            status = _flag(status, degree == 0, "product_ne_devices")
    for _, _, degrees in components:
        status = _plan_status(degrees, num_devices, per_node, status)
    if "tp_odd_layers" in family.rules and "tp" in plan.dense_strategies:
        odd = (get_int("model.num_bottom_layers") % 2 != 0) | (get_int("model.num_top_layers") % 2 != 0)
        status = _flag(status, odd, "tp_odd_layers")
    if semantics is not None and semantics.degree_limits:  # pp <= layers, tp <= heads (plans.degree_limits)
        for name, levels, degrees in components:
            layers, heads = _degree_limit_arrays(model, name, get_int)
            for level, degree in zip(levels, degrees):
                if level.strategy == "pp" and layers is not None:
                    status = _flag(status, degree > layers, "pp_gt_layers")
                if level.strategy == "tp" and heads is not None:
                    status = _flag(status, degree > heads, "tp_gt_heads")
    column = {"dense": "dense_degree", "emb": "emb_degree", "transformer": "transformer_degree"}
    for name, _, degrees in components:
        put(f"{column[name]}0", degrees[0])
        put(f"{column[name]}1", degrees[1] if len(degrees) > 1 else 1)

    replicas = {name: np.maximum(_replicas(levels, degrees), 1) for name, levels, degrees in components}
    local_column = {"dense": "local_dense_batch", "emb": "local_emb_batch", "transformer": "local_transformer_batch"}
    if "task.global_batch" in values or task.global_batch is not None:
        global_batch = get_int("task.global_batch")
        for dup in replicas.values():
            status = _flag(status, global_batch % dup != 0, "batch_not_divisible")
        for name, dup in replicas.items():
            put(local_column[name], global_batch // dup)
    else:
        global_batch = None
        for name, dup in replicas.items():
            local = get_int(f"task.local_batch.{name}")
            put(local_column[name], local)
            if global_batch is None:
                global_batch = local * dup
            else:
                status = _flag(status, local * dup != global_batch, "global_batch_mismatch")
    return table, np.broadcast_to(status, shape).reshape(n).astype(np.int8)
