"""Transformer Engine 1.x's FlashAttention path: the interleaved QKV copied apart before the kernel and its
gradients copied back after it (``fa_qkv_prepare``, docs/model.md §11.60).

NVIDIA/TransformerEngine 09ba842 ``transformer_engine/pytorch/attention.py``: ``MultiheadAttention`` splits the
fused, interleaved QKV projection into strided views of one [s, b, h, 3, d] tensor (lines 2288-2320, layout
``sbh3d``); ``FlashAttention.forward`` hands such a QKV of head dim 128 and at least 512 tokens to
``_PrepareQKVForFA`` (lines 936-945, 767-795), whose ``tex.fa_prepare_fwd`` (``csrc/extensions/attention.cu``
lines 1168-1262) writes a new contiguous [3, b, s, h, d] tensor, and whose backward ``tex.fa_prepare_bwd`` writes
the three gradients back into one interleaved tensor. Each direction reads and writes every element once:

    t_prepare = memory_bound_time(2 x ACT_BYTES x T x (a / t) x (2 d_qk + d_v))     forward; the same in backward
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_FA_QKV_PREPARE, C_HEADS, C_TP
from fastmodel.kernels.lm.shape import ACT_BYTES
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.softmax_rate import attention_dims


@njit
def fa_qkv_prepare_s(row, tokens):
    """Seconds of one direction's QKV copy for ``tokens`` tokens on a TP rank (module docstring); 0 without
    ``fa_qkv_prepare``."""
    if row[C_FA_QKV_PREPARE] <= 0.0:
        return 0.0
    dqk, dv = attention_dims(row)
    return memory_bound_time(row, 2.0 * ACT_BYTES * tokens * row[C_HEADS] / row[C_TP] * (2.0 * dqk + dv))
