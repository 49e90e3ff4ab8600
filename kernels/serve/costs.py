"""Serving costs of the model body: roofline GEMMs against sharded weights, memory-bound kernels and the
collectives of each layer, the LM head and the pipeline sends, for ``m`` tokens on one device of the TP group
(docs/model_serving.md). The layer's shape -- its GEMM list and GEMM model, the expert sharding, the
element-wise bytes -- is the training model's (``kernels/lm/shape.py``); this module says how serving runs it
(tokens per step, experts a step touches, checkpoint weight bytes, CUDA-graph launches). Cost vectors have four
slots ``K_*``: GEMM, attention, memory-bound, communication.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.shape import (  # noqa: F401 - ACT_BYTES, expert_tp re-exported for serving modules
    ACT_BYTES, attention_dims, elementwise_bytes, expert_tp, layer_gemm_time, layer_mix,
)
from fastmodel.kernels.roofline import gemm_roofline, memory_bound_time
from fastmodel.kernels.lm.layout import (
    C_EP, C_FFN, C_HEADS, C_HIDDEN, C_KV_HEADS,
    C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_PP, C_PRECISION,
    C_STACK_COMPUTE_EFF, C_TP, C_VOCAB, C_WEIGHT_BYTES, PRECISION_FP8,
)
from fastmodel.kernels.nccl import allgather_time, allreduce_time, alltoall_time, p2p_time

#: flags passed as floats, not bools: numba types a constant bool argument as a literal and compiles one
#: specialisation of the callee per value (and of everything it calls); a float flag compiles once
DENSE = 0.0
MOE = 1.0
LAUNCH = 1.0      # every GEMM pays its launch overhead (prefill: one kernel per GEMM)
NO_LAUNCH = 0.0   # launches hidden (decode steps run as a captured CUDA graph)

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


@njit
def experts_touched(experts, topk, tokens):
    """Expected distinct experts a step of ``tokens`` tokens reads: E (1 - (1 - k/E)^tokens)."""
    if experts <= 0.0 or tokens <= 0.0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


@njit
def layer_gemms(row, m, moe, launch):
    """GEMM seconds of one layer for ``m`` tokens on one TP rank: the layer's GEMM list
    (``kernels/lm/shape.layer_gemm_time``) with the checkpoint's weight bytes, weights read once per call; the
    routed experts are those the step touches on this device (:func:`experts_touched` / ep), each at
    ``moe_ffn / (tp / ep)`` (``shape.expert_tp``), sharing the ``m top_k / ep`` routed rows."""
    if moe:
        ep = row[C_EP]
        groups = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m) / ep
        rows = m * row[C_MOE_TOPK] / ep / max(groups, 1e-30)
        return layer_gemm_time(row, m, MOE, groups, rows, expert_tp(row, 1.0), is_fp8(row), row[C_WEIGHT_BYTES],
                               launch)
    return layer_gemm_time(row, m, DENSE, 0.0, 0.0, 1.0, is_fp8(row), row[C_WEIGHT_BYTES], launch)


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
    return memory_bound_time(row, nbytes)


@njit
def layer_comm(row, m, moe):
    """Communication seconds of one layer for ``m`` tokens: two TP allreduces of m x h 16-bit activations;
    with ep > 1 the MoE block's allreduce becomes a dispatch and a combine all-to-all over ep."""
    t = row[C_TP]
    nbytes = ACT_BYTES * m * row[C_HIDDEN]
    if moe and row[C_EP] > 1.0:
        ep = row[C_EP]
        a2a = alltoall_time(row, nbytes * row[C_MOE_TOPK], ep, 1.0)
        etp = expert_tp(row, 1.0)
        return allreduce_time(row, nbytes, t, 1.0) + 2.0 * a2a + allreduce_time(row, nbytes, etp, ep)
    return 2.0 * allreduce_time(row, nbytes, t, 1.0)


@njit
def head_costs(row, r, launch, costs):
    """LM head on ``r`` tokens (vocab-parallel, 16-bit weights) and the gather of the logits, added to ``costs``."""
    t = row[C_TP]
    costs[K_GEMM] += gemm_roofline(row, 1.0, r, row[C_VOCAB] / t, row[C_HIDDEN], False, ACT_BYTES, launch) \
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
def body_costs(row, m, launch, costs):
    """Every layer's GEMM, memory-bound and communication seconds for ``m`` tokens, added to ``costs``;
    returns the experts touched per MoE layer."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    n_dense = dense_full + dense_slide
    n_moe = moe_full + moe_slide
    if n_dense > 0.0:
        costs[K_GEMM] += n_dense * layer_gemms(row, m, DENSE, launch)
        costs[K_MEM] += n_dense * layer_memory_bound(row, m, DENSE)
        costs[K_COMM] += n_dense * layer_comm(row, m, DENSE)
    touched = 0.0
    if n_moe > 0.0:
        costs[K_GEMM] += n_moe * layer_gemms(row, m, MOE, launch)
        costs[K_MEM] += n_moe * layer_memory_bound(row, m, MOE)
        costs[K_COMM] += n_moe * layer_comm(row, m, MOE)
        touched = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m)
    costs[K_COMM] += pipeline_comm(row, m)
    return touched
