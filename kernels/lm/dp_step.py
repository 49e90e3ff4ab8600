"""The data-parallel part of the training step (docs/model.md §11.7, §11.27, §11.28): each end rank's gradient
reduction, parameter gather and optimizer step, and the per-layer ZeRO-3/FSDP collectives over the step.

``step.step_row`` adds :func:`_data_parallel_ranks` (the exposed seconds before the optimizer step, the step and
the exposed seconds after it, of the rank that bounds the critical path) and :func:`_fsdp_step` to the step; the
parameters an end rank holds beside its layers (the MTP modules, :func:`mtp_module_params`; a tied head's copy,
:func:`tied_head_copy`) are counted here. Moved out of ``kernels/lm/step.py`` (which re-exports the public names)
when that module reached the 450-line limit; no change to any function.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layer import layer_kind_params
from fastmodel.kernels.lm.layout import (
    C_LAST_STAGE_LAYERS, C_OVERLAP_GRAD_REDUCE, C_CP, C_DP, C_EP, C_MTP_LAYERS, C_HIDDEN, C_OPTIMIZER, C_PP,
    C_TIED_EMBEDDINGS, C_SHARDING, C_TP, SHARD_ZERO2, C_VOCAB, OPT_MUON, R_COMM_DP, R_EXPOSED_DP, R_TIME_OPTIMIZER,
)
from fastmodel.kernels.lm.memory_states import (
    explicit_layout, layers_per_stage, layout_busiest_layers, split_slots, stage_layers, stored_grad_bytes,
)
from fastmodel.kernels.lm.shape import mtp_stage_layers
from fastmodel.kernels.lm.muon import muon_step
from fastmodel.kernels.lm.optimizer_step import optimizer_bytes_per_param, optimizer_step_bytes
from fastmodel.kernels.lm.dp_window import per_chunk_collectives
from fastmodel.kernels.lm.embedding_fp32 import fp32_embedding_params, fp32_embedding_step, shared_grad_bytes
from fastmodel.kernels.lm.moe import expert_dp, expert_tp
from fastmodel.kernels.lm.parallel import data_parallel, fsdp_first_layer_exposed, microbatch_reduce
from fastmodel.kernels.lm.fsdp1_root import fsdp1_root_step
from fastmodel.kernels.lm.positions import position_table_params
from fastmodel.kernels.lm.sp_regather import sp_replicated_grads_allreduce
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_INPUT, A_BACKWARD_WEIGHT, A_FORWARD, A_EXPERT_PARAMS, A_MTP_EXPERT_PARAMS, A_MTP_PARAMS, A_FSDP_COMM,
    A_FSDP_EXPOSED, A_FSDP_GATHER, A_FSDP_REDUCE, A_FSDP_REFETCH, A_FSDP_WINDOW, A_PARAMS, A_RECOMPUTE,
    fsdp_shard_group, per_layer_fsdp,
)
from fastmodel.kernels.lm.fp8 import fp8_weight_step_s
from fastmodel.kernels.lm.host_syncs import optimizer_host_s
from fastmodel.kernels.lm.pipeline import model_copies, pipeline_drain
from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.roofline import memory_bound_time


@njit
def mtp_module_params(row, layer_params, layer_experts):
    """(non-expert, routed-expert, embedding-copy) parameters per device of the ``mtp_layers`` MTP modules on
    the last pipeline rank, given the MTP layer's (``mtp_breakdown.mtp_layer``) ``layer_params`` non-expert and
    ``layer_experts`` expert parameters (docs/model.md §11.4 "MTP module"). A module (Megatron-Core ``MultiTokenPredictionLayer``,
    megatron/core/transformer/multi_token_prediction.py, NVIDIA/Megatron-LM@d98e8a6) holds a transformer layer,
    the ``eh_proj`` projection ``2h x h`` (column-parallel: ``/t``) and three norms (``enorm``, ``hnorm``,
    ``final_layernorm``: ``3h``); the output layer is the main model's. The embedding is shared too, but with
    ``pp > 1`` the MTP stage builds its own copy of the word embedding (gpt_model.py ``if self.pre_process or
    self.mtp_process``) tied to the first stage's (language_module.py ``setup_embeddings_and_output_layer``; its
    gradient all-reduced over the embedding group in finalize_model_grads.py ``_allreduce_word_embedding_grads``),
    ``V h / t`` more parameters; its gradient is reduced over dp like the rest. Under DualPipe the MTP stage shares
    rank 0 with the embedding and the two share the parameters (DeepSeek-V3 report sec. 3.2.3): no copy. A tied
    head's copy on the last stage (:func:`tied_head_copy`) is that copy already: none more."""
    d = row[C_MTP_LAYERS]
    if d <= 0.0:
        return 0.0, 0.0, 0.0
    h = row[C_HIDDEN]
    t = row[C_TP]
    untied = row[C_TIED_EMBEDDINGS] <= 0.0
    copy = row[C_VOCAB] * h / t if (row[C_PP] > 1.0 and model_copies(row) <= 1.0 and untied) else 0.0
    return d * (layer_params + 2.0 * h * h / t + 3.0 * h) + copy, d * layer_experts, copy


@njit
def tied_head_copy(row):
    """Parameters per device of the last stage's copy of a tied word embedding (docs/model.md §11.7 "Tied
    embeddings across stages"): with ``tied_embeddings`` and ``pp > 1`` the output layer is not on the
    embedding's rank, so Megatron-Core keeps a second copy there (language_module.py
    ``setup_embeddings_and_output_layer``, ``weight.shared_embedding = True``, Megatron-LM core_v0.19.0 lines
    273-300), ``V h / t``; 0 without pipeline stages or under DualPipe (rank 0 holds both ends: one tensor)."""
    if row[C_TIED_EMBEDDINGS] > 0.0 and row[C_PP] > 1.0 and model_copies(row) <= 1.0:
        return row[C_VOCAB] * row[C_HIDDEN] / row[C_TP]
    return 0.0


#: which end of the model the rank of :func:`_data_parallel_step` holds beside its layers
END_LARGER, END_FIRST, END_LAST = -1.0, 0.0, 1.0


@njit
def _data_parallel_ranks(row, work, head_params, micro_batches, stage_mb, out):
    """The data-parallel step (:func:`_data_parallel_step`) into ``out``; returns its critical-path seconds. Each
    rank reduces its gradients when its own backward ends (Megatron-Core ``finish_grad_sync`` per model chunk,
    distributed/finalize_model_grads.py@0823c73 lines 501-502); the gradient norm's all-reduce over the
    model-parallel group (optimizer.py lines 759-760, clip_grads.py lines 102-104) then waits for every rank, and
    the slowest rank's optimizer step and parameter gather follow: max over ranks of the reduction's tail, plus
    max over ranks of the step after it (docs/model.md §11.27). The end ranks bound it: the first rank (the
    busiest other rank's layers, ``n_mid``, and the embedding), and the last (its layers, the head and MTP
    modules), whose reduction also runs in the :func:`pipeline_drain` of the other ranks' layers (rank 0's first
    chunk one fewer with the embedding's slot; a middle rank holds rank 0's layers without its embedding and ends
    its backward earlier). Without a pipeline, or under DualPipe (rank 0 holds both
    ends), one rank: the busiest beside the larger end."""
    if row[C_PP] <= 1.0 or model_copies(row) > 1.0:
        before, after = _data_parallel_step(row, work, layers_per_stage(row), head_params, micro_batches, stage_mb,
                                            out, END_LARGER, 0.0)
    elif ends_alike(row, head_params):      # the last rank's step is the first's, but for its drain: one call
        before, after = _data_parallel_step(row, work, layers_per_stage(row), head_params, micro_batches, stage_mb,
                                            out, END_FIRST, 0.0)
    else:
        before, after = _data_parallel_ends(row, work, head_params, micro_batches, stage_mb, out)
    out[R_EXPOSED_DP] = before + after - out[R_TIME_OPTIMIZER]
    return before + after


@njit
def _data_parallel_ends(row, work, head_params, micro_batches, stage_mb, out):
    """(exposed seconds before the optimizer step, the optimizer step and the exposed seconds after it) of a
    pipeline's two end ranks (:func:`_data_parallel_ranks`): the first rank's step and the last's, which waits the
    drain, each :func:`_data_parallel_step`; the larger of each part, ``R_COMM_DP`` the larger and
    ``R_TIME_OPTIMIZER`` of the rank whose step after the reduction is longer, into ``out``."""
    last = row[C_LAST_STAGE_LAYERS] if explicit_layout(row) else layers_per_stage(row)
    backward = work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE]   # a layer's
    drain = max(0.0, pipeline_drain(row, layout_busiest_layers(row), backward) - 0.5 * split_slots(row) * backward)
    if per_chunk_collectives(row) and row[C_OVERLAP_GRAD_REDUCE] > 0.0:
        drain = 0.0     # per-chunk reductions launched at one wall time on every rank (§11.28): no drain credited
    before, after = _data_parallel_step(row, work, layout_busiest_layers(row), head_params, micro_batches,
                                        stage_mb, out, END_FIRST, 0.0)
    comm, optimizer = out[R_COMM_DP], out[R_TIME_OPTIMIZER]
    last_before, last_after = _data_parallel_step(row, work, last, head_params, micro_batches, stage_mb, out,
                                                  END_LAST, drain)
    before = max(before, last_before)
    if after > last_after:      # the optimizer step of the rank whose step after the reduction is longer
        out[R_TIME_OPTIMIZER] = optimizer
    else:
        after = last_after
    out[R_COMM_DP] = max(comm, out[R_COMM_DP])
    return before, after


@njit
def ends_alike(row, head_params):
    """True when the two end ranks of a pipeline (no DualPipe) get the same data-parallel step but for the drain
    the last one waits (:func:`_data_parallel_ranks`), so that the first rank's bounds both: no explicit layout
    (both hold ``layers_per_stage`` average layers), no MTP modules, not Muon (whose matrices follow the rank's
    dense and MoE layers) and the head's parameters with the tied copy equal to the embedding's (an untied head
    or a tied copy is ``V h / t``, as the embedding without a learned position table, §11.56). Then every quantity of :func:`_data_parallel_step` is the
    same for both ends except ``idle``, and the exposed seconds do not grow with it (``parallel.reduce_tail``):
    the first rank's step (``idle = 0``) is the maximum, bit for bit."""
    if explicit_layout(row) or row[C_MTP_LAYERS] > 0.0 or row[C_OPTIMIZER] == OPT_MUON:
        return False
    return head_params + tied_head_copy(row) + 0.0 == row[C_VOCAB] * row[C_HIDDEN] / row[C_TP] + position_table_params(row)


@njit
def _data_parallel_step(row, work, per_stage, head_params, micro_batches, stage_mb, out, end, idle):
    """Data-parallel gradient reduction and parameter gather once per step (with ``reduce_every_microbatch``
    the earlier micro-batches' reductions too, each beside the next micro-batch's ``stage_mb``), and the
    optimizer step, of a rank of ``per_stage`` layers and the model's ``end`` (``END_*``: the larger of the two,
    the embedding, the head) that waits ``idle`` seconds after its backward for the other ranks (its reduction
    runs in them); returns (the exposed seconds before the optimizer step, the optimizer step and the exposed
    seconds after it) and leaves ``R_COMM_DP`` and ``R_TIME_OPTIMIZER`` in ``out``. Under an explicit layout an end
    rank's parameters are its own layers' (``stage_layers``: dense and MoE as it holds them, ``layer_kind_params``
    each), as its Muon matrices are; else ``per_stage`` average layers."""
    p = row[C_PP]
    t = row[C_TP]
    params = work[A_PARAMS]
    embedding_params = row[C_VOCAB] * row[C_HIDDEN] / t + position_table_params(row)    # the first end (§11.56)
    # dense parameters over dp; routed experts over the expert-data-parallel group edp (kernels/lm/moe.py)
    experts = work[A_EXPERT_PARAMS]
    copies = model_copies(row)      # DualPipe: rank 0 holds stages 0 and p - 1 (embedding and head)
    mtp_params, mtp_experts, mtp_embedding = mtp_module_params(row, work[A_MTP_PARAMS], work[A_MTP_EXPERT_PARAMS])
    tied_copy = tied_head_copy(row)
    last_end = head_params + tied_copy + mtp_params
    if copies > 1.0:
        ends = embedding_params + last_end
        holds_last = True       # DualPipe: rank 0 holds the embedding and the last stage (head, MTP)
    elif p > 1.0:
        holds_last = last_end >= embedding_params if end == END_LARGER else end == END_LAST
        ends = last_end if holds_last else embedding_params
    else:
        ends = embedding_params + last_end
        holds_last = True
    # the MTP modules' routed experts are on the rank that holds the last stage
    experts_held = copies * per_stage * experts + (mtp_experts if holds_last else 0.0)
    stage_params = copies * per_stage * (params - experts) + ends
    if explicit_layout(row) and end != END_LARGER:     # the rank's own dense and MoE layers (§11.27)
        dense, moe, _ = stage_layers(row, p - 1.0 if holds_last else 0.0)
        dense_params = layer_kind_params(row, False)[0]
        moe_params, moe_experts = layer_kind_params(row, True)
        stage_params = dense * dense_params + moe * (moe_params - moe_experts) + ends
        experts_held = moe * moe_experts + (mtp_experts if holds_last else 0.0)
    if split_slots(row) > 0.0:      # the embedding and the head hold a layer's slot (last_rank_layers)
        stage_params = max(stage_params - ends, stage_params - copies * (params - experts))
    # NeMo's FP32 embedding gradients: out of the stage's buffer, reduced on their own (§11.54)
    removed, fp32 = fp32_embedding_params(row, holds_last and copies <= 1.0 and p > 1.0, embedding_params, tied_copy)
    stage_params = max(0.0, stage_params - removed)
    backward = per_stage * (work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE])
    forward = per_stage * work[A_FORWARD]
    shard_group = fsdp_shard_group(row)
    # the windows the dense collectives overlap: per model chunk under interleaving (dp_overlap_windows, §11.28)
    dp_comm, before, after, local_params, last_backward, first_forward = data_parallel(
        row, stage_params, backward, forward, shard_group, row[C_DP], t * row[C_CP], idle, True)
    dp_comm, before = fsdp1_root_step(row, dp_comm, before, ends, params - experts, stage_params, last_backward,
                                      shard_group, row[C_DP], t * row[C_CP], micro_batches, embedding_params)
    mb_comm, mb_exposed = microbatch_reduce(row, stage_params, shard_group, t * row[C_CP], micro_batches, stage_mb)
    dp_comm += mb_comm
    before += mb_exposed
    f_comm, f_before, f_gather, f_step = fp32_embedding_step(row, fp32, stage_params, first_forward)
    dp_comm += f_comm
    before += f_before
    after += f_gather
    if experts_held > 0.0:
        edp = expert_dp(row)
        stride = expert_tp(row) * row[C_EP]
        expert_group = min(edp, max(1.0, shard_group * t * row[C_CP] / stride))
        # after the dense reduction on the same stream: the windows and the idle time it left
        e_comm, e_before, e_after, e_local, _, _ = data_parallel(
            row, experts_held, max(0.0, last_backward - dp_comm), max(0.0, first_forward - dp_comm), expert_group,
            edp, stride, max(0.0, idle - max(0.0, dp_comm - last_backward)), False)
        dp_comm += e_comm
        before += e_before
        after += e_after
        local_params += e_local
    # the gradients the rank holds: the stage's whole buffer, or its shard under ZeRO-2 and FSDP
    held = local_params if row[C_SHARDING] >= SHARD_ZERO2 else stage_params + experts_held
    # the last (MTP) stage's copy of the word embedding: its gradient all-reduced with the first stage's after the
    # backward over the two-rank embedding group (finalize_model_grads.py ``_get_shared_word_embedding_weight``:
    # tied or MTP, and ``_allreduce_word_embedding_grads``, Megatron-LM core_v0.19.0 lines 146, 164-197)
    shared = mtp_embedding + tied_copy
    if shared > 0.0:
        tied = allreduce_time(row, shared * shared_grad_bytes(row), 2.0, (p - 1.0) * t * row[C_CP] * row[C_DP])
        dp_comm += tied
        before += tied
    # finalize_model_grads' TP all-reduce of the SP-replicated gradients (norms, MLA down-projections; §11.44), the
    # MTP layers' too on the rank that holds them
    sp_grads = sp_replicated_grads_allreduce(row, copies * per_stage + (row[C_MTP_LAYERS] if holds_last else 0.0))
    dp_comm += sp_grads
    before += sp_grads
    step_bytes = optimizer_step_bytes(row, local_params, held)
    optimizer = 0.0
    if row[C_OPTIMIZER] == OPT_MUON:
        # Muon on the layers' matrices, AdamW on the rest (kernels/lm/muon.py): its passes replace the AdamW
        # kernel's over the matrices the device holds
        dense, moe, mtp = stage_layers(row, 0.0 if end == END_FIRST else row[C_PP] - 1.0)
        dense, moe = mtp_stage_layers(row, dense, moe, mtp)
        optimizer, muon_bytes, muon_params = muon_step(row, dense, moe, stored_grad_bytes(row), mtp)
        matrices = muon_params * min(1.0, local_params / max(stage_params, 1.0))
        step_bytes += muon_bytes - matrices * optimizer_bytes_per_param(row)
    # f_step: FP32 embeddings' (§11.54); FP8 re-cast of the updated weights (§11.65 C); host loops (§11.64)
    optimizer += (memory_bound_time(row, step_bytes) + f_step + fp8_weight_step_s(row, per_stage * work[A_PARAMS])
                  + optimizer_host_s(row, holds_last, local_params))
    out[R_COMM_DP] = dp_comm
    out[R_TIME_OPTIMIZER] = optimizer
    return before, after + optimizer


@njit
def _fsdp_step(row, work, micro_batches, per_stage, out):
    """ZeRO-3/FSDP per-layer collectives over the step (into ``out``'s data-parallel results); the exposed seconds.
    Each layer's collectives count once: the stage's first layer exposes its forward gather and its reduce-scatter,
    the last of the backward (``fsdp_first_layer_exposed``); the others hide behind their neighbours' compute."""
    if not per_layer_fsdp(row):
        return 0.0
    first = fsdp_first_layer_exposed(row, work[A_FSDP_GATHER], work[A_FSDP_REDUCE], work[A_FSDP_WINDOW]) \
        + work[A_FSDP_REFETCH]
    exposed_step = micro_batches * ((per_stage - 1.0) * work[A_FSDP_EXPOSED] + first)
    out[R_COMM_DP] += micro_batches * per_stage * work[A_FSDP_COMM]
    out[R_EXPOSED_DP] += exposed_step
    return exposed_step
