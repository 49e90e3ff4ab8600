"""Serving costs of the model body: roofline GEMMs against sharded weights, memory-bound kernels and the
collectives of each layer, the LM head and the pipeline sends, for ``m`` tokens on one device of the TP group
(docs/model_serving.md). Cost vectors have four slots ``K_*``: GEMM, attention, memory-bound, communication.
"""

from fastmodel.kernels.roofline import gemm_peak, tile_quantization
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layer import attention_dims, layer_mix, mlp_matrices
from fastmodel.kernels.lm.layout import (
    C_EP, C_FFN, C_GEMM_K_HALF, C_HBM_BW, C_HBM_EFF, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KERNEL_OVERHEAD_S, C_KV_HEADS,
    C_KV_LORA_RANK, C_MLA, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_PP, C_PRECISION,
    C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_Q_LORA_RANK, C_TP, C_VOCAB, C_WEIGHT_BYTES, PRECISION_FP8,
)
from fastmodel.kernels.columns import C_ATTENTION_DP, C_FP4_GEMM, C_GEMM_EFF_8, C_MOE_TP, C_PEAK_FLOPS_4
from fastmodel.kernels.nccl import allgather_time, allreduce_time, alltoall_time, p2p_time


#: bytes per activation element and per embedding / LM-head weight (kept in 16 bits by quantized recipes)
ACT_BYTES = 2.0

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
    """True when the GEMMs run in FP8."""
    return row[C_PRECISION] == PRECISION_FP8


@njit(inline="always")
def serve_gemm_peak(row):
    """Attainable GEMM FLOP/s of a serving configuration: FP4 weights on a device with FP4 tensor cores run
    W4A4 at the FP4 peak (x the FP8 large-GEMM efficiency: no FP4 microbenchmark in the device files); FP4
    weights elsewhere are dequantised into 16-bit GEMMs (weight-only, as Hopper runs MXFP4: Marlin/Triton);
    else the FP8 or 16-bit peak (``kernels/roofline.gemm_peak``)."""
    if row[C_FP4_GEMM] > 0.0 and row[C_PEAK_FLOPS_4] > 0.0:
        return row[C_PEAK_FLOPS_4] * row[C_GEMM_EFF_8]
    return gemm_peak(row, is_fp8(row))


@njit(inline="always")
def weight_gemm(row, groups, m, n, k, wbytes, launch):
    """Roofline seconds of ``groups`` (m x k) @ (k x n) GEMMs against weights of ``wbytes`` per element:
    ``max(FLOPs / (peak x quantization x depth), (weights + activations) / HBM)`` (kernels/roofline.py terms;
    depth = k / (k + gemm_k_half)); ``launch`` (1.0 or 0.0) adds the kernel launch overhead."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    quantization = tile_quantization(row, groups, m, n, k)
    compute = 2.0 * groups * m * n * (k + row[C_GEMM_K_HALF]) / (serve_gemm_peak(row) * quantization)
    traffic = groups * (wbytes * n * k + ACT_BYTES * (m * k + m * n))
    memory = traffic / (row[C_HBM_BW] * row[C_HBM_EFF])
    return max(compute, memory) + launch * row[C_KERNEL_OVERHEAD_S]


@njit
def experts_touched(experts, topk, tokens):
    """Expected distinct experts a step of ``tokens`` tokens reads: E (1 - (1 - k/E)^tokens)."""
    if experts <= 0.0 or tokens <= 0.0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


@njit(inline="always")
def expert_tp(row):
    """Tensor-parallel degree of each expert: ``moe_tp`` when given, else the GPUs of a stage that EP leaves
    (tp x attention_dp / ep; TRT-LLM's default moe_tp = tp, moe_ep = 1 at attention_dp = ep = 1)."""
    if row[C_MOE_TP] > 0.0:
        return row[C_MOE_TP]
    return row[C_TP] * row[C_ATTENTION_DP] / row[C_EP]


@njit(inline="always")
def ffn_tp(row):
    """Tensor-parallel degree of dense MLPs and shared experts: every GPU of a stage (tp x attention_dp; under
    attention DP the MLP gathers the tokens of every attention group, SGLang/TRT-LLM attention DP)."""
    return row[C_TP] * row[C_ATTENTION_DP]


@njit
def layer_gemms(row, m, moe, launch, m_rank=-1.0):
    """GEMM seconds of one layer for ``m`` tokens of the stage on one GPU (weights read once per call); the
    attention side of the busiest attention-DP group sees ``m_rank`` tokens (default: m / attention_dp)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    t = row[C_TP]
    wb = row[C_WEIGHT_BYTES]
    dqk, dv = attention_dims(row)
    nm = mlp_matrices(row)
    mlp_m = m
    m = m_rank if m_rank >= 0.0 else m / row[C_ATTENTION_DP]
    ft = ffn_tp(row)
    total = 0.0
    if row[C_MLA] > 0.0:
        q_rank = row[C_Q_LORA_RANK]
        if q_rank > 0.0:
            total += weight_gemm(row, 1.0, m, q_rank, h, wb, launch)
            total += weight_gemm(row, 1.0, m, a * dqk / t, q_rank, wb, launch)
        else:
            total += weight_gemm(row, 1.0, m, a * dqk / t, h, wb, launch)
        kv_rank = row[C_KV_LORA_RANK]
        total += weight_gemm(row, 1.0, m, kv_rank + row[C_QK_ROPE_HEAD_DIM], h, wb, launch)
        total += weight_gemm(row, 1.0, m, a * (row[C_QK_NOPE_HEAD_DIM] + dv) / t, kv_rank, wb, launch)
    else:
        total += weight_gemm(row, 1.0, m, (a + 2.0 * row[C_KV_HEADS]) * row[C_HEAD_DIM] / t, h, wb, launch)
    total += weight_gemm(row, 1.0, m, h, a * dv / t, wb, launch)
    if moe:
        experts = row[C_MOE_EXPERTS]
        ep = row[C_EP]
        width = row[C_MOE_FFN] / expert_tp(row)
        touched = experts_touched(experts, row[C_MOE_TOPK], mlp_m) / ep
        rows = mlp_m * row[C_MOE_TOPK] / ep / max(touched, 1e-30)
        total += weight_gemm(row, 1.0, m, experts, h, ACT_BYTES, launch)                 # router, 16-bit
        total += weight_gemm(row, touched, rows, (nm - 1.0) * width, h, wb, launch)
        total += weight_gemm(row, touched, rows, h, width, wb, launch)
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / ft
        total += weight_gemm(row, 1.0, mlp_m, (nm - 1.0) * shared, h, wb, launch)
        total += weight_gemm(row, 1.0, mlp_m, h, shared, wb, launch)
    else:
        f = row[C_FFN] / ft
        total += weight_gemm(row, 1.0, mlp_m, (nm - 1.0) * f, h, wb, launch)
        total += weight_gemm(row, 1.0, mlp_m, h, f, wb, launch)
    return total


@njit
def layer_memory_bound(row, m, moe):
    """Memory-bound seconds of one layer for ``m`` tokens on one GPU: 2 norms + 2 residual adds (10 h elements
    moved per token), the MLP activation (read nm - 1, write 1 of the local width), rotary on Q and K."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    dqk, dv = attention_dims(row)
    nm = mlp_matrices(row)
    if moe:
        width = row[C_MOE_TOPK] * row[C_MOE_FFN] / row[C_TP] + row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
    else:
        width = row[C_FFN] / t
    nbytes = ACT_BYTES * m * (10.0 * h + nm * width + 4.0 * (row[C_HEADS] + row[C_KV_HEADS]) * dqk / t)
    return nbytes / (row[C_HBM_BW] * row[C_HBM_EFF])


@njit
def layer_comm(row, m, moe, m_rank=-1.0):
    """Communication seconds of one layer for ``m`` tokens of the stage (``m_rank`` on the busiest attention-DP
    group, default m / attention_dp): the attention block's TP allreduce of m_rank x h 16-bit activations; the
    MLP's allreduce over every GPU of the stage (tp x attention_dp: under attention DP it gathers every group's
    tokens); with ep > 1 the MoE block's allreduce becomes a dispatch and a combine all-to-all over ep and an
    allreduce over each expert's moe_tp GPUs."""
    t = row[C_TP]
    adp = row[C_ATTENTION_DP]
    mine = m_rank if m_rank >= 0.0 else m / adp
    nbytes = ACT_BYTES * mine * row[C_HIDDEN]
    attention = allreduce_time(row, nbytes, t, 1.0)
    if moe and row[C_EP] > 1.0:
        ep = row[C_EP]
        a2a = alltoall_time(row, nbytes * row[C_MOE_TOPK], ep, 1.0)
        etp = expert_tp(row)
        return attention + 2.0 * a2a + allreduce_time(row, nbytes, etp, ep)
    if adp > 1.0:
        return attention + allreduce_time(row, ACT_BYTES * m * row[C_HIDDEN], ffn_tp(row), 1.0)
    return 2.0 * attention


@njit
def head_costs(row, r, launch, costs):
    """LM head on ``r`` tokens of one attention group (vocab-parallel over tp, 16-bit weights) and the gather of
    the logits, added to ``costs``."""
    t = row[C_TP]
    costs[K_GEMM] += weight_gemm(row, 1.0, r, row[C_VOCAB] / t, row[C_HIDDEN], ACT_BYTES, launch)
    costs[K_COMM] += allgather_time(row, ACT_BYTES * r * row[C_VOCAB], t, 1.0) if t > 1.0 else 0.0


@njit
def pipeline_comm(row, m):
    """Point-to-point sends of m x h activations across the pp - 1 stage boundaries."""
    p = row[C_PP]
    if p <= 1.0:
        return 0.0
    return (p - 1.0) * p2p_time(row, ACT_BYTES * m * row[C_HIDDEN], row[C_TP])


@njit
def body_costs(row, m, launch, costs, m_rank=-1.0):
    """Every layer's GEMM, memory-bound and communication seconds for ``m`` tokens of the stage (``m_rank`` on
    the busiest attention-DP group; default m / attention_dp), added to ``costs``; returns the experts touched
    per MoE layer."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    n_dense = dense_full + dense_slide
    n_moe = moe_full + moe_slide
    mine = m_rank if m_rank >= 0.0 else m / row[C_ATTENTION_DP]
    costs[K_MEM] += launch * row[C_KERNEL_OVERHEAD_S] * ((n_dense + n_moe) * MEM_KERNELS_DENSE + n_moe * MEM_KERNELS_MOE)
    if n_dense > 0.0:
        costs[K_GEMM] += n_dense * layer_gemms(row, m, DENSE, launch, mine)
        costs[K_MEM] += n_dense * layer_memory_bound(row, mine, DENSE)
        costs[K_COMM] += n_dense * layer_comm(row, m, DENSE, mine)
    touched = 0.0
    if n_moe > 0.0:
        costs[K_GEMM] += n_moe * layer_gemms(row, m, MOE, launch, mine)
        costs[K_MEM] += n_moe * layer_memory_bound(row, mine, MOE)
        costs[K_COMM] += n_moe * layer_comm(row, m, MOE, mine)
        touched = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m)
    costs[K_COMM] += pipeline_comm(row, mine)
    return touched
