"""Read the MAD-Max reference's three JSON config formats as they are.

The reference (ScaleExplorer ``madmax/``) takes a model, a system and a task
dict with its own keys and units (bytes/s, FLOP/s). These pydantic models
validate those dicts and convert them to fastmodel specs; errors name the
reference's own keys. Semantics of each key: docs/model.md §2.4.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveInt, StrictBool, StrictInt

from fastmodel.errors import PlanError, SpecError, nearest
from fastmodel.madmax.families import REFERENCE_NAMES
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.spec.quantity import Bytes, BytesPerSecond, FlopPerSecond, Fraction, Utilization

#: reference model types and the fastmodel family each maps to (each family module names its own)
MADMAX_MODEL_TYPES = REFERENCE_NAMES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _MadmaxModel(_Strict):
    name: str
    type: str
    bytes_per_nonemb_param: int
    bytes_per_emb_param: float


class _MadmaxTransformer(_MadmaxModel):
    num_transformer_layers: PositiveInt
    num_transformer_heads: PositiveInt
    attention_dim: PositiveInt
    transformer_fc_dim: PositiveInt


class _MadmaxExperts(_Strict):
    num_experts: PositiveInt
    num_active_experts: PositiveInt


class MadmaxLLMModel(_MadmaxTransformer):
    entries_per_table: PositiveInt
    transformer_seq_len: PositiveInt


class MadmaxLLMMoEModel(MadmaxLLMModel, _MadmaxExperts):
    pass


class MadmaxViTModel(_MadmaxTransformer):
    image_size: PositiveInt
    patch_dim: PositiveInt


class MadmaxDLRMModel(_MadmaxModel):
    num_bot_mlp_layers: PositiveInt
    num_top_mlp_layers: PositiveInt
    mlp_dim: PositiveInt
    num_tables: PositiveInt
    entries_per_table: PositiveInt
    emb_dim: PositiveInt
    pooling_size: float


class MadmaxDLRMMoEModel(MadmaxDLRMModel, _MadmaxExperts):
    pass


class MadmaxDLRMTransformerModel(MadmaxDLRMModel, _MadmaxTransformer):
    transformer_seq_len: PositiveInt


_MODEL_CLASSES = {
    "LLM": MadmaxLLMModel, "LLM_MoE": MadmaxLLMMoEModel, "ViT": MadmaxViTModel,
    "DLRM": MadmaxDLRMModel, "DLRM_MoE": MadmaxDLRMMoEModel, "DLRM_Transformer": MadmaxDLRMTransformerModel,
}


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
    m = validate(_MODEL_CLASSES[mtype], data, source, "model")
    if m.bytes_per_nonemb_param not in (1, 2, 4, 8):
        raise SpecError(source, "model.bytes_per_nonemb_param", f"must be 1, 2, 4 or 8 (got {m.bytes_per_nonemb_param})")
    out: dict[str, Any] = {
        "family": MADMAX_MODEL_TYPES[mtype],
        "name": m.name,
        "bytes_per_dense_param": m.bytes_per_nonemb_param,
        "bytes_per_emb_param": m.bytes_per_emb_param,
    }
    if hasattr(m, "num_transformer_layers"):
        out.update(num_layers=m.num_transformer_layers, hidden=m.attention_dim, ffn_hidden=m.transformer_fc_dim,
                   num_heads=m.num_transformer_heads)
    if hasattr(m, "transformer_seq_len"):
        out["seq_len"] = m.transformer_seq_len
    if mtype in ("LLM", "LLM_MoE"):
        out["vocab_size"] = m.entries_per_table
    if mtype == "ViT":
        out.update(image_size=m.image_size, patch_size=m.patch_dim)
    if mtype.startswith("DLRM"):
        out.update(num_bottom_layers=m.num_bot_mlp_layers, num_top_layers=m.num_top_mlp_layers, mlp_dim=m.mlp_dim,
                   num_tables=m.num_tables, rows_per_table=m.entries_per_table, emb_dim=m.emb_dim,
                   pooling=float(m.pooling_size))
    if hasattr(m, "num_experts"):
        out.update(num_experts=m.num_experts, num_active_experts=m.num_active_experts)
    return out


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
    """Reference task dict -> fastmodel task dict.

    The keys tell the family: ``mlp_parallel`` (DLRM families; with
    ``transformer_parallel`` too, DLRM_Transformer) or ``transformer_parallel``
    (LLM, LLM_MoE, ViT).
    """
    t = validate(MadmaxTask, data, source, "task")
    if t.type not in ("pretrain", "finetune", "inference"):
        raise SpecError(source, "task.type", f"unknown task type {t.type!r}{nearest(t.type, ('pretrain', 'finetune', 'inference'))}")
    mlp = t.mlp_parallel is not None or t.mlp_parallel_degree is not None
    transformer = t.transformer_parallel is not None or t.transformer_parallel_degree is not None
    required = ["emb_parallel", "emb_parallel_degree", "local_emb_bs"]
    if mlp:
        required += ["mlp_parallel", "mlp_parallel_degree", "local_mlp_bs"]
    if transformer or not mlp:
        required += ["transformer_parallel", "transformer_parallel_degree", "local_transformer_bs"]
    if t.type == "finetune":
        required += ["freeze_emb"]
        required += ["freeze_top_mlp", "freeze_bot_mlp"] if mlp else []
        required += ["freeze_transformer"] if transformer else []
        required += ["min_frozen_layer"] if transformer and not mlp else []
    for key in required:
        if getattr(t, key) is None:
            raise SpecError(source, f"task.{key}", "required field missing")
    if mlp:
        plan = Plan.from_lists(t.mlp_parallel, t.mlp_parallel_degree, t.emb_parallel, t.emb_parallel_degree,
                               t.transformer_parallel or (), t.transformer_parallel_degree or ())
        local = {"dense": t.local_mlp_bs, "emb": t.local_emb_bs}
        if transformer:
            local["transformer"] = t.local_transformer_bs
    else:
        plan = Plan.from_lists(t.transformer_parallel, t.transformer_parallel_degree, t.emb_parallel, t.emb_parallel_degree)
        local = {"dense": t.local_transformer_bs, "emb": t.local_emb_bs}
    out: dict[str, Any] = {"name": t.name, "kind": t.type, "plan": plan.label, "local_batch": local}
    if t.type == "finetune":
        out["freeze_emb"] = t.freeze_emb
        if mlp:
            out.update(freeze_top_mlp=t.freeze_top_mlp, freeze_bottom_mlp=t.freeze_bot_mlp)
        if transformer:
            out["freeze_dense"] = t.freeze_transformer
        if transformer and not mlp:
            out["min_frozen_layer"] = t.min_frozen_layer
    return out


__all__ = ["PlanError", "is_madmax_model", "is_madmax_system", "is_madmax_task", "model_to_spec", "system_to_spec", "task_to_spec"]
