"""Specs of the real-world model: a decoder LM (``family = "lm"``), a GPU cluster with network tiers
(``kind = "cluster"``) and how a run executes (``ExecutionSpec``, defined in ``fastmodel.lm.execution``).

Field names follow the run-record schema (``RUNS.md``: the ``model`` and ``system``
blocks), so a built-in spec and a measured run describe a model the same way.
Quantities are SI (bytes, bytes/s, FLOP/s) and may be written with units
(``"3.35 TB/s"``). Device efficiencies come from ``specs/devices/*.toml`` by
``gpu`` name; a cluster may override any of them in its ``[efficiency]`` table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from fastmodel.errors import FieldValueError
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.spec.quantity import Bytes, BytesPerSecond, FlopPerSecond
from fastmodel.spec.record_blocks import bounds

__all__ = ["LMSpec", "ClusterSpec", "ExecutionSpec"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class LMSpec(_Spec):
    """A dense or mixture-of-experts decoder language model as it is really built."""

    family: Literal["lm"] = "lm"
    name: str
    source: str = Field("", description="Where the dimensions come from (model card, paper).")
    layers: int = bounds("layers")
    hidden: int = bounds("hidden")
    ffn: int = bounds("ffn", description="Dense MLP intermediate width.")
    heads: int = bounds("heads")
    kv_heads: int | None = bounds("kv_heads", None, description="Key/value heads (GQA); default: heads.")
    head_dim: int | None = bounds("head_dim", None, description="Per-head width; default: hidden / heads.")
    vocab: int = bounds("vocab")
    seq_len: int = bounds("seq_len", description="Training sequence length, tokens.")
    ffn_kind: Literal["gelu2", "swiglu3"] = Field(description="gelu2: 2-matrix MLP; swiglu3: gated 3-matrix MLP.")
    tied_embeddings: bool = False
    moe_experts: int = bounds("moe_experts", 0)
    moe_topk: int = bounds("moe_topk", 0)
    moe_ffn: int = bounds("moe_ffn", 0)
    moe_shared_experts: int = bounds("moe_shared_experts", 0)
    moe_capacity_factor: float = bounds("moe_capacity_factor", 0.0, description="Token capacity factor (0 = dropless).")
    moe_pad_to_capacity: bool = Field(False, description="Pad every expert's input to its capacity "
                                      "(needs moe_capacity_factor > 0).")
    moe_layer_freq: int = bounds("moe_layer_freq", 1, description="One MoE layer every N layers after the "
                                 "leading dense ones (DeepSpeed-MoE: 2).")
    moe_max_nodes: int = bounds("moe_max_nodes", 0, description="Node-limited routing: nodes one token's "
                                "experts may span (DeepSeek-V3: 4; 0 = unlimited).")
    moe_routing: Literal["uniform", "round_robin"] = Field(
        "uniform", description="Expert choice the dispatch sees: uniform (expected destinations of k experts drawn "
        "without replacement) or round_robin (TorchTitan _debug_force_load_balance: token i to experts k i ... "
        "k i + k - 1 mod E); docs/model.md §11.14.2.")
    dense_layers: int = bounds("dense_layers", 0, description="Leading dense layers of a MoE model.")
    attention: Literal["mha", "mla"] = "mha"
    q_lora_rank: int = bounds("q_lora_rank", 0)
    kv_lora_rank: int = bounds("kv_lora_rank", 0)
    qk_nope_head_dim: int = bounds("qk_nope_head_dim", 0)
    qk_rope_head_dim: int = bounds("qk_rope_head_dim", 0)
    v_head_dim: int = bounds("v_head_dim", 0)
    sliding_window: int = bounds("sliding_window", 0)
    sliding_window_layers: int | None = bounds("sliding_window_layers", None,
                                               description="Layers using the window; default: all; 0: none.")
    attention_chunk: int = bounds("attention_chunk", 0)
    attention_chunk_layers: int = bounds("attention_chunk_layers", 0)
    mtp_layers: int = bounds("mtp_layers", 0)
    normalization: str | None = Field(None, max_length=64, description="e.g. \"rmsnorm\", \"layernorm\"; a name "
                                      "containing 'rms' is RMSNorm, any other LayerNorm; default: RMSNorm for "
                                      "gated MLPs (swiglu3), LayerNorm otherwise.")

    position_embedding: str | None = Field(
        None, max_length=200, description="\"rotary\" (or \"rope\", optionally \"(N% of head dim)\"), \"learned\" "
        "(or \"absolute\"), \"alibi\" or \"none\", then an optional remark; default: rotary on every head "
        "dimension (fastmodel.lm.lowering.position_values).")

    @model_validator(mode="after")
    def _consistent(self):
        if self.position_embedding is not None:
            from fastmodel.lm.lowering import position_values
            position_values(self.position_embedding)          # a FieldValueError naming the field
        kv_heads = self.kv_heads if self.kv_heads is not None else self.heads
        if kv_heads > self.heads or self.heads % kv_heads:
            raise FieldValueError(("kv_heads",), f"{kv_heads} kv heads must divide the {self.heads} query heads")
        if self.head_dim is None and self.hidden % self.heads:
            raise FieldValueError(("head_dim",), f"required when hidden ({self.hidden}) is not a multiple of heads "
                                  f"({self.heads})")
        if self.sliding_window_layers is not None and self.sliding_window_layers > self.layers:
            raise FieldValueError(("sliding_window_layers",),
                                  f"{self.sliding_window_layers} exceeds the {self.layers} layers")
        if self.attention_chunk_layers > self.layers:
            raise FieldValueError(("attention_chunk_layers",),
                                  f"{self.attention_chunk_layers} exceeds the {self.layers} layers")
        if self.attention_chunk and self.attention_chunk_layers and self.sliding_window:
            raise FieldValueError(("attention_chunk",), "a model has chunked or sliding-window layers, not both "
                                  "(they share one layer kind, docs/model.md §11.55)")
        if (self.moe_experts > 0) != (self.moe_topk > 0):
            raise ValueError("moe_experts and moe_topk must both be 0 (dense) or both > 0")
        if self.moe_experts and not self.moe_ffn:
            raise FieldValueError(("moe_ffn",), "required when moe_experts > 0")
        if self.moe_topk > self.moe_experts:
            raise FieldValueError(("moe_topk",), f"{self.moe_topk} exceeds moe_experts {self.moe_experts}")
        if self.moe_pad_to_capacity and not self.moe_capacity_factor:
            raise FieldValueError(("moe_pad_to_capacity",), "needs moe_capacity_factor > 0 (dropless routing "
                                  "has no capacity to pad to)")
        if self.dense_layers > self.layers:
            raise FieldValueError(("dense_layers",), f"{self.dense_layers} exceeds layers {self.layers}")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_rope_head_dim and self.v_head_dim):
            raise ValueError("attention = 'mla' needs kv_lora_rank, qk_rope_head_dim and v_head_dim")
        return self

    def record_block(self) -> dict:
        """The ``model`` block of a run record (RUNS.md) describing this model."""
        data = self.model_dump(exclude={"family", "source"})
        if not self.moe_experts:
            for key in ("moe_pad_to_capacity", "moe_layer_freq", "moe_max_nodes", "moe_routing"):
                data.pop(key)
        if self.attention != "mla":
            for key in ("attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                        "v_head_dim"):
                data.pop(key)
        return data


class ClusterSpec(_Spec):
    """Identical GPU servers, an NVLink domain and a scale-out network (``tiers``: tier 0 and tier 1)."""

    kind: Literal["cluster"] = "cluster"
    name: str
    source: str = Field("", description="Datasheets the numbers come from.")
    gpu: str = Field(description="Device name; selects specs/devices/*.toml efficiencies.")
    num_nodes: PositiveInt = Field(le=1 << 20)
    gpus_per_node: int = bounds("gpus_per_node")
    nvlink_domain_size: int | None = bounds("domain_size", None,
                                            description="GPUs per NVLink domain (NVL72: 72); default a node.")
    peak_flops_bf16: FlopPerSecond
    peak_flops_fp8: FlopPerSecond | None = None
    hbm_bytes: Bytes
    hbm_bw_bytes_s: BytesPerSecond
    intra_node_bw_bytes_s_per_gpu: BytesPerSecond = Field(description="NVLink bandwidth per GPU, one direction.")
    inter_node_bw_bytes_s_per_gpu: BytesPerSecond = Field(description="Scale-out NIC bandwidth per GPU, one direction.")
    price_usd_per_gpu_hour: float | None = Field(None, gt=0, le=1e6)
    efficiency: dict[str, float] = Field(default_factory=dict,
                                         description="Overrides of device/network efficiency columns by name.")

    @property
    def n_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def tiers(self) -> tuple:
        """The network as tiers (``fastmodel/spec/network.py``): tier 0 the NVLink domain
        (``nvlink_domain_size``, default a node), tier 1 the scale-out network spanning the cluster;
        efficiencies and latencies from the device file (``specs/devices``), then ``efficiency`` (a view, built
        without re-validating: it shows the cluster's numbers as the kernels get them, so a job smaller than
        its NVLink domain, e.g. 8 GPUs of an NVL72, shows tier 0 larger than tier 1: the job sits inside one
        domain)."""
        from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
        from fastmodel.spec.devices import device_table
        from fastmodel.spec.network import NetworkTier

        device = device_table().get(self.gpu.lower(), {})

        def column(name: str) -> float:
            return float(self.efficiency.get(name, device.get(name, COLUMNS[COLUMN_INDEX[name]].default)))

        return (
            NetworkTier.model_construct(domain_size=self.nvlink_domain_size or self.gpus_per_node,
                        bandwidth_per_device_bytes_per_s=self.intra_node_bw_bytes_s_per_gpu,
                        latency_s=column("intra_latency"), efficiency=column("intra_eff")),
            NetworkTier.model_construct(domain_size=self.n_gpus, bandwidth_per_device_bytes_per_s=self.inter_node_bw_bytes_s_per_gpu,
                        latency_s=column("inter_latency"), efficiency=column("inter_eff")),
        )

    def record_block(self) -> dict:
        """The ``system`` block of a run record (RUNS.md) for this cluster."""
        data = self.model_dump(exclude={"kind", "name", "source", "num_nodes", "price_usd_per_gpu_hour",
                                        "efficiency", "nvlink_domain_size"})
        data["n_gpus"] = self.n_gpus
        if self.nvlink_domain_size is not None:
            data["nvlink_domain_size"] = self.nvlink_domain_size
        if data["peak_flops_fp8"] is None:
            data.pop("peak_flops_fp8")
        return data

