"""Serving memory of one device: weights of its pipeline stage and the activation workspace of an engine step
(the KV cache per token is in kernels/serve/attention.py; docs/model_serving.md).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.shape import (
    attention_dims, attention_params, expert_weight_params, layer_mix, mlp_matrices, mlp_params, norm_params,
)
from fastmodel.kernels.lm.layout import (
    C_FFN, C_HEADS, C_HIDDEN, C_INPUT_LEN, C_KV_HEADS, C_MAX_NUM_TOKENS, C_MOE_EXPERTS, C_MOE_FFN,
    C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_PP, C_TIED_EMBEDDINGS, C_TP, C_VOCAB, C_WEIGHT_BYTES,
)
from fastmodel.kernels.columns import (
    C_CUDA_CONTEXT_BYTES,
    C_CUSTOM_ALLREDUCE_BYTES,
    C_FRAMEWORK_MEMORY_BYTES,
    C_HBM_BYTES,
    C_KV_BUDGET_OF_TOTAL,
    C_KV_CACHE_MEM_FRACTION,
    C_KV_SNAPSHOT_AFTER_NCCL,
    C_NCCL_CHANNELS,
    C_QUANT_EXPERTS_ONLY,
)
from fastmodel.registry.lm_overhead import NCCL_LL128_BYTES, NCCL_LL_BYTES, NCCL_SIMPLE_BYTES
from fastmodel.kernels.serve.costs import ACT_BYTES, DENSE, MOE, ffn_tp, serve_etp


# --- memory ----------------------------------------------------------------------

#: one ring connection's NCCL buffers, LL + LL128 + Simple (as kernels/lm/memory.py's nccl_buffer_bytes)
NCCL_RING_BYTES = float(NCCL_LL_BYTES + NCCL_LL128_BYTES + NCCL_SIMPLE_BYTES)
#: vLLM CustomAllreduce's torch tensor of registered IPC pointer tuples, 8 MiB (vllm@v0.11.2
#: vllm/distributed/device_communicators/custom_all_reduce.py:187-189; the same at 0.10.2)
VLLM_CA_RANK_DATA_BYTES = 8.0 * 2**20

@njit
def layer_weight_params(row, moe):
    """Weight elements of one layer held by one device: attention split over tp (replicated over the attention-DP
    groups), experts over ep x their expert TP (``costs.serve_etp``), dense MLPs and shared experts over
    tp x attention_dp."""
    t = row[C_TP]
    params = attention_params(row) / t + norm_params(row)      # kernels/lm/shape.py, as training counts them
    if moe:
        params += expert_weight_params(row, serve_etp(row))
        params += mlp_params(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]) / ffn_tp(row)
    else:
        params += mlp_params(row, row[C_FFN]) / ffn_tp(row)
    return params


@njit
def weight_memory(row):
    """Weight bytes of the most loaded device: its stage's layers at weight_bytes (with ``quant_experts_only``
    only the routed experts, the rest BF16), the 16-bit embedding on the first stage and the LM head on the
    last (both on one device without pp); router in 16 bits."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    p = row[C_PP]
    n_moe = moe_full + moe_slide
    per_stage = ((dense_full + dense_slide) * layer_weight_params(row, DENSE)
                 + n_moe * layer_weight_params(row, MOE)) / p
    router = n_moe / p * row[C_HIDDEN] * row[C_MOE_EXPERTS]
    table = row[C_VOCAB] * row[C_HIDDEN] / row[C_TP] * ACT_BYTES
    head = 0.0 if row[C_TIED_EMBEDDINGS] > 0.0 else table
    edges = table + head if p <= 1.0 else max(table, head)
    if row[C_QUANT_EXPERTS_ONLY] > 0.0:
        experts = n_moe / p * expert_weight_params(row, serve_etp(row))
        return experts * row[C_WEIGHT_BYTES] + (per_stage - experts + router) * ACT_BYTES + edges
    return per_stage * row[C_WEIGHT_BYTES] + router * ACT_BYTES + edges


@njit
def activation_memory(row, requests):
    """Workspace of one engine step of up to max_num_tokens tokens: the widest layer's live activations
    (residual, normed input, QKV, attention output, the MLP's nm - 1 inputs and its output) in 16 bits, and
    the FP32 logits of ``requests`` sampled tokens."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    nm = mlp_matrices(row)
    if row[C_MOE_EXPERTS] > 0.0:
        width = (row[C_MOE_TOPK] + row[C_MOE_SHARED_EXPERTS]) * row[C_MOE_FFN] / t
    else:
        width = row[C_FFN] / t
    dqk, dv = attention_dims(row)
    per_token = ACT_BYTES * (3.0 * h + (row[C_HEADS] + 2.0 * row[C_KV_HEADS]) * dqk / t + nm * width)
    tokens = min(row[C_MAX_NUM_TOKENS], max(requests, requests * row[C_INPUT_LEN]))
    return tokens * per_token + requests * row[C_VOCAB] / t * 4.0


@njit(inline="always")
def snapshot_bytes(row):
    """Device memory that vLLM's start-up ``MemorySnapshot`` already holds, so its ``non_kv_cache_memory`` (non-torch
    increase measured from that snapshot) leaves it out and it lies in the ``1 - f`` headroom (docs/model_serving.md
    S66): the CUDA context (``cuda_context_bytes``); at ``tp > 1`` with the engine's own allreduce
    (``custom_allreduce_bytes > 0``) CustomAllreduce's 8 MiB torch ``rank_data`` (allocated outside the profile run
    at either version); with ``kv_snapshot_after_nccl`` also the TP communicator's NCCL ring buffers,
    ``nccl_channels (LL + LL128 + Simple)``, and CustomAllreduce's two IPC buffers, ``meta`` and ``buffer``, about
    ``2 custom_allreduce_bytes`` (custom_all_reduce.py:176-181 @v0.11.2)."""
    held = row[C_CUDA_CONTEXT_BYTES]
    if row[C_TP] > 1.0:
        ca = row[C_CUSTOM_ALLREDUCE_BYTES] > 0.0
        if ca:
            held += VLLM_CA_RANK_DATA_BYTES
        if row[C_KV_SNAPSHOT_AFTER_NCCL] > 0.0:
            held += row[C_NCCL_CHANNELS] * NCCL_RING_BYTES
            if ca:
                held += 2.0 * row[C_CUSTOM_ALLREDUCE_BYTES]
    return held


@njit(inline="always")
def kv_capacity(row, weights, workspace):
    """KV-cache bytes one device allocates, at least 0, from ``f = kv_cache_mem_fraction`` and the non-KV memory
    ``m = weights + workspace`` (the step's activations, :func:`activation_memory`) ``+`` the framework constant
    ``F``: ``f (HBM - m)`` where f is a share of what the warm-up run left free (TensorRT-LLM
    ``free_gpu_memory_fraction``, ``KvCacheCreator._cal_max_tokens``); with ``kv_budget_of_total`` (vLLM
    ``gpu_memory_utilization``: ``requested_memory - non_kv_cache_memory``, ``Worker.determine_available_memory``)
    ``f HBM - weights - workspace - (F - min(F, snapshot))``, vLLM subtracting only the non-torch memory added after
    its start-up snapshot (:func:`snapshot_bytes`; docs/model_serving.md S66)."""
    framework = row[C_FRAMEWORK_MEMORY_BYTES]
    f = row[C_KV_CACHE_MEM_FRACTION]
    if row[C_KV_BUDGET_OF_TOTAL] > 0.0:
        after = framework - min(framework, snapshot_bytes(row))
        return max(0.0, f * row[C_HBM_BYTES] - (weights + workspace + after))
    return max(0.0, f * (row[C_HBM_BYTES] - (weights + workspace + framework)))
