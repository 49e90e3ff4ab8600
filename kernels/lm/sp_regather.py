"""Sequence-parallel wgrad re-gathers beyond the dense layer's (docs/model.md §11.42): an MLA layer's attention
up-projections, the LM head's output layer and the MTP ``eh_proj`` (its input gather's bytes). The layer's own
re-gathers, their overlap and the TP of a layer are ``kernels/lm/layer.py`` (``tp_layer_time``,
``regather_hidden_time``, §11.41)."""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.fp4 import train_gemm_format
from fastmodel.kernels.lm.layout import (
    C_COLLECTIVE_OVERHEAD_S, C_HIDDEN, C_KV_LORA_RANK, C_MTP_LAYERS, C_PRECISION, C_Q_LORA_RANK, C_SEQUENCE_PARALLEL,
    C_SP_WGRAD_REGATHER, C_TP, C_VOCAB, PRECISION_FP8,
)
from fastmodel.kernels.lm.parallel import exposed
from fastmodel.kernels.lm.shape import ACT_BYTES
from fastmodel.kernels.nccl import allgather_time
from fastmodel.kernels.roofline import gemm_time, sp_gather_bytes


@njit
def mla_regathers(row, tokens, t):
    """(q, kv) seconds of an MLA layer's attention wgrad re-gathers, each AG + o (docs/model.md §11.42).
    Megatron-Core's MLA spec runs the down-projections as ``TELinear`` with ``parallel_mode='duplicated'`` (no TP
    communication, on the sequence-parallel slice); the column-parallel linears on sequence-parallel inputs are
    ``linear_q_up_proj`` (input q_lora wide; ``linear_q_proj``, h wide, without a query low rank) and
    ``linear_kv_up_proj`` (kv_lora wide): each gathers its input at :func:`sp_gather_bytes` and again in backward,
    async under its own dgrad GEMM (:func:`regather_hidden_time`)."""
    b = sp_gather_bytes(row, False)
    o = row[C_COLLECTIVE_OVERHEAD_S]
    q_width = row[C_Q_LORA_RANK] if row[C_Q_LORA_RANK] > 0.0 else row[C_HIDDEN]
    q = allgather_time(row, b * tokens * q_width, t, 1.0) + o
    return q, allgather_time(row, b * tokens * row[C_KV_LORA_RANK], t, 1.0) + o


@njit
def eh_proj_gather_bytes(row):
    """Bytes per element of the MTP ``eh_proj`` input's sequence-parallel all-gather (docs/model.md §11.42): a
    Transformer Engine column-parallel linear (``get_mtp_layer_spec_for_backend``: ``backend.column_parallel_linear()``,
    ``TEColumnParallelLinear`` under TE) run inside the FP8 context (``_proj_and_transformer_layer``), so under FP8
    it gathers its quantized input (:func:`sp_gather_bytes`); FP4 is not applied in the MTP layers ("currently
    ignoring FP4 in MTP layers", Megatron-LM d98e8a6), so 2 B under fp4 and 16-bit."""
    return sp_gather_bytes(row, False) if row[C_PRECISION] == PRECISION_FP8 else ACT_BYTES


@njit
def head_tp_backward(row, tokens):
    """(backward TP seconds beyond the forward's, of all backward TP seconds those hidden) of the LM head and the
    MTP projections, one micro-batch on the last stage (docs/model.md §11.42). Under SP with ``sp_wgrad_regather``
    the output layer (Megatron-Core ``ColumnParallelLinear``, BF16: its input at 2 B) re-gathers its
    sequence-parallel input for the weight gradient once per head pass (1 + ``mtp_layers``) and each MTP
    ``eh_proj`` its 2h-wide input (:func:`eh_proj_gather_bytes`), each AG + o issued async before its dgrad GEMM
    (``LinearWithGradAccumulationAndAsyncCommunication.backward``) and hidden as the layers' re-gathers
    (``parallel.exposed`` against that GEMM); the ``eh_proj`` input gradient's reduce-scatter moves 2 B where
    its forward gather moved the quantized bytes."""
    t = row[C_TP]
    if t <= 1.0 or row[C_SEQUENCE_PARALLEL] <= 0.0:
        return 0.0, 0.0
    h = row[C_HIDDEN]
    d = row[C_MTP_LAYERS]
    o = row[C_COLLECTIVE_OVERHEAD_S]
    eh_gather = allgather_time(row, eh_proj_gather_bytes(row) * tokens * 2.0 * h, t, 1.0)
    extra = d * (allgather_time(row, ACT_BYTES * tokens * 2.0 * h, t, 1.0) - eh_gather) if d > 0.0 else 0.0
    if row[C_SP_WGRAD_REGATHER] <= 0.0:
        return extra, 0.0
    head = allgather_time(row, ACT_BYTES * tokens * h, t, 1.0) + o
    head_dgrad = gemm_time(row, tokens, row[C_VOCAB] / t, h, False)
    extra += (1.0 + d) * head
    hidden = (1.0 + d) * (head - exposed(row, head, head_dgrad))
    if d > 0.0:
        eh = eh_gather + o
        eh_dgrad = gemm_time(row, tokens, h / t, 2.0 * h, train_gemm_format(row))
        extra += d * eh
        hidden += d * (eh - exposed(row, eh, eh_dgrad))
    return extra, hidden
