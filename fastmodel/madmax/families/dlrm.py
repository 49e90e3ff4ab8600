"""The ``dlrm`` family: a deep learning recommendation model (MAD-Max ``DLRM``).

Plan ``MLP/EMB`` over the bottom + top MLPs and the embedding tables; lowered
as the DLRM MLP graph (fastmodel/madmax/lowering/stacks.py). MLP tensor parallelism
needs even bottom and top layer counts (rule ``tp_odd_layers``).
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

from fastmodel.kernels.madmax.layout import FAMILY_DLRM
from fastmodel.madmax.families.base import Family
from fastmodel.madmax.lowering.stacks import lower_dlrm
from fastmodel.madmax.spec.model import ModelSpecBase


class DLRMSpec(ModelSpecBase):
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


FAMILY = Family(
    name="dlrm", reference_name="DLRM", spec=DLRMSpec, kernel_code=FAMILY_DLRM,
    components=("dense", "emb"), traits=("recommendation",),
    lower=partial(lower_dlrm, moe=False, with_transformer=False), plan_example="'fsdp/mp'",
    degree_limits={"dense": (("model.num_bottom_layers", "model.num_top_layers"), None)}, rules=("tp_odd_layers",),
    freeze_fields=("freeze_top_mlp", "freeze_bottom_mlp"),
)
