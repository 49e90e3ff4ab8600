"""Read the MAD-Max reference's three JSON config formats as they are.

The reference (ScaleExplorer ``madmax/``) takes a model, a system and a task
dict with its own keys and units (bytes/s, FLOP/s). These pydantic models
validate those dicts and convert them to fastmodel specs; errors name the
reference's own keys. Semantics of each key: MADMAX_MODEL.md section 1.1.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveInt, StrictBool, StrictInt

from fastmodel.errors import PlanError, SpecError, nearest
from fastmodel.plans import Plan
from fastmodel.quantity import BytesPerSecond, Bytes, FlopPerSecond, Fraction, Utilization

#: reference model types and the fastmodel family each maps to (None: not yet supported)
MADMAX_MODEL_TYPES = {
    "LLM": "llm",
    "LLM_MoE": None,
    "ViT": None,
    "DLRM": None,
    "DLRM_MoE": None,
    "DLRM_Transformer": None,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MadmaxLLMModel(_Strict):
    name: str
    type: str
    bytes_per_nonemb_param: int
    bytes_per_emb_param: float
    entries_per_table: PositiveInt
    num_transformer_layers: PositiveInt
    num_transformer_heads: PositiveInt
    attention_dim: PositiveInt
    transformer_fc_dim: PositiveInt
    transformer_seq_len: PositiveInt


class MadmaxSystem(_Strict):
    name: str
    type: str
    num_devices: PositiveInt
    num_nodes: PositiveInt
    f64_flops: FlopPerSecond
    f32_flops: FlopPerSecond
    f16_flops: FlopPerSecond
    i8_ops: FlopPerSecond
    flops_util: Utilization
    mem_cap: Bytes
    mem_bw: BytesPerSecond
    mem_bw_util: Utilization
    num_nvlinks: PositiveInt
    bw_per_nvlink: BytesPerSecond
    nvlink_util: Utilization
    num_ibroce_ports: PositiveInt
    ibroce_bw: BytesPerSecond
    ibroce_util: Utilization
    ar_perc_intra: Fraction


class MadmaxTask(_Strict):
    name: str
    type: str
    emb_parallel: list[str] | None = None
    emb_parallel_degree: list[StrictInt] | None = None
    transformer_parallel: list[str] | None = None
    transformer_parallel_degree: list[StrictInt] | None = None
    mlp_parallel: list[str] | None = None
    mlp_parallel_degree: list[StrictInt] | None = None
    local_emb_bs: PositiveInt | None = None
    local_transformer_bs: PositiveInt | None = None
    local_mlp_bs: PositiveInt | None = None
    freeze_emb: StrictBool | None = None
    freeze_transformer: StrictBool | None = None
    min_frozen_layer: NonNegativeInt | None = None
    freeze_top_mlp: StrictBool | None = None
    freeze_bot_mlp: StrictBool | None = None


def is_madmax_model(data: dict) -> bool:
    return "family" not in data and "type" in data


def is_madmax_system(data: dict) -> bool:
    return "num_devices" in data or ("type" in data and "device" not in data)


def is_madmax_task(data: dict) -> bool:
    return "kind" not in data and ("type" in data or "emb_parallel" in data)


def model_to_spec(data: dict, source: str, validate) -> dict:
    """Reference model dict -> fastmodel model dict (validated by ``validate``)."""
    mtype = data.get("type")
    if mtype not in MADMAX_MODEL_TYPES:
        raise SpecError(source, "model.type", f"unknown model type {mtype!r}{nearest(str(mtype), MADMAX_MODEL_TYPES)}")
    if MADMAX_MODEL_TYPES[mtype] is None:
        raise SpecError(source, "model.type", f"model family {mtype!r} is not supported yet (supported: LLM)")
    m = validate(MadmaxLLMModel, data, source, "model")
    if m.bytes_per_nonemb_param not in (1, 2, 4, 8):
        raise SpecError(source, "model.bytes_per_nonemb_param", f"must be 1, 2, 4 or 8 (got {m.bytes_per_nonemb_param})")
    return {
        "family": "llm",
        "name": m.name,
        "num_layers": m.num_transformer_layers,
        "hidden": m.attention_dim,
        "ffn_hidden": m.transformer_fc_dim,
        "num_heads": m.num_transformer_heads,
        "seq_len": m.transformer_seq_len,
        "vocab_size": m.entries_per_table,
        "bytes_per_dense_param": m.bytes_per_nonemb_param,
        "bytes_per_emb_param": m.bytes_per_emb_param,
    }


def system_to_spec(data: dict, source: str, validate) -> dict:
    """Reference system dict -> fastmodel system dict."""
    if data.get("type") != "GPU":
        raise SpecError(source, "system.type", f"unknown system type {data.get('type')!r} (the reference knows 'GPU')")
    s = validate(MadmaxSystem, data, source, "system")
    if s.num_devices % s.num_nodes:
        raise SpecError(source, "system.num_devices", f"{s.num_devices} devices do not divide evenly over {s.num_nodes} nodes")
    if s.num_nodes == 1 and s.ar_perc_intra != 1:
        raise SpecError(source, "system.ar_perc_intra", f"a single-node system must use intra-node links only (1.0), got {s.ar_perc_intra}")
    return {
        "name": s.name,
        "num_nodes": s.num_nodes,
        "devices_per_node": s.num_devices // s.num_nodes,
        "device": {
            "peak_flop_per_s": {"fp64": s.f64_flops, "fp32": s.f32_flops, "fp16": s.f16_flops, "int8": s.i8_ops},
            "flops_util": s.flops_util,
            "hbm_capacity_bytes": s.mem_cap,
            "hbm_bandwidth_bytes_per_s": s.mem_bw,
            "hbm_bandwidth_util": s.mem_bw_util,
        },
        "node": {"num_links": s.num_nvlinks, "link_bandwidth_bytes_per_s": s.bw_per_nvlink, "link_util": s.nvlink_util},
        "network": {
            "num_ports": s.num_ibroce_ports,
            "port_bandwidth_bytes_per_s": s.ibroce_bw,
            "port_util": s.ibroce_util,
            "allreduce_intra_fraction": s.ar_perc_intra,
        },
    }


def task_to_spec(data: dict, source: str, validate) -> dict:
    """Reference task dict (LLM family keys) -> fastmodel task dict."""
    t = validate(MadmaxTask, data, source, "task")
    if t.type not in ("pretrain", "finetune", "inference"):
        raise SpecError(source, "task.type", f"unknown task type {t.type!r}{nearest(t.type, ('pretrain', 'finetune', 'inference'))}")
    required = ["emb_parallel", "emb_parallel_degree", "transformer_parallel", "transformer_parallel_degree",
                "local_emb_bs", "local_transformer_bs"]
    if t.type == "finetune":
        required += ["freeze_emb", "freeze_transformer", "min_frozen_layer"]
    for key in required:
        if getattr(t, key) is None:
            raise SpecError(source, f"task.{key}", "required field missing")
    plan = Plan.from_lists(t.transformer_parallel, t.transformer_parallel_degree, t.emb_parallel, t.emb_parallel_degree)
    out: dict[str, Any] = {
        "name": t.name,
        "kind": t.type,
        "plan": plan.label,
        "local_batch": {"dense": t.local_transformer_bs, "emb": t.local_emb_bs},
    }
    if t.type == "finetune":
        out.update(freeze_emb=t.freeze_emb, freeze_dense=t.freeze_transformer, min_frozen_layer=t.min_frozen_layer)
    return out


__all__ = ["PlanError", "is_madmax_model", "is_madmax_system", "is_madmax_task", "model_to_spec", "system_to_spec", "task_to_spec"]
