"""Serving costs of the model body: roofline GEMMs against sharded weights, memory-bound kernels and the
collectives of each layer, the LM head and the pipeline sends, for ``m`` tokens on one device of the TP group
(docs/model_serving.md). The layer's shape -- its GEMM list and GEMM model, the expert sharding, the
element-wise bytes -- is the training model's (``kernels/lm/shape.py``); this module says how serving runs it
(tokens per step, experts a step touches, checkpoint weight bytes, CUDA-graph launches). Cost vectors have four
slots ``K_*``: GEMM, attention, memory-bound, communication.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.shape import (  # noqa: F401 - ACT_BYTES, expert_tp re-exported for serving modules
    ACT_BYTES, attention_dims, attention_gemm_time, elementwise_bytes, expert_dims, expert_tp, layer_mix, mlp_gemm_time,
    mlp_matrices,
)
from fastmodel.kernels.columns import (
    C_ATTENTION_DP, C_FP4_ACT, C_MOE_DISPATCHER, DISPATCH_ALLGATHER, DISPATCH_DEEPEP_LL,
    C_FP4_GEMM, C_KERNEL_OVERHEAD_S, C_MOE_TP, C_PEAK_FLOPS_4, C_PEAK_FLOPS_8, C_QUANT_EXPERTS_ONLY,
)
from fastmodel.kernels.roofline import gemm_roofline, memory_bound_time
from fastmodel.kernels.lm.layout import (
    C_EP, C_FFN, C_HEADS, C_HIDDEN, C_KV_HEADS,
    C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_PP, C_PRECISION,
    C_STACK_COMPUTE_EFF, C_TP, C_VOCAB, C_WEIGHT_BYTES, PRECISION_FP8,
)
from fastmodel.kernels.nccl import allgather_time, engine_alltoall_time, p2p_time
from fastmodel.kernels.serve.allreduce import serve_allreduce
from fastmodel.kernels.serve.deepep_ll import deepep_ll_time
from fastmodel.kernels.serve.quant_kernels import linear_extra_time
from fastmodel.kernels.serve.upcast import expert_upcast_time

#: flags passed as floats, not bools: numba types a constant bool argument as a literal and compiles one
#: specialisation of the callee per value (and of everything it calls); a float flag compiles once
DENSE = 0.0
MOE = 1.0
LAUNCH = 1.0      # every kernel pays the device's per-kernel overhead (launch ramp + tail on the GPU)
NO_LAUNCH = 0.0   # no per-kernel overhead (a bare roofline; kept for tests of the roofline terms)
#: memory-bound kernels per layer that pay the per-kernel overhead: the two fused add+RMSNorm kernels, the gated
#: activation and rotary embedding (TensorRT-LLM/vLLM fuse the residual add into the norm); an MoE layer adds the
#: router's top-k/softmax, the token permute and the weighted un-permute (combine)
MEM_KERNELS_DENSE = 4.0
MEM_KERNELS_MOE = 3.0

# slots of a cost vector: (gemm, attention, memory-bound, communication)
K_GEMM = 0
K_ATTN = 1
K_MEM = 2
K_COMM = 3


# --- building blocks ---------------------------------------------------------

@njit(inline="always")
def is_fp8(row):
    """True when the GEMMs run in FP8: FP8 weights on a device with FP8 tensor cores (without them an engine that
    runs FP8 weight-only, ``fp8_weight_only``, dequantises them into 16-bit GEMMs; docs/model_serving.md S55)."""
    return row[C_PRECISION] == PRECISION_FP8 and row[C_PEAK_FLOPS_8] > 0.0


@njit(inline="always")
def gemm_format(row):
    """The GEMM precision code ``roofline.gemm_peak`` reads: FP4 weights on a device with FP4 tensor cores take the
    engine's activations (``fp4_act``: 2.0 FP4 W4A4, 1.0 FP8 W4A8, 0.0 16-bit W4A16); else 1.0 FP8, else 0.0
    (16-bit; FP4 weights without FP4 tensor cores are dequantised into 16-bit GEMMs, weight-only)."""
    if row[C_FP4_GEMM] > 0.0 and row[C_PEAK_FLOPS_4] > 0.0:
        return row[C_FP4_ACT]
    return 1.0 if is_fp8(row) else 0.0


@njit(inline="always")
def dense_format(row):
    """(GEMM format, weight bytes) of the GEMMs outside the routed experts: BF16 when only the experts are
    quantised (``quant_experts_only``), else the checkpoint's (:func:`gemm_format`, ``weight_bytes``)."""
    if row[C_QUANT_EXPERTS_ONLY] > 0.0:
        return 0.0, ACT_BYTES
    return gemm_format(row), row[C_WEIGHT_BYTES]


@njit(inline="always")
def serve_etp(row):
    """Devices one routed expert is split over: ``moe_tp`` when given, else the GPUs of a stage that EP leaves
    (tp x attention_dp / ep; ``shape.expert_tp``'s tp / ep at attention_dp = 1)."""
    if row[C_MOE_TP] > 0.0:
        return row[C_MOE_TP]
    return row[C_TP] * row[C_ATTENTION_DP] / row[C_EP]


@njit(inline="always")
def ffn_tp(row):
    """Devices dense MLPs and shared experts are split over in memory: every GPU of a stage (tp x attention_dp;
    under attention DP the MLP gathers the tokens of every attention group)."""
    return row[C_TP] * row[C_ATTENTION_DP]


@njit
def experts_touched(experts, topk, tokens):
    """Expected distinct experts a step of ``tokens`` tokens reads: E (1 - (1 - k/E)^tokens)."""
    if experts <= 0.0 or tokens <= 0.0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


@njit
def layer_gemms(row, m, moe, launch, m_rank=-1.0):
    """GEMM seconds of one layer for ``m`` tokens of the stage on one device: the attention projections
    (``kernels/lm/shape.attention_gemm_time``) on the ``m_rank`` tokens of the busiest attention-DP group
    (default m / attention_dp), the MLP (``shape.mlp_gemm_time``) on all m; the routed experts are those the
    step touches on this device (:func:`experts_touched` / ep), each at ``moe_ffn / serve_etp``, sharing the
    ``m top_k / ep`` routed rows; checkpoint weight bytes, GEMM format of :func:`gemm_format`."""
    mine = m_rank if m_rank >= 0.0 else m / row[C_ATTENTION_DP]
    fmt_d, wb_d = dense_format(row)
    total = attention_gemm_time(row, mine, fmt_d, wb_d, launch)
    if moe:
        ep = row[C_EP]
        groups = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m) / ep
        rows = m * row[C_MOE_TOPK] / ep / max(groups, 1e-30)
        fmt = gemm_format(row)
        wb = row[C_WEIGHT_BYTES]
        total += mlp_gemm_time(row, m, MOE, groups, rows, serve_etp(row), fmt, wb, launch)
        width, he = expert_dims(row, serve_etp(row))
        total += expert_upcast_time(row, groups, rows, width, he, mlp_matrices(row), fmt, wb)
        if row[C_QUANT_EXPERTS_ONLY] > 0.0 and row[C_MOE_SHARED_EXPERTS] > 0.0:   # shared experts: BF16, not fmt
            total += shared_gemm_time(row, m, fmt_d, wb_d, launch) - shared_gemm_time(row, m, fmt, wb, launch)
    else:
        total += mlp_gemm_time(row, m, DENSE, 0.0, 0.0, 1.0, fmt_d, wb_d, launch)
    return total / row[C_STACK_COMPUTE_EFF]


@njit
def shared_gemm_time(row, m, fmt, wb, launch):
    """The shared experts' GEMMs of one MoE layer for ``m`` tokens, as ``shape.mlp_gemm_time`` prices them."""
    h = row[C_HIDDEN]
    shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP]
    return gemm_roofline(row, 1.0, m, (mlp_matrices(row) - 1.0) * shared, h, fmt, wb, launch) \
        + gemm_roofline(row, 1.0, m, h, shared, fmt, wb, launch)


@njit
def layer_memory_bound(row, m, moe):
    """Memory-bound seconds of one layer for ``m`` tokens: the element-wise kernels of
    ``kernels/lm/shape.elementwise_bytes`` (2 norms + 2 residual adds on m h, the MLP activation on the local
    intermediate width, rotary on the local Q and K heads)."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    dqk, _ = attention_dims(row)
    if moe:
        width = row[C_MOE_TOPK] * row[C_MOE_FFN] / t + row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
    else:
        width = row[C_FFN] / t
    nbytes = elementwise_bytes(row, m * h, m * width, m * (row[C_HEADS] + row[C_KV_HEADS]) * dqk / t)
    if moe:
        nbytes += combine_bytes(row, m)
    return memory_bound_time(row, nbytes)


@njit(inline="always")
def combine_bytes(row, m):
    """HBM bytes of the MoE combine (docs/model_serving.md S23): the k-way weighted sum of each token's expert
    outputs back into token order, a kernel of its own after the down projection in every engine here (vLLM
    ``ops.moe_sum(intermediate_cache3.view(M, topk, K), output)``, TensorRT-LLM ``finalizeMoeRoutingKernel``):
    it reads the ``m top_k / ep`` 16-bit expert rows this device holds and writes ``m`` 16-bit hidden rows."""
    return ACT_BYTES * m * row[C_HIDDEN] * (row[C_MOE_TOPK] / row[C_EP] + 1.0)


@njit
def layer_comm(row, m, moe, m_rank=-1.0):
    """Communication seconds of one layer for ``m`` tokens of the stage (``m_rank`` on the busiest attention-DP
    group, default m / attention_dp): the attention block's TP allreduce of m_rank x h 16-bit activations; the
    MLP's allreduce over every GPU of the stage (tp x attention_dp: under attention DP it gathers every group's
    tokens); with ep > 1 under attention DP the MoE block's allreduce becomes a dispatch and a combine all-to-all
    over ep and an allreduce over each expert's devices. Without attention DP every GPU of the TP group already
    holds every token, so EP needs no dispatch: each GPU runs its experts on the tokens routed to them and one
    allreduce over the group sums the partial outputs, as for a dense MLP (vLLM ``FusedMoEParallelConfig.
    use_all2all_kernels``: ``dp_size > 1 and use_ep``; TensorRT-LLM ``enable_alltoall`` needs
    ``enable_attention_dp``; docs/model_serving.md S14). Under attention DP with the all-gather dispatcher
    (``moe_dispatcher`` 1, vLLM's and SGLang's default) the MoE block all-gathers every group's tokens and
    reduce-scatters the outputs over the stage: an allreduce's volume, the dense MLP's path below. With DeepEP's
    low-latency kernels (``moe_dispatcher`` 4, S39) the dispatch and combine are ``deepep_ll_time``."""
    t = row[C_TP]
    adp = row[C_ATTENTION_DP]
    mine = m_rank if m_rank >= 0.0 else m / adp
    nbytes = ACT_BYTES * mine * row[C_HIDDEN]
    attention = serve_allreduce(row, nbytes, t, 1.0)
    if moe and row[C_EP] > 1.0 and adp > 1.0 and row[C_MOE_DISPATCHER] != DISPATCH_ALLGATHER:
        ep = row[C_EP]
        if row[C_MOE_DISPATCHER] == DISPATCH_DEEPEP_LL:
            a2a = deepep_ll_time(row, mine)
        else:
            a2a = 2.0 * engine_alltoall_time(row, nbytes * row[C_MOE_TOPK], ep, 1.0)
        return attention + a2a + serve_allreduce(row, nbytes, serve_etp(row), ep)
    if adp > 1.0:
        return attention + serve_allreduce(row, ACT_BYTES * m * row[C_HIDDEN], ffn_tp(row), 1.0)
    return 2.0 * attention


@njit
def head_costs(row, r, launch, costs):
    """LM head on ``r`` tokens (vocab-parallel, 16-bit weights) and the gather of the logits, added to ``costs``."""
    t = row[C_TP]
    costs[K_GEMM] += gemm_roofline(row, 1.0, r, row[C_VOCAB] / t, row[C_HIDDEN], 0.0, ACT_BYTES, launch) \
        / row[C_STACK_COMPUTE_EFF]
    costs[K_COMM] += allgather_time(row, ACT_BYTES * r * row[C_VOCAB], t, 1.0) if t > 1.0 else 0.0


@njit
def pipeline_comm(row, m):
    """Point-to-point sends of m x h activations across the pp - 1 stage boundaries."""
    p = row[C_PP]
    if p <= 1.0:
        return 0.0
    return (p - 1.0) * p2p_time(row, ACT_BYTES * m * row[C_HIDDEN], row[C_TP])


@njit
def body_costs(row, m, launch, costs, m_rank):
    """Every layer's GEMM, memory-bound and communication seconds for ``m`` tokens of the stage (``m_rank`` on
    the busiest attention-DP group; -1: m / attention_dp), added to ``costs``; every memory-bound kernel
    pays the per-kernel overhead with ``launch``; returns the experts touched per MoE layer. ``m_rank`` has no
    default: every caller passes it, as an omitted default is an argument type of its own, one more compile."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    n_dense = dense_full + dense_slide
    n_moe = moe_full + moe_slide
    mine = m_rank if m_rank >= 0.0 else m / row[C_ATTENTION_DP]
    costs[K_MEM] += launch * row[C_KERNEL_OVERHEAD_S] * ((n_dense + n_moe) * MEM_KERNELS_DENSE + n_moe * MEM_KERNELS_MOE) \
        / row[C_STACK_COMPUTE_EFF]       # a kernel's overhead runs at the modelled speed too (kernels/roofline.py)
    fmt_d = dense_format(row)[0]     # the engine's kernels around its quantized linears (quant_kernels.py)
    if n_dense > 0.0:
        costs[K_GEMM] += n_dense * layer_gemms(row, m, DENSE, launch, mine)
        costs[K_MEM] += n_dense * (layer_memory_bound(row, mine, DENSE) + linear_extra_time(row, mine, DENSE, fmt_d, launch))
        costs[K_COMM] += n_dense * layer_comm(row, m, DENSE, mine)
    touched = 0.0
    if n_moe > 0.0:
        costs[K_GEMM] += n_moe * layer_gemms(row, m, MOE, launch, mine)
        costs[K_MEM] += n_moe * (layer_memory_bound(row, mine, MOE) + linear_extra_time(row, mine, MOE, fmt_d, launch))
        costs[K_COMM] += n_moe * layer_comm(row, m, MOE, mine)
        touched = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m)
    costs[K_COMM] += pipeline_comm(row, mine)
    return touched
