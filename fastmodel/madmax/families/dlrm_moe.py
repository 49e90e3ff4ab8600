"""The ``dlrm-moe`` family: a DLRM whose top MLP is a mixture of experts (MAD-Max ``DLRM_MoE``)."""

from __future__ import annotations

from functools import partial
from typing import Literal

from fastmodel.kernels.madmax.layout import FAMILY_DLRM
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.families.dlrm import DLRMSpec
from fastmodel.madmax.lowering.stacks import lower_dlrm
from fastmodel.madmax.spec.model import Experts


class DLRMMoESpec(DLRMSpec, Experts):
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


FAMILY = Family(
    name="dlrm-moe", reference_name="DLRM_MoE", spec=DLRMMoESpec, kernel_code=FAMILY_DLRM,
    components=("dense", "emb"), traits=("recommendation", "experts"),
    lower=partial(lower_dlrm, moe=True, with_transformer=False), plan_example="'tp,ddp/mp'",
    degree_limits={"dense": (("model.num_bottom_layers", "model.num_top_layers"), None)}, rules=("tp_odd_layers",),
    freeze_fields=("freeze_top_mlp", "freeze_bottom_mlp"),
)
