"""The ``vit`` family: a vision transformer (MAD-Max ``ViT``), an LLM over image patches.

Its sequence length and "vocabulary" (patch-projection rows) are derived from
the image and patch sizes, so it fills those columns itself (``derive_columns``).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from fastmodel.kernels.madmax.layout import FAMILY_TRANSFORMER
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.families.llm import LLMSpec
from fastmodel.madmax.lowering.stacks import lower_transformer_model
from fastmodel.madmax.spec.model import ModelSpecBase


class ViTSpec(ModelSpecBase):
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


def _patch_columns(get) -> dict:
    """seq_len = ceil(image / patch)^2 and vocab_size = 3 p^2, on (swept) arrays."""
    patch = get("model.patch_size")
    return {"seq_len": np.ceil(get("model.image_size") / patch) ** 2, "vocab_size": 3 * patch * patch}


FAMILY = Family(
    name="vit", reference_name="ViT", spec=ViTSpec, kernel_code=FAMILY_TRANSFORMER,
    components=("dense", "emb"), traits=("transformer",),
    lower=partial(lower_transformer_model, moe=False), plan_example="'fsdp/ddp'",
    degree_limits={"dense": (("model.num_layers",), "model.num_heads")}, freeze_fields=("freeze_dense", "min_frozen_layer"),
    fsdp_backward_field="vit_fsdp_backward", sample_is_sequence=True, derive_columns=_patch_columns,
)
