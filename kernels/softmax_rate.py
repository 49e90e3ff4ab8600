"""The softmax exponentials' rate in flash attention (docs/model.md §11.58).

Each score element of flash attention takes 2 (d_qk + d_v) FLOPs of tensor-core MMA forward (QK^T and PV) and one
exponential on the SM's special function units (MUFU.EX2). Per SM and clock the two units run at fixed rates (H100
4,096 FLOPs / 16 exponentials, B200 8,192 / 16, Blackwell Ultra 8,192 / 32), so a device file that carries another
device's measured attention efficiency (B300, GB300: B200's) rescales the exponential part of the measured forward
time. The training backward is not rescaled: FlashAttention-4 finds it bound by shared-memory traffic, not by the
exponentials (kernels/roofline.py ``attention_backward_base``).
"""

from fastmodel.kernels.columns import (
    C_ATTN_EFF_MMA_FLOPS_PER_EXP, C_HEAD_DIM, C_MLA, C_MMA_FLOPS_PER_EXP, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM,
    C_V_HEAD_DIM,
)
from fastmodel.kernels.jit import njit


@njit(inline="always")
def attention_dims(row):
    """(query-key width, value width) per head: MLA's nope+rope and v widths, else head_dim."""
    if row[C_MLA] > 0.0:
        return row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM], row[C_V_HEAD_DIM]
    return row[C_HEAD_DIM], row[C_HEAD_DIM]


@njit(inline="always")
def exp_rate_scale(row, matmuls, exps):
    """Attention time on this device over its time at the efficiency measured on another (docs/model.md §11.58).
    One score element takes ``matmuls`` x (d_qk + d_v) MMA FLOPs (the forward: 2) and ``exps`` exponentials (the
    forward: 1; the backward is not rescaled, §11.58); the measured time is split by the measuring device's
    ``attn_eff_mma_flops_per_exp`` R_ref into an MMA part f and an exponential part n R_ref, and the exponential part
    runs at this device's R:
    (f + n R) / (f + n R_ref). 1 where either ratio is 0 (attn_eff measured on this device, or no rate stated)."""
    ref = row[C_ATTN_EFF_MMA_FLOPS_PER_EXP]
    own = row[C_MMA_FLOPS_PER_EXP]
    if ref <= 0.0 or own <= 0.0:
        return 1.0
    dqk, dv = attention_dims(row)
    f = matmuls * (dqk + dv)
    return (f + exps * own) / (f + exps * ref)
