"""The ``llm-moe`` family: a decoder-only transformer whose FC blocks are mixtures of experts
(MAD-Max ``LLM_MoE``). Lowered as the transformer stack with expert all-to-alls under tp.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from fastmodel.kernels.madmax.layout import FAMILY_TRANSFORMER
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.families.llm import LLMSpec
from fastmodel.madmax.lowering.stacks import lower_transformer_model
from fastmodel.madmax.spec.model import Experts


class LLMMoESpec(LLMSpec, Experts):
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


FAMILY = Family(
    name="llm-moe", reference_name="LLM_MoE", spec=LLMMoESpec, kernel_code=FAMILY_TRANSFORMER,
    components=("dense", "emb"), traits=("transformer", "sequence", "vocabulary", "experts"),
    lower=partial(lower_transformer_model, moe=True), plan_example="'fsdp/ddp'",
    degree_limits={"dense": (("model.num_layers",), "model.num_heads")}, freeze_fields=("freeze_dense", "min_frozen_layer"),
    sample_is_sequence=True,
)
