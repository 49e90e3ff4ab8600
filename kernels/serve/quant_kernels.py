"""The kernels an engine runs around its quantized linears besides the GEMMs (docs/model_serving.md S22).

A GEMM with FP8 or NVFP4 activations takes its input already quantized. Where the engine cannot fuse that
quantization into the kernel before it (the RMSNorm, the attention, the gated activation), it runs a kernel of
its own: one read of the 16-bit input and one write of the quantized values and scales, and one more kernel's
ramp and tail on the GPU (``kernel_overhead_s``: under CUDA graphs a node is still a kernel, S2). Which inputs
take such a kernel is the engine's (column ``act_quant_inputs``, bits ``QKV``, ``OUT``, ``GATE_UP``, ``DOWN``; set
by ``fastmodel/serve/engine_kernels.py``).

An engine may also fuse the residual add and RMSNorm that follow a tensor-parallel allreduce, and the next
linear's input quantization, into the allreduce kernel (``allreduce_norm_fusion``; vLLM ``fuse_allreduce_rms``).
Then the fused add+RMSNorm kernel of S2's list is not launched and the quantization after it is not a kernel of
its own; the fused kernel still moves the residual and the normalised output (their bytes stay in
``layer_memory_bound``). The fusion applies where the allreduce runs the engine's own P2P kernel
(``allreduce.is_custom``: small messages, one NVLink domain), and without attention DP.

Per layer on one TP rank, ``m`` tokens (the busiest attention-DP group's), q bytes per quantized value:

    t = sum over the unfused quantized inputs i of ( kernel_overhead_s + m K_i (2 + q) / (BW hbm_eff) )
        - fused_norms x kernel_overhead_s                                           (all / stack_compute_eff)

with K = h (QKV and gate/up inputs), a d_v / t (output projection), f / t (down projection); q = 1 (FP8: one
scale per tensor or per token), 0.5 + 1/16 (NVFP4: one E4M3 scale per 16 values). An MoE layer counts only its
attention's inputs (the MoE kernels quantize their own inputs inside, as ``mlp_gemm_time`` prices them) and
fuses only the attention's allreduce (the MoE block's reduction runs inside the engine's fused-MoE op), except
where the engine quantizes the MoE block's input in a kernel of its own before its fused-MoE op (bit
``MOE_IN``: vLLM's W4A8 MXFP4 x MXFP8 backend calls FlashInfer's ``mxfp8_quantize``, one launch of
``quantize_with_block_size`` over the m x h input, docs/model_serving.md S47):

    t_moe_in = kernel_overhead_s + m h (2 + 1 + 1/32) / (BW hbm_eff)     (all / stack_compute_eff)

(MXFP8: one E4M3 byte per value and one E8M0 scale byte per 32 values), whatever the attention's format.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    C_ACT_QUANT_INPUTS, C_ALLREDUCE_NORM_FUSION, C_ATTENTION_DP, C_FFN, C_HEADS, C_HIDDEN, C_KERNEL_OVERHEAD_S,
    C_STACK_COMPUTE_EFF, C_TP,
)
from fastmodel.kernels.lm.shape import ACT_BYTES, attention_dims
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.serve.allreduce import is_custom

#: bits of ``act_quant_inputs``: the input of the QKV projection, the attention output projection, the gate/up
#: projection and the down projection
QKV = 1.0
OUT = 2.0
GATE_UP = 4.0
DOWN = 8.0
#: bit of ``act_quant_inputs``: the input of an MoE layer's fused expert op, quantized to MXFP8 by a kernel of its own
MOE_IN = 16.0
#: bytes per quantized activation value: FP8 (the per-tensor or per-token scale is negligible) and NVFP4
#: (E2M1 + one E4M3 scale per 16 values, "Introducing NVFP4", NVIDIA 2025)
Q_BYTES_FP8 = 1.0
Q_BYTES_NVFP4 = 0.5 + 1.0 / 16.0
#: MXFP8 (E4M3 + one E8M0 scale per 32 values: FlashInfer ``mxfp8_quantize``, ``sf_vec_size = 32``)
Q_BYTES_MXFP8 = 1.0 + 1.0 / 32.0


@njit(inline="always")
def has_input(mask, bit):
    """True when the bit ``bit`` (1, 2, 4, 8 or 16) is set in the float bitmask ``mask``."""
    return math.floor(mask / bit) % 2.0 == 1.0


@njit(inline="always")
def quant_value_bytes(fmt):
    """Bytes per quantized activation value of a GEMM format (``costs.gemm_format``: 2 FP4 W4A4, 1 FP8)."""
    return Q_BYTES_NVFP4 if fmt == 2.0 else Q_BYTES_FP8


@njit
def quant_kernel_time(row, elements, fmt, launch):
    """Seconds of one activation-quantization kernel over ``elements`` 16-bit values: its per-kernel overhead
    (with ``launch``), one read of the input and one write of the quantized values and scales."""
    return launch * row[C_KERNEL_OVERHEAD_S] / row[C_STACK_COMPUTE_EFF] \
        + memory_bound_time(row, elements * (ACT_BYTES + quant_value_bytes(fmt)))


@njit
def moe_input_quant_time(row, m_rank, launch):
    """Seconds of the MXFP8 quantization kernel an engine runs on an MoE layer's ``m_rank`` x h input before its
    fused expert op (bit ``MOE_IN``): its per-kernel overhead (with ``launch``), one read of the 16-bit input, one
    write of the E4M3 values and E8M0 scales."""
    return launch * row[C_KERNEL_OVERHEAD_S] / row[C_STACK_COMPUTE_EFF] \
        + memory_bound_time(row, m_rank * row[C_HIDDEN] * (ACT_BYTES + Q_BYTES_MXFP8))


@njit
def fused_norms(row, m_rank, moe):
    """Add+RMSNorm kernels per layer the TP allreduces absorb (``allreduce_norm_fusion``): the post-attention
    norm after the attention's allreduce and, in a dense layer, the next layer's input norm after the MLP's;
    only where the allreduce of ``m_rank`` tokens runs the engine's own kernel and without attention DP."""
    t = row[C_TP]
    if row[C_ALLREDUCE_NORM_FUSION] <= 0.0 or t <= 1.0 or row[C_ATTENTION_DP] > 1.0:
        return 0.0
    if not is_custom(row, ACT_BYTES * m_rank * row[C_HIDDEN], t, 1.0):
        return 0.0
    return 1.0 if moe else 2.0


@njit
def linear_extra_time(row, m_rank, moe, fmt, launch):
    """Seconds one layer spends in the kernels around its quantized linears for ``m_rank`` tokens (module
    docstring): the unfused input quantizations of GEMM format ``fmt`` (none at 16-bit activations, 0) and an MoE
    layer's MXFP8 input kernel (``MOE_IN``, any ``fmt``) less the norm kernels the allreduces absorb; kernel
    overheads only with ``launch``. Negative when the fusion saves more launches than the quantizations add."""
    fused = fused_norms(row, m_rank, moe)
    total = -launch * fused * row[C_KERNEL_OVERHEAD_S] / row[C_STACK_COMPUTE_EFF]
    mask = row[C_ACT_QUANT_INPUTS]
    if moe and m_rank > 0.0 and has_input(mask, MOE_IN):
        total += moe_input_quant_time(row, m_rank, launch)
    if fmt <= 0.0 or mask <= 0.0 or m_rank <= 0.0:
        return total
    h = row[C_HIDDEN]
    t = row[C_TP]
    _, dv = attention_dims(row)
    if has_input(mask, QKV) and not fused >= 2.0:          # the previous MLP's allreduce quantizes it
        total += quant_kernel_time(row, m_rank * h, fmt, launch)
    if has_input(mask, OUT):
        total += quant_kernel_time(row, m_rank * row[C_HEADS] * dv / t, fmt, launch)
    if not moe:
        if has_input(mask, GATE_UP) and not fused >= 1.0:  # the attention's allreduce quantizes it
            total += quant_kernel_time(row, m_rank * h, fmt, launch)
        if has_input(mask, DOWN):
            total += quant_kernel_time(row, m_rank * row[C_FFN] / t, fmt, launch)
    return total
