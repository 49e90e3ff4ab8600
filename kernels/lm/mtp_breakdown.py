"""The MTP modules' layers in the step and in its breakdown (docs/model.md §11.4 "MTP module").

The last pipeline rank runs the ``mtp_layers`` MTP modules after its decoder layers, one transformer layer each
(DeepSeek-V3 report sec. 2.2). ``step.busiest_stage_into`` charges each at its own time, ``t_mtp`` of
:func:`mtp_layer`; :func:`add_mtp_layers` adds the same layer's parts to the step's breakdown (GEMM, attention,
memory-bound, recompute, each group's collective and exposed seconds), so that the breakdown adds up to the step
as ``bf16_layers.add_bf16_layers`` does for the BF16 layers (§11.39).
"""

from fastmodel.kernels.jit import njit, stack_vector
from fastmodel.kernels.lm.bf16_layers import LAYER_PARTS, bf16_row_into
from fastmodel.kernels.lm.fp4 import train_gemm_format
from fastmodel.kernels.lm.layout import C_MTP_LAYERS, N_COLUMNS
from fastmodel.kernels.lm.passes import (
    A_EXPERT_PARAMS, A_PARAMS, layer_kinds_passes, layer_passes_of, layer_time,
)
from fastmodel.kernels.lm.shape import moe_layers, mtp_layer_is_moe
from fastmodel.kernels.lm.sp_regather import mtp_gemm_format


@njit(inline="always")   # into mtp_layer_into, its one caller: one library of the layer costs fewer (cold compile)
def mtp_layer(row, work):
    """(seconds, non-expert parameters, routed-expert parameters) of the MTP module's transformer layer, one
    micro-batch, per device (docs/model.md §11.4 "MTP module"): the MoE layer's passes when the layer is MoE
    (:func:`mtp_layer_is_moe`), else the dense layer's (a dense model's average layer; in a MoE model whose last
    layer is dense its dense layers', ``passes.layer_kinds_passes``, not the mix's average); at 16-bit GEMMs under
    fp4 (Megatron-LM d98e8a6 runs the MTP layer outside the FP4 context, §11.44). Leaves ``work[A_*]`` with that
    layer's passes."""
    r = bf16_row_into(row, stack_vector(N_COLUMNS)) if mtp_gemm_format(row) != train_gemm_format(row) else row
    if mtp_layer_is_moe(row) or moe_layers(row) <= 0.0:
        layer_passes_of(r, work, mtp_layer_is_moe(row))
    else:
        layer_kinds_passes(r, work, 0, 2)
    return layer_time(work), work[A_PARAMS] - work[A_EXPERT_PARAMS], work[A_EXPERT_PARAMS]


@njit
def mtp_layer_into(row, work, d_mtp):
    """:func:`mtp_layer`'s result, 0 without MTP modules; ``d_mtp`` (as long as ``work``) gets a copy of the MTP
    layer's accumulators (zeros without MTP modules) for :func:`add_mtp_layers`."""
    if row[C_MTP_LAYERS] <= 0.0:
        d_mtp[:] = 0.0
        return 0.0, 0.0, 0.0
    seconds, params, experts = mtp_layer(row, work)
    d_mtp[:] = work
    return seconds, params, experts


@njit
def add_mtp_layers(out, count, work, d_mtp):
    """Add ``count`` (micro-batches x MTP layers on the busiest rank, 0 when it is not the last) MTP layers to the
    step's breakdown in ``out``, which ``step.step_row`` filled counting them as the rank's ordinary layers
    (``work``, ``per_stage x work[A_*]``): each part gets ``count x (d_mtp[A_*] - work[A_*])``, the MTP layer's
    own accumulators (:func:`mtp_layer_into`) in place of the ordinary layer's, as the step charges them."""
    if count <= 0.0:
        return
    for result, slot in LAYER_PARTS:
        out[result] += count * (d_mtp[slot] - work[slot])
