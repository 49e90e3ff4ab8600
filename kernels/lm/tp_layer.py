"""The tensor-parallel collectives of one transformer layer (docs/model.md §11.4, §11.40, §11.41, §11.42): the
forward and backward TP seconds of one layer and micro-batch (:func:`tp_layer_time`: all-reduces without SP;
all-gathers, reduce-scatters and the wgrad re-gathers with it) and the part of the re-gathers hidden under their
own dgrad GEMMs (:func:`regather_hidden_time`). ``layer.layer_costs`` writes them into ``W_TP``,
``W_TP_BACKWARD`` and ``W_TP_HIDDEN``; the re-gathers' MLA, head and MTP shapes are ``kernels/lm/sp_regather.py``.
Moved out of ``kernels/lm/layer.py`` (which re-exports both) when that module reached the 450-line limit; no
change to either function.
"""

from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.roofline import gemm_roofline, sp_gather_bytes
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_COLLECTIVE_OVERHEAD_S, C_HEADS, C_MLA, C_SP_WGRAD_REGATHER, C_STACK_COMPUTE_EFF, C_TP_COMM_OVERLAP, C_GATED_MLP,
    C_KV_LORA_RANK, C_Q_LORA_RANK, C_QK_NOPE_HEAD_DIM, C_TP_PER_PROJECTION, C_V_HEAD_DIM,
)
from fastmodel.kernels.lm.shape import ACT_BYTES, attention_dims
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.lm.parallel import exposed
from fastmodel.kernels.lm.sp_regather import mla_regathers, mla_sp_gathers


@njit
def tp_layer_time(row, tokens, h, t, sp, linears):
    """(forward, backward) TP seconds of one layer and micro-batch (docs/model.md §11.4, §11.40, §11.41, §11.42). Without SP two
    all-reduces of ``tokens h`` 16-bit elements each way. With SP an all-gather before and a reduce-scatter after
    attention and the MLP: forward the column-parallel inputs are gathered at :func:`sp_gather_bytes` (quantized
    under FP8 / NVFP4) and the row-parallel outputs reduce-scattered at 2 B; backward the conjugates, the output
    gradients gathered at their bytes before the row-parallel dgrads and the input gradients reduce-scattered at
    2 B; with ``sp_wgrad_regather`` (Megatron-Core, Transformer Engine) the inputs of the ``linears``
    column-parallel linears that gather their own input are gathered again in backward for the weight gradients,
    at the forward gather's bytes (§11.41; an MLA layer's attention re-gathers its up-projections' inputs instead,
    :func:`mla_regathers`, §11.42). With ``tp_per_projection`` under SP the n column-parallel projections gather
    their inputs one by one: n gathers and 2 reduce-scatters forward, 2 gathers and n reduce-scatters backward
    (§11.42). Each collective also idles the GPU for collective_overhead_s; current scaling's and NVFP4's amax
    all-reduces (:func:`amax_reduction_time`, one per two quantized gathers) are added each way. Third: the
    seconds of one forward gather (0 without SP), which :func:`regather_hidden_time` reuses."""
    if t <= 1.0:
        return 0.0, 0.0, 0.0
    elements = tokens * h
    if not sp:
        tp = 2.0 * (allreduce_time(row, ACT_BYTES * elements, t, 1.0) + row[C_COLLECTIVE_OVERHEAD_S])
        return tp, tp, 0.0
    o = row[C_COLLECTIVE_OVERHEAD_S]
    scatter = allgather_time(row, ACT_BYTES * elements, t, 1.0)
    # a gather at the bytes of one already timed is that time (16-bit GEMMs: all three; per-tensor FP8: both gathers)
    forward_bytes, backward_bytes = sp_gather_bytes(row, False), sp_gather_bytes(row, True)
    gather = scatter if forward_bytes == ACT_BYTES else allgather_time(row, forward_bytes * elements, t, 1.0)
    if backward_bytes == ACT_BYTES:
        gather_backward = scatter
    elif backward_bytes == forward_bytes:
        gather_backward = gather
    else:
        gather_backward = allgather_time(row, backward_bytes * elements, t, 1.0)
    # the column-parallel inputs gathered forward (and reduce-scattered backward): 2, or per projection n (§11.42)
    inputs = 2.0
    if row[C_TP_PER_PROJECTION] > 0.0:
        inputs = 3.0 + (2.0 if row[C_GATED_MLP] > 0.0 else 1.0)
    amax = amax_reduction_time(row)
    forward = inputs * gather + 2.0 * scatter + ((inputs + 2.0) * o + 0.5 * inputs * amax)
    backward = 2.0 * gather_backward + inputs * scatter + ((inputs + 2.0) * o + amax)
    if row[C_MLA] > 0.0 and row[C_TP_PER_PROJECTION] <= 0.0:
        # MLA gathers its latents and k_pos_emb, not h (§11.44): its attention input's AG + o and RS + o replaced,
        # one amax all-reduce more for the third quantized gather
        mla_f, mla_b = mla_sp_gathers(row, tokens, t)
        forward += mla_f - gather - o + 0.5 * amax
        backward += mla_b - scatter - o
    # the column-parallel inputs, saved as the local slice, gathered again for the weight gradients (§11.41)
    regather = 0.0
    if row[C_SP_WGRAD_REGATHER] > 0.0:
        if row[C_MLA] > 0.0:
            q, kv = mla_regathers(row, tokens, t)
            regather = (linears - 1.0) * (gather + o) + q + kv
        else:   # per projection (dense layers only, rules.py): each of the n re-gathers its own input
            regather = (inputs if row[C_TP_PER_PROJECTION] > 0.0 else linears) * (gather + o)
    return forward, backward + regather, gather


@njit
def regather_hidden_time(row, tokens, h, t, sp, fc1, gather, qkv, fc1_gemm, fp8, weight_bytes):
    """Seconds of one layer's wgrad re-gathers (§11.41) hidden under the dgrad GEMM of their own linear (used
    without ``tp_comm_overlap``; with it the layer's own overlap rule hides all its TP). Megatron-Core's ``LinearWithGradAccumulationAndAsyncCommunication``
    and Transformer Engine's ``Linear`` / ``LayerNormLinear`` issue the gather with ``async_op=True`` before the dgrad
    GEMM and wait before the wgrad GEMM: linear i's gather (AG + o) adds ``exposed(AG + o, D_i)``
    (:func:`parallel.exposed`: the excess over the window plus ``comm_sm_share`` of the overlap) and hides the rest.
    D_i is the dgrad GEMM, the size of the forward's (``BACKWARD_INPUT_GEMM`` = 1): tokens x h x n_i / t, with
    n = (a + 2 kv) d_head for QKV and ``fc1`` = (m - 1) f (a shared expert's (m - 1) s f_moe; 0: no FC1 re-gather);
    an MLA layer's attention re-gathers its up-projections' inputs under their dgrads (:func:`mla_regathers`,
    §11.42). ``qkv`` and ``fc1_gemm``: those forward GEMMs' seconds at the modelled speed (``roofline.gemm_roofline``
    at the GEMM format's weight bytes), as the layer's GEMM list times them (``shape.layer_gemm_parts``; 0 under MLA
    for QKV), over ``stack_compute_eff`` here; ``fp8`` and ``weight_bytes``: :func:`layer_costs`' GEMM format and
    its weight bytes, for the MLA dgrads. ``gather``: AG, the forward gather's seconds from
    :func:`tp_layer_time`, taken where its bytes per element b are 1 or 2 (then ``b (tokens h)`` there and
    ``(b tokens) h`` here are the same double), else timed again. 0 with ``tp_comm_overlap`` (``W_TP_HIDDEN`` is
    read only without it)."""
    if t <= 1.0 or not sp or row[C_SP_WGRAD_REGATHER] <= 0.0 or row[C_TP_COMM_OVERLAP] > 0.0:
        return 0.0      # nothing re-gathered, or TP overlap's own rule hides it (W_TP_HIDDEN is read without it)
    eff = row[C_STACK_COMPUTE_EFF]
    mla = row[C_MLA] > 0.0
    hidden = 0.0
    if mla:
        # the up-projections' dgrads: tokens x a (nope + rope) / t x q_lora (h without a query low rank), tokens x
        # a (nope + v) / t x kv_lora
        q, kv = mla_regathers(row, tokens, t)
        dqk, _ = attention_dims(row)
        a = row[C_HEADS]
        q_width = row[C_Q_LORA_RANK] if row[C_Q_LORA_RANK] > 0.0 else h
        d_q = gemm_roofline(row, 1.0, tokens, a * dqk / t, q_width, fp8, weight_bytes, 1.0) / eff
        d_kv = gemm_roofline(row, 1.0, tokens, a * (row[C_QK_NOPE_HEAD_DIM] + row[C_V_HEAD_DIM]) / t,
                             row[C_KV_LORA_RANK], fp8, weight_bytes, 1.0) / eff
        hidden = q - exposed(row, q, d_q) + kv - exposed(row, kv, d_kv)
        if fc1 <= 0.0:
            return hidden
    # one hidden-width linear's re-gather, AG + o: QKV's (not under MLA) and FC1's
    nbytes = sp_gather_bytes(row, False)
    if nbytes != 1.0 and nbytes != 2.0:
        gather = allgather_time(row, nbytes * tokens * h, t, 1.0)
    comm = gather + row[C_COLLECTIVE_OVERHEAD_S]
    if not mla:
        hidden = comm - exposed(row, comm, qkv / eff)
    if fc1 > 0.0:
        hidden += comm - exposed(row, comm, fc1_gemm / eff)
    return hidden
