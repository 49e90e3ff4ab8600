"""The ``dlrm-transformer`` family: a DLRM with transformer layers between its MLPs
(MAD-Max ``DLRM_Transformer``; the reference's module fails at import).

Plans have a third component for the transformer layers (``MLP/EMB/TRANSFORMER``),
which get their own local batch; lowered as the DLRM graph with the
transformer stack between bottom and top MLPs (choices: fastmodel/madmax/lowering/stacks.py).
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from pydantic import Field, PositiveInt

from fastmodel.kernels.madmax.layout import FAMILY_DLRM_TRANSFORMER
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.families.dlrm import DLRMSpec
from fastmodel.madmax.families.llm import LLMSpec
from fastmodel.madmax.lowering.stacks import lower_dlrm


class DLRMTransformerSpec(DLRMSpec):
    """DLRM with transformer layers between the bottom and top MLPs (MAD-Max ``DLRM_Transformer``).

    The transformer layers are counted as in the LLM family (4·d² + 2·d·f
    weights per layer, 2·(4d² + 2df)·s FLOPs per sample) over ``seq_len`` tokens.
    The reference's module for this family fails at import, so there are no
    reference numbers; the op graph is what its code intends, with the choices
    listed in ``fastmodel/madmax/lowering/stacks.py`` (and docs/model.md §4.4): plans have
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


FAMILY = Family(
    name="dlrm-transformer", reference_name="DLRM_Transformer", spec=DLRMTransformerSpec,
    kernel_code=FAMILY_DLRM_TRANSFORMER, components=("dense", "emb", "transformer"),
    traits=("recommendation", "transformer", "sequence"),
    lower=partial(lower_dlrm, moe=False, with_transformer=True), plan_example="'ddp/mp/fsdp'",
    degree_limits={"dense": (("model.num_bottom_layers", "model.num_top_layers"), None), "transformer": (("model.num_layers",), "model.num_heads")},
    rules=("tp_odd_layers",),
    freeze_fields=("freeze_top_mlp", "freeze_bottom_mlp", "freeze_dense", "min_frozen_layer"),
)
