"""LLM serving: prefill, decode, KV cache and the largest batch that fits (docs/model_serving.md).

One configuration is one column vector ``row`` (``fastmodel.variables`` columns,
``SERVE_COLUMNS`` included). Times are whole-model times of one device of the TP
group (every layer, weights sharded over ``tp``); with ``pp`` stages the batch is
cut into ``pp`` micro-batches that keep every stage busy, so a request sees the
whole-model time at ``batch / pp`` requests per token and the instance emits
``batch`` tokens in that time.

- **Prefill** of ``r`` prompts of ``input_len`` tokens, in chunks of at most
  ``max_num_tokens`` tokens: roofline GEMMs at ``m`` = chunk tokens (weights read
  once per chunk), flash attention over the causal prompt, memory-bound kernels,
  two TP allreduces per layer per chunk, the LM head on the last token of each prompt.
- **Decode** step at ``n`` requests: GEMMs with ``m = n`` whose weights are read
  once per step for the whole batch (memory-bound below the roofline crossover),
  attention as a roofline of its own ``max(FLOPs / attention peak, (KV + Q + O bytes)
  / HBM)``, which is affine in the context on each side of its crossover, and small
  allreduces that pay their latency. No launch overhead: engines replay decode as
  CUDA graphs.
- The **sum over output tokens** of a static batch is exact: the step time is
  ``D0 + sum_layers max(p0 + p1 c, q0 + q1 min(c, window))``; each sum is split at
  its roofline crossover (and the window) and summed in closed form.
- **Continuous batching** (concurrency, max_throughput) is a stationary step:
  ``n`` slots, each step ``n (O-1)/O`` decode tokens plus ``n/O`` prompts of
  prefill (chunked prefill), attention over the mean in-flight context.
- **MoE decode**: a step of ``m`` tokens reads ``E (1 - (1 - k/E)^m)`` experts
  per MoE layer (each token picks ``k`` of ``E`` uniformly).
- **max_throughput**: the largest batch whose KV cache at full length
  (``input_len + output_len``) fits ``kv_cache_mem_fraction`` of the HBM left
  after weights, workspace and the framework constant, capped by
  ``max_batch_size`` and by what the step token budget can feed.
"""

import math

import numpy as np

from fastmodel.kernels.compute import attention_time, gemm_peak, tile_quantization
from fastmodel.kernels.jit import njit, prange
from fastmodel.kernels.lm_layout import (
    C_ATTN_EFF, C_BATCH_SIZE, C_EP, C_FFN, C_FRAMEWORK_MEMORY_BYTES, C_GEMM_K_HALF, C_HBM_BW,
    C_HBM_BYTES, C_HBM_EFF, C_HEAD_DIM, C_HEADS, C_HIDDEN, C_INPUT_LEN, C_INSTANCES, C_KERNEL_OVERHEAD_S,
    C_KV_BYTES, C_KV_CACHE_MEM_FRACTION, C_KV_HEADS, C_KV_LORA_RANK, C_LAYERS, C_LOAD_MODE, C_MAX_BATCH_SIZE,
    C_MAX_NUM_TOKENS, C_MLA, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_N_GPUS, C_OUTPUT_LEN,
    C_PEAK_FLOPS_16, C_PEAK_FLOPS_8, C_PP, C_PRECISION, C_Q_LORA_RANK, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM,
    C_SEQ_LEN, C_SERVE_STEP_OVERHEAD_S, C_SLIDING_WINDOW, C_TIED_EMBEDDINGS, C_TP, C_USABLE_HBM_FRACTION, C_VOCAB,
    C_WEIGHT_BYTES, LOAD_BATCH, LOAD_MAX_THROUGHPUT, N_SERVE_RESULTS, PRECISION_FP8, S_ACTIVATION_MEMORY, S_BATCH_SIZE,
    S_CLUSTER_OUTPUT_TOKENS_PER_S, S_DECODE_ATTENTION, S_DECODE_COMM, S_DECODE_GEMM, S_DECODE_MEMORY_BOUND,
    S_DECODE_OVERHEAD, S_E2E_LATENCY, S_EXPERTS_TOUCHED, S_FITS_MEMORY, S_KV_BYTES_PER_TOKEN, S_KV_CACHE_CAPACITY,
    S_KV_CACHE_MEMORY, S_MEMORY_PER_DEVICE, S_OUTPUT_TOKENS_PER_S, S_OUTPUT_TOKENS_PER_S_PER_GPU,
    S_OUTPUT_TOKENS_PER_S_PER_USER, S_PREFILL_ATTENTION, S_PREFILL_COMM, S_PREFILL_GEMM, S_PREFILL_MEMORY_BOUND,
    S_TPOT, S_TTFT, S_WEIGHT_MEMORY,
)
from fastmodel.kernels.lm_step import attention_dims, attention_params, layer_mix, mlp_matrices
from fastmodel.kernels.network import allgather_time, allreduce_time, alltoall_time, p2p_time

#: bytes per activation element and per embedding / LM-head weight (kept in 16 bits by quantized recipes)
ACT_BYTES = 2.0

# status codes (fastmodel.variables.SERVE_STATUS_NAMES)
ST_OK = 0
ST_HEADS = 1
ST_LAYERS = 2
ST_EP = 3
ST_FP8 = 4
ST_NO_KV = 5

# slots of a cost vector: (gemm, attention, memory-bound, communication)
K_GEMM = 0
K_ATTN = 1
K_MEM = 2
K_COMM = 3


# --- building blocks ---------------------------------------------------------

@njit(inline="always")
def _fp8(row):
    return row[C_PRECISION] == PRECISION_FP8


@njit(inline="always")
def weight_gemm(row, groups, m, n, k, wbytes, launch):
    """Roofline seconds of ``groups`` (m x k) @ (k x n) GEMMs against weights of ``wbytes`` per element:
    ``max(FLOPs / (peak x quantization x depth), (weights + activations) / HBM)`` (kernels/compute.py terms;
    depth = k / (k + gemm_k_half))."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    quantization = tile_quantization(row, groups, m, n, k)
    compute = 2.0 * groups * m * n * (k + row[C_GEMM_K_HALF]) / (gemm_peak(row, _fp8(row)) * quantization)
    traffic = groups * (wbytes * n * k + ACT_BYTES * (m * k + m * n))
    memory = traffic / (row[C_HBM_BW] * row[C_HBM_EFF])
    return max(compute, memory) + (row[C_KERNEL_OVERHEAD_S] if launch else 0.0)


@njit
def experts_touched(experts, topk, tokens):
    """Expected distinct experts a step of ``tokens`` tokens reads: E (1 - (1 - k/E)^tokens)."""
    if experts <= 0.0 or tokens <= 0.0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


@njit(inline="always")
def expert_tp(row):
    """Tensor-parallel degree of each expert: experts spread over ep, each split over tp / ep."""
    return row[C_TP] / row[C_EP]


@njit
def layer_gemms(row, m, moe, launch):
    """GEMM seconds of one layer for ``m`` tokens on one TP rank (weights read once per call)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    t = row[C_TP]
    wb = row[C_WEIGHT_BYTES]
    dqk, dv = attention_dims(row)
    nm = mlp_matrices(row)
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
        touched = experts_touched(experts, row[C_MOE_TOPK], m) / ep
        rows = m * row[C_MOE_TOPK] / ep / max(touched, 1e-30)
        total += weight_gemm(row, 1.0, m, experts, h, ACT_BYTES, launch)                 # router, 16-bit
        total += weight_gemm(row, touched, rows, (nm - 1.0) * width, h, wb, launch)
        total += weight_gemm(row, touched, rows, h, width, wb, launch)
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
        total += weight_gemm(row, 1.0, m, (nm - 1.0) * shared, h, wb, launch)
        total += weight_gemm(row, 1.0, m, h, shared, wb, launch)
    else:
        f = row[C_FFN] / t
        total += weight_gemm(row, 1.0, m, (nm - 1.0) * f, h, wb, launch)
        total += weight_gemm(row, 1.0, m, h, f, wb, launch)
    return total


@njit
def layer_memory_bound(row, m, moe):
    """Memory-bound seconds of one layer for ``m`` tokens: 2 norms + 2 residual adds (10 h elements moved
    per token), the MLP activation (read nm - 1, write 1 of the local width), rotary on Q and K."""
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
def layer_comm(row, m, moe):
    """Communication seconds of one layer for ``m`` tokens: two TP allreduces of m x h 16-bit activations;
    with ep > 1 the MoE block's allreduce becomes a dispatch and a combine all-to-all over ep."""
    t = row[C_TP]
    nbytes = ACT_BYTES * m * row[C_HIDDEN]
    if moe and row[C_EP] > 1.0:
        ep = row[C_EP]
        a2a = alltoall_time(row, nbytes * row[C_MOE_TOPK], ep, 1.0)
        etp = expert_tp(row)
        return allreduce_time(row, nbytes, t, 1.0) + 2.0 * a2a + allreduce_time(row, nbytes, etp, ep)
    return 2.0 * allreduce_time(row, nbytes, t, 1.0)


@njit
def head_costs(row, r, launch, costs):
    """LM head on ``r`` tokens (vocab-parallel, 16-bit weights) and the gather of the logits, added to ``costs``."""
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
def body_costs(row, m, launch, costs):
    """Every layer's GEMM, memory-bound and communication seconds for ``m`` tokens, added to ``costs``;
    returns the experts touched per MoE layer."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    n_dense = dense_full + dense_slide
    n_moe = moe_full + moe_slide
    if n_dense > 0.0:
        costs[K_GEMM] += n_dense * layer_gemms(row, m, False, launch)
        costs[K_MEM] += n_dense * layer_memory_bound(row, m, False)
        costs[K_COMM] += n_dense * layer_comm(row, m, False)
    touched = 0.0
    if n_moe > 0.0:
        costs[K_GEMM] += n_moe * layer_gemms(row, m, True, launch)
        costs[K_MEM] += n_moe * layer_memory_bound(row, m, True)
        costs[K_COMM] += n_moe * layer_comm(row, m, True)
        touched = experts_touched(row[C_MOE_EXPERTS], row[C_MOE_TOPK], m)
    costs[K_COMM] += pipeline_comm(row, m)
    return touched


# --- attention -----------------------------------------------------------------

@njit
def decode_attention_dims(row):
    """(FLOPs per key per local head, KV bytes per token per layer on one device, Q+O bytes per query).

    MLA decodes in its absorbed form: every head attends to the shared latent (kv_lora_rank + rope wide,
    values kv_lora_rank wide), which is replicated over TP. Otherwise each device holds kv_heads / tp
    heads (at least one: KV heads are replicated when tp > kv_heads)."""
    t = row[C_TP]
    heads = row[C_HEADS] / t
    if row[C_MLA] > 0.0:
        latent = row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]
        flops = 2.0 * (latent + row[C_KV_LORA_RANK])
        kv_token = latent * row[C_KV_BYTES]
        qo = ACT_BYTES * heads * (latent + row[C_KV_LORA_RANK])
        return flops, kv_token, qo
    dh = row[C_HEAD_DIM]
    local_kv = max(1.0, row[C_KV_HEADS] / t)
    return 2.0 * 2.0 * dh, 2.0 * local_kv * dh * row[C_KV_BYTES], ACT_BYTES * heads * 2.0 * dh


@njit
def kv_bytes_per_token(row):
    """KV-cache bytes of one token on one device: layers / pp x the per-layer bytes
    (= 2 x layers x kv_heads x head_dim x bytes at tp = pp = 1)."""
    _, kv_token, _ = decode_attention_dims(row)
    return row[C_LAYERS] / row[C_PP] * kv_token


@njit
def attention_lines(row, n):
    """The decode attention roofline of one layer for ``n`` requests at context c, as two lines:
    compute ``p1 c`` and memory ``q0 + q1 c`` (seconds)."""
    flops_key, kv_token, qo = decode_attention_dims(row)
    heads = row[C_HEADS] / row[C_TP]
    bw = row[C_HBM_BW] * row[C_HBM_EFF]
    p1 = n * heads * flops_key / (row[C_PEAK_FLOPS_16] * row[C_ATTN_EFF])
    q1 = n * kv_token / bw
    q0 = n * qo / bw
    return p1, q0, q1


@njit
def sum_max_lines(p0, p1, q0, q1, lo, hi):
    """Exact sum over integers c = lo..hi of max(p0 + p1 c, q0 + q1 c): split where the lines cross."""
    if hi < lo:
        return 0.0
    if p1 == q1:
        top0 = max(p0, q0)
        return (hi - lo + 1.0) * top0 + p1 * (hi - lo + 1.0) * (lo + hi) / 2.0
    # first c where line p is at least line q (p rises faster than q, or vice versa)
    cross = (q0 - p0) / (p1 - q1)
    if p1 > q1:
        split = max(lo, min(hi + 1.0, math.ceil(cross)))     # c >= split: line p on top
        low = _sum_line(q0, q1, lo, split - 1.0)
        high = _sum_line(p0, p1, split, hi)
    else:
        split = max(lo, min(hi + 1.0, math.floor(cross) + 1.0))  # c >= split: line q on top
        low = _sum_line(p0, p1, lo, split - 1.0)
        high = _sum_line(q0, q1, split, hi)
    return low + high


@njit(inline="always")
def _sum_line(c0, c1, lo, hi):
    if hi < lo:
        return 0.0
    count = hi - lo + 1.0
    return count * c0 + c1 * count * (lo + hi) / 2.0


@njit
def sum_window(p0, p1, q0, q1, lo, hi, window):
    """Exact sum over c = lo..hi of max(p0 + p1 w, q0 + q1 w) with w = min(c, window) (window <= 0: none)."""
    if window <= 0.0 or hi <= window:
        return sum_max_lines(p0, p1, q0, q1, lo, hi)
    below = sum_max_lines(p0, p1, q0, q1, lo, min(hi, window))
    capped = hi - max(lo, window + 1.0) + 1.0
    return below + max(0.0, capped) * max(p0 + p1 * window, q0 + q1 * window)


@njit
def decode_attention_sum(row, n, lo, hi):
    """Attention seconds of every layer summed over decode steps at contexts c = lo..hi, ``n`` requests."""
    p1, q0, q1 = attention_lines(row, n)
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    full = dense_full + moe_full
    slide = dense_slide + moe_slide
    total = full * sum_max_lines(0.0, p1, q0, q1, lo, hi)
    if slide > 0.0:
        total += slide * sum_window(0.0, p1, q0, q1, lo, hi, row[C_SLIDING_WINDOW])
    return total


@njit
def prefill_attention_flops(row, prompts, length):
    """Executed attention FLOPs per layer of ``prompts`` causal prompts of ``length`` tokens (flash kernels
    skip the masked half: length (length + 1) / 2 query-key pairs), for a full and a sliding layer."""
    dqk, dv = attention_dims(row)
    per_pair = 2.0 * (row[C_HEADS] / row[C_TP]) * (dqk + dv)
    full = length * (length + 1.0) / 2.0
    window = row[C_SLIDING_WINDOW]
    slide = full
    if window > 0.0 and length > window:
        slide = window * (window + 1.0) / 2.0 + (length - window) * window
    return prompts * per_pair * full, prompts * per_pair * slide


@njit
def prefill_attention_time(row, prompts, length):
    full, slide = prefill_attention_flops(row, prompts, length)
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    return (dense_full + moe_full) * attention_time(row, full) + (dense_slide + moe_slide) * attention_time(row, slide)


# --- phases --------------------------------------------------------------------

@njit
def prefill_costs(row, prompts, costs, part):
    """Prefill of ``prompts`` prompts of input_len tokens in chunks of <= max_num_tokens tokens (into ``costs``);
    returns the seconds."""
    tokens = prompts * row[C_INPUT_LEN]
    chunks = max(1.0, math.ceil(tokens / row[C_MAX_NUM_TOKENS]))
    m = tokens / chunks
    for k in range(4):
        part[k] = 0.0
    body_costs(row, m, True, part)
    head_costs(row, prompts / chunks, True, part)
    for k in range(4):
        costs[k] += chunks * part[k]
    costs[K_ATTN] += prefill_attention_time(row, prompts, row[C_INPUT_LEN])
    return costs[K_GEMM] + costs[K_ATTN] + costs[K_MEM] + costs[K_COMM]


@njit
def decode_fixed_costs(row, n, costs):
    """Context-independent seconds of one decode step of ``n`` requests (weights, norms, comm, head)."""
    touched = body_costs(row, n, False, costs)
    head_costs(row, n, False, costs)
    return touched


# --- memory ----------------------------------------------------------------------

@njit
def layer_weight_params(row, moe):
    """Weight elements of one layer held by one device."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    nm = mlp_matrices(row)
    params = attention_params(row) / t
    if moe:
        experts = row[C_MOE_EXPERTS]
        params += nm * h * row[C_MOE_FFN] * experts / (row[C_EP] * expert_tp(row))
        params += nm * h * row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
    else:
        params += nm * h * row[C_FFN] / t
    return params


@njit
def weight_memory(row):
    """Weight bytes of the most loaded device: its stage's layers at weight_bytes, the 16-bit embedding on
    the first stage and the LM head on the last (both on one device without pp); router in 16 bits."""
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    p = row[C_PP]
    n_moe = moe_full + moe_slide
    per_stage = ((dense_full + dense_slide) * layer_weight_params(row, False)
                 + n_moe * layer_weight_params(row, True)) / p
    router = n_moe / p * row[C_HIDDEN] * row[C_MOE_EXPERTS]
    table = row[C_VOCAB] * row[C_HIDDEN] / row[C_TP] * ACT_BYTES
    head = 0.0 if row[C_TIED_EMBEDDINGS] > 0.0 else table
    edges = table + head if p <= 1.0 else max(table, head)
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


# --- one configuration ---------------------------------------------------------------

@njit(inline="always")
def _divides(d, x):
    """True when the whole number ``d`` divides ``x`` (floor instead of fmod: cheaper in sweeps)."""
    return x == d * math.floor(x / d)


@njit
def check(row):
    """Status code of a serving configuration (0 legal)."""
    t = row[C_TP]
    if not _divides(t, row[C_HEADS]) or (row[C_KV_HEADS] > t and not _divides(t, row[C_KV_HEADS])):
        return ST_HEADS
    if not _divides(row[C_PP], row[C_LAYERS]):
        return ST_LAYERS
    if row[C_MOE_EXPERTS] > 0.0 and not (_divides(row[C_EP], t) and _divides(row[C_EP], row[C_MOE_EXPERTS])):
        return ST_EP
    if _fp8(row) and row[C_PEAK_FLOPS_8] <= 0.0:
        return ST_FP8
    return ST_OK


@njit
def serve_row(row, out, scratch):
    """Every serving result of one configuration into ``out`` (SERVE_RESULTS indices); returns its status.
    ``scratch``: a (3, 4) work array."""
    status = check(row)
    if status != ST_OK:
        return status
    p = row[C_PP]
    gpus = row[C_TP] * p
    inp = row[C_INPUT_LEN]
    outp = row[C_OUTPUT_LEN]
    mode = row[C_LOAD_MODE]
    kv_token = kv_bytes_per_token(row)
    kv_request = kv_token * (inp + outp)
    weights = weight_memory(row)
    overhead = row[C_FRAMEWORK_MEMORY_BYTES]
    steps = outp - 1.0                              # decode steps after the prefill's first token

    batch = row[C_BATCH_SIZE]
    if mode == LOAD_MAX_THROUGHPUT:
        workspace = activation_memory(row, row[C_MAX_BATCH_SIZE])
        capacity = max(0.0, row[C_KV_CACHE_MEM_FRACTION] * (row[C_HBM_BYTES] - weights - workspace - overhead))
        batch = min(math.floor(capacity / kv_request), row[C_MAX_BATCH_SIZE])
        if batch < 1.0:
            return ST_NO_KV
    if mode != LOAD_BATCH:
        # the step token budget feeds at most max_num_tokens x O / (I + O - 1) requests per micro-batch
        feed = math.floor(p * row[C_MAX_NUM_TOKENS] * outp / (inp + steps))
        batch = max(1.0, min(batch, feed))
    workspace = activation_memory(row, batch)
    capacity = max(0.0, row[C_KV_CACHE_MEM_FRACTION] * (row[C_HBM_BYTES] - weights - workspace - overhead))
    n = batch / p                                     # requests per pipeline micro-batch

    pre = scratch[0]
    dec = scratch[1]
    for k in range(4):
        pre[k] = 0.0
        dec[k] = 0.0
    host = row[C_SERVE_STEP_OVERHEAD_S]
    if mode == LOAD_BATCH:
        ttft = prefill_costs(row, batch, pre, scratch[2]) + host
        touched = decode_fixed_costs(row, n, dec)
        for k in range(4):
            dec[k] *= steps
        dec[K_ATTN] = decode_attention_sum(row, n, inp + 1.0, inp + steps)
        decode = dec[K_GEMM] + dec[K_ATTN] + dec[K_MEM] + dec[K_COMM] + steps * host
        e2e = ttft + decode
        tpot = decode / steps if steps > 0.0 else 0.0
        throughput = batch * outp / e2e
    else:
        # stationary continuous-batching step: n slots, n (O-1)/O decoding and n/O prompts being prefilled
        ttft = prefill_costs(row, 1.0, pre, scratch[2]) + host
        decoding = n * steps / outp
        m = decoding + n * inp / outp
        touched = body_costs(row, m, False, dec)
        head_costs(row, n, False, dec)
        mean_attention = decode_attention_sum(row, decoding, inp + 1.0, inp + steps) / steps if steps > 0.0 \
            else 0.0
        dec[K_ATTN] = mean_attention + prefill_attention_time(row, n / outp, inp)
        step = dec[K_GEMM] + dec[K_ATTN] + dec[K_MEM] + dec[K_COMM] + host
        for k in range(4):
            dec[k] *= steps
        tpot = step
        decode = steps * step
        e2e = ttft + decode
        throughput = batch / step
    kv_memory = kv_request * batch
    memory = weights + kv_memory + workspace + overhead
    if mode == LOAD_MAX_THROUGHPUT:
        fits = 1.0 if kv_memory <= capacity else 0.0
    else:
        fits = 1.0 if memory <= row[C_USABLE_HBM_FRACTION] * row[C_HBM_BYTES] else 0.0

    out[S_TTFT] = ttft
    out[S_TPOT] = tpot
    out[S_E2E_LATENCY] = e2e
    out[S_OUTPUT_TOKENS_PER_S] = throughput
    out[S_OUTPUT_TOKENS_PER_S_PER_GPU] = throughput / gpus
    out[S_OUTPUT_TOKENS_PER_S_PER_USER] = 1.0 / tpot if tpot > 0.0 else outp / e2e
    out[S_CLUSTER_OUTPUT_TOKENS_PER_S] = throughput * row[C_INSTANCES]
    out[S_BATCH_SIZE] = batch
    out[S_KV_BYTES_PER_TOKEN] = kv_token
    out[S_KV_CACHE_MEMORY] = kv_memory
    out[S_KV_CACHE_CAPACITY] = capacity
    out[S_WEIGHT_MEMORY] = weights
    out[S_ACTIVATION_MEMORY] = workspace
    out[S_MEMORY_PER_DEVICE] = memory
    out[S_FITS_MEMORY] = fits
    out[S_EXPERTS_TOUCHED] = touched
    out[S_PREFILL_GEMM] = pre[K_GEMM]
    out[S_PREFILL_ATTENTION] = pre[K_ATTN]
    out[S_PREFILL_MEMORY_BOUND] = pre[K_MEM]
    out[S_PREFILL_COMM] = pre[K_COMM]
    out[S_DECODE_GEMM] = dec[K_GEMM]
    out[S_DECODE_ATTENTION] = dec[K_ATTN]
    out[S_DECODE_MEMORY_BOUND] = dec[K_MEM]
    out[S_DECODE_COMM] = dec[K_COMM]
    out[S_DECODE_OVERHEAD] = steps * host
    return ST_OK


# --- fused passes ------------------------------------------------------------------

#: rows per prange chunk
CHUNK_ROWS = 256


@njit
def _serve_rows(params, status, out, lo, hi):
    result = np.empty(N_SERVE_RESULTS)
    scratch = np.empty((3, 4))
    row = np.empty(params.shape[0])
    for r in range(lo, hi):
        for k in range(params.shape[0]):
            row[k] = params[k, r]
        _emit(row, result, scratch, status, out, r)


@njit(inline="always")
def _emit(row, result, scratch, status, out, r):
    code = serve_row(row, result, scratch)
    status[r] = code
    if code == ST_OK:
        for v in range(N_SERVE_RESULTS):
            out[v, r] = result[v]
    else:
        for v in range(N_SERVE_RESULTS):
            out[v, r] = np.nan


@njit(parallel=True)
def serve_parallel(params, status, out):
    """Evaluate every row of ``params`` (N_COLUMNS x n) into ``out`` (N_SERVE_RESULTS x n) and ``status``."""
    n = params.shape[1]
    chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for chunk in prange(chunks):
        lo = chunk * CHUNK_ROWS
        _serve_rows(params, status, out, lo, min(n, lo + CHUNK_ROWS))


@njit
def serve_serial(params, status, out):
    """Single-threaded :func:`serve_parallel` for small tables."""
    _serve_rows(params, status, out, 0, params.shape[1])


@njit
def _grid_rows(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, lo, hi):
    result = np.empty(N_SERVE_RESULTS)
    scratch = np.empty((3, 4))
    row = base.copy()
    axes = shape.shape[0]
    index = np.empty(axes, dtype=np.int64)
    rest = lo
    for a in range(axes - 1, -1, -1):          # the first row's grid index; later rows count up (odometer)
        index[a] = rest % shape[a]
        rest //= shape[a]
    changed = 0                                # axes >= changed were set for this row
    for r in range(lo, hi):
        for a in range(changed, axes):
            size = shape[a]
            i = index[a]
            for j in range(col_start[a], col_start[a + 1]):
                row[axis_cols[j]] = axis_vals[val_start[a] + (j - col_start[a]) * size + i]
        if derive[0]:
            row[C_N_GPUS] = row[C_TP] * row[C_PP]
        if derive[1]:
            row[C_SEQ_LEN] = row[C_INPUT_LEN] + row[C_OUTPUT_LEN]
        _emit(row, result, scratch, status, out, r)
        if axes == 0:
            continue
        changed = axes - 1
        while changed > 0 and index[changed] + 1 == shape[changed]:
            index[changed] = 0
            changed -= 1
        index[changed] += 1


@njit(parallel=True)
def serve_grid(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out):
    """Evaluate a Cartesian grid without materialising its parameter table: row r is ``base`` with, for every
    axis a (C order, last fastest), the columns ``axis_cols[col_start[a]:col_start[a+1]]`` set to that axis's
    values at index i_a (``axis_vals[val_start[a] + j * shape[a] + i_a]`` for its j-th column); then
    ``derive`` (n_gpus = tp x pp, seq_len = input_len + output_len). Results into ``out`` and ``status``."""
    n = out.shape[1]
    chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for chunk in prange(chunks):
        lo = chunk * CHUNK_ROWS
        _grid_rows(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, lo,
                   min(n, lo + CHUNK_ROWS))
