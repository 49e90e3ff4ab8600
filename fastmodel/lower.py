"""Lowering: a program structure -> the op graph (:class:`Program`) of one iteration.

The structure key holds everything that shapes the graph (family, task kind,
plan strategies, layer count, what is frozen, graph-changing semantics);
numbers that only change durations go to the parameter table instead.
Programs are cached by key, so a sweep lowers each structure once.

LLM emission order follows MADMAX_MODEL.md 1.6 (forward: embedding, then per
layer attention and FC with FSDP allgathers one layer ahead and Megatron TP
allreduces; barrier; backward in reverse, per layer FC then attention with
their gradient collectives; then embedding gradient communication and lookup).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fastmodel.kernels.layout import (
    CAT_ALL2ALL, CAT_ALLGATHER, CAT_ALLREDUCE, CAT_EMB, CAT_GEMM, CAT_REDUCESCATTER,
    S_ATTN_AG, S_ATTN_BWD, S_ATTN_FWD, S_ATTN_GRAD_AR, S_ATTN_RS, S_EMB_ALL2ALL, S_EMB_GRAD_AR,
    S_EMB_LOOKUP, S_FC_AG, S_FC_BWD, S_FC_FWD, S_FC_GRAD_AR, S_FC_RS, S_TP_AR,
    STREAM_COMM as COMM, STREAM_COMPUTE as COMP,
)
from fastmodel.program import Program, ProgramBuilder


@dataclass(frozen=True)
class StructureKey:
    """Everything that determines a Program's op graph."""

    family: str
    kind: str                       # pretrain | finetune | inference
    dense: tuple[str, ...]          # dense strategies per level
    emb: tuple[str, ...]            # embedding strategies per level
    num_layers: int
    freeze_emb: bool = False
    freeze_dense: bool = False
    min_frozen_layer: int = 0       # layers >= this get no gradient (clipped to num_layers)
    emb_ddp_grad_any_level: bool = False
    fsdp_backward: str = "pre_optimized"
    bogus_prefetch_without_fsdp: bool = False


@lru_cache(maxsize=4096)
def lower(key: StructureKey) -> Program:
    """The Program of ``key`` (cached)."""
    if key.family != "llm":
        raise ValueError(f"no lowering for family {key.family!r}")
    return _lower_llm(key)


def _lower_llm(key: StructureKey) -> Program:
    b = ProgramBuilder()
    _llm_forward(b, key)
    if key.kind != "inference":
        b.barrier()
        _llm_backward(b, key)
    return b.build()


def _llm_forward(b: ProgramBuilder, key: StructureKey) -> None:
    fsdp = key.dense[0] == "fsdp"
    tp = "tp" in key.dense
    b.op("emb.f", COMP, S_EMB_LOOKUP, CAT_EMB)
    emb_comm = []
    for lvl, strategy in enumerate(key.emb):
        if strategy == "mp":
            b.op(f"emb.f.a2a{lvl}", COMM, S_EMB_ALL2ALL, CAT_ALL2ALL, ["emb.f"])
            emb_comm.append(f"emb.f.a2a{lvl}")
    b.begin_layers()
    for i in range(key.num_layers):
        b.layer()
        if fsdp:
            b.op(f"attn{i}.f.ag", COMM, S_ATTN_AG, CAT_ALLGATHER, [f"attn{i - 1}.f"])
        waits = emb_comm if i == 0 else [f"fc{i - 1}.f", f"fc{i - 1}.f.tp_ar"]
        b.op(f"attn{i}.f", COMP, S_ATTN_FWD, CAT_GEMM, [*waits, f"attn{i}.f.ag"])
        if tp:
            b.op(f"attn{i}.f.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [f"attn{i}.f"])
        if fsdp:
            b.op(f"fc{i}.f.ag", COMM, S_FC_AG, CAT_ALLGATHER, [f"fc{i - 1}.f"])
        b.op(f"fc{i}.f", COMP, S_FC_FWD, CAT_GEMM, [f"attn{i}.f", f"attn{i}.f.tp_ar", f"fc{i}.f.ag"])
        if tp:
            b.op(f"fc{i}.f.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [f"fc{i}.f"])
    b.end_layers()


def _gradient_comms(b: ProgramBuilder, key: StructureKey, block: str, i: int, trainable: bool) -> None:
    """Per-level collectives after a block's backward GEMM (in plan level order)."""
    grad_ar, rs = (S_ATTN_GRAD_AR, S_ATTN_RS) if block == "attn" else (S_FC_GRAD_AR, S_FC_RS)
    compute = f"{block}{i}.b"
    for strategy in key.dense:
        if strategy == "ddp" and trainable:
            b.op(f"{compute}.grad_ar", COMM, grad_ar, CAT_ALLREDUCE, [compute])
        elif strategy == "fsdp" and trainable:
            b.op(f"{compute}.rs", COMM, rs, CAT_REDUCESCATTER, [compute])
        elif strategy == "tp":
            b.op(f"{compute}.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [compute])


def _llm_backward(b: ProgramBuilder, key: StructureKey) -> None:
    fsdp = key.dense[0] == "fsdp"
    post = key.fsdp_backward == "post_optimized"
    last = key.num_layers - 1
    b.begin_layers()
    for i in range(last, -1, -1):
        b.layer()
        trainable = not key.freeze_dense and i < key.min_frozen_layer
        if post:
            if i == last and (fsdp or key.bogus_prefetch_without_fsdp):
                b.op(f"fc{i}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER)
            if fsdp:
                b.op(f"attn{i}.b.ag", COMM, S_ATTN_AG, CAT_ALLGATHER)
        elif fsdp:
            b.op(f"fc{i}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER, [f"fc{i + 1}.b"])
        b.op(f"fc{i}.b", COMP, S_FC_BWD, CAT_GEMM, [f"attn{i + 1}.b", f"attn{i + 1}.b.tp_ar", f"fc{i}.b.ag"])
        _gradient_comms(b, key, "fc", i, trainable)
        if post:
            if fsdp and i > 0:
                b.op(f"fc{i - 1}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER)
        elif fsdp:
            b.op(f"attn{i}.b.ag", COMM, S_ATTN_AG, CAT_ALLGATHER, [f"attn{i + 1}.b"])
        b.op(f"attn{i}.b", COMP, S_ATTN_BWD, CAT_GEMM, [f"fc{i}.b", f"fc{i}.b.tp_ar", f"attn{i}.b.ag"])
        _gradient_comms(b, key, "attn", i, trainable)
    b.end_layers()
    if key.freeze_emb:
        return
    emb_comm = []
    for lvl, strategy in enumerate(key.emb):
        waits = ["attn0.b", "attn0.b.tp_ar"]
        if strategy == "mp":
            b.op(f"emb.b.a2a{lvl}", COMM, S_EMB_ALL2ALL, CAT_ALL2ALL, waits)
            emb_comm.append(f"emb.b.a2a{lvl}")
        elif key.emb_ddp_grad_any_level or key.emb[0] == "ddp":
            b.op(f"emb.b.grad_ar{lvl}", COMM, S_EMB_GRAD_AR, CAT_ALLREDUCE, waits)
            emb_comm.append(f"emb.b.grad_ar{lvl}")
    b.op("emb.b", COMP, S_EMB_LOOKUP, CAT_EMB, emb_comm)
