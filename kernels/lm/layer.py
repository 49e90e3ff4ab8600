"""Per-layer costs of decoder-LM training under the real-world model (docs/model.md §11.4, §11.6).

One transformer layer (dense or MoE, full or sliding-window attention) and the LM head, for one micro-batch on
one device: GEMM, attention-kernel and memory-bound seconds, the forward TP/CP/EP collectives, parameters held
and FLOPs executed, written into a scratch vector of ``N_WORK`` slots (``W_*``); model FLOPs per token and the
recompute shares. The layer's shape (its GEMM list, parameter counts, expert sharding, element-wise bytes, the
layer mix) is ``kernels/lm/shape.py``, which serving reads too, and its TP collectives ``kernels/lm/tp_layer.py``;
``kernels/lm/passes.py`` turns these costs into passes and ``kernels/lm/step.py`` composes the step.
"""

from fastmodel.kernels.lm.fp4 import lowp_cast_bytes, train_gemm_format
from fastmodel.kernels.lm.fp8 import fp8_transpose_bytes
from fastmodel.kernels.roofline import (
    attention_backward_base, attention_time, attention_wave, gemm_time, gemm_weight_bytes, grouped_gemm_time,
    memory_bound_time,
)
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_ATTENTION_CHUNK, C_CAUSAL, C_CP, C_EP, C_FFN, C_FLASH_ATTENTION, C_HEADS, C_HIDDEN, C_PP, C_LAYERS,
    C_LOSS_TRAFFIC_BYTES_PER_LOGIT, C_MICRO_BATCH, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS,
    C_MOE_SHARED_EXPERT_OVERLAP, C_MOE_TOPK, C_MTP_LAYERS, C_RECOMPUTE, C_RECOMPUTE_FRACTION, C_SEQUENCE_PARALLEL,
    C_SEQ_LEN, C_SLIDING_WINDOW, C_TIED_EMBEDDINGS, C_TP, C_VOCAB, RECOMPUTE_FULL, RECOMPUTE_PARTIAL_LAYERS,
    RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.lm.shape import (  # noqa: F401 - the shape terms, re-exported for the layer's callers
    ACT_BYTES, attention_dims, attention_params, attention_params_per_device, chunk_pairs, elementwise_bytes,
    elementwise_unit_bytes, expert_tp, expert_weight_params, layer_gemm_parts, layer_gemm_time, layer_mix, mlp_matrices, moe_layers,
    embedding_dense_grad_s, wgrad_source_s,
)
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.lm.parallel import cp_forward_time
from fastmodel.kernels.lm.positions import alibi_bias_s, position_table_s, rotary_bytes
from fastmodel.kernels.lm.moe_dispatch import dispatch_time
from fastmodel.kernels.lm.moe import einsum_time, expert_rows, expert_wgrad_extra, moe_compute, moe_pass_extras, moe_sync_idle_time
from fastmodel.kernels.lm.attn_layout import fa_qkv_prepare_s
from fastmodel.kernels.lm.recompute import module_recompute_costs
from fastmodel.kernels.lm.sp_regather import (
    eh_proj_gather_bytes, embedding_tp, head_input_tp, head_tp_backward, mla_down_sp_excess, mtp_gemm_format,
)
from fastmodel.kernels.lm.tp_layer import regather_hidden_time, tp_layer_time  # noqa: F401 - re-exported

# --- per-layer work slots (scratch vector filled by layer_costs) ------------
W_GEMM = 0            # forward GEMM seconds of one layer, one micro-batch
W_ATTN = 1            # forward attention-kernel seconds
W_MEM = 2             # forward memory-bound seconds
W_ATTN_CORE_MEM = 3   # forward memory-bound seconds of the attention core (softmax without flash)
W_TP = 4              # TP collective seconds, forward (one direction)
W_CP = 5              # CP exchange seconds, forward
W_EP = 6              # EP all-to-all seconds, forward
W_PARAMS = 7          # parameters of the layer held per device (before data-parallel sharding)
W_FLOPS = 8           # executed forward FLOPs of the layer per micro-batch per device
W_EXPERT_PARAMS = 9   # routed-expert parameters of the layer per device (part of W_PARAMS; reduced over edp)
W_SHARED = 10         # forward seconds of the shared experts (part of W_GEMM; may hide the dispatch)
W_EP_REMOTE = 11      # seconds of W_EP's traffic on the scale-out tier (kernels/lm/moe_dispatch.py dispatch_time)
W_AGAIN = 12          # forward seconds the Megatron-Core recompute_modules other than core_attn run again
W_AGAIN_GEMM = 13     # GEMM part of W_AGAIN
W_AGAIN_EP = 14       # EP seconds (forward direction) a recomputed MoE layer runs again (kernels/lm/recompute.py)
W_WGRAD = 15          # weight-gradient GEMM seconds beyond the forward's W_GEMM (routed experts, main-gradient reads)
W_FORWARD_ONLY = 16   # forward-only seconds: MoE GPU idle after host syncs, einsum gating, SequentialMLP's loop (§11.57); ALiBi
W_BACKWARD_MEM = 17   # backward-only memory-bound seconds of a MoE layer (einsum gating's, SequentialMLP's: moe.py)
W_TP_BACKWARD = 18    # TP collective seconds, backward (one pass; W_TP's conjugates, the SP gathers at their bytes)
W_TP_HIDDEN = 19      # of W_TP_BACKWARD: the wgrad re-gathers' seconds hidden under their dgrad GEMMs (§11.41)
W_ATTN_BACKWARD = 20  # W_ATTN at the measured rate, no exponential factor: the base of the backward's BACKWARD_ATTN x (§11.58)
N_WORK = 21


@njit
def model_flops_per_token(row):
    """Training FLOPs per token, RUNS.md ``mfu_std`` convention: 6 x matmul params (LM head included,
    embedding excluded; MoE: top-k routed + shared experts + router) + 6 s heads (d_qk + d_v) per layer."""
    h = row[C_HIDDEN]
    nm = mlp_matrices(row)
    n_moe = moe_layers(row)
    n_dense = row[C_LAYERS] - n_moe
    dense = n_dense * (attention_params(row) + nm * h * row[C_FFN])
    active_experts = row[C_MOE_TOPK] + row[C_MOE_SHARED_EXPERTS]
    moe = n_moe * (attention_params(row) + nm * h * row[C_MOE_FFN] * active_experts + h * row[C_MOE_EXPERTS])
    head = row[C_VOCAB] * h
    dqk, dv = attention_dims(row)
    scores = 6.0 * row[C_SEQ_LEN] * row[C_HEADS] * (dqk + dv) * row[C_LAYERS]
    return 6.0 * (dense + moe + head) + scores


@njit
def attention_context(row, sliding):
    """Keys each query attends to on average, as executed (flash skips masked blocks: ~s/2 causal).

    A causal window of w keys (query i sees keys i-w+1..i) covers the band of the s x s score matrix: a
    w x w triangle plus (s - w) rows of w, w s - w^2/2 in the continuous limit, i.e. w - w^2 / (2 s) keys
    per query, which is s/2 (full causal attention) at w = s; a window w >= s is full attention. Without a
    causal mask a window covers min(s, w) keys. A chunked layer (``attention_chunk`` C < s, §11.55) covers
    :func:`chunk_pairs` / s keys per query in the same continuous convention (C / 2 at s = q C), twice that without
    a causal mask.
    """
    s = row[C_SEQ_LEN]
    if row[C_FLASH_ATTENTION] <= 0.0:
        return s                                  # unfused attention computes the full s x s scores
    causal = row[C_CAUSAL] > 0.0
    chunk = row[C_ATTENTION_CHUNK]
    if sliding and 0.0 < chunk < s:
        keys = chunk_pairs(s, chunk, 0.0) / s
        return keys if causal else 2.0 * keys
    w = row[C_SLIDING_WINDOW]
    if sliding and 0.0 < w < s:
        return w - w * w / (2.0 * s) if causal else w
    return 0.5 * s if causal else s


@njit
def layer_kind_params(row, moe):
    """(parameters, routed-expert parameters) of one dense (``moe`` False) or MoE layer on a device, counted as
    :func:`layer_costs` counts them (``W_PARAMS``, ``W_EXPERT_PARAMS``): the attention over tp, and the MLP over tp
    or the rank's routed experts, the shared experts over tp and the router. The data-parallel step of an explicit
    layout's end ranks sums them over the rank's own layers (kernels/lm/step.py, docs/model.md §11.27)."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    params = attention_params_per_device(row, t)     # MLA down-projections replicated (§11.44)
    if moe:
        experts = expert_weight_params(row, expert_tp(row, 0.0))
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]
        return params + experts + mlp_matrices(row) * h * shared / t + h * row[C_MOE_EXPERTS], experts
    return params + mlp_matrices(row) * h * row[C_FFN] / t, 0.0


@njit
def flash_attention_time(row, flops, ctx):
    """Seconds of the layer's flash-attention forward and the backward's base (x 2.5 in passes.py; no exponential
    factor, §11.58) at the device's rate x the grid's useful share (§11.51): micro-batch x local heads x tiles of the
    local sequence; causal attention on one CP rank carries the tiles' imbalance, windows and CP ring steps do not."""
    c = row[C_CP]
    s_local = row[C_SEQ_LEN] / c
    imbalance = row[C_CAUSAL] > 0.0 and c <= 1.0 and ctx >= 0.5 * s_local
    groups = row[C_MICRO_BATCH] * row[C_HEADS] / row[C_TP]
    share = attention_wave(row, groups, s_local, imbalance)
    return attention_time(row, flops, share), attention_backward_base(row, flops, share)


@njit
def layer_costs(row, moe, sliding, work):
    """Forward costs of one transformer layer for one micro-batch on one device (into ``work``)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    t = row[C_TP]
    c = row[C_CP]
    sp = row[C_SEQUENCE_PARALLEL] > 0.0
    fp8 = train_gemm_format(row)       # 0 16-bit, 1 FP8, 2 NVFP4 GEMMs (docs/model.md §11.38)
    element = gemm_weight_bytes(fp8)   # GEMM weights at the GEMM precision
    tokens = row[C_MICRO_BATCH] * row[C_SEQ_LEN] / c
    dqk, dv = attention_dims(row)
    nm = mlp_matrices(row)
    flops = 2.0 * tokens * attention_params(row) / t
    params = attention_params_per_device(row, t)     # MLA down-projections replicated (§11.44)
    # MLP: dense, or router + shared experts + routed experts: the busiest rank's rows over its E / ep local
    # experts, the memory-bound router and permutation and the FLOPs from kernels/lm/moe.py
    expert_params = shared_time = moe_mem = local_experts = rows = routed = 0.0
    etp = 1.0
    if moe:
        experts = row[C_MOE_EXPERTS]
        local_experts = experts / row[C_EP]
        etp = expert_tp(row, 0.0)
        rows = expert_rows(row)
        gemm, qkv_gemm, fc1_gemm = layer_gemm_parts(row, tokens, 1.0, local_experts, rows / local_experts, etp, fp8,
                                                    element, 1.0)
        gemm -= mla_down_sp_excess(row, tokens, fp8, element)     # MLA's down-projections on the SP slice (§11.44)
        # DeepSpeed-MoE's dense einsum dispatch + combine (0 for the other dispatchers; their weight-gradient
        # share: expert_wgrad_extra)
        dispatch_gemm, combine_gemm = einsum_time(row)
        gemm += dispatch_gemm + combine_gemm
        _, moe_mem, shared_time, moe_flops, mlp_out, routed = moe_compute(row, fp8)
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]
        expert_params = expert_weight_params(row, etp)
        params += expert_params + nm * h * shared / t + h * experts
        flops += moe_flops
    else:
        f = row[C_FFN]
        gemm, qkv_gemm, fc1_gemm = layer_gemm_parts(row, tokens, 0.0, 0.0, 0.0, 1.0, fp8, element, 1.0)
        gemm -= mla_down_sp_excess(row, tokens, fp8, element)
        params += nm * h * f / t
        flops += 2.0 * tokens * nm * h * f / t
        mlp_out = tokens * f / t
    # attention core: scores and PV over the executed context
    ctx = attention_context(row, sliding)
    attn_flops = 2.0 * tokens * ctx * (a / t) * (dqk + dv)
    flops += attn_flops
    core_mem = 0.0
    if row[C_FLASH_ATTENTION] > 0.0:
        attn, attn_backward = flash_attention_time(row, attn_flops, ctx)
    else:
        # unfused: batched GEMMs at GEMM efficiency + fused scale/mask/softmax/dropout over the s x s scores:
        # read 2 B, write 2 B, dropout mask 1 B and write 2 B per score element
        batches = row[C_MICRO_BATCH] * a / t
        queries = tokens / row[C_MICRO_BATCH]
        attn = attn_backward = grouped_gemm_time(row, batches, queries, ctx, dqk, 0.0) + grouped_gemm_time(row, batches, queries, dv, ctx, 0.0)
        core_mem = memory_bound_time(row, 7.0 * tokens * row[C_SEQ_LEN] * a / t)
    # memory-bound kernels: 2 norms + 2 residual adds (replicated over TP unless SP), activation, rotary (§11.56)
    norm_tokens = tokens / t if sp else tokens
    nbytes = elementwise_bytes(row, norm_tokens * h, mlp_out, 0.0) + rotary_bytes(row, tokens)
    if fp8:
        # FP8 casts of the GEMM inputs, per recipe (docs/model.md §11.19; unstated: 2 casts, read 2 B, write 1 B);
        # NVFP4's amax pass, rowwise and columnwise (RHT) casts under fp4 (§11.38)
        nbytes += lowp_cast_bytes(row) * tokens * (2.0 * h / (t if sp else 1.0) + a * dv / t + mlp_out / tokens)
    mem = memory_bound_time(row, nbytes) + core_mem + moe_mem
    # communication of the layer, forward and backward direction
    # the column-parallel linears that gather their own SP input, and so re-gather it for wgrad (§11.41): QKV and
    # FC1; in a MoE layer the dispatcher's gather feeds the experts, so QKV and a shared expert's FC1 unless the
    # shared expert overlaps the dispatch (its gather then a mapping, not the linear's)
    shared_fc1 = row[C_MOE_SHARED_EXPERTS] > 0.0 and row[C_MOE_SHARED_EXPERT_OVERLAP] <= 0.0
    linears = (2.0 if shared_fc1 else 1.0) if moe else 2.0
    tp, tp_backward, gather = tp_layer_time(row, tokens, h, t, sp, linears)
    fc1 = (nm - 1.0) * (row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] if moe else row[C_FFN]) if linears > 1.0 else 0.0
    tp_hidden = regather_hidden_time(row, tokens, h, t, sp, fc1, gather, qkv_gemm, fc1_gemm, fp8, element)
    cp = cp_forward_time(row, tokens, a, dqk, dv, t, c)
    ep = ep_remote = 0.0
    prepare = fa_qkv_prepare_s(row, tokens)     # TE's QKV copy (§11.60): forward, backward, and again in a recompute
    if moe:
        ep, ep_remote = dispatch_time(row)
    recomputed_modules(row, moe, tokens, norm_tokens, fp8, element, local_experts, rows, etp, moe_mem, ep, work)
    work[W_GEMM] = gemm
    work[W_ATTN] = attn
    work[W_ATTN_BACKWARD] = attn_backward
    work[W_MEM] = mem
    work[W_ATTN_CORE_MEM] = core_mem + prepare     # TE recomputes its QKV copy too (review16 #11)
    work[W_TP] = tp
    work[W_TP_BACKWARD] = tp_backward
    work[W_TP_HIDDEN] = tp_hidden
    work[W_CP] = cp
    work[W_EP] = ep
    work[W_PARAMS] = params
    work[W_FLOPS] = flops
    work[W_EXPERT_PARAMS] = expert_params
    work[W_SHARED] = shared_time
    work[W_EP_REMOTE] = ep_remote
    # the fused dense linears' main-gradient read (§11.46): all matmul weights but routed experts' (own) and router's
    dense = params - expert_params - (h * row[C_MOE_EXPERTS] if moe else 0.0)
    work[W_WGRAD] = (expert_wgrad_extra(row, fp8, routed) if moe else 0.0) + wgrad_source_s(row, dense)
    gating_forward, gating_backward = moe_pass_extras(row) if moe else (0.0, 0.0)   # + SequentialMLP's (§11.57)
    work[W_FORWARD_ONLY] = (moe_sync_idle_time(row) + gating_forward if moe else 0.0) + alibi_bias_s(row, tokens) + prepare
    work[W_BACKWARD_MEM] = gating_backward + memory_bound_time(row, fp8_transpose_bytes(row, dense + expert_params)) + prepare


@njit
def recomputed_modules(row, moe, tokens, norm_tokens, fp8, element, local_experts, rows, etp, moe_mem, ep, work):
    """``work[W_AGAIN*]``: the forward seconds the Megatron-Core ``recompute_modules`` other than core_attn run
    again in one layer's backward (``kernels/lm/recompute.py``), its GEMM part and the EP seconds re-run; ``rows``
    the busiest rank's routed expert rows of an MoE layer (0 for a dense one)."""
    per_expert = rows / local_experts if moe else 0.0
    again, again_gemm, again_ep = module_recompute_costs(row, 1.0 if moe else 0.0, tokens, norm_tokens, fp8, element,
                                                         local_experts, per_expert, etp, rows * row[C_MOE_FFN] / etp,
                                                         moe_mem, ep)
    work[W_AGAIN] = again
    work[W_AGAIN_GEMM] = again_gemm
    work[W_AGAIN_EP] = again_ep


@njit
def recompute_share(row):
    """(fraction of layers fully recomputed, 1 if the attention core is recomputed selectively)."""
    mode = row[C_RECOMPUTE]
    if mode == RECOMPUTE_FULL:
        return 1.0, 0.0
    if mode == RECOMPUTE_PARTIAL_LAYERS:
        return row[C_RECOMPUTE_FRACTION], 0.0
    if mode == RECOMPUTE_SELECTIVE:
        return 0.0, 1.0
    return 0.0, 0.0


@njit
def mtp_costs(row, tokens, norm_tokens):
    """(GEMM, memory-bound, TP seconds, FLOPs) of the ``mtp_layers`` multi-token-prediction modules beyond their
    transformer layers and their LM-head GEMMs, one micro-batch, forward (docs/model.md §11.4 "MTP module").

    Each module (DeepSeek-V3 report sec. 2.2; Megatron-Core ``MultiTokenPredictionLayer``,
    megatron/core/transformer/multi_token_prediction.py, NVIDIA/Megatron-LM@d98e8a6) normalises the shifted
    tokens' embedding and the previous depth's hidden state (``enorm``, ``hnorm``), concatenates them (2h) and
    projects them back to h (``eh_proj``, column-parallel 2h x h/t, at the training GEMM format and its weight bytes), and normalises its
    layer's output (``final_layernorm``) before the shared head; ``process_mtp_loss`` then runs the shared output
    layer and the loss once per depth. The loss's passes over each depth's logits cost what the main head's do
    (``loss_traffic_bytes_per_logit``, half per pass) and so does its vocab-parallel all-reduce (3 x 4 B per
    token). The three norms move ``norm`` bytes per element forward and ``BACKWARD_MEM`` (2) times that
    backward, the concatenation writes its 2h output after reading its two halves (8 B per token-element of
    h); like the loss, half of forward + backward is charged to each head pass. Under TP the projection's
    output is all-gathered over the hidden dimension (``gather_from_tensor_model_parallel_region``) and, with
    SP, its input all-gathered over the sequence first (``ColumnParallelLinear``), at :func:`eh_proj_gather_bytes`."""
    d = row[C_MTP_LAYERS]
    if d <= 0.0:
        return 0.0, 0.0, 0.0, 0.0
    h = row[C_HIDDEN]
    t = row[C_TP]
    # at the training GEMM format, NVFP4 weights at 0.5625 B (roofline.gemm_weight_bytes, docs/model.md §11.38)
    gemm = gemm_time(row, tokens, h / t, 2.0 * h, mtp_gemm_format(row))     # BF16 under fp4 (§11.44)
    norm, _, _ = elementwise_unit_bytes(row)
    mem_bytes = norm_tokens * h * (3.0 * norm * (1.0 + 2.0) + 8.0) / 2.0
    loss = tokens * row[C_VOCAB] / t * 0.5 * row[C_LOSS_TRAFFIC_BYTES_PER_LOGIT]
    mem = memory_bound_time(row, mem_bytes) + memory_bound_time(row, loss)
    tp = 0.0
    if t > 1.0:
        tp = allreduce_time(row, 3.0 * 4.0 * tokens, t, 1.0) + allgather_time(row, ACT_BYTES * tokens * h, t, 1.0)
        if row[C_SEQUENCE_PARALLEL] > 0.0:
            tp += allgather_time(row, eh_proj_gather_bytes(row) * tokens * 2.0 * h, t, 1.0)
    flops = 2.0 * tokens * 2.0 * h * h / t
    return d * gemm, d * mem, d * tp, d * flops


@njit
def head_costs(row, work):
    """Forward costs of the LM head and vocab-parallel cross-entropy on the last stage (into ``work``), with the
    MTP modules' extra heads, losses and projections (:func:`mtp_costs`)."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    tokens = row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP]
    vocab = row[C_VOCAB] / t
    mtp_gemm, mtp_mem, mtp_tp, mtp_flops = mtp_costs(row, tokens, tokens / t if row[C_SEQUENCE_PARALLEL] > 0.0 else tokens)
    # the LM head runs in 16-bit in FP8 recipes (Transformer Engine keeps first/last layers in BF16); once more per
    # MTP module (the shared output layer)
    work[W_GEMM] = gemm_time(row, tokens, vocab, h, 0.0) * (1.0 + row[C_MTP_LAYERS]) + mtp_gemm
    work[W_ATTN] = work[W_ATTN_BACKWARD] = 0.0
    # the loss's memory-bound passes over the logits (loss_traffic_bytes_per_logit, the stack's count, forward and
    # backward together): half charged to each pass (docs/model.md §11.3)
    work[W_MEM] = memory_bound_time(row, tokens * vocab * 0.5 * row[C_LOSS_TRAFFIC_BYTES_PER_LOGIT]) + mtp_mem
    if row[C_PP] <= 1.0:    # the embedding's dense gradient (§11.43), a position table's (§11.56), halved; pp > 1: rank 0's
        work[W_MEM] += 0.5 * (embedding_dense_grad_s(row) + position_table_s(row))
    work[W_ATTN_CORE_MEM] = 0.0
    loss_tp = (allreduce_time(row, 3.0 * 4.0 * tokens, t, 1.0) if t > 1.0 else 0.0) + mtp_tp
    # the output layer's input gather under SP, its reduce-scatter (SP) or all-reduce backward (§11.44)
    head_f, head_b, head_hidden = head_input_tp(row, tokens)
    # the word embedding's reduce-scatter / all-reduce (§11.44): here at PP 1 (one rank holds it; at pp > 1 the
    # first rank's, first_rank.py), and once per MTP depth at any pp (MultiTokenPredictionLayer._get_embeddings)
    lookups = row[C_MTP_LAYERS] + (1.0 if row[C_PP] <= 1.0 else 0.0)
    if lookups > 0.0:
        emb_f, emb_b = embedding_tp(row, tokens)
        head_f, head_b = head_f + lookups * emb_f, head_b + lookups * emb_b
    work[W_TP] = loss_tp + head_f
    # backward: the same, plus the SP re-gathers of the output layer's and eh_proj's inputs (§11.42)
    extra, hidden = head_tp_backward(row, tokens)
    work[W_TP_BACKWARD] = loss_tp + head_b + extra
    work[W_TP_HIDDEN] = hidden + head_hidden
    work[W_CP] = 0.0
    work[W_EP] = 0.0
    work[W_PARAMS] = row[C_VOCAB] * h / t * (1.0 if row[C_TIED_EMBEDDINGS] <= 0.0 else 0.0)
    work[W_FLOPS] = 2.0 * tokens * vocab * h * (1.0 + row[C_MTP_LAYERS]) + mtp_flops
    work[W_EXPERT_PARAMS] = 0.0
    work[W_SHARED] = 0.0
    work[W_EP_REMOTE] = 0.0
    # the head's and eh_proj's fused weight gradients read their main gradient once per application (§11.46)
    work[W_WGRAD] = wgrad_source_s(row, (1.0 + row[C_MTP_LAYERS]) * vocab * h + row[C_MTP_LAYERS] * 2.0 * h * h / t)
    work[W_FORWARD_ONLY] = 0.0
    work[W_BACKWARD_MEM] = 0.0
