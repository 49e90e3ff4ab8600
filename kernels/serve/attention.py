"""Serving attention: the decode roofline as two lines in the context, their exact sums over a request's
output tokens (split at the crossover and the sliding window), the KV cache per token, and prefill attention
over causal prompts (docs/model_serving.md).
"""

import math

from fastmodel.kernels.roofline import attention_fwd_time, attention_grid_share
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.shape import attention_dims, chunk_pairs, layer_mix
from fastmodel.kernels.lm.layout import (
    C_ATTENTION_CHUNK, C_ATTN_EFF, C_CHUNK_KV_LOCAL,
    C_HBM_BW, C_HBM_EFF, C_HEADS, C_HEAD_DIM, C_KERNEL_OVERHEAD_S, C_KV_BYTES, C_KV_HEADS, C_KV_LORA_RANK, C_LAYERS, C_MLA,
    C_PEAK_FLOPS_16, C_PP, C_QK_ROPE_HEAD_DIM, C_SLIDING_WINDOW, C_TP,
)
from fastmodel.kernels.serve.costs import ACT_BYTES
from fastmodel.kernels.columns import C_ATTENTION_DP, C_ATTN_TILE_Q, C_KV_WRITE_KERNEL, C_Q_QUANT_KERNEL


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
def kv_held_tokens(row, held):
    """Tokens of context whose KV a request holding ``held`` tokens keeps, in full-attention layers' tokens:
    ``held`` without chunked layers or where the engine keeps their whole context (``chunk_kv_local`` 0); else a
    chunked layer keeps at most its current chunk's C tokens (vLLM 0.18.0 ``ChunkedLocalAttentionManager.
    get_num_skipped_tokens`` frees the blocks before the chunk; docs/model_serving.md S60), so with a share f of
    chunked layers held (1 - f) + f min(held, C)."""
    chunk = row[C_ATTENTION_CHUNK]
    if chunk <= 0.0 or held <= chunk or row[C_CHUNK_KV_LOCAL] <= 0.0:
        return held
    _, dense_chunk, _, moe_chunk = layer_mix(row)
    share = (dense_chunk + moe_chunk) / row[C_LAYERS]
    return held * (1.0 - share) + chunk * share


@njit
def attention_lines(row, n):
    """The decode attention roofline of one layer for ``n`` requests at context c, as two lines:
    compute ``p1 c`` and memory ``q0 + q1 c`` (seconds). Under attention DP the ``n`` requests are spread over
    the attention_dp groups: one GPU attends over n / attention_dp of them."""
    n = n / row[C_ATTENTION_DP]
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
def sum_chunk(p0, p1, q0, q1, lo, hi, chunk):
    """Exact sum over c = lo..hi of max(p0 + p1 w, q0 + q1 w) with w = c - C floor((c - 1) / C), the keys of the
    query at context c on a chunked layer (its own chunk's, itself included; chunk <= 0: none): the first and last
    chunks' partial runs plus the whole chunks between them, each an arithmetic sum (docs/model_serving.md S60)."""
    if chunk <= 0.0 or hi <= chunk:
        return sum_max_lines(p0, p1, q0, q1, lo, hi)
    total = 0.0
    if lo < 1.0:                                   # contexts below 1 sit in no chunk: w = c
        total = sum_max_lines(p0, p1, q0, q1, lo, min(hi, 0.0))
        lo = 1.0
    first = math.floor((lo - 1.0) / chunk)
    last = math.floor((hi - 1.0) / chunk)
    if first == last:
        return total + sum_max_lines(p0, p1, q0, q1, lo - first * chunk, hi - first * chunk)
    total += sum_max_lines(p0, p1, q0, q1, lo - first * chunk, chunk)
    total += (last - first - 1.0) * sum_max_lines(p0, p1, q0, q1, 1.0, chunk)
    return total + sum_max_lines(p0, p1, q0, q1, 1.0, hi - last * chunk)


@njit
def decode_attention_sum(row, n, lo, hi):
    """Attention seconds of every layer summed over decode steps at contexts c = lo..hi, ``n`` requests."""
    p1, q0, q1 = attention_lines(row, n)
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    full = dense_full + moe_full
    slide = dense_slide + moe_slide
    total = full * sum_max_lines(0.0, p1, q0, q1, lo, hi)
    if slide > 0.0 and row[C_ATTENTION_CHUNK] > 0.0:
        total += slide * sum_chunk(0.0, p1, q0, q1, lo, hi, row[C_ATTENTION_CHUNK])
    elif slide > 0.0:
        total += slide * sum_window(0.0, p1, q0, q1, lo, hi, row[C_SLIDING_WINDOW])
    return total


@njit
def attention_launches(row):
    """Per-kernel overhead of one iteration's attention kernels (``kernel_overhead_s``): one per layer, plus the
    engine's own KV-cache write kernel where it launches one (``kv_write_kernel``, vLLM V1: docs/model_serving.md
    S45) and its FP8 query quantization kernel where it launches one (``q_quant_kernel``, vLLM 0.10.2 with an FP8
    KV cache: S54)."""
    return (1.0 + row[C_KV_WRITE_KERNEL] + row[C_Q_QUANT_KERNEL]) * row[C_LAYERS] / row[C_PP] * row[C_KERNEL_OVERHEAD_S]


@njit
def prefill_attention_flops(row, prompts, length):
    """Executed attention FLOPs per layer of ``prompts`` causal prompts of ``length`` tokens (flash kernels
    skip the masked half: length (length + 1) / 2 query-key pairs), for a full and a sliding (or chunked, §S60:
    ``chunk_pairs`` with the diagonal) layer."""
    dqk, dv = attention_dims(row)
    per_pair = 2.0 * (row[C_HEADS] / row[C_TP]) * (dqk + dv)
    full = length * (length + 1.0) / 2.0
    window = row[C_SLIDING_WINDOW]
    slide = full
    if window > 0.0 and length > window:
        slide = window * (window + 1.0) / 2.0 + (length - window) * window
    chunk = row[C_ATTENTION_CHUNK]
    if chunk > 0.0 and length > chunk:
        slide = chunk_pairs(length, chunk, 1.0)
    return prompts * per_pair * full, prompts * per_pair * slide


@njit
def prefill_attention_time(row, prompts, length):
    """Seconds of the prefill's attention kernels over ``prompts`` causal prompts of ``length`` tokens: forward
    kernels only, at the device's forward efficiency (``attention_fwd_time``, docs/model_serving.md §S48)."""
    full, slide = prefill_attention_flops(row, prompts, length)
    dense_full, dense_slide, moe_full, moe_slide = layer_mix(row)
    # the forward grid: prompts x local heads x query tiles; a full causal layer's tiles carry the causal imbalance,
    # a window's run equal tiles (docs/model.md §11.51)
    groups = prompts * row[C_HEADS] / row[C_TP]
    windowed = row[C_SLIDING_WINDOW] > 0.0 and length > row[C_SLIDING_WINDOW]
    windowed = windowed or 0.0 < row[C_ATTENTION_CHUNK] < length     # chunked layers: as a window's (§S60)
    return ((dense_full + moe_full) * attention_fwd_time(row, full, attention_grid_share(row, groups, length,
                                                                                          row[C_ATTN_TILE_Q], True))
            + (dense_slide + moe_slide) * attention_fwd_time(row, slide, attention_grid_share(
                row, groups, length, row[C_ATTN_TILE_Q], not windowed)))
