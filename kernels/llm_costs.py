"""Cost slots of the dense-transformer LLM family (MADMAX_MODEL.md 1.2-1.5).

``llm_costs`` maps each parameter-table row to the duration of every cost slot
(``layout.LLM_SLOTS``) and to the per-config terms (global batch, weight memory
per device, effective FLOP/s). The Program decides which slots are used.
"""

import numpy as np
from numba import njit

from fastmodel.kernels.collectives import KIND_ALL2ALL, KIND_ALLGATHER, KIND_ALLREDUCE, collective_bandwidth
from fastmodel.kernels.layout import (
    F_DDP_GRAD_SHARDED, N_LLM_SLOTS, N_TERMS,
    P_BYTES_DENSE, P_BYTES_EMB, P_DENSE_DEG0, P_DENSE_DEG1, P_EMB_DEG0, P_EMB_DEG1,
    P_FFN, P_FLOPS_UTIL, P_HBM_BW, P_HBM_BW_UTIL, P_HIDDEN, P_LAYERS, P_LOCAL_DENSE_BS,
    P_LOCAL_EMB_BS, P_PEAK_FLOPS, P_SEQ, P_VOCAB,
    S_ATTN_AG, S_ATTN_BWD, S_ATTN_FWD, S_ATTN_GRAD_AR, S_ATTN_RS, S_EMB_ALL2ALL, S_EMB_GRAD_AR,
    S_EMB_LOOKUP, S_FC_AG, S_FC_BWD, S_FC_FWD, S_FC_GRAD_AR, S_FC_RS, S_TP_AR,
    STRAT_DDP, STRAT_FSDP, STRAT_MP, STRAT_TP,
    T_EFF_FLOPS, T_GLOBAL_BATCH, T_WMEM_DENSE, T_WMEM_EMB,
)


@njit(cache=True)
def llm_costs_row(row, dense_codes, num_dense, emb_codes, num_emb, flags, slots, terms):
    """Fill ``slots`` (seconds) and ``terms`` for one configuration ``row``."""
    d = row[P_HIDDEN]
    s = row[P_SEQ]
    b_dense = row[P_BYTES_DENSE]
    attn_params = 4.0 * d * d
    fc_params = 2.0 * d * row[P_FFN]
    dense_deg = (row[P_DENSE_DEG0], row[P_DENSE_DEG1])
    emb_deg = (row[P_EMB_DEG0], row[P_EMB_DEG1])

    # --- plan factors (1.4) ---
    dense_dup = 1.0
    dense_shard = 1.0
    tp_deg = 1.0
    tp_level = -1
    ddp_level = -1
    for lvl in range(num_dense):
        code = dense_codes[lvl]
        deg = dense_deg[lvl]
        if code == STRAT_DDP:
            dense_dup *= deg
            ddp_level = lvl
        elif code == STRAT_FSDP:
            dense_dup *= deg
            dense_shard *= deg
        else:  # tp, pp
            dense_shard *= deg
            if code == STRAT_TP:
                tp_deg = deg
                tp_level = lvl
    emb_dup = 1.0
    emb_shard = 1.0
    mp_level = -1
    emb_ddp_level = -1
    for lvl in range(num_emb):
        if emb_codes[lvl] == STRAT_MP:
            emb_shard *= emb_deg[lvl]
            mp_level = lvl
        else:
            emb_dup *= emb_deg[lvl]
            emb_ddp_level = lvl

    # --- compute ---
    eff_flops = row[P_PEAK_FLOPS] * row[P_FLOPS_UTIL]
    local_bs = row[P_LOCAL_DENSE_BS]
    attn_flops = 2.0 * attn_params * s * local_bs / tp_deg
    fc_flops = 2.0 * fc_params * s * local_bs / tp_deg
    slots[S_ATTN_FWD] = attn_flops / eff_flops
    slots[S_FC_FWD] = fc_flops / eff_flops
    slots[S_ATTN_BWD] = 2.0 * attn_flops / eff_flops
    slots[S_FC_BWD] = 2.0 * fc_flops / eff_flops

    # --- embeddings: lookups, all-to-all, ddp "gradient" allreduce ---
    lookup_bytes = 2.0 * s * d * row[P_BYTES_EMB] * row[P_LOCAL_EMB_BS] / emb_shard
    slots[S_EMB_LOOKUP] = lookup_bytes / (row[P_HBM_BW] * row[P_HBM_BW_UTIL])
    slots[S_EMB_ALL2ALL] = 0.0
    if mp_level >= 0:
        slots[S_EMB_ALL2ALL] = 2.0 * (lookup_bytes / emb_deg[mp_level]) / collective_bandwidth(
            row, KIND_ALL2ALL, num_emb, mp_level)
    slots[S_EMB_GRAD_AR] = 0.0
    if emb_ddp_level >= 0:
        slots[S_EMB_GRAD_AR] = lookup_bytes / collective_bandwidth(row, KIND_ALLREDUCE, num_emb, emb_ddp_level)

    # --- FSDP weight allgather: layer / total shard x degree[0], level-0 bandwidth ---
    ag_bw = collective_bandwidth(row, KIND_ALLGATHER, num_dense, 0)
    slots[S_ATTN_AG] = attn_params / dense_shard * dense_deg[0] * b_dense / ag_bw
    slots[S_FC_AG] = fc_params / dense_shard * dense_deg[0] * b_dense / ag_bw

    # --- TP activation allreduce ---
    slots[S_TP_AR] = 0.0
    if tp_level >= 0:
        act_bytes = local_bs * s * d * b_dense
        slots[S_TP_AR] = act_bytes / collective_bandwidth(row, KIND_ALLREDUCE, num_dense, tp_level)

    # --- gradient allreduce (ddp) and reduce-scatter (fsdp, level 0) ---
    slots[S_ATTN_GRAD_AR] = 0.0
    slots[S_FC_GRAD_AR] = 0.0
    if ddp_level >= 0:
        if flags[F_DDP_GRAD_SHARDED] != 0:
            grad_shard = dense_shard
        else:  # reference: shard divided by tp/fsdp degrees met before the ddp level
            grad_shard = dense_shard
            for lvl in range(ddp_level):
                if dense_codes[lvl] == STRAT_TP or dense_codes[lvl] == STRAT_FSDP:
                    grad_shard /= dense_deg[lvl]
        ar_bw = collective_bandwidth(row, KIND_ALLREDUCE, num_dense, ddp_level)
        slots[S_ATTN_GRAD_AR] = attn_params / grad_shard * b_dense / ar_bw
        slots[S_FC_GRAD_AR] = fc_params / grad_shard * b_dense / ar_bw
    slots[S_ATTN_RS] = 0.0
    slots[S_FC_RS] = 0.0
    if num_dense > 0 and dense_codes[0] == STRAT_FSDP:
        rs_shard = dense_shard / dense_deg[0]
        rs_bw = collective_bandwidth(row, KIND_ALLGATHER, num_dense, 0)
        slots[S_ATTN_RS] = attn_params / rs_shard * b_dense / rs_bw
        slots[S_FC_RS] = fc_params / rs_shard * b_dense / rs_bw

    # --- terms ---
    terms[T_GLOBAL_BATCH] = row[P_LOCAL_EMB_BS] * emb_dup
    terms[T_WMEM_DENSE] = row[P_LAYERS] * (attn_params + fc_params) * b_dense / dense_shard
    terms[T_WMEM_EMB] = (row[P_VOCAB] * d + s * d) * row[P_BYTES_EMB] / emb_shard
    terms[T_EFF_FLOPS] = eff_flops


@njit(cache=True)
def llm_costs(params, dense_codes, num_dense, emb_codes, num_emb, flags):
    """Cost slots and terms of every config of a column-major table (N_LLM_COLUMNS x n), for tools."""
    n = params.shape[1]
    slots = np.empty((n, N_LLM_SLOTS))
    terms = np.empty((n, N_TERMS))
    for i in range(n):
        llm_costs_row(params[:, i], dense_codes, num_dense, emb_codes, num_emb, flags, slots[i], terms[i])
    return slots, terms
