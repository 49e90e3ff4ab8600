"""Parameter tables: specs (+ per-config overrides) -> the kernels' numeric columns.

:func:`param_table` is the one place where spec fields become kernel inputs, for
a single configuration and for a sweep chunk alike: it takes base specs, a
plan (degrees may be implied) and optional arrays of overridden field values,
and returns the parameter table with a status code per row. Legality that
depends on numbers (degrees vs. device counts, batch divisibility) is checked
here by running the row rules of ``fastmodel.madmax.parallel.rules`` (the one rule
table) on broadcast arrays; degrees are implied on the plan's mesh axes
(``fastmodel.madmax.parallel.mesh``). Legality of the strategies themselves is
checked once per plan (``rules.check_plan_shape``). :func:`rule_inputs` gives
``lowering.config.resolve`` the same inputs for one configuration.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fastmodel.kernels.madmax.layout import COLUMNS, N_COLUMNS
from fastmodel.madmax.families import FAMILIES, ModelSpec
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.madmax.parallel.rules import RowInputs, row_inputs, row_status
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec
from fastmodel.registry.madmax import COLUMNS as PARAM_COLUMNS
from fastmodel.registry.madmax import STATUS, STATUS_NAMES  # noqa: F401 (the registry; re-exported)

_PRECISION = {8: "fp64", 4: "fp32", 2: "fp16", 1: "int8"}


def spec_value(model: ModelSpec, system: SystemSpec, task: TaskSpec, path: str) -> Any:
    """The value of a dotted field path (``system.device.flops_util``) in the base specs."""
    root, *parts = path.split(".")
    obj: Any = {"model": model, "system": system, "task": task}[root]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _getters(model: ModelSpec, system: SystemSpec, task: TaskSpec, values: Mapping[str, Any]):
    """(get, get_int): a field path's value as an array, overridden by ``values`` (None -> NaN)."""

    def get(path: str) -> np.ndarray:
        value = values[path] if path in values else spec_value(model, system, task, path)
        return np.asarray(np.nan if value is None else value)

    def get_int(path: str) -> np.ndarray:
        return get(path).astype(np.int64)

    return get, get_int


def rule_inputs(model: ModelSpec, system: SystemSpec, task: TaskSpec, plan: Plan, semantics=None,
                values: Mapping[str, Any] | None = None) -> RowInputs:
    """The inputs of the plan rules (``parallel.rules``) for specs + overridden ``values`` (arrays that
    broadcast over a block; none: one configuration, 0-d arrays)."""
    values = values or {}
    _, get_int = _getters(model, system, task, values)
    per_node = get_int("system.devices_per_node")
    wanted = None
    if "system.num_devices" in values:  # cluster size in devices: nodes follow from each system's node size
        wanted = np.asarray(values["system.num_devices"]).astype(np.int64)
        nodes = np.maximum(wanted // per_node, 1)
    else:
        nodes = get_int("system.num_nodes")
    global_batch = local = None
    if "task.global_batch" in values or task.global_batch is not None:
        global_batch = get_int("task.global_batch")
    else:
        local = {name: get_int(f"task.local_batch.{name}") for name, _ in plan.components}
    return row_inputs(plan, nodes * per_node, per_node, nodes, family=model.family, get_int=get_int,
                      degree_limits=bool(semantics is not None and semantics.degree_limits),
                      wanted_devices=wanted, global_batch=global_batch, local_batch=local)


#: columns param_table writes itself: the structural precision (one value per table) and the node size
#: the rule inputs already read (a num_devices axis sets the node count from it)
_WRITTEN_BELOW = ("bytes_per_dense_param", "devices_per_node")
#: columns read straight from a spec field by every family
_SPEC_COLUMNS = tuple((c.name, c.path) for c in PARAM_COLUMNS
                      if c.needs == "all" and c.path and c.name not in _WRITTEN_BELOW)
#: columns read from a spec field by the families with the column's trait; the others write ``fill`` (if any)
_TRAIT_COLUMNS = tuple(c for c in PARAM_COLUMNS if c.needs != "all")
_COL = {name: i for i, name in enumerate(COLUMNS)}


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
    get, get_int = _getters(model, system, task, values)

    # column-major: one contiguous row per column; columns the family never reads stay unset
    table = np.empty((N_COLUMNS, n))
    grid = table.reshape((N_COLUMNS, *shape))

    def put(name: str, value) -> None:
        grid[_COL[name]] = value

    family = FAMILIES[model.family]
    bytes_dense = int(get("model.bytes_per_dense_param").flat[0])  # structural: one value per table
    for name, path in _SPEC_COLUMNS:
        put(name, get(path))
    for column in _TRAIT_COLUMNS:  # the family's own columns (registry.madmax.COLUMNS, Family.traits)
        if column.needs in family.traits:
            put(column.name, get(column.path))
        elif column.fill is not None:
            put(column.name, column.fill)
    if family.derive_columns is not None:
        for name, value in family.derive_columns(get).items():
            put(name, value)
    put("bytes_per_dense_param", bytes_dense)
    put("peak_flop_per_s", get(f"system.device.peak_flop_per_s.{_PRECISION[bytes_dense]}"))

    # legality: the row rules of parallel.rules, on the block's broadcast arrays
    rules = rule_inputs(model, system, task, plan, semantics, values)
    status = row_status(rules)
    put("num_nodes", rules.nodes)
    put("devices_per_node", rules.per_node)
    column = {"dense": "dense_degree", "emb": "emb_degree", "transformer": "transformer_degree"}
    local_column = {"dense": "local_dense_batch", "emb": "local_emb_batch", "transformer": "local_transformer_batch"}
    for name, degrees, replicas in zip(rules.names, rules.degrees, rules.replicas):
        put(f"{column[name]}0", degrees[0])
        put(f"{column[name]}1", degrees[1] if len(degrees) > 1 else 1)
        local = rules.global_batch // replicas if rules.global_batch is not None else rules.local_batch[name]
        put(local_column[name], local)
    return table, np.broadcast_to(status, shape).reshape(n).astype(np.int8)
