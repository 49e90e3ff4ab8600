"""Model specs: the architecture of the network being trained or served.

One class per model family, selected by the ``family`` field. Fields are in
natural units (layers, widths, tokens, bytes per parameter). Derived counts
(parameters, FLOPs, lookup bytes) follow the MAD-Max model (Hsia et al.,
ISCA 2024, arXiv 2310.02784), see docs/model.md §2.1.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationInfo, field_validator


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class LLMSpec(_Spec):
    """Dense decoder-only transformer language model (MAD-Max family ``LLM``).

    Counts as in MAD-Max: attention has 4·d² weights (Q, K, V, O), the FC
    block 2·d·f (two matrices), embeddings V·d + s·d (word + position).
    """

    family: Literal["llm"] = "llm"
    name: str = Field(description="Human-readable model name.")
    # upper bounds keep every count exact in float64 and the op graph small; far above real models
    num_layers: PositiveInt = Field(le=10_000, description="Transformer layers L.")
    hidden: PositiveInt = Field(le=1 << 20, description="Model width d (attention_dim), elements.")
    ffn_hidden: PositiveInt = Field(le=1 << 22, description="FC hidden width f (transformer_fc_dim), elements.")
    num_heads: PositiveInt = Field(le=1 << 16, description="Attention heads (not used by the MAD-Max cost model).")
    seq_len: PositiveInt = Field(le=1 << 30, description="Sequence length s, tokens per sample.")
    vocab_size: PositiveInt = Field(le=1 << 34, description="Vocabulary size V (word-embedding rows).")
    bytes_per_dense_param: Literal[1, 2, 4, 8] = Field(
        description="Bytes per non-embedding parameter; also selects the peak FLOP/s "
        "(8: fp64, 4: fp32/tf32, 2: fp16/bf16, 1: int8)."
    )
    bytes_per_emb_param: PositiveFloat = Field(le=64, description="Bytes per embedding parameter.")

    # --- derived per-sample quantities (docs/model.md §2.1) ---
    @property
    def attention_params(self) -> float:
        """Weights of one attention block: 4·d²."""
        return 4.0 * self.hidden * self.hidden

    @property
    def fc_params(self) -> float:
        """Weights of one FC block: 2·d·f."""
        return 2.0 * self.hidden * self.ffn_hidden

    @property
    def dense_params(self) -> float:
        return self.num_layers * (self.attention_params + self.fc_params)

    @property
    def emb_params(self) -> float:
        """Word plus position embeddings: (V + s)·d."""
        return float(self.vocab_size * self.hidden + self.seq_len * self.hidden)

    @property
    def total_params(self) -> float:
        return self.dense_params + self.emb_params

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample: L·(2·4d²·s + 2·2df·s); no attention-score term."""
        return self.num_layers * 2.0 * self.seq_len * (self.attention_params + self.fc_params)

    @property
    def lookup_bytes_per_sample(self) -> float:
        """Embedding bytes read per sample: 2·s·d·B_emb (word + position)."""
        return 2.0 * self.seq_len * self.hidden * self.bytes_per_emb_param


class _Experts(_Spec):
    """Mixture-of-experts fields shared by the MoE families."""

    num_experts: PositiveInt = Field(le=1 << 16, description="Experts X per MoE layer (parameters scale by X).")
    num_active_experts: PositiveInt = Field(le=1 << 16, description="Experts k each sample uses (FLOPs scale by k).")

    @field_validator("num_active_experts")
    @classmethod
    def _active_le_experts(cls, value, info: ValidationInfo):
        experts = info.data.get("num_experts")
        if experts is not None and value > experts:
            raise ValueError(f"{value} active experts exceed num_experts ({experts})")
        return value


class LLMMoESpec(LLMSpec, _Experts):
    """Decoder-only transformer whose FC block is a mixture of experts (MAD-Max ``LLM_MoE``).

    Expert weights: X·2·d·f per layer; FLOPs of the FC block scale by k.
    """

    family: Literal["llm-moe"] = "llm-moe"

    @property
    def fc_params(self) -> float:
        """Weights of one MoE FC block: X·2·d·f."""
        return self.num_experts * 2.0 * self.hidden * self.ffn_hidden

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample: L·(2·4d²·s + k·2·2df·s)."""
        active_fc = self.num_active_experts * 2.0 * self.hidden * self.ffn_hidden
        return self.num_layers * 2.0 * self.seq_len * (self.attention_params + active_fc)


class ViTSpec(_Spec):
    """Vision transformer (MAD-Max ``ViT``): an LLM over image patches.

    Sequence length s = ceil(image / patch)²; the patch projection plays the
    embedding table with 3·p² rows ("vocabulary"), plus s position rows.
    """

    family: Literal["vit"] = "vit"
    name: str = Field(description="Human-readable model name.")
    num_layers: PositiveInt = Field(le=10_000, description="Transformer layers L.")
    hidden: PositiveInt = Field(le=1 << 20, description="Model width d, elements.")
    ffn_hidden: PositiveInt = Field(le=1 << 22, description="MLP hidden width f, elements.")
    num_heads: PositiveInt = Field(le=1 << 16, description="Attention heads (not used by the MAD-Max cost model).")
    image_size: PositiveInt = Field(le=1 << 16, description="Image side, pixels.")
    patch_size: PositiveInt = Field(le=1 << 12, description="Patch side, pixels.")
    bytes_per_dense_param: Literal[1, 2, 4, 8] = Field(description="Bytes per non-embedding parameter (selects the peak).")
    bytes_per_emb_param: PositiveFloat = Field(le=64, description="Bytes per patch-projection parameter.")

    @property
    def seq_len(self) -> int:
        """Patches per image: ceil(image / patch)²."""
        return math.ceil(self.image_size / self.patch_size) ** 2

    @property
    def vocab_size(self) -> int:
        """Rows of the patch projection: 3·p² (RGB pixels of one patch)."""
        return 3 * self.patch_size * self.patch_size

    attention_params = LLMSpec.attention_params
    fc_params = LLMSpec.fc_params
    dense_params = LLMSpec.dense_params
    emb_params = LLMSpec.emb_params
    total_params = LLMSpec.total_params
    flops_per_sample = LLMSpec.flops_per_sample
    lookup_bytes_per_sample = LLMSpec.lookup_bytes_per_sample


class DLRMSpec(_Spec):
    """Deep learning recommendation model (MAD-Max ``DLRM``).

    Bottom and top MLPs of square ``mlp_dim`` x ``mlp_dim`` layers without bias
    (2·m² FLOPs per sample per layer) and ``num_tables`` embedding tables read
    with ``pooling`` lookups per sample. Feature interaction and the lookups
    themselves are not FLOP-counted.
    """

    family: Literal["dlrm"] = "dlrm"
    name: str = Field(description="Human-readable model name.")
    num_bottom_layers: PositiveInt = Field(le=10_000, description="Bottom-MLP layers Lb.")
    num_top_layers: PositiveInt = Field(le=10_000, description="Top-MLP layers Lt.")
    mlp_dim: PositiveInt = Field(le=1 << 20, description="Width m of every (square) MLP layer, elements.")
    num_tables: PositiveInt = Field(le=1 << 24, description="Embedding tables T.")
    rows_per_table: PositiveInt = Field(le=1 << 40, description="Rows E of each table.")
    emb_dim: PositiveInt = Field(le=1 << 16, description="Embedding dimension e.")
    pooling: PositiveFloat = Field(le=1 << 20, description="Lookups per table per sample (pooling factor).")
    bytes_per_dense_param: Literal[1, 2, 4, 8] = Field(description="Bytes per MLP parameter (selects the peak).")
    bytes_per_emb_param: PositiveFloat = Field(le=64, description="Bytes per embedding parameter.")

    @property
    def mlp_layer_params(self) -> float:
        return float(self.mlp_dim) * self.mlp_dim

    @property
    def bottom_params(self) -> float:
        return self.num_bottom_layers * self.mlp_layer_params

    @property
    def top_params(self) -> float:
        return self.num_top_layers * self.mlp_layer_params

    @property
    def dense_params(self) -> float:
        return self.bottom_params + self.top_params

    @property
    def emb_params(self) -> float:
        """T·E·e."""
        return float(self.num_tables) * self.rows_per_table * self.emb_dim

    @property
    def total_params(self) -> float:
        return self.dense_params + self.emb_params

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample: 2·m² per MLP layer."""
        return 2.0 * self.mlp_layer_params * (self.num_bottom_layers + self.num_top_layers)

    @property
    def lookup_bytes_per_sample(self) -> float:
        """Embedding bytes read per sample: T·pooling·e·B_emb."""
        return self.num_tables * self.pooling * self.emb_dim * self.bytes_per_emb_param


class DLRMMoESpec(DLRMSpec, _Experts):
    """DLRM whose top MLP is a mixture of experts (MAD-Max ``DLRM_MoE``).

    Top-MLP weights X·Lt·m²; top-MLP FLOPs 2·k·m² per layer and sample.
    """

    family: Literal["dlrm-moe"] = "dlrm-moe"

    @property
    def top_params(self) -> float:
        return self.num_experts * self.num_top_layers * self.mlp_layer_params

    @property
    def flops_per_sample(self) -> float:
        layer = 2.0 * self.mlp_layer_params
        return layer * (self.num_bottom_layers + self.num_active_experts * self.num_top_layers)


class DLRMTransformerSpec(DLRMSpec):
    """DLRM with transformer layers between the bottom and top MLPs (MAD-Max ``DLRM_Transformer``).

    The transformer layers are counted as in the LLM family (4·d² + 2·d·f
    weights per layer, 2·(4d² + 2df)·s FLOPs per sample) over ``seq_len`` tokens.
    The reference's module for this family fails at import, so there are no
    reference numbers; the op graph is what its code intends, with the choices
    listed in ``fastmodel/lowering/graph.py`` (and docs/model.md §4.4): plans have
    a third component for the transformer layers, which get their own local
    batch; embeddings are the DLRM tables (no position embedding).
    """

    family: Literal["dlrm-transformer"] = "dlrm-transformer"
    num_layers: PositiveInt = Field(le=10_000, description="Transformer layers L.")
    hidden: PositiveInt = Field(le=1 << 20, description="Transformer width d, elements.")
    ffn_hidden: PositiveInt = Field(le=1 << 22, description="Transformer FC width f, elements.")
    num_heads: PositiveInt = Field(le=1 << 16, description="Attention heads (not used by the cost model).")
    seq_len: PositiveInt = Field(le=1 << 20, description="Tokens per sample seen by the transformer.")

    attention_params = LLMSpec.attention_params
    fc_params = LLMSpec.fc_params

    @property
    def transformer_params(self) -> float:
        return self.num_layers * (self.attention_params + self.fc_params)

    @property
    def dense_params(self) -> float:
        return self.bottom_params + self.top_params + self.transformer_params

    @property
    def flops_per_sample(self) -> float:
        return DLRMSpec.flops_per_sample.fget(self) + self.num_layers * 2.0 * self.seq_len * (
            self.attention_params + self.fc_params)


#: family name -> spec class.
MODEL_FAMILIES: dict[str, type[_Spec]] = {
    "llm": LLMSpec, "llm-moe": LLMMoESpec, "vit": ViTSpec,
    "dlrm": DLRMSpec, "dlrm-moe": DLRMMoESpec, "dlrm-transformer": DLRMTransformerSpec,
}
#: families whose dense part is a stack of transformer layers
TRANSFORMER_FAMILIES = ("llm", "llm-moe", "vit")
#: families whose dense part is bottom/top MLPs
DLRM_FAMILIES = ("dlrm", "dlrm-moe", "dlrm-transformer")

ModelSpec = LLMSpec | LLMMoESpec | ViTSpec | DLRMSpec | DLRMMoESpec | DLRMTransformerSpec
