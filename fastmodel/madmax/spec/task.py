"""Task specs: what is run (pretrain, finetune, inference), with which batch and plan."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, PrivateAttr, field_validator, model_validator,
)

from fastmodel.errors import PlanError
from fastmodel.madmax.parallel.plans import Plan


class LocalBatch(BaseModel):
    """Per-device batch of each component (MAD-Max ``local_*_bs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    dense: PositiveInt = Field(le=1 << 32, description="Samples per device in the transformer/MLP part.")
    emb: PositiveInt = Field(le=1 << 32, description="Samples per device in the embedding part.")
    transformer: PositiveInt | None = Field(
        None, le=1 << 32, description="Samples per device in the transformer part (dlrm-transformer only).")


class TaskSpec(BaseModel):
    """One training or inference task.

    Give the batch either as ``global_batch`` (samples per iteration; local
    batches are derived from the plan) or as ``local_batch`` (as the MAD-Max
    reference does). ``plan`` may be left open; sweeps and ``--plan`` fill it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    kind: Literal["pretrain", "finetune", "inference"]
    plan: str | None = Field(None, description="Plan 'DENSE/EMB', e.g. 'fsdp/ddp' or 'tp8,ddp16/mp128'.")
    global_batch: PositiveInt | None = Field(None, le=1 << 40, description="Samples per iteration.")
    local_batch: LocalBatch | None = None
    freeze_emb: bool = Field(False, description="finetune: embeddings get no gradient (no backward).")
    freeze_dense: bool = Field(False, description="finetune: no transformer layer gets a gradient update.")
    freeze_top_mlp: bool = Field(
        False, description="finetune, DLRM families: top-MLP backward still runs but its gradients are not synchronised.")
    freeze_bottom_mlp: bool = Field(False, description="finetune, DLRM families: the bottom-MLP backward is skipped.")
    min_frozen_layer: NonNegativeInt | None = Field(
        None, description="finetune: layers with index >= this get no gradient update (None: none by index)."
    )
    train_samples: PositiveFloat | None = Field(
        None, le=1e18, description="Samples to train on; enables train_time, gpu_hours, cost and energy.")
    _source: str | None = PrivateAttr(default=None)  # file or built-in name it was loaded from

    @property
    def source(self) -> str:
        return self._source or f"task {self.name!r}"

    @field_validator("plan")
    @classmethod
    def _plan_parses(cls, value):
        if value is not None:
            try:
                Plan.parse(value)
            except PlanError as error:
                raise ValueError(error.reason) from None
        return value

    @model_validator(mode="after")
    def _consistent(self):
        if (self.global_batch is None) == (self.local_batch is None):
            raise ValueError("give exactly one of global_batch or local_batch")
        freezes = (self.freeze_emb, self.freeze_dense, self.freeze_top_mlp, self.freeze_bottom_mlp)
        if self.kind != "finetune" and (any(freezes) or self.min_frozen_layer is not None):
            raise ValueError("freeze_* and min_frozen_layer apply to finetune only, not " + self.kind)
        return self

    @property
    def parsed_plan(self) -> Plan | None:
        return None if self.plan is None else Plan.parse(self.plan)

    def with_plan(self, plan: str | Plan) -> "TaskSpec":
        text = plan.label if isinstance(plan, Plan) else str(plan)
        Plan.parse(text)
        return self.model_copy(update={"plan": text})
