"""Serving Llama 4's chunked local attention (docs/model_serving.md S60): prefill pairs per chunk, the decode read of
the current chunk's keys, and the KV a chunked layer keeps under vLLM 0.18.0's hybrid KV cache manager (the
chunk's blocks only)."""

from __future__ import annotations

import numpy as np
import pytest

from fastmodel.kernels.serve.attention import attention_lines, prefill_attention_flops, sum_chunk
from fastmodel.serve.api import columns, evaluate

C = 8192


def _pairs(s: int, c: int) -> int:
    """Causal pairs of a sequence of s tokens chunked by c, one query at a time (the diagonal counted)."""
    return sum(i - (i // c) * c + 1 for i in range(s))


@pytest.mark.parametrize("length, pairs", [
    (C, C * (C + 1) // 2),                              # one full chunk: the causal triangle, 33,558,528
    (2 * C + 5, 2 * (C * (C + 1) // 2) + 5 * 6 // 2),  # q = 2 chunks and r = 5: 67,117,071
    (1000, 1000 * 1001 // 2),                           # s < C: full causal attention
])
def test_prefill_pairs_of_a_chunked_layer(length, pairs):
    """q C (C + 1) / 2 + r (r + 1) / 2, q = floor(s / C), r = s - q C: the exact count the full causal layer's
    s (s + 1) / 2 uses (flash kernels skip the masked blocks); per pair 2 x heads x (d_qk + d_v) FLOPs."""
    vector = columns("llama4-maverick", "H200", batch_size=1, input_len=length, output_len=1)
    full, chunked = prefill_attention_flops(vector, 1.0, float(length))
    per_pair = 2.0 * 40 * (128 + 128)
    assert chunked / per_pair == pairs
    assert full / per_pair == length * (length + 1) // 2
    assert _pairs(length, C) == pairs                   # the mask, query by query


def test_pair_formula_against_the_mask_on_small_chunks():
    """The closed form against the mask itself (j <= i, floor(j / C) = floor(i / C)) for chunks of 7 tokens."""
    for s in range(1, 40):
        q, r = divmod(s, 7)
        assert _pairs(s, 7) == q * 7 * 8 // 2 + r * (r + 1) // 2 == sum(
            1 for i in range(s) for j in range(i + 1) if j // 7 == i // 7)


@pytest.mark.parametrize("input_len, output_len", [(16000, 1000), (8000, 20000)])
def test_decode_reads_the_current_chunk_on_chunked_layers(input_len, output_len):
    """Decode at context c (the new token included) reads c keys on the 12 global layers and w = c - C floor((c -
    1) / C) on the 36 chunked ones; the closed-form sum equals the per-step loop across one and three chunk
    boundaries."""
    kw = dict(tp=8, ep=8, precision="fp8", kv_precision="fp8", batch_size=4, input_len=input_len,
              output_len=output_len)
    vector = columns("llama4-maverick", "H200", **kw)
    p1, q0, q1 = attention_lines(vector, 4.0)
    launch = evaluate("llama4-maverick", "H200", **{**kw, "attention_chunk": 0})
    full = sum(max(p1 * c, q0 + q1 * c) for c in range(input_len + 1, input_len + output_len))
    loop = 0.0
    for c in range(input_len + 1, input_len + output_len):
        w = c - C * ((c - 1) // C)
        loop += 12 * max(p1 * c, q0 + q1 * c) + 36 * max(p1 * w, q0 + q1 * w)
    got = evaluate("llama4-maverick", "H200", **kw)["decode_attention"]
    # the launches are the same with or without chunks: take them from the unchunked evaluation
    launches = launch["decode_attention"] - 48 * full
    assert got == pytest.approx(loop + launches, rel=1e-12)
    assert got < launch["decode_attention"]


def test_kv_held_by_a_request_longer_than_a_chunk():
    """Maverick, FP8 KV at TP 8 (one KV head of 128 per device): 2 x 48 x 128 x 1 B = 12,288 B per token of a
    full-attention model. Under vLLM 0.18.0 a request of I + O = 20,000 tokens holds 20,000 tokens on the 12 global
    layers and at most one chunk, 8,192, on the 36 chunked ones (the blocks before the current chunk are freed):
    12,288 x (12 x 20,000 + 36 x 8,192) / 48 = 136,937,472 B, 6,846.9 B per token of context (55.7 % of the full
    12,288). vLLM 0.12.0 (the hybrid KV cache manager off for chunked attention by default) and the engines not
    read (TensorRT-LLM, the default on NVIDIA) keep the whole context."""
    kw = dict(tp=8, ep=8, precision="fp8", kv_precision="fp8", batch_size=4, input_len=16384, output_len=3616,
              engine="vLLM 0.18.0")
    out = evaluate("llama4-maverick", "H200", **kw)
    assert out["kv_bytes_per_token"] == 2 * 48 * 128 * 1 == 12288
    per_request = 12288 * (12 * 20000 + 36 * 8192) / 48
    assert per_request == 136_937_472
    assert out["kv_cache_memory"] == 4 * per_request
    assert per_request / 20000 == pytest.approx(6846.8736, rel=1e-12)
    unchunked = evaluate("llama4-maverick", "H200", **{**kw, "attention_chunk": 0})
    assert unchunked["kv_cache_memory"] == 4 * 12288 * 20000
    short = evaluate("llama4-maverick", "H200", **{**kw, "input_len": 4000, "output_len": 4000})
    assert short["kv_cache_memory"] == 4 * 12288 * 8000          # within one chunk: the whole context
    for engine in ("vLLM 0.12.0", None):
        whole = evaluate("llama4-maverick", "H200", **{**kw, "engine": engine})
        assert whole["kv_cache_memory"] == 4 * 12288 * 20000, engine


def test_sum_chunk_matches_brute_force():
    """Random lines, chunks of 1-12 tokens, ranges from below 1 (w = c there) across several boundaries."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        p0, p1, q0, q1 = rng.normal(size=4)
        lo, hi = sorted(int(v) for v in rng.integers(-5, 60, size=2))
        chunk = int(rng.integers(1, 13))
        brute = 0.0
        for c in range(lo, hi + 1):
            w = c if c < 1 else c - chunk * ((c - 1) // chunk)
            brute += max(p0 + p1 * w, q0 + q1 * w)
        assert sum_chunk(p0, p1, q0, q1, float(lo), float(hi), float(chunk)) == pytest.approx(brute, abs=1e-9)
