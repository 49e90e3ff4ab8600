"""Sequence-parallel wgrad re-gathers beyond the dense layer's (docs/model.md §11.42): an MLA layer's attention
up-projections, the LM head's output layer and the MTP ``eh_proj`` (its input gather's bytes); and (§11.44) the
output layer's own input gather / reduce-scatter / all-reduce, MLA's forward gathers at the latents' widths, its
replicated down-projections (their GEMMs on the SP slice, their gradients' once-a-step TP all-reduce with the
norms') and the MTP module's BF16 GEMMs under fp4. The layer's own re-gathers, their overlap and the TP of a layer
are ``kernels/lm/tp_layer.py`` (``tp_layer_time``, ``regather_hidden_time``, §11.41)."""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.fp4 import train_gemm_format
from fastmodel.kernels.lm.layout import (
    C_COLLECTIVE_OVERHEAD_S, C_GRAD_REDUCE_BYTES, C_HIDDEN, C_KV_LORA_RANK, C_LEARNED_POSITIONS, C_MLA, C_MTP_LAYERS,
    C_PRECISION, C_Q_LORA_RANK, C_QK_ROPE_HEAD_DIM, C_SEQUENCE_PARALLEL, C_SP_WGRAD_REGATHER, C_STACK_COMPUTE_EFF,
    C_TP, C_VOCAB, PRECISION_FP8,
)
from fastmodel.kernels.lm.parallel import exposed
from fastmodel.kernels.lm.shape import ACT_BYTES, mla_duplicated_params, norm_params
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import gemm_roofline, gemm_time, sp_gather_bytes


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
def mla_sp_gathers(row, tokens, t):
    """(forward, backward) seconds of an MLA layer's attention input collectives under SP, one micro-batch, each
    with its overhead o (docs/model.md §11.44). Megatron-Core (d98e8a6 ``multi_latent_attention.py``) runs the
    down-projections on the sequence-parallel slice (``parallel_mode='duplicated'``, no TP group) and gathers the
    latents, not the h-wide hidden state: ``linear_q_up_proj`` its q_lora-wide input (``linear_q_proj`` h wide
    without a query low rank) and ``linear_kv_up_proj`` its kv_lora-wide input at :func:`sp_gather_bytes`, and
    ``k_pos_emb`` (rope wide) through ``gather_from_sequence_parallel_region`` (16-bit; lines 757-763). Backward
    their conjugate reduce-scatters at 2 B (priced as the model prices a reduce-scatter, as the gather of its
    output). Replaces the dense layer's one AG(b_f T h) + o forward and RS(2 T h) + o backward."""
    b = sp_gather_bytes(row, False)
    o = row[C_COLLECTIVE_OVERHEAD_S]
    q_width = row[C_Q_LORA_RANK] if row[C_Q_LORA_RANK] > 0.0 else row[C_HIDDEN]
    kv, rope = row[C_KV_LORA_RANK], row[C_QK_ROPE_HEAD_DIM]
    forward = allgather_time(row, b * tokens * q_width, t, 1.0) + allgather_time(row, b * tokens * kv, t, 1.0) \
        + allgather_time(row, ACT_BYTES * tokens * rope, t, 1.0) + 3.0 * o
    backward = allgather_time(row, ACT_BYTES * tokens * q_width, t, 1.0) \
        + allgather_time(row, ACT_BYTES * tokens * kv, t, 1.0) + allgather_time(row, ACT_BYTES * tokens * rope, t, 1.0) \
        + 3.0 * o
    return forward, backward


@njit
def embedding_tp(row, tokens):
    """(forward, backward) seconds of the vocab-parallel word embedding's TP collectives, one micro-batch on the
    first stage (docs/model.md §11.44). ``VocabParallelEmbedding.forward`` (Megatron-LM d98e8a6
    ``tensor_parallel/layers.py`` 367-383) reduce-scatters its 16-bit output over the sequence under SP
    (``reduce_scatter_embeddings``, set by ``LanguageModelEmbedding`` under SP without learned positions,
    ``language_model_embedding.py`` 51-63), whose backward all-gathers the output gradient (``mappings.py``
    372-377); otherwise it all-reduces the output (383), and under SP ``scatter_to_sequence_parallel_region``
    splits it (143-147; backward an all-gather), without SP the backward is the identity. Each a blocking
    collective + o, exposed."""
    t = row[C_TP]
    if t <= 1.0:
        return 0.0, 0.0
    nbytes = ACT_BYTES * tokens * row[C_HIDDEN]
    o = row[C_COLLECTIVE_OVERHEAD_S]
    gather = allgather_time(row, nbytes, t, 1.0) + o
    if row[C_SEQUENCE_PARALLEL] <= 0.0:
        return allreduce_time(row, nbytes, t, 1.0) + o, 0.0
    if row[C_LEARNED_POSITIONS] > 0.0:
        return allreduce_time(row, nbytes, t, 1.0) + o, gather
    return gather, gather       # the reduce-scatter priced as its output's gather


@njit
def mla_down_sp_excess(row, tokens, fp8, wbytes):
    """Seconds the layer's GEMM list (``shape.attention_gemm_time``, over ``stack_compute_eff``) charges an MLA
    layer's down-projections beyond what they take under SP (docs/model.md §11.44): replicated over TP
    (``parallel_mode='duplicated'``, :func:`shape.mla_duplicated_params`), they run on the rank's
    sequence-parallel slice, ``tokens / t`` rows at full width, where the list prices all ``tokens`` rows (right
    without SP, where every rank projects the whole sequence). 0 without MLA, TP or SP."""
    t = row[C_TP]
    if row[C_MLA] <= 0.0 or t <= 1.0 or row[C_SEQUENCE_PARALLEL] <= 0.0:
        return 0.0
    h = row[C_HIDDEN]
    kv = row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]
    full = gemm_roofline(row, 1.0, tokens, kv, h, fp8, wbytes, 1.0)
    local = gemm_roofline(row, 1.0, tokens / t, kv, h, fp8, wbytes, 1.0)
    if row[C_Q_LORA_RANK] > 0.0:
        full += gemm_roofline(row, 1.0, tokens, row[C_Q_LORA_RANK], h, fp8, wbytes, 1.0)
        local += gemm_roofline(row, 1.0, tokens / t, row[C_Q_LORA_RANK], h, fp8, wbytes, 1.0)
    return (full - local) / row[C_STACK_COMPUTE_EFF]


@njit
def head_input_tp(row, tokens):
    """(forward, backward, of backward hidden) seconds of the LM output layer's own input collectives, one
    micro-batch on the last stage, over its 1 + ``mtp_layers`` passes (docs/model.md §11.44). The output layer is
    Megatron-Core's ``ColumnParallelLinear`` (16-bit): under SP its forward all-gathers its sequence-parallel input,
    synchronously before the GEMM (``layers.py`` 623-629, d98e8a6), and its backward reduce-scatters the input
    gradient with ``async_op=True`` before the wgrad GEMM (700-709), waited on after it; without SP the backward
    all-reduces the input gradient (694-696; the forward has none). With ``sp_wgrad_regather`` (the async
    Megatron-Core linear) the reduce-scatter hides under the wgrad GEMM GEMM(T, h, V/t) by ``parallel.exposed``;
    the all-reduce without SP is charged exposed [A: Megatron-LM 67aa861's ``parallel_lm_logits``, the
    Narayanan-era rows without SP, reduces synchronously through ``copy_to_tensor_model_parallel_region``]."""
    t = row[C_TP]
    if t <= 1.0:
        return 0.0, 0.0, 0.0
    n = 1.0 + row[C_MTP_LAYERS]
    elements = ACT_BYTES * tokens * row[C_HIDDEN]
    o = row[C_COLLECTIVE_OVERHEAD_S]
    if row[C_SEQUENCE_PARALLEL] <= 0.0:
        return 0.0, n * (allreduce_time(row, elements, t, 1.0) + o), 0.0
    c = allgather_time(row, elements, t, 1.0) + o
    hidden = 0.0
    if row[C_SP_WGRAD_REGATHER] > 0.0:
        hidden = n * (c - exposed(row, c, gemm_time(row, tokens, row[C_VOCAB] / t, row[C_HIDDEN], 0.0)))
    return n * c, n * c, hidden


@njit
def sp_replicated_grads_allreduce(row, layers):
    """Seconds of the once-a-step all-reduce over TP of the gradients that sequence parallelism leaves partial on
    each TP rank, for a rank of ``layers`` layers (docs/model.md §11.44): Megatron-Core's ``finalize_model_grads``
    (d98e8a6 ``finalize_model_grads.py`` 661) calls ``_allreduce_non_tensor_model_parallel_grads``, which
    coalesces every parameter marked ``sequence_parallel`` (452: the norms' weights, and MLA's duplicated
    down-projections, ``transformer_engine.py`` 1313-1318) and all-reduces them over the TP group in one call
    (474), after the last micro-batch, at the main-gradient dtype (``grad_reduce_bytes``). Per layer
    :func:`shape.norm_params` + :func:`shape.mla_duplicated_params` (the caller counts an MTP module's layer as one);
    the final norm and the MTP modules' own three norms are left out (a few h). 0 without TP or SP, and for stacks without Megatron's linears
    (``sp_wgrad_regather`` 0: DTensor reduces replicated gradients its own way) [A]."""
    t = row[C_TP]
    if t <= 1.0 or row[C_SEQUENCE_PARALLEL] <= 0.0 or row[C_SP_WGRAD_REGATHER] <= 0.0:
        return 0.0
    params = layers * (norm_params(row) + mla_duplicated_params(row))
    return allreduce_time(row, params * row[C_GRAD_REDUCE_BYTES], t, 1.0) + row[C_COLLECTIVE_OVERHEAD_S]


@njit
def mtp_gemm_format(row):
    """The GEMM format of the MTP module's ``eh_proj`` and transformer layer (docs/model.md §11.44): the training
    format, but 16-bit under fp4. Megatron-LM d98e8a6 ``_proj_and_transformer_layer`` enters only
    ``get_fp8_context`` when ``config.fp8`` ("TODO: currently ignoring FP4 in MTP layers",
    ``multi_token_prediction.py`` 1387-1394), so an fp4 run's MTP GEMMs are BF16."""
    f = train_gemm_format(row)
    return 0.0 if f == 2.0 else f


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
    head_dgrad = gemm_time(row, tokens, row[C_VOCAB] / t, h, 0.0)
    extra += (1.0 + d) * head
    hidden = (1.0 + d) * (head - exposed(row, head, head_dgrad))
    if d > 0.0:
        eh = eh_gather + o
        eh_dgrad = gemm_time(row, tokens, h / t, 2.0 * h, mtp_gemm_format(row))
        extra += d * eh
        hidden += d * (eh - exposed(row, eh, eh_dgrad))
    return extra, hidden
