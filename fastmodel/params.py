"""Parameter tables: specs (+ per-config overrides) -> the kernels' numeric columns.

:func:`llm_table` is the one place where spec fields become kernel inputs, for
a single configuration and for a sweep chunk alike: it takes base specs, a
plan (degrees may be implied) and optional arrays of overridden field values,
and returns the parameter table with a status code per row. Legality that
depends on numbers (degrees vs. device counts, batch divisibility) is checked
here, vectorized; legality of the strategies themselves is checked once per
plan by :func:`fastmodel.plans.check_plan_static`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fastmodel.kernels.layout import LLM_COLUMNS, N_LLM_COLUMNS
from fastmodel.plans import Level, Plan
from fastmodel.spec_model import LLMSpec
from fastmodel.spec_system import SystemSpec
from fastmodel.spec_task import TaskSpec

#: status codes of a configuration (sweep grids keep illegal points with these)
STATUS_NAMES = (
    "ok",
    "degree_le_1",            # a plan level with degree <= 1 on this cluster
    "product_ne_devices",     # degrees do not multiply to the device count
    "first_degree",           # level 0 neither one node nor all devices
    "batch_not_divisible",    # global batch does not divide over the replicas
    "global_batch_mismatch",  # local batches give different global batches
    "does_not_fit",           # legal, but memory per device exceeds HBM
    "illegal_plan",           # strategies break a rule on every cluster
)
STATUS = {name: code for code, name in enumerate(STATUS_NAMES)}

_PRECISION = {8: "fp64", 4: "fp32", 2: "fp16", 1: "int8"}


def spec_value(model: LLMSpec, system: SystemSpec, task: TaskSpec, path: str) -> Any:
    """The value of a dotted field path (``system.device.flops_util``) in the base specs."""
    root, *parts = path.split(".")
    obj: Any = {"model": model, "system": system, "task": task}[root]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _degrees(levels: tuple[Level, ...], num_devices, per_node, nodes):
    """Per-level degree arrays, implying omitted degrees as Plan.resolve does."""
    known = [lv.degree for lv in levels]
    if len(levels) == 1:
        return [num_devices if known[0] is None else np.full_like(num_devices, known[0])]
    if len(levels) == 2:
        if known[0] is None and known[1] is None:
            return [per_node, nodes]
        if known[0] is None:
            d1 = np.full_like(num_devices, known[1])
            return [np.where(num_devices % d1 == 0, num_devices // d1, per_node), d1]
        d0 = np.full_like(num_devices, known[0])
        if known[1] is None:
            return [d0, np.where(num_devices % d0 == 0, num_devices // d0, 0)]
        return [d0, np.full_like(num_devices, known[1])]
    return [np.full_like(num_devices, k if k is not None else 0) for k in known]


def _plan_status(levels, degrees, num_devices, per_node, status):
    """Numeric legality of one component (MADMAX_MODEL.md 1.4), in rule order."""
    product = np.ones_like(num_devices)
    for degree in degrees:
        status[(status == 0) & (degree <= 1)] = STATUS["degree_le_1"]
        product = product * degree
    status[(status == 0) & (product != num_devices)] = STATUS["product_ne_devices"]
    first = degrees[0]
    status[(status == 0) & (first != per_node) & (first != num_devices)] = STATUS["first_degree"]


def _replicas(levels, degrees):
    dup = np.ones_like(degrees[0])
    for level, degree in zip(levels, degrees):
        if level.strategy in ("ddp", "fsdp"):
            dup = dup * degree
    return dup


def llm_table(model: LLMSpec, system: SystemSpec, task: TaskSpec, plan: Plan,
              values: Mapping[str, Any] | None = None, n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Parameter table (LLM_COLUMNS x n, one row per column) and status codes (int8) for ``n`` configs.

    ``values`` maps dotted field paths to scalars or length-``n`` arrays that
    override the base specs (a sweep chunk); the plan's strategies are fixed
    and its omitted degrees are implied per row from the cluster size.
    """
    values = values or {}

    def get(path: str) -> np.ndarray:
        value = values[path] if path in values else spec_value(model, system, task, path)
        return np.broadcast_to(np.asarray(value), (n,))

    def get_int(path: str) -> np.ndarray:
        return get(path).astype(np.int64)

    table = np.empty((N_LLM_COLUMNS, n))  # column-major: one contiguous row per column
    col = {name: i for i, name in enumerate(LLM_COLUMNS)}
    status = np.zeros(n, dtype=np.int8)

    bytes_dense = int(get("model.bytes_per_dense_param")[0])  # structural: one value per table
    for name, path in (
        ("num_layers", "model.num_layers"), ("hidden", "model.hidden"), ("ffn_hidden", "model.ffn_hidden"),
        ("seq_len", "model.seq_len"), ("vocab_size", "model.vocab_size"),
        ("bytes_per_emb_param", "model.bytes_per_emb_param"),
        ("flops_util", "system.device.flops_util"),
        ("hbm_bandwidth_bytes_per_s", "system.device.hbm_bandwidth_bytes_per_s"),
        ("hbm_bandwidth_util", "system.device.hbm_bandwidth_util"),
        ("hbm_capacity_bytes", "system.device.hbm_capacity_bytes"),
        ("num_links", "system.node.num_links"),
        ("link_bandwidth_bytes_per_s", "system.node.link_bandwidth_bytes_per_s"),
        ("link_util", "system.node.link_util"),
        ("num_ports", "system.network.num_ports"),
        ("port_bandwidth_bytes_per_s", "system.network.port_bandwidth_bytes_per_s"),
        ("port_util", "system.network.port_util"),
        ("allreduce_intra_fraction", "system.network.allreduce_intra_fraction"),
    ):
        table[col[name], :] = get(path)
    table[col["bytes_per_dense_param"], :] = bytes_dense
    table[col["peak_flop_per_s"], :] = get(f"system.device.peak_flop_per_s.{_PRECISION[bytes_dense]}")

    nodes = get_int("system.num_nodes")
    per_node = get_int("system.devices_per_node")
    num_devices = nodes * per_node
    table[col["num_nodes"], :] = nodes
    table[col["devices_per_node"], :] = per_node

    dense_deg = _degrees(plan.dense, num_devices, per_node, nodes)
    emb_deg = _degrees(plan.emb, num_devices, per_node, nodes)
    _plan_status(plan.dense, dense_deg, num_devices, per_node, status)
    _plan_status(plan.emb, emb_deg, num_devices, per_node, status)
    one = np.ones(n, dtype=np.int64)
    table[col["dense_degree0"], :] = dense_deg[0]
    table[col["dense_degree1"], :] = dense_deg[1] if len(dense_deg) > 1 else one
    table[col["emb_degree0"], :] = emb_deg[0]
    table[col["emb_degree1"], :] = emb_deg[1] if len(emb_deg) > 1 else one

    dense_dup = np.maximum(_replicas(plan.dense, dense_deg), 1)
    emb_dup = np.maximum(_replicas(plan.emb, emb_deg), 1)
    if "task.global_batch" in values or task.global_batch is not None:
        global_batch = get_int("task.global_batch")
        bad = (global_batch % dense_dup != 0) | (global_batch % emb_dup != 0)
        status[(status == 0) & bad] = STATUS["batch_not_divisible"]
        local_dense, local_emb = global_batch // dense_dup, global_batch // emb_dup
    else:
        local_dense, local_emb = get_int("task.local_batch.dense"), get_int("task.local_batch.emb")
        status[(status == 0) & (local_dense * dense_dup != local_emb * emb_dup)] = STATUS["global_batch_mismatch"]
    table[col["local_dense_batch"], :] = local_dense
    table[col["local_emb_batch"], :] = local_emb
    return table, status
