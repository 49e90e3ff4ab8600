"""Model columns of the position embedding a model states (``model.position_embedding``, lowered by
``fastmodel.lm.lowering.position_values``): the rotary share of the query/key heads, a learned absolute table,
an ALiBi bias.

Rows of ``fastmodel.registry.lm.MODEL_COLUMNS`` (name, units, default, doc, lo, hi), kept here so the registry
module stays under the line cap. docs/model.md §11.56 gives the terms they price (``kernels/lm/positions.py``).
"""

from __future__ import annotations

POSITION_MODEL_ROWS = (
    ("rotary_fraction", "1", 1, "Share of each query/key head's dimensions rotated by rotary position embedding "
     "(RoPE, Su et al. 2021; GPT-NeoX/Pythia rotary_pct 0.25); 0: no rotary kernel (learned, ALiBi or no positions).",
     0, 1),
    ("learned_positions", "1", 0, "1: a learned absolute position table of seq_len x hidden on the first pipeline "
     "rank (GPT-2/GPT-3 wpe; Megatron-Core LanguageModelEmbedding.position_embeddings, not split over TP).", 0, 1),
    ("alibi_bias", "1", 0, "1: ALiBi (Press et al. 2022) added to the attention scores as the beta input of "
     "torch.baddbmm (BigScience Megatron-DeepSpeed, BLOOM): without flash attention each forward copies the "
     "broadcast bias into the score-sized output and the GEMM reads it back (docs/model.md §11.56).", 0, 1),
)
