"""Semantics: every modelling choice where the reference made one of several
reasonable choices is a named field here; presets pick them.

- ``madmax`` reproduces the public MAD-Max reference implementation
  (ScaleExplorer ``madmax/``, commit 562db98) to 1e-9 relative, bugs included.
- ``madmax-fixed`` is the reference's model with its plain bugs fixed.
- ``default`` is ``madmax-fixed`` for MAD-Max family specs, and the real-world
  model (docs/model.md §11) for real-world specs (``family = "lm"`` models,
  ``kind = "cluster"`` systems, run records).

Fields that change the op graph are part of a Program's structure key; the
others only change cost slots. See docs/model.md §10.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fastmodel.errors import SpecError, nearest


class Semantics(BaseModel):
    """Named modelling choices (see each field's description)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"

    ddp_grad_sharded_layer: bool = Field(
        description="DDP gradient allreduce carries the layer shard each device holds "
        "(params / total shard). False reproduces the reference's 'running shard' quirk: "
        "the shard is divided level by level as the loop reaches tp/fsdp levels, so in "
        "(tp, ddp) and (fsdp, ddp) the allreduce carries the full, unsharded layer "
        "(docs/model.md §10.1)."
    )
    emb_ddp_grad_any_level: bool = Field(
        description="The embedding DDP gradient allreduce fires for a ddp level at any "
        "position. False reproduces the reference, which fires it only when level 0 is "
        "ddp, so a 2-D (mp, ddp) embedding plan syncs no embedding gradient (docs/model.md §10.2)."
    )
    llm_fsdp_backward: Literal["pre_optimized", "post_optimized"] = Field(
        description="FSDP backward of the transformer stacks of llm, llm-moe and dlrm-transformer. "
        "'pre_optimized' (the reference's "
        "llm_tasks_preoptimized, used for LLM): each allgather waits for the previous "
        "layer's backward compute and queues behind its reduce-scatter, so FSDP "
        "communication is exposed. 'post_optimized' (the reference's llm_tasks): "
        "allgathers are issued without dependencies one block ahead, hiding them."
    )
    vit_fsdp_backward: Literal["pre_optimized", "post_optimized"] = Field(
        "post_optimized",
        description="FSDP backward of the ViT family; the reference's vit_tasks is a copy of the "
        "post-optimized LLM backward, so both presets use 'post_optimized'."
    )
    dlrm_bottom_fsdp_prefetch: Literal["reference", "two_ahead"] = Field(
        "two_ahead",
        description="FSDP allgathers of the DLRM bottom MLP in the backward pass. 'two_ahead': each "
        "waits for the backward compute two ops earlier in backward order (for the last two bottom "
        "layers: the top MLP's layers 1 and 0, or in dlrm-transformer the first FC and attention "
        "blocks), as in the forward pass. 'reference': the reference "
        "discards those dependencies (a literal name is passed; docs/model.md §10.5), so the first two "
        "bottom allgathers wait on nothing and queue right behind the top MLP's communication."
    )
    bogus_prefetch_without_fsdp: bool = Field(
        description="With 'post_optimized', issue the first-layer FC allgather even when "
        "the plan has no fsdp (the reference's bug, docs/model.md §10.6; degree[0] times the "
        "full layer). Under madmax this hits every ViT plan without fsdp."
    )
    degree_limits: bool = Field(
        False,
        description="A plan is illegal when a pipeline degree exceeds the layers it splits (status pp_gt_layers) "
        "or a tensor-parallel degree exceeds the attention heads it splits (tp_gt_heads): transformer layers "
        "and heads for llm, llm-moe, vit and the transformer part of dlrm-transformer, bottom + top MLP layers "
        "for the DLRM MLPs. False reproduces the reference, which accepts any degree.",
    )
    real_world: bool = Field(
        False,
        description="Evaluate real-world specs (family = \"lm\" models, kind = \"cluster\" systems, run records) "
        "with the real-world model of docs/model.md §11; MAD-Max family specs keep the MAD-Max model with this "
        "preset's fixes. False (madmax, madmax-fixed): real-world specs are refused.",
    )
    memory_weight_factor: float = Field(
        3.0, gt=0,
        description="memory_per_device = this x weights per device. MAD-Max counts weights only; "
        "its cloud study (Figs. 1, 16) calls a configuration feasible when 3 x weights fits in HBM, "
        "which both presets use for fits_memory.",
    )


PRESETS: dict[str, Semantics] = {
    "madmax": Semantics(
        name="madmax",
        ddp_grad_sharded_layer=False,
        emb_ddp_grad_any_level=False,
        llm_fsdp_backward="pre_optimized",
        vit_fsdp_backward="post_optimized",
        dlrm_bottom_fsdp_prefetch="reference",
        bogus_prefetch_without_fsdp=True,
    ),
    "madmax-fixed": Semantics(
        name="madmax-fixed",
        ddp_grad_sharded_layer=True,
        emb_ddp_grad_any_level=True,
        llm_fsdp_backward="post_optimized",
        vit_fsdp_backward="post_optimized",
        dlrm_bottom_fsdp_prefetch="two_ahead",
        bogus_prefetch_without_fsdp=False,
        degree_limits=True,
    ),
}
#: default = madmax-fixed for MAD-Max family specs, plus the real-world model for real-world specs
PRESETS["default"] = PRESETS["madmax-fixed"].model_copy(update={"name": "default", "real_world": True})


def get_semantics(semantics: "str | Semantics | dict") -> Semantics:
    """Resolve a preset name, a dict of fields (optionally with ``base``), or a Semantics."""
    if isinstance(semantics, Semantics):
        return semantics
    if isinstance(semantics, str):
        if semantics not in PRESETS:
            raise SpecError(None, "semantics", f"unknown preset {semantics!r}; choose one of {', '.join(PRESETS)}{nearest(semantics, PRESETS)}")
        return PRESETS[semantics]
    if isinstance(semantics, dict):
        fields = dict(semantics)
        base = get_semantics(fields.pop("base", "default"))
        unknown = set(fields) - set(Semantics.model_fields)
        if unknown:
            key = sorted(unknown)[0]
            raise SpecError(None, f"semantics.{key}", f"unknown field{nearest(key, Semantics.model_fields)}")
        from pydantic import ValidationError

        from fastmodel.spec.loader import validation_to_spec_error

        try:
            return Semantics(**{**base.model_dump(), "name": "custom", **fields})
        except ValidationError as error:
            raise validation_to_spec_error(error, Semantics, None, "semantics") from None
    raise SpecError(None, "semantics", f"expected a preset name or a dict, got {type(semantics).__name__}")
