"""The ``llm`` family: a dense decoder-only transformer language model (MAD-Max ``LLM``).

Plan ``DENSE/EMB`` over the transformer layers and the word + position
embeddings; lowered as the transformer stack (fastmodel/madmax/lowering/stacks.py).
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

from fastmodel.kernels.madmax.layout import FAMILY_TRANSFORMER
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.lowering.stacks import lower_transformer_model
from fastmodel.madmax.spec.model import ModelSpecBase


class LLMSpec(ModelSpecBase):
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


FAMILY = Family(
    name="llm", reference_name="LLM", spec=LLMSpec, kernel_code=FAMILY_TRANSFORMER,
    components=("dense", "emb"), traits=("transformer", "sequence", "vocabulary"),
    lower=partial(lower_transformer_model, moe=False), plan_example="'fsdp/ddp'",
    degree_limits={"dense": (("model.num_layers",), "model.num_heads")}, freeze_fields=("freeze_dense", "min_frozen_layer"),
    sample_is_sequence=True,
)
