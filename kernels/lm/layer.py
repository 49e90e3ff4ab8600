"""Per-layer costs of decoder-LM training under the real-world model (docs/model.md §11.4, §11.6).

One transformer layer (dense or MoE, full or sliding-window attention) and the LM head, for one micro-batch on
one device: GEMM, attention-kernel and memory-bound seconds, the forward TP/CP/EP collectives, parameters held
and FLOPs executed, written into a scratch vector of ``N_WORK`` slots (``W_*``). Also the model's shape terms
the step and the serving kernels share: attention widths, matmul parameters, the layer mix, model FLOPs per
token, and the recompute shares. ``kernels/lm/step.py`` composes them into a step.
"""

from fastmodel.kernels.roofline import attention_time, gemm_time, grouped_gemm_time, memory_bound_time
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    CP_ALLTOALL, C_CAUSAL, C_CP, C_CP_ALGORITHM, C_DENSE_LAYERS, C_EP, C_ETP, C_FFN, C_FLASH_ATTENTION, C_FUSED_KERNELS,
    C_GATED_MLP, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KV_HEADS, C_KV_LORA_RANK, C_LAYERS, C_MICRO_BATCH, C_MLA,
    C_MOE_CAPACITY_FACTOR, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_MTP_LAYERS, C_PRECISION,
    C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_Q_LORA_RANK, C_RECOMPUTE, C_RECOMPUTE_FRACTION, C_SEQUENCE_PARALLEL,
    C_SEQ_LEN, C_SLIDING_WINDOW, C_SLIDING_WINDOW_LAYERS, C_TIED_EMBEDDINGS, C_TP, C_VOCAB, C_V_HEAD_DIM, PRECISION_FP8,
    RECOMPUTE_FULL, RECOMPUTE_PARTIAL_LAYERS, RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.nccl import allgather_time, allreduce_time, alltoall_time

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
N_WORK = 9

#: bytes per element of activations and 16-bit weights
ACT_BYTES = 2.0


@njit(inline="always")
def attention_dims(row):
    """(query-key width, value width) per head: MLA's nope+rope and v widths, else head_dim."""
    if row[C_MLA] > 0.0:
        return row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM], row[C_V_HEAD_DIM]
    return row[C_HEAD_DIM], row[C_HEAD_DIM]


@njit
def attention_params(row):
    """Matmul parameters of one attention block (projections, unsharded)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    if row[C_MLA] > 0.0:
        dqk, dv = attention_dims(row)
        q_rank = row[C_Q_LORA_RANK]
        q = h * q_rank + q_rank * a * dqk if q_rank > 0.0 else h * a * dqk
        kv = h * (row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]) + row[C_KV_LORA_RANK] * a * (row[C_QK_NOPE_HEAD_DIM] + dv)
        return q + kv + a * dv * h
    dh = row[C_HEAD_DIM]
    return h * (a + 2.0 * row[C_KV_HEADS]) * dh + a * dh * h


@njit(inline="always")
def mlp_matrices(row):
    return 3.0 if row[C_GATED_MLP] > 0.0 else 2.0


@njit
def moe_layers(row):
    """Layers with routed experts (0 for a dense model)."""
    if row[C_MOE_EXPERTS] <= 0.0:
        return 0.0
    return row[C_LAYERS] - row[C_DENSE_LAYERS]


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
    causal mask a window covers min(s, w) keys.
    """
    s = row[C_SEQ_LEN]
    if row[C_FLASH_ATTENTION] <= 0.0:
        return s                                  # unfused attention computes the full s x s scores
    causal = row[C_CAUSAL] > 0.0
    w = row[C_SLIDING_WINDOW]
    if sliding and 0.0 < w < s:
        return w - w * w / (2.0 * s) if causal else w
    return 0.5 * s if causal else s


@njit
def elementwise_bytes(row, hidden_elements, mlp_elements, rotary_elements):
    """HBM bytes of one layer's element-wise kernels in the forward pass.

    Per element of the hidden state: 2 norms and 2 residual adds; of the MLP's intermediate: the activation;
    of the query/key heads: rotary embedding. Fused kernels (Megatron/Transformer Engine, torch.compile) read
    and write each tensor once: norm 2+2 B, residual add 2+2+2 B, SwiGLU 2+2+2 B (GELU 2+2 B), rotary 2+2 B.
    Eager PyTorch runs the reference implementations op by op in FP32: RMSNorm as float() 2+4, pow 4+4,
    mean 4, mul 4+4, type_as 4+2, weight mul 2+2 = 36 B; SwiGLU as silu 2+2 then mul 2+2+2 = 10 B; complex
    rotary as float() 2+4, complex mul 4+4+4, type_as 4+2 = 24 B.
    """
    gated = row[C_GATED_MLP] > 0.0
    if row[C_FUSED_KERNELS] > 0.0:
        norm, activation, rotary = 4.0, (6.0 if gated else 4.0), 4.0
    else:
        norm, activation, rotary = 36.0, (10.0 if gated else 4.0), 24.0
    residual = 6.0
    return hidden_elements * 2.0 * (norm + residual) + mlp_elements * activation + rotary_elements * rotary


@njit
def layer_costs(row, moe, sliding, work):
    """Forward costs of one transformer layer for one micro-batch on one device (into ``work``)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    t = row[C_TP]
    c = row[C_CP]
    sp = row[C_SEQUENCE_PARALLEL] > 0.0
    fp8 = row[C_PRECISION] == PRECISION_FP8
    tokens = row[C_MICRO_BATCH] * row[C_SEQ_LEN] / c
    dqk, dv = attention_dims(row)
    nm = mlp_matrices(row)
    gemm = 0.0
    flops = 0.0
    # attention projections (column-parallel QKV, row-parallel output)
    if row[C_MLA] > 0.0:
        q_rank = row[C_Q_LORA_RANK]
        if q_rank > 0.0:
            gemm += gemm_time(row, tokens, q_rank, h, fp8) + gemm_time(row, tokens, a * dqk / t, q_rank, fp8)
        else:
            gemm += gemm_time(row, tokens, a * dqk / t, h, fp8)
        kv_rank = row[C_KV_LORA_RANK]
        gemm += gemm_time(row, tokens, kv_rank + row[C_QK_ROPE_HEAD_DIM], h, fp8)
        gemm += gemm_time(row, tokens, a * (row[C_QK_NOPE_HEAD_DIM] + dv) / t, kv_rank, fp8)
    else:
        gemm += gemm_time(row, tokens, (a + 2.0 * row[C_KV_HEADS]) * row[C_HEAD_DIM] / t, h, fp8)
    gemm += gemm_time(row, tokens, h, a * dv / t, fp8)
    params = attention_params(row) / t
    flops += 2.0 * tokens * attention_params(row) / t
    # MLP: dense, or router + shared experts + routed experts
    if moe:
        experts = row[C_MOE_EXPERTS]
        local_experts = experts / row[C_EP]
        etp = row[C_ETP]
        routed = tokens * row[C_MOE_TOPK] * max(1.0, row[C_MOE_CAPACITY_FACTOR])
        rows_per_expert = routed * etp / local_experts
        width = row[C_MOE_FFN] / etp
        gemm += gemm_time(row, tokens, experts, h, False)
        gemm += grouped_gemm_time(row, local_experts, rows_per_expert, (nm - 1.0) * width, h, fp8)
        gemm += grouped_gemm_time(row, local_experts, rows_per_expert, h, width, fp8)
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]
        gemm += gemm_time(row, tokens, (nm - 1.0) * shared / t, h, fp8) + gemm_time(row, tokens, h, shared / t, fp8)
        params += nm * h * (experts * row[C_MOE_FFN] / (row[C_EP] * etp) + shared / t) + h * experts
        flops += 2.0 * (routed * nm * h * row[C_MOE_FFN] + tokens * (nm * h * shared / t + h * experts))
        mlp_out = routed * width + tokens * shared / t
    else:
        f = row[C_FFN]
        gemm += gemm_time(row, tokens, (nm - 1.0) * f / t, h, fp8) + gemm_time(row, tokens, h, f / t, fp8)
        params += nm * h * f / t
        flops += 2.0 * tokens * nm * h * f / t
        mlp_out = tokens * f / t
    # attention core: scores and PV over the executed context
    ctx = attention_context(row, sliding)
    attn_flops = 2.0 * tokens * ctx * (a / t) * (dqk + dv)
    flops += attn_flops
    core_mem = 0.0
    if row[C_FLASH_ATTENTION] > 0.0:
        attn = attention_time(row, attn_flops)
    else:
        # unfused: batched GEMMs at GEMM efficiency + fused scale/mask/softmax/dropout over the s x s scores:
        # read 2 B, write 2 B, dropout mask 1 B and write 2 B per score element
        batches = row[C_MICRO_BATCH] * a / t
        queries = tokens / row[C_MICRO_BATCH]
        attn = grouped_gemm_time(row, batches, queries, ctx, dqk, False) + grouped_gemm_time(row, batches, queries, dv, ctx, False)
        core_mem = memory_bound_time(row, 7.0 * tokens * row[C_SEQ_LEN] * a / t)
    # memory-bound kernels: 2 norms + 2 residual adds (replicated over TP unless SP), activation, rotary
    norm_tokens = tokens / t if sp else tokens
    nbytes = elementwise_bytes(row, norm_tokens * h, mlp_out, tokens * (a + row[C_KV_HEADS]) * dqk / t)
    if fp8:
        # FP8 casts of the GEMM inputs (read 2 B, write 1 B) for forward and transposed backward copies
        nbytes += 2.0 * 3.0 * tokens * (2.0 * h / (t if sp else 1.0) + a * dv / t + mlp_out / tokens)
    mem = memory_bound_time(row, nbytes) + core_mem
    # communication of the layer, forward direction
    tp_bytes = ACT_BYTES * tokens * h
    tp = 0.0
    if t > 1.0:
        if sp:
            tp = 2.0 * (allgather_time(row, tp_bytes, t, 1.0) + allgather_time(row, tp_bytes, t, 1.0))
        else:
            tp = 2.0 * allreduce_time(row, tp_bytes, t, 1.0)
    cp = 0.0
    if c > 1.0 and row[C_CP_ALGORITHM] == CP_ALLTOALL:
        # DeepSpeed-Ulysses: Q, K, V scattered by heads and the output gathered back, one all-to-all each
        heads_width = (a + 2.0 * row[C_KV_HEADS]) * dqk / t + a * dv / t
        cp = alltoall_time(row, ACT_BYTES * tokens * heads_width, c, t)
    elif c > 1.0:
        # ring attention: c - 1 exchanges of this rank's K and V blocks with its ring neighbour
        kv_block = 2.0 * ACT_BYTES * tokens * row[C_KV_HEADS] * row[C_HEAD_DIM] / t
        cp = (c - 1.0) * allgather_time(row, kv_block * 2.0, 2.0, t)
    ep = 0.0
    if moe and row[C_EP] > 1.0:
        ep = 2.0 * alltoall_time(row, ACT_BYTES * tokens * row[C_MOE_TOPK] * h, row[C_EP], t * c)
    work[W_GEMM] = gemm
    work[W_ATTN] = attn
    work[W_MEM] = mem
    work[W_ATTN_CORE_MEM] = core_mem
    work[W_TP] = tp
    work[W_CP] = cp
    work[W_EP] = ep
    work[W_PARAMS] = params
    work[W_FLOPS] = flops


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
def head_costs(row, work):
    """Forward costs of the LM head and vocab-parallel cross-entropy on the last stage (into ``work``)."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    tokens = row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP]
    vocab = row[C_VOCAB] / t
    # the LM head runs in 16-bit in FP8 recipes (Transformer Engine keeps first/last layers in BF16)
    work[W_GEMM] = gemm_time(row, tokens, vocab, h, False) * (1.0 + row[C_MTP_LAYERS])
    work[W_ATTN] = 0.0
    # logits write + softmax/cross-entropy read and write in FP32
    work[W_MEM] = memory_bound_time(row, tokens * vocab * (ACT_BYTES + 4.0 + 4.0))
    work[W_ATTN_CORE_MEM] = 0.0
    work[W_TP] = allreduce_time(row, 3.0 * 4.0 * tokens, t, 1.0) if t > 1.0 else 0.0
    work[W_CP] = 0.0
    work[W_EP] = 0.0
    work[W_PARAMS] = row[C_VOCAB] * h / t * (1.0 if row[C_TIED_EMBEDDINGS] <= 0.0 else 0.0)
    work[W_FLOPS] = 2.0 * tokens * vocab * h


@njit
def layer_mix(row):
    """Counts of the four layer kinds: (dense full, dense sliding, MoE full, MoE sliding)."""
    layers = row[C_LAYERS]
    n_moe = moe_layers(row)
    sliding = min(row[C_SLIDING_WINDOW_LAYERS], layers) / layers if row[C_SLIDING_WINDOW] > 0.0 else 0.0
    n_dense = layers - n_moe
    return n_dense * (1.0 - sliding), n_dense * sliding, n_moe * (1.0 - sliding), n_moe * sliding
