"""Step time of decoder-LM training under the real-world model (docs/model.md §11.7).

One configuration is one column vector ``row`` (``fastmodel.variables`` columns).
The step is composed in closed form from per-layer costs of one micro-batch on
one pipeline stage:

    t_layer   = GEMMs + attention + memory-bound + recompute + exposed TP/CP/EP + exposed FSDP   (docs/model.md §11.4, §11.6)
    t_mb      = layers_per_stage x t_layer + LM head and loss on the last stage                 (docs/model.md §11.4)
    step      = m x t_mb + bubble + exposed PP + exposed DP + optimizer + framework overhead     (docs/model.md §11.7)
    bubble    = (pp - 1) / vp x t_mb(average stage)                                              (Narayanan et al. 2021, eq. 1-2)

where m = global_batch / (micro_batch x dp) micro-batches per step. Backward GEMMs
cost twice the forward (data and weight gradients); flash-attention backward
2.5x its forward (Dao 2023). Every communication term is a collective of
``kernels.network`` on its own process group and stream; "exposed" is the part
not hidden behind the compute it overlaps with.
"""


from fastmodel.kernels.compute import attention_time, gemm_time, grouped_gemm_time, memory_bound_time
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm_layout import (
    C_CAUSAL, C_COLLECTIVE_BUCKET_BYTES, C_COMM_SM_SHARE, C_CP_ALGORITHM, C_CP, C_DENSE_LAYERS, C_DP, C_EP,
    C_ETP, C_FFN, C_FLASH_ATTENTION, C_FSDP_COPY_OUT, C_FP8_PARAMS, C_FUSED_KERNELS,
    C_GATED_MLP, C_GLOBAL_BATCH, C_GRAD_REDUCE_BYTES, C_HEAD_DIM, C_HEADS, C_HIDDEN,
    C_KV_HEADS, C_KV_LORA_RANK, C_LAYERS, C_MICRO_BATCH, C_MLA, C_MOE_CAPACITY_FACTOR, C_MOE_EXPERTS, C_MOE_FFN,
    C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_MTP_LAYERS, C_N_GPUS, C_OPTIMIZER, C_OVERLAP_GRAD_REDUCE,
    C_OVERLAP_PARAM_GATHER, C_PEAK_FLOPS_16, C_PEAK_FLOPS_8, C_PP, C_PRECISION, C_Q_LORA_RANK, C_QK_NOPE_HEAD_DIM,
    C_QK_ROPE_HEAD_DIM, C_RECOMPUTE, C_RECOMPUTE_FRACTION, C_SEQ_LEN, C_SELECTIVE_POLICY, C_SEQUENCE_PARALLEL, C_SHARD_DEGREE,
    C_SHARDING, C_SLIDING_WINDOW, C_SLIDING_WINDOW_LAYERS, C_STEP_OVERHEAD_S, C_TIED_EMBEDDINGS, C_TP,
    C_TP_COMM_OVERLAP, C_V_HEAD_DIM, C_VOCAB, C_VP, CP_ALLTOALL, OPT_ADAM, OPT_SGD, PRECISION_FP8, R_COMM_CP,
    R_COMM_DP,
    R_COMM_EP, R_COMM_PP, R_COMM_TP, R_EXPOSED_CP, R_EXPOSED_DP, R_EXPOSED_EP, R_EXPOSED_PP, R_EXPOSED_TP,
    R_FLOPS_PER_TOKEN, R_HFU, R_MFU, R_PIPELINE_BUBBLE, R_STEP_TIME, R_TIME_ATTENTION, R_TIME_GEMM,
    R_TIME_MEMORY_BOUND, R_TIME_OPTIMIZER, R_TIME_RECOMPUTE, R_TOKENS_PER_S, R_TOKENS_PER_S_PER_GPU,
    RECOMPUTE_FULL, RECOMPUTE_PARTIAL_LAYERS, RECOMPUTE_SELECTIVE, SHARD_DDP, SHARD_FSDP,
)
from fastmodel.kernels.memory import layers_per_stage
from fastmodel.kernels.network import (
    allgather_time, allreduce_time, alltoall_time, bucketed_allgather_time, p2p_time,
)

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
    """Keys each query attends to, as executed (flash skips masked blocks: ~s/2 causal)."""
    s = row[C_SEQ_LEN]
    if row[C_FLASH_ATTENTION] <= 0.0:
        return s                                  # unfused attention computes the full s x s scores
    if sliding and row[C_SLIDING_WINDOW] > 0.0:
        return min(s, row[C_SLIDING_WINDOW])
    return 0.5 * s if row[C_CAUSAL] > 0.0 else s


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
def exposed(row, comm, window):
    """Time a collective adds to the critical path when it overlaps ``window`` seconds of compute: what does
    not fit in the window, plus the compute slowed while they share the GPU (``comm_sm_share`` of its
    throughput goes to the communication kernels during the overlap)."""
    return max(0.0, comm - window) + row[C_COMM_SM_SHARE] * min(comm, window)


@njit
def fsdp_copy_out_time(row, layer_params):
    """FSDP2 copy-out of one gathered layer: its parameters read from the all-gather buffer and written to
    their own tensors, memory-bound on the compute stream (0 unless ``fsdp_copy_out``)."""
    if row[C_FSDP_COPY_OUT] <= 0.0:
        return 0.0
    return memory_bound_time(row, 2.0 * layer_params * param_bytes(row))


@njit
def fsdp_layer_exposed(row, gather, reduce, forward, backward):
    """ZeRO-3/FSDP time one layer adds to the critical path: its forward gather overlaps the forward compute
    and its backward gather and gradient reduce-scatter the backward compute, each only where the framework
    prefetches parameters (``overlap_param_gather``) or overlaps the reduction (``overlap_grad_reduce``);
    otherwise the collective runs between the layers' kernels (DeepSpeed's ``overlap_comm`` was off by default)."""
    overlap_gather = row[C_OVERLAP_PARAM_GATHER] > 0.0
    overlap_reduce = row[C_OVERLAP_GRAD_REDUCE] > 0.0
    hidden_forward = gather if overlap_gather else 0.0
    hidden_backward = (gather if overlap_gather else 0.0) + (reduce if overlap_reduce else 0.0)
    serial = (2.0 * gather + reduce) - hidden_forward - hidden_backward
    return serial + exposed(row, hidden_forward, forward) + exposed(row, hidden_backward, backward)


@njit
def layer_mix(row):
    """Counts of the four layer kinds: (dense full, dense sliding, MoE full, MoE sliding)."""
    layers = row[C_LAYERS]
    n_moe = moe_layers(row)
    sliding = min(row[C_SLIDING_WINDOW_LAYERS], layers) / layers if row[C_SLIDING_WINDOW] > 0.0 else 0.0
    n_dense = layers - n_moe
    return n_dense * (1.0 - sliding), n_dense * sliding, n_moe * (1.0 - sliding), n_moe * sliding


@njit
def param_bytes(row):
    """Bytes per gathered weight element: 1 with FP8 weight copies, else 2."""
    return 1.0 if row[C_FP8_PARAMS] > 0.0 else 2.0


@njit
def optimizer_bytes_per_param(row):
    """HBM traffic of the optimizer step per local parameter: FP32 master and states read and written,
    gradient read, 16-bit weight copy written (Adam: 4+4 master, 8+8 moments)."""
    grad = row[C_GRAD_REDUCE_BYTES]
    if row[C_OPTIMIZER] == OPT_ADAM:
        return 8.0 + 16.0 + grad + 2.0
    if row[C_OPTIMIZER] == OPT_SGD:
        return 8.0 + 8.0 + grad + 2.0
    return 8.0 + 2.0 + grad + 2.0   # Adafactor: factored second moment, no first moment


@njit
def step_row(row, work, out):
    """Every time result of one configuration into ``out`` (registry result indices)."""
    layers = row[C_LAYERS]
    t = row[C_TP]
    p = row[C_PP]
    v = row[C_VP]
    c = row[C_CP]
    d = row[C_DP]
    b = row[C_MICRO_BATCH]
    micro_batches = row[C_GLOBAL_BATCH] / (b * d)
    per_stage = layers_per_stage(row)       # the busiest rank's layers (uneven stages: a layer more than average)
    full, selective = recompute_share(row)
    overlap_tp = row[C_TP_COMM_OVERLAP] > 0.0
    # ZeRO-3/FSDP gathers each layer per micro-batch; under pipeline parallelism frameworks keep the gathered
    # stage across the step's micro-batches instead (TorchTitan's default with PP; Llama 3 paper sec. 3.3.2)
    sharded = row[C_SHARDING] == SHARD_FSDP
    fsdp = sharded and p <= 1.0
    shard_group = min(row[C_SHARD_DEGREE], d) if row[C_SHARD_DEGREE] > 0.0 else d
    grad_bytes = row[C_GRAD_REDUCE_BYTES]
    bucket = row[C_COLLECTIVE_BUCKET_BYTES]

    # per-layer averages over the layer mix, one micro-batch
    counts = layer_mix(row)
    layer_time = 0.0        # critical-path seconds of the average layer (compute + exposed comm)
    forward_time = backward_time = 0.0
    gemm = attn = mem = recompute = 0.0
    tp_comm = cp_comm = ep_comm = 0.0
    tp_exposed = cp_exposed = 0.0
    fsdp_comm = fsdp_exposed = 0.0
    params = 0.0
    flops = 0.0
    for kind in range(4):
        weight = counts[kind] / layers
        if weight <= 0.0:
            continue
        layer_costs(row, kind >= 2, kind % 2 == 1, work)
        g, a_, m_ = work[W_GEMM], work[W_ATTN], work[W_MEM]
        forward = g + a_ + m_
        backward = 2.0 * g + 2.5 * a_ + 2.0 * m_
        # selective recompute: Megatron re-runs the attention core; op-level checkpointing (TorchTitan,
        # selective_policy 1) keeps attention and every other matmul output and re-runs the rest
        megatron = row[C_SELECTIVE_POLICY] <= 0.0
        cheap = a_ + work[W_ATTN_CORE_MEM] if megatron else 0.5 * g + m_
        again = full * forward + selective * cheap
        copy = fsdp_copy_out_time(row, work[W_PARAMS]) if fsdp else 0.0
        forward += copy
        backward += copy
        tp = work[W_TP] * (2.0 + full)
        cp = work[W_CP] * (3.0 + full)
        ep = work[W_EP] * (2.0 + full)
        tp_left = exposed(row, tp, g * (3.0 + full)) if overlap_tp else tp
        if row[C_CP_ALGORITHM] == CP_ALLTOALL:
            cp_left = cp                    # the all-to-alls sit between the projections and attention
        else:
            cp_left = exposed(row, cp, a_ * (3.5 + full))
        fsdp_left = 0.0
        fsdp_here = 0.0
        if fsdp:
            gather = bucketed_allgather_time(row, work[W_PARAMS] * param_bytes(row), shard_group, t * c, bucket)
            reduce = bucketed_allgather_time(row, work[W_PARAMS] * grad_bytes, shard_group, t * c, bucket)
            fsdp_here = 2.0 * gather + reduce
            fsdp_left = fsdp_layer_exposed(row, gather, reduce, forward, backward + again)
        gemm += weight * g * (3.0 + full + (0.0 if megatron else 0.5 * selective))
        attn += weight * a_ * (3.5 + full + (selective if megatron else 0.0))
        mem += weight * (m_ * (3.0 + full) + selective * (work[W_ATTN_CORE_MEM] if megatron else m_) + 2.0 * copy)
        recompute += weight * again
        tp_comm += weight * tp
        cp_comm += weight * cp
        ep_comm += weight * ep
        tp_exposed += weight * tp_left
        cp_exposed += weight * cp_left
        fsdp_comm += weight * fsdp_here
        fsdp_exposed += weight * fsdp_left
        params += weight * work[W_PARAMS]
        flops += weight * work[W_FLOPS]
        layer_time += weight * (forward + backward + again + tp_left + cp_left + ep)   # FSDP: per step below
        forward_time += weight * forward
        backward_time += weight * (backward + again)
    layer_flops_executed = 3.0 * flops + full * flops

    # LM head and loss on the last stage (not recomputed)
    head_costs(row, work)
    head_tp = 2.0 * work[W_TP]
    head_time = 3.0 * work[W_GEMM] + 2.0 * work[W_MEM] + head_tp
    head_params = work[W_PARAMS]
    head_flops = 3.0 * work[W_FLOPS]
    head_gemm = 3.0 * work[W_GEMM]
    head_mem = 2.0 * work[W_MEM]
    embedding_params = row[C_VOCAB] * row[C_HIDDEN] / t

    # one micro-batch on the slowest (last) stage and on the average stage
    stage_mb = per_stage * layer_time + head_time
    average_mb = per_stage * layer_time + head_time / p
    bubble = (p - 1.0) / v * average_mb if p > 1.0 else 0.0

    # FSDP: the first gather of a micro-batch and the last reduce-scatter are never hidden
    fsdp_edges = 0.0
    if fsdp and row[C_OVERLAP_PARAM_GATHER] > 0.0 and row[C_OVERLAP_GRAD_REDUCE] > 0.0:
        fsdp_edges = bucketed_allgather_time(row, params * param_bytes(row), shard_group, t * c, bucket) \
            + bucketed_allgather_time(row, params * grad_bytes, shard_group, t * c, bucket)
    fsdp_exposed_step = micro_batches * (per_stage * fsdp_exposed + fsdp_edges)
    fsdp_comm_step = micro_batches * per_stage * fsdp_comm

    # pipeline point-to-point: activations forward, gradients backward, per virtual stage
    pp_comm = 0.0
    pp_exposed = 0.0
    if p > 1.0:
        nbytes = ACT_BYTES * b * row[C_SEQ_LEN] / c * row[C_HIDDEN]
        if row[C_SEQUENCE_PARALLEL] > 0.0:
            nbytes = nbytes / t
        send = p2p_time(row, nbytes, t * c * d)
        pp_comm = 2.0 * (micro_batches * v + p - 1.0) * send      # every send of the schedule's critical path
        pp_exposed = 2.0 * (p - 1.0) * send + (2.0 * micro_batches * send if v <= 1.0 else 0.0)

    # data parallelism once per step: gradient reduction and (sharded optimizers) parameter gather
    stage_params = per_stage * params + max(embedding_params if p > 1.0 else embedding_params + head_params,
                                            head_params)
    last_backward = per_stage * backward_time
    first_forward = per_stage * forward_time
    dp_comm = 0.0
    dp_exposed = 0.0
    sharding = row[C_SHARDING]
    if sharded:
        if not fsdp:
            reduce = bucketed_allgather_time(row, stage_params * grad_bytes, shard_group, t * c, bucket)
            gather = bucketed_allgather_time(row, stage_params * param_bytes(row), shard_group, t * c, bucket)
            dp_comm = reduce + gather
            dp_exposed = exposed(row, reduce, last_backward) + exposed(row, gather, first_forward)
        replicas = d / shard_group
        if replicas > 1.0:
            replica = allreduce_time(row, stage_params * grad_bytes / shard_group, replicas, t * c * shard_group)
            dp_comm += replica
            dp_exposed += exposed(row, replica, last_backward)
        local_params = stage_params / shard_group
    elif d > 1.0:
        if sharding == SHARD_DDP:
            dp_comm = allreduce_time(row, stage_params * grad_bytes, d, t * c)
            dp_exposed = exposed(row, dp_comm, last_backward) if row[C_OVERLAP_GRAD_REDUCE] > 0.0 else dp_comm
        else:
            reduce = allgather_time(row, stage_params * grad_bytes, d, t * c)
            gather = allgather_time(row, stage_params * param_bytes(row), d, t * c)
            dp_comm = reduce + gather
            dp_exposed = exposed(row, reduce, last_backward) if row[C_OVERLAP_GRAD_REDUCE] > 0.0 else reduce
            dp_exposed += exposed(row, gather, first_forward) if row[C_OVERLAP_PARAM_GATHER] > 0.0 else gather
        local_params = stage_params / d if sharding != SHARD_DDP else stage_params
    else:
        local_params = stage_params
    optimizer = memory_bound_time(row, local_params * optimizer_bytes_per_param(row))

    step = micro_batches * stage_mb + bubble + fsdp_exposed_step + pp_exposed + dp_exposed + optimizer \
        + row[C_STEP_OVERHEAD_S]

    tokens = row[C_GLOBAL_BATCH] * row[C_SEQ_LEN]
    n = row[C_N_GPUS]
    peak = row[C_PEAK_FLOPS_8] if row[C_PRECISION] == PRECISION_FP8 and row[C_PEAK_FLOPS_8] > 0.0 \
        else row[C_PEAK_FLOPS_16]
    model_flops = model_flops_per_token(row)
    executed = micro_batches * (per_stage * layer_flops_executed + head_flops / p)
    out[R_STEP_TIME] = step
    out[R_TOKENS_PER_S] = tokens / step
    out[R_TOKENS_PER_S_PER_GPU] = tokens / step / n
    out[R_FLOPS_PER_TOKEN] = model_flops
    out[R_MFU] = model_flops * tokens / (step * n * peak)
    out[R_HFU] = executed / (step * peak)
    out[R_TIME_GEMM] = micro_batches * (per_stage * gemm + head_gemm)
    out[R_TIME_ATTENTION] = micro_batches * per_stage * attn
    out[R_TIME_MEMORY_BOUND] = micro_batches * (per_stage * mem + head_mem)
    out[R_TIME_RECOMPUTE] = micro_batches * per_stage * recompute
    out[R_TIME_OPTIMIZER] = optimizer
    out[R_PIPELINE_BUBBLE] = bubble
    out[R_COMM_TP] = micro_batches * (per_stage * tp_comm + head_tp)
    out[R_COMM_CP] = micro_batches * per_stage * cp_comm
    out[R_COMM_EP] = micro_batches * per_stage * ep_comm
    out[R_COMM_PP] = pp_comm
    out[R_COMM_DP] = dp_comm + fsdp_comm_step
    out[R_EXPOSED_TP] = micro_batches * (per_stage * tp_exposed + head_tp)
    out[R_EXPOSED_CP] = micro_batches * per_stage * cp_exposed
    out[R_EXPOSED_EP] = micro_batches * per_stage * ep_comm
    out[R_EXPOSED_PP] = pp_exposed
    out[R_EXPOSED_DP] = dp_exposed + fsdp_exposed_step
