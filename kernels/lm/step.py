"""Step time of decoder-LM training under the real-world model (docs/model.md §11.7).

One configuration is one column vector ``row`` (``fastmodel.registry.lm`` columns).
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

The per-layer costs are in ``kernels/lm/layer.py``; the collectives around the
layer (overlap, FSDP per layer, pipeline sends, the data-parallel step) in
``kernels/lm/parallel.py``; this module composes the step.
"""

from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layer import (
    model_flops_per_token, layer_costs, recompute_share, head_costs, layer_mix, W_GEMM, W_ATTN, W_MEM, W_ATTN_CORE_MEM,
    W_TP, W_CP, W_EP, W_PARAMS, W_FLOPS, W_EXPERT_PARAMS, W_SHARED,
)
from fastmodel.kernels.lm.moe import expert_dp, expert_tp
from fastmodel.kernels.lm.layout import (
    CP_ALLTOALL, C_COLLECTIVE_BUCKET_BYTES, C_CP, C_CP_ALGORITHM, C_DP, C_EP, C_MOE_A2A_OVERLAP,
    C_MOE_SHARED_EXPERT_OVERLAP, C_GLOBAL_BATCH, C_GRAD_REDUCE_BYTES, C_HIDDEN,
    C_LAYERS, C_MICRO_BATCH, C_N_GPUS, C_OPTIMIZER, C_OVERLAP_GRAD_REDUCE, C_OVERLAP_PARAM_GATHER, C_PEAK_FLOPS_16,
    C_PEAK_FLOPS_8, C_PP, C_PRECISION, C_SELECTIVE_POLICY, C_SEQ_LEN, C_SHARDING, C_SHARD_DEGREE, C_STEP_OVERHEAD_S,
    C_TP, C_TP_COMM_OVERLAP, C_VOCAB, C_VP, OPT_ADAM, OPT_SGD, PRECISION_FP8, R_COMM_CP, R_COMM_DP, R_COMM_EP,
    R_COMM_PP, R_COMM_TP, R_EXPOSED_CP, R_EXPOSED_DP, R_EXPOSED_EP, R_EXPOSED_PP, R_EXPOSED_TP, R_FLOPS_PER_TOKEN,
    R_HFU, R_MFU, R_PIPELINE_BUBBLE, R_STEP_TIME, R_TIME_ATTENTION, R_TIME_GEMM, R_TIME_MEMORY_BOUND, R_TIME_OPTIMIZER,
    R_TIME_RECOMPUTE, R_TOKENS_PER_S, R_TOKENS_PER_S_PER_GPU, SHARD_FSDP,
)
from fastmodel.kernels.lm.parallel import (
    exposed, fsdp_copy_out_time, fsdp_layer_exposed, param_bytes, pipeline_p2p, data_parallel,
)
from fastmodel.kernels.lm.memory_states import layers_per_stage
from fastmodel.kernels.nccl import bucketed_allgather_time


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
def expert_parallel_exposed(row, ep, shared, window):
    """Seconds the expert-parallel dispatch and combine ``ep`` of one layer and micro-batch add to the critical
    path (docs/model.md §11.14).

    ``moe_a2a_overlap`` none (Megatron-Core's default): all of it, less the part hidden behind the shared
    experts' ``shared`` seconds with ``moe_shared_expert_overlap``. Batch-level (Megatron-Core
    ``--overlap-moe-expert-parallel-comm``) and DualPipe (DeepSeek-V3 report sec. 3.2.1) pair one micro-batch's
    forward with another's backward and hide each one's communication behind the other's ``window`` of compute;
    the first stage's ``max(1, pp - 1)`` warm-up forwards and cool-down backwards of the ``m`` micro-batches
    have no partner and stay exposed.
    """
    if ep <= 0.0:
        return 0.0
    micro_batches = row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * row[C_DP])
    mode = row[C_MOE_A2A_OVERLAP]
    if mode <= 0.0:
        if row[C_MOE_SHARED_EXPERT_OVERLAP] > 0.0:
            return exposed(row, ep, shared)
        return ep
    unpaired = min(1.0, max(1.0, row[C_PP] - 1.0) / micro_batches)
    return unpaired * ep + (1.0 - unpaired) * exposed(row, ep, window)


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
    tp_exposed = cp_exposed = ep_exposed = 0.0
    expert_params = 0.0
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
        ep_left = expert_parallel_exposed(row, ep, work[W_SHARED] * (3.0 + full), forward + backward + again)
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
        ep_exposed += weight * ep_left
        expert_params += weight * work[W_EXPERT_PARAMS]
        tp_exposed += weight * tp_left
        cp_exposed += weight * cp_left
        fsdp_comm += weight * fsdp_here
        fsdp_exposed += weight * fsdp_left
        params += weight * work[W_PARAMS]
        flops += weight * work[W_FLOPS]
        layer_time += weight * (forward + backward + again + tp_left + cp_left + ep_left)   # FSDP: per step below
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
    pp_comm, pp_exposed = pipeline_p2p(row, micro_batches)

    # data parallelism once per step: gradient reduction and (sharded optimizers) parameter gather
    # (dense parameters over dp; routed experts over the expert-data-parallel group edp, kernels/lm/moe.py)
    stage_params = per_stage * (params - expert_params) + max(embedding_params if p > 1.0 else
                                                              embedding_params + head_params, head_params)
    last_backward = per_stage * backward_time
    first_forward = per_stage * forward_time
    dp_comm, dp_exposed, local_params = data_parallel(row, stage_params, last_backward, first_forward, shard_group,
                                                      d, t * c)
    if expert_params > 0.0:
        edp = expert_dp(row)
        expert_group = max(1.0, shard_group * t * c / (expert_tp(row) * row[C_EP]))
        left_backward = max(0.0, last_backward - dp_comm)
        left_forward = max(0.0, first_forward - dp_comm)
        e_comm, e_exposed, e_local = data_parallel(row, per_stage * expert_params, left_backward, left_forward,
                                                   min(expert_group, edp), edp, expert_tp(row) * row[C_EP])
        dp_comm += e_comm
        dp_exposed += e_exposed
        local_params += e_local
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
    out[R_EXPOSED_EP] = micro_batches * per_stage * ep_exposed
    out[R_EXPOSED_PP] = pp_exposed
    out[R_EXPOSED_DP] = dp_exposed + fsdp_exposed_step
