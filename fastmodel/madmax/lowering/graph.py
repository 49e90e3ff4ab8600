"""Lowering: a program structure -> the op graph (:class:`Program`) of one iteration.

The structure key holds everything that shapes the graph (family, task kind,
plan strategies, layer counts, what is frozen, graph-changing semantics);
numbers that only change durations go to the parameter table instead.
Programs are cached by key, so a sweep lowers each structure once. Each family
(fastmodel/madmax/families/) names its builder (fastmodel/madmax/lowering/stacks.py, where
the graphs and the reference's quirks are described; docs/model.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fastmodel.madmax.families import FAMILIES
from fastmodel.schedule.program import Program


@dataclass(frozen=True)
class StructureKey:
    """Everything that determines a Program's op graph."""

    family: str
    kind: str                       # pretrain | finetune | inference
    dense: tuple[str, ...]          # dense (transformer or MLP) strategies per level
    emb: tuple[str, ...]            # embedding strategies per level
    num_layers: int                 # transformer layers (0 for dlrm, dlrm-moe)
    transformer: tuple[str, ...] = ()   # dlrm-transformer: transformer strategies
    num_bottom_layers: int = 0
    num_top_layers: int = 0
    freeze_emb: bool = False
    freeze_dense: bool = False      # transformer layers
    freeze_top_mlp: bool = False
    freeze_bottom_mlp: bool = False
    min_frozen_layer: int = 0       # layers >= this get no gradient (clipped to num_layers)
    emb_ddp_grad_any_level: bool = False
    fsdp_backward: str = "pre_optimized"
    bogus_prefetch_without_fsdp: bool = False
    dlrm_bottom_prefetch: str = "two_ahead"


@lru_cache(maxsize=4096)
def lower(key: StructureKey) -> Program:
    """The Program of ``key`` (cached)."""
    family = FAMILIES.get(key.family)
    if family is None:
        raise ValueError(f"no lowering for family {key.family!r}")
    return family.lower(key)
