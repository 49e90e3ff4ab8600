"""Transformer Engine 1.x's FlashAttention path: the interleaved QKV copied apart before the kernel and its
gradients copied back after it (``fa_qkv_prepare``, docs/model.md §11.60).

NVIDIA/TransformerEngine 09ba842 ``transformer_engine/pytorch/attention.py``: ``MultiheadAttention`` splits the
fused, interleaved QKV projection into strided views of one [s, b, h, 3, d] tensor (lines 2288-2320, layout
``sbh3d``); ``FlashAttention.forward`` hands such a QKV of head dim 128 and at least 512 tokens to
``_PrepareQKVForFA`` (lines 936-945, 767-795), whose ``tex.fa_prepare_fwd`` (``csrc/extensions/attention.cu``
lines 1168-1262) writes a new contiguous [3, b, s, h, d] tensor, and whose backward ``tex.fa_prepare_bwd`` writes
the three gradients back into one interleaved tensor. Each direction reads and writes every element once:

    t_prepare = memory_bound_time(2 x ACT_BYTES x T x (a d_qk + k (d_qk + d_v)) / t)     forward; the same in backward

with k the KV heads. TE takes this copy only on the flash-attn path (``attn_fa2``; TE 09ba842 attention.py
1493-1496, the flash branch before the fused one at 1747 vs 1773), for head dim 128, at least 512 tokens
(s x b) and the ``sbh3d`` layout, i.e. as many KV heads as query heads (GQA gives ``sbhd_sbh2d``; attention.py
~945-950, review16 #1): the term is 0 otherwise, whatever the plan states.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_ATTN_FA2, C_FA_QKV_PREPARE, C_HEADS, C_KV_HEADS, C_MLA, C_TP
from fastmodel.kernels.lm.shape import ACT_BYTES
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.softmax_rate import attention_dims

TE_PREPARE_HEAD_DIM = 128.0     # TE 09ba842 attention.py ~945-950: the copy runs only for this head dim
TE_PREPARE_MIN_TOKENS = 512.0   # ... and for s x b >= 512


@njit
def fa_qkv_prepare_s(row, tokens):
    """Seconds of one direction's QKV copy for ``tokens`` tokens on a TP rank (module docstring); 0 without
    ``fa_qkv_prepare``, or where TE would not copy (not flash-attn, MLA, head dim not 128, GQA, < 512 tokens)."""
    if row[C_FA_QKV_PREPARE] <= 0.0 or row[C_ATTN_FA2] <= 0.0 or row[C_MLA] > 0.0:
        return 0.0
    dqk, dv = attention_dims(row)
    if dqk != TE_PREPARE_HEAD_DIM or row[C_KV_HEADS] != row[C_HEADS] or tokens < TE_PREPARE_MIN_TOKENS:
        return 0.0
    elements = tokens * (row[C_HEADS] * dqk + row[C_KV_HEADS] * (dqk + dv)) / row[C_TP]
    return memory_bound_time(row, 2.0 * ACT_BYTES * elements)
