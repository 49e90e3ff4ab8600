"""Model specs: the shared base of every MAD-Max family's spec class.

Each family defines its own spec class in its module under
``fastmodel/madmax/families/`` (selected by the ``family`` field); the registry there
(``fastmodel.madmax.families.MODEL_FAMILIES``, ``ModelSpec``) collects them. Fields are
in natural units (layers, widths, tokens, bytes per parameter). Derived counts
(parameters, FLOPs, lookup bytes) follow the MAD-Max model (Hsia et al.,
ISCA 2024, arXiv 2310.02784), see docs/model.md §2.1.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, field_validator


class ModelSpecBase(BaseModel):
    """Strict, frozen, no extra keys: the pydantic base of every family's spec class."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class Experts(ModelSpecBase):
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
