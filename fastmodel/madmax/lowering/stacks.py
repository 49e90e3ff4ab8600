"""The op graphs the families lower to: transformer stacks, DLRM MLPs, embeddings.

Family modules (fastmodel/madmax/families/) pick a builder and its flags; the
structure key (fastmodel/madmax/lowering/graph.py) carries the rest.

Emission order and dependencies follow the reference (docs/model.md §4); a
dependency on an op that does not exist is dropped, as the reference's
substring matching does.

- Transformer stacks (llm, llm-moe, vit; the middle of dlrm-transformer):
  forward per layer attention then FC, FSDP allgathers one layer ahead,
  Megatron TP allreduces after both blocks, and under MoE + tp two
  all-to-alls around the FC block; barrier; backward in reverse (FC then
  attention, each followed by its gradient collectives), in the
  pre-optimized or post-optimized FSDP variant.
- DLRM MLPs: bottom then top layers, FSDP allgathers two layers ahead, the
  TP allreduce once per layer pair (after odd layers forward, even layers
  backward), MoE all-to-alls around each top layer under tp; backward: top
  MLP, embedding gradient communication, bottom MLP (overlapping that
  communication), embedding backward.
- dlrm-transformer (the reference's module fails at import; this is what its
  code intends): EMB -> bottom MLP -> transformer layers -> top MLP forward;
  backward top MLP -> transformer layers (run when anything below them
  trains) -> embedding communication -> bottom MLP -> embedding. Choices
  where its code is ambiguous: the first transformer allgather waits on the
  second-to-last bottom layer and the first two top-MLP allgathers on the
  last attention and FC blocks (as written); the last bottom layer's backward
  waits on the first attention block's backward and its TP allreduce (the
  code names the top MLP there, which would let the bottom MLP run before the
  transformer backward it depends on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastmodel.kernels.madmax.layout import (
    CAT_ALL2ALL, CAT_ALLGATHER, CAT_ALLREDUCE, CAT_EMB, CAT_GEMM, CAT_REDUCESCATTER,
    S_ATTN_AG, S_ATTN_BWD, S_ATTN_FWD, S_ATTN_GRAD_AR, S_ATTN_RS, S_BOT_AG, S_BOT_BWD, S_BOT_FWD, S_BOT_GRAD_AR,
    S_BOT_RS, S_EMB_ALL2ALL, S_EMB_GRAD_AR, S_EMB_LOOKUP, S_FC_AG, S_FC_BWD, S_FC_FWD, S_FC_GRAD_AR, S_FC_RS,
    S_MLP_MOE_A2A, S_MLP_TP_AR, S_MOE_A2A, S_TOP_AG, S_TOP_BWD, S_TOP_FWD, S_TOP_GRAD_AR, S_TOP_RS, S_TP_AR,
    STREAM_COMM as COMM, STREAM_COMPUTE as COMP,
)
from fastmodel.schedule.program import Program, ProgramBuilder

if TYPE_CHECKING:
    from fastmodel.madmax.lowering.graph import StructureKey


# --- shared pieces ----------------------------------------------------------

def _emb_forward(b: ProgramBuilder, key: StructureKey) -> list[str]:
    """Embedding lookup and its all-to-alls; returns the comm op keys."""
    b.op("emb.f", COMP, S_EMB_LOOKUP, CAT_EMB)
    comm = []
    for lvl, strategy in enumerate(key.emb):
        if strategy == "mp":
            b.op(f"emb.f.a2a{lvl}", COMM, S_EMB_ALL2ALL, CAT_ALL2ALL, ["emb.f"])
            comm.append(f"emb.f.a2a{lvl}")
    return comm


def _emb_backward_comm(b: ProgramBuilder, key: StructureKey, waits: list[str]) -> list[str]:
    """Embedding gradient communication (all-to-all for mp; allreduce for ddp)."""
    comm = []
    for lvl, strategy in enumerate(key.emb):
        if strategy == "mp":
            b.op(f"emb.b.a2a{lvl}", COMM, S_EMB_ALL2ALL, CAT_ALL2ALL, waits)
            comm.append(f"emb.b.a2a{lvl}")
        elif key.emb_ddp_grad_any_level or key.emb[0] == "ddp":
            b.op(f"emb.b.grad_ar{lvl}", COMM, S_EMB_GRAD_AR, CAT_ALLREDUCE, waits)
            comm.append(f"emb.b.grad_ar{lvl}")
    return comm


# --- transformer stacks -----------------------------------------------------

def _transformer_forward(b: ProgramBuilder, strategies: tuple[str, ...], layers: int, moe: bool,
                         first_waits: list[str], first_ag_waits: list[str]) -> None:
    fsdp = strategies[0] == "fsdp"
    tp = "tp" in strategies
    moe_a2a = moe and tp
    b.begin_layers()
    for i in range(layers):
        b.layer()
        if fsdp:
            b.op(f"attn{i}.f.ag", COMM, S_ATTN_AG, CAT_ALLGATHER, first_ag_waits if i == 0 else [f"attn{i - 1}.f"])
        waits = first_waits if i == 0 else [f"fc{i - 1}.f", f"fc{i - 1}.f.tp_ar", f"fc{i - 1}.f.a2a2"]
        b.op(f"attn{i}.f", COMP, S_ATTN_FWD, CAT_GEMM, [*waits, f"attn{i}.f.ag"])
        if tp:
            b.op(f"attn{i}.f.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [f"attn{i}.f"])
        if fsdp:
            b.op(f"fc{i}.f.ag", COMM, S_FC_AG, CAT_ALLGATHER, [f"fc{i - 1}.f"])
        if moe_a2a:  # tokens to their experts
            b.op(f"fc{i}.f.a2a1", COMM, S_MOE_A2A, CAT_ALL2ALL)
        b.op(f"fc{i}.f", COMP, S_FC_FWD, CAT_GEMM, [f"attn{i}.f", f"attn{i}.f.tp_ar", f"fc{i}.f.ag", f"fc{i}.f.a2a1"])
        if tp:
            b.op(f"fc{i}.f.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [f"fc{i}.f"])
        if moe_a2a:  # and back
            b.op(f"fc{i}.f.a2a2", COMM, S_MOE_A2A, CAT_ALL2ALL, [f"fc{i}.f", f"fc{i}.f.tp_ar"])
    b.end_layers()


def _transformer_gradient_comms(b: ProgramBuilder, strategies: tuple[str, ...], block: str, i: int,
                                trainable: bool, moe_a2a: bool) -> None:
    """Per-level collectives after a block's backward GEMM (in plan level order)."""
    grad_ar, rs = (S_ATTN_GRAD_AR, S_ATTN_RS) if block == "attn" else (S_FC_GRAD_AR, S_FC_RS)
    compute = f"{block}{i}.b"
    for strategy in strategies:
        if strategy == "ddp" and trainable:
            b.op(f"{compute}.grad_ar", COMM, grad_ar, CAT_ALLREDUCE, [compute])
        elif strategy == "fsdp" and trainable:
            b.op(f"{compute}.rs", COMM, rs, CAT_REDUCESCATTER, [compute])
        elif strategy == "tp":
            b.op(f"{compute}.tp_ar", COMM, S_TP_AR, CAT_ALLREDUCE, [compute])
            if moe_a2a:
                b.op(f"{compute}.a2a2", COMM, S_MOE_A2A, CAT_ALL2ALL, [compute, f"{compute}.tp_ar"])


def _transformer_backward(b: ProgramBuilder, key: StructureKey, strategies: tuple[str, ...], moe: bool,
                          last_waits: list[str], last_ag_waits: list[str], min_frozen: int) -> None:
    fsdp = strategies[0] == "fsdp"
    moe_a2a = moe and "tp" in strategies
    post = key.fsdp_backward == "post_optimized"
    last = key.num_layers - 1
    b.begin_layers()
    for i in range(last, -1, -1):
        b.layer()
        trainable = not key.freeze_dense and i < min_frozen
        if post:
            if i == last and (fsdp or key.bogus_prefetch_without_fsdp):
                b.op(f"fc{i}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER)
            if fsdp:
                b.op(f"attn{i}.b.ag", COMM, S_ATTN_AG, CAT_ALLGATHER)
        elif fsdp:
            b.op(f"fc{i}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER, last_ag_waits if i == last else [f"fc{i + 1}.b"])
        if moe_a2a:
            b.op(f"fc{i}.b.a2a1", COMM, S_MOE_A2A, CAT_ALL2ALL)
        waits = last_waits if i == last else [f"attn{i + 1}.b", f"attn{i + 1}.b.tp_ar"]
        b.op(f"fc{i}.b", COMP, S_FC_BWD, CAT_GEMM, [*waits, f"fc{i}.b.ag", f"fc{i}.b.a2a1"])
        _transformer_gradient_comms(b, strategies, "fc", i, trainable, moe_a2a)
        if post:
            if fsdp and i > 0:
                b.op(f"fc{i - 1}.b.ag", COMM, S_FC_AG, CAT_ALLGATHER)
        elif fsdp:
            b.op(f"attn{i}.b.ag", COMM, S_ATTN_AG, CAT_ALLGATHER, [f"attn{i + 1}.b"])
        b.op(f"attn{i}.b", COMP, S_ATTN_BWD, CAT_GEMM, [f"fc{i}.b", f"fc{i}.b.tp_ar", f"fc{i}.b.a2a2", f"attn{i}.b.ag"])
        _transformer_gradient_comms(b, strategies, "attn", i, trainable, False)
    b.end_layers()


def lower_transformer_model(key: StructureKey, moe: bool) -> Program:
    """llm, llm-moe, vit: embedding + transformer stack (plan component ``dense``); ``moe``: expert FC blocks."""
    b = ProgramBuilder()
    emb_comm = _emb_forward(b, key)
    _transformer_forward(b, key.dense, key.num_layers, moe, emb_comm, [])
    if key.kind != "inference":
        b.barrier()
        _transformer_backward(b, key, key.dense, moe, [], [], key.min_frozen_layer)
        if not key.freeze_emb:
            comm = _emb_backward_comm(b, key, ["attn0.b", "attn0.b.tp_ar"])
            b.op("emb.b", COMP, S_EMB_LOOKUP, CAT_EMB, comm)
    return b.build()


# --- DLRM MLPs --------------------------------------------------------------

def _mlp_level_comms_forward(b: ProgramBuilder, key: StructureKey, name: str, index: int, moe_a2a: bool) -> None:
    """TP allreduce after odd layers (and the MoE return all-to-all) in the forward pass."""
    for strategy in key.dense:
        if strategy == "tp":
            if index % 2 == 1:
                b.op(f"{name}.f.tp_ar", COMM, S_MLP_TP_AR, CAT_ALLREDUCE, [f"{name}.f"])
            if moe_a2a:
                b.op(f"{name}.f.a2a2", COMM, S_MLP_MOE_A2A, CAT_ALL2ALL, [f"{name}.f", f"{name}.f.tp_ar"])


def _mlp_level_comms_backward(b: ProgramBuilder, key: StructureKey, name: str, index: int, trainable: bool,
                              grad_ar: int, rs: int, moe_a2a: bool) -> None:
    """Gradient collectives per level; TP allreduce after even layers (and the MoE all-to-all)."""
    compute = f"{name}.b"
    for strategy in key.dense:
        if strategy == "ddp" and trainable:
            b.op(f"{compute}.grad_ar", COMM, grad_ar, CAT_ALLREDUCE, [compute])
        elif strategy == "fsdp" and trainable:
            b.op(f"{compute}.rs", COMM, rs, CAT_REDUCESCATTER, [compute])
        elif strategy == "tp":
            if index % 2 == 0:
                b.op(f"{compute}.tp_ar", COMM, S_MLP_TP_AR, CAT_ALLREDUCE, [compute])
            if moe_a2a:
                b.op(f"{compute}.a2a2", COMM, S_MLP_MOE_A2A, CAT_ALL2ALL, [compute, f"{compute}.tp_ar"])


def lower_dlrm(key: StructureKey, moe: bool, with_transformer: bool) -> Program:
    """The DLRM graph; ``moe``: an expert top MLP (dlrm-moe); ``with_transformer``: transformer layers
    between the MLPs (dlrm-transformer)."""
    fsdp = key.dense[0] == "fsdp"
    moe_a2a = moe and "tp" in key.dense
    nb, nt = key.num_bottom_layers, key.num_top_layers
    b = ProgramBuilder()

    # forward: embedding, bottom MLP, [transformer], top MLP
    emb_comm = _emb_forward(b, key)
    for n in range(nb):
        if fsdp:
            b.op(f"bot{n}.f.ag", COMM, S_BOT_AG, CAT_ALLGATHER, [f"bot{n - 2}.f"])
        waits = [] if n == 0 else [f"bot{n - 1}.f", f"bot{n - 1}.f.tp_ar"]
        b.op(f"bot{n}.f", COMP, S_BOT_FWD, CAT_GEMM, [*waits, f"bot{n}.f.ag"])
        _mlp_level_comms_forward(b, key, f"bot{n}", n, False)
    last_bot = [f"bot{nb - 1}.f", f"bot{nb - 1}.f.tp_ar"]
    if with_transformer:
        last = key.num_layers - 1
        _transformer_forward(b, key.transformer, key.num_layers, False, [*emb_comm, *last_bot], [f"bot{nb - 2}.f"])
        before_top = [f"fc{last}.f", f"fc{last}.f.tp_ar"]
        top_ag_waits = ([f"attn{last}.f"], [f"fc{last}.f"])
    else:
        before_top = [*emb_comm, *last_bot]
        top_ag_waits = ([f"bot{nb - 2}.f"], [f"bot{nb - 1}.f"])
    for t in range(nt):
        if fsdp:
            b.op(f"top{t}.f.ag", COMM, S_TOP_AG, CAT_ALLGATHER, top_ag_waits[t] if t < 2 else [f"top{t - 2}.f"])
        if moe_a2a:
            b.op(f"top{t}.f.a2a1", COMM, S_MLP_MOE_A2A, CAT_ALL2ALL)
        waits = before_top if t == 0 else [f"top{t - 1}.f", f"top{t - 1}.f.tp_ar"]
        b.op(f"top{t}.f", COMP, S_TOP_FWD, CAT_GEMM, [*waits, f"top{t}.f.ag", f"top{t}.f.a2a1"])
        _mlp_level_comms_forward(b, key, f"top{t}", t, moe_a2a)
    if key.kind == "inference":
        return b.build()

    # backward: top MLP, [transformer], embedding comm, bottom MLP, embedding
    b.barrier()
    for t in range(nt - 1, -1, -1):
        if fsdp:
            b.op(f"top{t}.b.ag", COMM, S_TOP_AG, CAT_ALLGATHER, [f"top{t + 2}.b"])
        if moe_a2a:
            b.op(f"top{t}.b.a2a1", COMM, S_MLP_MOE_A2A, CAT_ALL2ALL)
        waits = [] if t == nt - 1 else [f"top{t + 1}.b", f"top{t + 1}.b.tp_ar"]
        b.op(f"top{t}.b", COMP, S_TOP_BWD, CAT_GEMM, [*waits, f"top{t}.b.ag", f"top{t}.b.a2a1"])
        _mlp_level_comms_backward(b, key, f"top{t}", t, not key.freeze_top_mlp, S_TOP_GRAD_AR, S_TOP_RS, moe_a2a)
    after_top = ["top0.b", "top0.b.tp_ar", "top0.b.a2a2"]
    if with_transformer:
        if not (key.freeze_bottom_mlp and key.freeze_emb and key.freeze_dense):
            _transformer_backward(b, key, key.transformer, False, after_top, ["top1.b"], key.min_frozen_layer)
        after_top = ["attn0.b", "attn0.b.tp_ar"]
    emb_comm = [] if key.freeze_emb else _emb_backward_comm(b, key, after_top[:2])
    if not key.freeze_bottom_mlp:
        for n in range(nb - 1, -1, -1):
            if fsdp:
                if key.dlrm_bottom_prefetch == "two_ahead" and n >= nb - 2:
                    # two computes earlier in backward order: top1/top0, or fc0/attn0 with a transformer
                    ahead = after_top[0] if n == nb - 2 else ("fc0.b" if with_transformer else "top1.b")
                else:
                    ahead = f"bot{n + 2}.b"
                b.op(f"bot{n}.b.ag", COMM, S_BOT_AG, CAT_ALLGATHER, [ahead])
            waits = after_top if n == nb - 1 else [f"bot{n + 1}.b", f"bot{n + 1}.b.tp_ar"]
            b.op(f"bot{n}.b", COMP, S_BOT_BWD, CAT_GEMM, [*waits, f"bot{n}.b.ag"])
            _mlp_level_comms_backward(b, key, f"bot{n}", n, True, S_BOT_GRAD_AR, S_BOT_RS, False)
    if not key.freeze_emb:
        b.op("emb.b", COMP, S_EMB_LOOKUP, CAT_EMB, emb_comm)
    return b.build()
