"""Cost slots of every family (docs/model.md §5).

``costs_row`` maps one parameter-table row to the duration of every cost slot
(``layout.SLOTS``) and to the per-config terms (global batch, weight memory
per device, effective FLOP/s). A family uses some of the parts below; the
Program decides which slots are scheduled.

- embedding part (every family): lookups, EMB all-to-all, EMB ddp allreduce;
- transformer part (llm, llm-moe, vit; dlrm-transformer with its own plan):
  attention and FC blocks, FSDP gathers, TP and MoE activation collectives;
- MLP part (dlrm families): bottom and top MLP layers, the top one optionally
  a mixture of experts.
"""

import numpy as np
from fastmodel.kernels.jit import njit

from fastmodel.kernels.madmax.collectives import KIND_ALL2ALL, KIND_ALLGATHER, KIND_ALLREDUCE, collective_bandwidth
from fastmodel.kernels.madmax.layout import (
    F_DDP_GRAD_SHARDED, FAMILY_DLRM, FAMILY_TRANSFORMER, N_SLOTS, N_TERMS,
    P_ACTIVE_EXPERTS, P_BOT_LAYERS, P_BYTES_DENSE, P_BYTES_EMB, P_DENSE_DEG0, P_DENSE_DEG1, P_EMB_DEG0,
    P_EMB_DEG1, P_EMB_DIM, P_EXPERTS, P_FFN, P_FLOPS_UTIL, P_HBM_BW, P_HBM_BW_UTIL, P_HIDDEN, P_LAYERS,
    P_LOCAL_DENSE_BS, P_LOCAL_EMB_BS, P_LOCAL_TR_BS, P_MLP_DIM, P_PEAK_FLOPS, P_POOLING, P_ROWS, P_SEQ,
    P_TABLES, P_TOP_LAYERS, P_TR_DEG0, P_TR_DEG1, P_VOCAB,
    PAIR_AG, PAIR_BWD, PAIR_FWD, PAIR_GRAD_AR, PAIR_MOE_A2A, PAIR_RS, PAIR_TP_AR,
    S_ATTN_FWD, S_BOT_FWD, S_EMB_ALL2ALL, S_EMB_GRAD_AR, S_EMB_LOOKUP,
    STRAT_DDP, STRAT_FSDP, STRAT_MP, STRAT_TP,
    T_EFF_FLOPS, T_GLOBAL_BATCH, T_WMEM_DENSE, T_WMEM_EMB,
)


@njit(cache=True)
def plan_factors(codes, num_levels, deg0, deg1):
    """(duplicate, shard, tp degree, tp level, ddp level) of one component (docs/model.md §3.2).

    ddp duplicates, fsdp duplicates and shards, tp/pp/mp shard; levels are -1 when absent.
    """
    dup = 1.0
    shard = 1.0
    tp_deg = 1.0
    tp_level = -1
    ddp_level = -1
    for lvl in range(num_levels):
        code = codes[lvl]
        deg = deg0 if lvl == 0 else deg1
        if code == STRAT_DDP:
            dup *= deg
            ddp_level = lvl
        elif code == STRAT_FSDP:
            dup *= deg
            shard *= deg
        else:  # tp, pp, mp
            shard *= deg
            if code == STRAT_TP:
                tp_deg = deg
                tp_level = lvl
    return dup, shard, tp_deg, tp_level, ddp_level


@njit(cache=True)
def ddp_gradient_shard(codes, ddp_level, deg0, shard, sharded_layer):
    """Shard of the layer a DDP gradient allreduce carries.

    ``sharded_layer``: the shard each device holds. Otherwise the reference's
    running shard: the total shard divided by the tp/fsdp degrees of the levels
    before the ddp level (docs/model.md §10.1). With at most two levels only level 0
    can precede it.
    """
    if sharded_layer or ddp_level == 0:
        return shard
    if codes[0] == STRAT_TP or codes[0] == STRAT_FSDP:
        return shard / deg0
    return shard


@njit(cache=True)
def _embedding(row, plan, slots):
    """Embedding slots; returns (weights per device in bytes, duplicate factor)."""
    family = plan.family
    emb_codes = (plan.emb_code0, plan.emb_code1)
    num_emb = plan.num_emb
    emb_dup, emb_shard, _, _, _ = plan_factors(emb_codes, num_emb, row[P_EMB_DEG0], row[P_EMB_DEG1])
    if family == FAMILY_TRANSFORMER:  # word + position rows read per token
        lookup_per_sample = 2.0 * row[P_SEQ] * row[P_HIDDEN] * row[P_BYTES_EMB]
        params = (row[P_VOCAB] + row[P_SEQ]) * row[P_HIDDEN]
    else:  # tables x pooled lookups
        lookup_per_sample = row[P_TABLES] * row[P_POOLING] * row[P_EMB_DIM] * row[P_BYTES_EMB]
        params = row[P_TABLES] * row[P_ROWS] * row[P_EMB_DIM]
    lookup_bytes = lookup_per_sample * row[P_LOCAL_EMB_BS] / emb_shard
    slots[S_EMB_LOOKUP] = lookup_bytes / (row[P_HBM_BW] * row[P_HBM_BW_UTIL])
    slots[S_EMB_ALL2ALL] = 0.0
    slots[S_EMB_GRAD_AR] = 0.0
    for lvl in range(num_emb):  # each level's op carries its own slot value only if it exists in the Program
        deg = row[P_EMB_DEG0] if lvl == 0 else row[P_EMB_DEG1]
        if emb_codes[lvl] == STRAT_MP:
            slots[S_EMB_ALL2ALL] = 2.0 * (lookup_bytes / deg) / collective_bandwidth(row, KIND_ALL2ALL, num_emb, lvl)
        else:
            slots[S_EMB_GRAD_AR] = lookup_bytes / collective_bandwidth(row, KIND_ALLREDUCE, num_emb, lvl)
    return params * row[P_BYTES_EMB] / emb_shard, emb_dup


@njit(cache=True)
def _block_pair(row, component, sharded_grad, eff_flops, block_params, block_flops, act_bytes, base, slots):
    """Slots of two kinds of layer block sharing one plan component (attention and FC, or
    bottom and top MLP layers), written at ``base`` in the PAIR_* layout; returns the shard.

    ``component``: ((code of level 0, of level 1), levels, degree 0, degree 1) of the plan component;
    ``block_params[k]``: weights of one block of kind k; ``block_flops[k]``: its forward
    FLOPs for the local batch; ``act_bytes``: the activations a TP allreduce carries
    (docs/model.md §5.4).
    """
    codes, num_levels, deg0, deg1 = component
    b = row[P_BYTES_DENSE]
    _, shard, tp_deg, tp_level, ddp_level = plan_factors(codes, num_levels, deg0, deg1)
    ag_bw = collective_bandwidth(row, KIND_ALLGATHER, num_levels, 0)
    fsdp = num_levels > 0 and codes[0] == STRAT_FSDP
    for k in range(2):
        params = block_params[k]
        flops = block_flops[k] / tp_deg     # only tp divides compute
        slots[base + PAIR_FWD + k] = flops / eff_flops
        slots[base + PAIR_BWD + k] = 2.0 * flops / eff_flops  # backward = 2 x forward
        # FSDP weight allgather: block / total shard x degree[0], at the level-0 bandwidth
        slots[base + PAIR_AG + k] = params / shard * deg0 * b / ag_bw
        if ddp_level >= 0:
            grad_shard = ddp_gradient_shard(codes, ddp_level, deg0, shard, sharded_grad)
            slots[base + PAIR_GRAD_AR + k] = params / grad_shard * b / collective_bandwidth(
                row, KIND_ALLREDUCE, num_levels, ddp_level)
        if fsdp:  # reduce-scatter of the gradient shard left after the fsdp level
            slots[base + PAIR_RS + k] = params / (shard / deg0) * b / ag_bw
    if tp_level >= 0:
        slots[base + PAIR_TP_AR] = act_bytes / collective_bandwidth(row, KIND_ALLREDUCE, num_levels, tp_level)
        slots[base + PAIR_MOE_A2A] = act_bytes / row[P_EXPERTS] / collective_bandwidth(
            row, KIND_ALL2ALL, num_levels, tp_level)
    return shard


@njit(cache=True)
def _transformer(row, component, local_bs, eff_flops, sharded_grad, slots):
    """Attention/FC slots of a transformer stack; returns its weights per device (bytes)."""
    d = row[P_HIDDEN]
    s = row[P_SEQ]
    attn_params = 4.0 * d * d
    fc_params = row[P_EXPERTS] * 2.0 * d * row[P_FFN]          # X experts hold weights
    fc_active = row[P_ACTIVE_EXPERTS] * 2.0 * d * row[P_FFN]   # k experts compute
    shard = _block_pair(row, component, sharded_grad, eff_flops, (attn_params, fc_params),
                        (2.0 * attn_params * s * local_bs, 2.0 * fc_active * s * local_bs),
                        local_bs * s * d * row[P_BYTES_DENSE], S_ATTN_FWD, slots)
    return row[P_LAYERS] * (attn_params + fc_params) * row[P_BYTES_DENSE] / shard


@njit(cache=True)
def _mlps(row, component, local_bs, eff_flops, sharded_grad, slots):
    """Bottom/top MLP slots of a DLRM; returns the MLP weights per device (bytes)."""
    m = row[P_MLP_DIM]
    layer = m * m
    top_params = row[P_EXPERTS] * layer                       # X experts hold weights
    shard = _block_pair(row, component, sharded_grad, eff_flops, (layer, top_params),
                        (2.0 * layer * local_bs, 2.0 * row[P_ACTIVE_EXPERTS] * layer * local_bs),
                        local_bs * m * row[P_BYTES_DENSE], S_BOT_FWD, slots)
    return (row[P_BOT_LAYERS] * layer + row[P_TOP_LAYERS] * top_params) * row[P_BYTES_DENSE] / shard


@njit(cache=True)
def costs_row(row, plan, slots, terms):
    """Fill ``slots`` (seconds) and ``terms`` for one configuration ``row`` of ``plan`` (an ``args.PlanCodes``)."""
    for k in range(N_SLOTS):
        slots[k] = 0.0
    family = plan.family
    eff_flops = row[P_PEAK_FLOPS] * row[P_FLOPS_UTIL]
    sharded_grad = ((plan.flags >> F_DDP_GRAD_SHARDED) & 1) != 0
    emb_weights, emb_dup = _embedding(row, plan, slots)
    dense = ((plan.dense_code0, plan.dense_code1), plan.num_dense, row[P_DENSE_DEG0], row[P_DENSE_DEG1])
    if family == FAMILY_TRANSFORMER:
        dense_weights = _transformer(row, dense, row[P_LOCAL_DENSE_BS], eff_flops, sharded_grad, slots)
    else:
        dense_weights = _mlps(row, dense, row[P_LOCAL_DENSE_BS], eff_flops, sharded_grad, slots)
        if family != FAMILY_DLRM:
            transformer = ((plan.tr_code0, plan.tr_code1), plan.num_tr, row[P_TR_DEG0], row[P_TR_DEG1])
            dense_weights += _transformer(row, transformer, row[P_LOCAL_TR_BS], eff_flops, sharded_grad, slots)
    terms[T_GLOBAL_BATCH] = row[P_LOCAL_EMB_BS] * emb_dup
    terms[T_WMEM_DENSE] = dense_weights
    terms[T_WMEM_EMB] = emb_weights
    terms[T_EFF_FLOPS] = eff_flops


@njit(cache=True)
def costs(params, plan):
    """Cost slots and terms of every config of a column-major table (N_COLUMNS x n) of one ``plan``, for tools."""
    n = params.shape[1]
    slots = np.empty((n, N_SLOTS))
    terms = np.empty((n, N_TERMS))
    for i in range(n):
        costs_row(params[:, i], plan, slots[i], terms[i])
    return slots, terms
