"""Model specs: the architecture of the network being trained or served.

One class per model family, selected by the ``family`` field. Fields are in
natural units (layers, widths, tokens, bytes per parameter). Derived counts
(parameters, FLOPs, lookup bytes) follow the MAD-Max model (Hsia et al.,
ISCA 2024, arXiv 2310.02784), see ``docs``/MADMAX_MODEL.md section 1.2.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt


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

    # --- derived per-sample quantities (MADMAX_MODEL.md 1.2) ---
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


#: family name -> spec class; later families register here.
MODEL_FAMILIES: dict[str, type[_Spec]] = {"llm": LLMSpec}

ModelSpec = LLMSpec
