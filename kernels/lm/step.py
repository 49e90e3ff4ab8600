"""Step time of decoder-LM training under the real-world model (docs/model.md §11.7).

One configuration is one column vector ``row`` (``fastmodel.registry.lm`` columns). The step is composed in
three parts:

1. the layer mix (``layer.layer_mix``: dense or MoE, full or sliding-window attention) and the per-layer
   costs of each kind (``layer.layer_costs``);
2. the per-layer pass times: forward, backward for inputs, backward for weights, recompute and the exposed
   communication of the average layer (``kernels/lm/passes.py``), and the LM head's (``passes.head_passes``);
3. the step composition (this module):

    t_layer   = F + B + W + R + exposed TP/CP/EP                          (docs/model.md §11.4, §11.6)
    t_mb      = layers_per_stage x t_layer + t_head / copies             busiest (last) stage     (§11.4)
                (the loss in the split: max(L_s t_layer, (L_s - 1) t_layer + t_head / copies), §11.7)
    step      = m x t_mb + bubble + exposed FSDP + exposed PP + exposed DP + optimizer + overhead    (§11.7)
                + m x layers x exposed offload copies per layer                                    (§11.21)

where m = global_batch / (micro_batch x dp) micro-batches per step, and the bubble, the exposed sends and the model
copies per rank come from the pipeline schedule (``kernels/lm/pipeline.py``). Every communication term is a
collective of ``kernels.nccl`` on its own process group and stream; "exposed" is the part not hidden behind the
compute it overlaps with (``kernels/lm/parallel.py``).
"""

import numpy as np

from fastmodel.kernels.jit import njit, stack_vector
from fastmodel.kernels.lm.layer import (
    W_FLOPS, W_GEMM, W_MEM, W_PARAMS, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, W_WGRAD, layer_kind_params, model_flops_per_token,
    recompute_share,
)
from fastmodel.kernels.lm.layout import (
    C_LAST_STAGE_LAYERS, C_OVERLAP_GRAD_REDUCE, C_CP, C_DP, C_EP, C_GLOBAL_BATCH, C_MTP_LAYERS, C_HIDDEN, C_MICRO_BATCH,
    C_N_GPUS, C_OPTIMIZER, C_PEAK_FLOPS_4, C_PEAK_FLOPS_8, C_PEAK_FLOPS_16, C_PP, C_PRECISION, C_SEQ_LEN,
    C_TIED_EMBEDDINGS, C_SHARDING, C_STEP_OVERHEAD_S, C_TP, SHARD_ZERO2, C_VOCAB, OPT_MUON, PRECISION_FP4,
    PRECISION_FP8, R_COMM_CP, R_COMM_DP, R_COMM_EP, R_COMM_EP_SCALE_OUT, R_COMM_PP, R_COMM_TP, R_EXPOSED_CP,
    R_EXPOSED_DP, R_EXPOSED_EP, R_EXPOSED_PP, R_EXPOSED_TP, R_FLOPS_PER_TOKEN, R_HFU, R_MFU, R_PIPELINE_BUBBLE,
    R_STEP_TIME, R_TIME_HOST_WAIT, R_TIME_ATTENTION, R_TIME_GEMM, R_TIME_MEMORY_BOUND, R_TIME_OPTIMIZER, R_TIME_OFFLOAD,
    R_TIME_RECOMPUTE, R_TOKENS_PER_S, R_TOKENS_PER_S_PER_GPU, R_TIME_EVAL,
)
from fastmodel.kernels.lm.memory_states import (
    explicit_layout, layers_per_stage, layout_busiest_layers, split_slots, stage_layers, stored_grad_bytes,
)
from fastmodel.kernels.lm.shape import mtp_stage_layers
from fastmodel.kernels.lm.muon import muon_step
from fastmodel.kernels.lm.optimizer_step import optimizer_bytes_per_param, optimizer_step_bytes
from fastmodel.kernels.lm.offload_time import forward_backward, mtp_offload_s, offload_layer_from
from fastmodel.kernels.lm.dp_window import per_chunk_collectives
from fastmodel.kernels.lm.embedding_fp32 import fp32_embedding_params, fp32_embedding_step, shared_grad_bytes
from fastmodel.kernels.lm.moe import expert_dp, expert_tp
from fastmodel.kernels.lm.parallel import data_parallel, fsdp_first_layer_exposed, microbatch_reduce
from fastmodel.kernels.lm.bf16_layers import add_bf16_layers, bf16_end_work_into
from fastmodel.kernels.lm.first_rank import embedding_ends, embedding_parts_of, embedding_terms
from fastmodel.kernels.lm.fsdp1_root import fsdp1_root_step
from fastmodel.kernels.lm.positions import position_table_params
from fastmodel.kernels.lm.rank_lead import (
    last_rank_all_moe, last_rank_layer_time, leader_passes, middle_rank_can_lead, other_ranks_mb, priced_by_kind,
)
from fastmodel.kernels.lm.mtp_breakdown import add_mtp_layers, mtp_layer_into
from fastmodel.kernels.lm.sp_regather import sp_replicated_grads_allreduce
from fastmodel.kernels.lm.passes import (
    A_ATTN, A_BACKWARD_INPUT, A_BACKWARD_WEIGHT, A_CP_COMM, A_CP_EXPOSED, A_EP_COMM, A_EXPOSED_F, A_FLOPS, A_FORWARD,
    A_EP_EXPOSED, A_EP_SCALE_OUT, A_EXPERT_PARAMS, A_MTP_EXPERT_PARAMS, A_MTP_PARAMS, A_FSDP_COMM, A_FSDP_EXPOSED,
    A_FSDP_GATHER, A_FSDP_REDUCE, A_FSDP_REFETCH, A_FSDP_WINDOW, A_GEMM, A_MEM, A_PARAMS, A_RECOMPUTE, A_TP_COMM,
    A_TP_EXPOSED, BACKWARD_GEMM, N_KIND_COSTS, N_WORK, TP_BACKWARD_PASSES, fsdp_shard_group, head_passes, layer_passes,
    layer_passes_keeping, layer_time, per_layer_fsdp,
)
from fastmodel.kernels.lm.host_step import embedding_send_overlap, eval_time, host_bound_bubble, host_wait_per_microbatch
from fastmodel.kernels.lm.chain_nic import chain_sends_nic_shared
from fastmodel.kernels.lm.fp8 import fp8_weight_chain_s, fp8_weight_step_s
from fastmodel.kernels.lm.host_syncs import host_wait_s, optimizer_host_s
from fastmodel.kernels.lm.pipeline import model_copies, pipeline_drain, pipeline_p2p
from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.roofline import memory_bound_time


def busiest_stage(row, work):
    """(t_mb, t_avg, F_avg, W_avg, layers, head share, n16, d16, emb): one micro-batch on the busiest stage and on the
    average stage, the average stage's forward and weight-gradient passes (what the pipeline schedule's bubble reads),
    the busiest rank's layers and share of the LM head (1: the last rank; 0: a middle or the first rank,
    :func:`last_rank_layers`), the BF16 layers it holds with one's accumulators beyond its kind's
    (``bf16_layers.bf16_layer_work``, §11.39) and its seconds of the word embedding's TP collectives and dense
    gradient a micro-batch at pp > 1 (``first_rank.embedding_ends``, §11.44). Leaves the busiest rank's layer
    accumulators in ``work[A_*]`` and the head's parameters and FLOPs in ``work[W_*]``. ``d16`` is a new vector
    (:func:`busiest_stage_into`). Called from Python (timeline, pipeline report): a plain function, so it runs the
    compiled ``busiest_stage_into`` and ``embedding_terms`` at the types ``step_row`` compiles them at not one more
    compile of the step (~1 s cold)."""
    t_mb, t_avg, f_avg, w_avg, layers, share, n16, d16, emb, _ = busiest_stage_into(
        row, work, np.empty(N_WORK), np.empty(N_WORK), np.empty(N_WORK), embedding_terms(row))
    return t_mb, t_avg, f_avg, w_avg, layers, share, n16, d16, emb


@njit
def busiest_stage_into(row, work, d_first, d_last, d_mtp, terms):
    """:func:`busiest_stage` with the first and last rank's BF16-layer accumulators written into the caller's
    ``d_first`` and ``d_last`` and the MTP layer's into ``d_mtp`` (``N_WORK`` each; ``d16`` is one of the first two;
    ``mtp_breakdown.mtp_layer_into``): :func:`step_row` passes frame vectors, so the step allocates nothing per
    configuration (docs/performance.md, 2026-12-06 evening), and the embedding's ``first_rank.embedding_terms``
    ``terms``, which it evaluates once for this and the bubble; and a tenth value, the average layer's exposed
    offload copies (``offload_time.offload_layer_from``: from the passes taken here, not taken again)."""
    p = row[C_PP]
    per_stage = layers_per_stage(row)       # the busiest rank's layers (uneven stages: a layer more than average)
    slots = split_slots(row) / p            # the embedding's and the loss's slots, per rank on average
    t_mtp, mtp_params, mtp_experts = mtp_layer_into(row, work, d_mtp)  # first: the passes below overwrite work
    work[A_MTP_PARAMS] = mtp_params         # kept by layer_passes_of, read by the data-parallel step
    work[A_MTP_EXPERT_PARAMS] = mtp_experts
    all_moe = last_rank_all_moe(row)
    n_first, n_last = bf16_end_work_into(row, all_moe, d_first, d_last)  # the recipe's BF16 layers (§11.39)
    first_bf16, last_bf16 = n_first * layer_time(d_first), n_last * layer_time(d_last)
    emb_first, emb_last, emb_forward, emb = embedding_ends(row, terms)  # the embedding at pp > 1 (§11.44 1d)
    costs = stack_vector(N_KIND_COSTS)     # by kind: each kind's layer costs, kept for the ranks (rank_lead.py)
    if priced_by_kind(row):
        layer_passes_keeping(row, work, costs)
    else:
        layer_passes(row, work)
    t_layer = layer_time(work)
    avg_f, avg_b = forward_backward(work)   # the average layer's, for the offload copies (§11.21)
    # the average stage's passes: its L / p layers and its share of the end ranks' BF16 layers, each pass its own
    forward = (per_stage - slots) * (work[A_FORWARD] + work[A_EXPOSED_F]) + (
        n_first * (d_first[A_FORWARD] + d_first[A_EXPOSED_F]) + n_last * (d_last[A_FORWARD] + d_last[A_EXPOSED_F])) / p
    weight = (per_stage - slots) * work[A_BACKWARD_WEIGHT] \
        + (n_first * d_first[A_BACKWARD_WEIGHT] + n_last * d_last[A_BACKWARD_WEIGHT]) / p
    # the first and the busiest middle rank: by layer kind in a MoE model with leading dense layers (§11.44 1d)
    first_mb, first_layers, lead, middle = other_ranks_mb(
        row, work, t_layer, first_bf16, n_first, emb_first, middle_rank_can_lead(row), costs)
    t_last = last_rank_layer_time(row, work, t_layer, all_moe, costs)   # its layers' passes left in work[A_*]
    offload = offload_layer_from(row, all_moe, avg_f, avg_b, work)      # all_moe: the MoE layer's passes in work
    head_f, head_b, head_w = head_passes(row, work)
    head = head_f + head_b + head_w
    # the last stage also runs the MTP modules: one transformer layer each (DeepSeek-V3 report sec. 2.2), of the
    # decoder's last layer's kind (mtp_layer); their extra LM heads are in the head's passes
    mtp = row[C_MTP_LAYERS] * t_mtp
    last = last_rank_layers(row)
    last_mb = last * t_last + (head + mtp) / model_copies(row) + last_bf16 + emb_last   # DualPipe: half each
    # the slots hold the embedding and the head, not layers: the average rank's layers are L / p
    average_mb = (per_stage - slots) * t_layer + (head + mtp + first_bf16 + last_bf16 + emb) / p
    # the MTP layers' forward and weight-gradient passes are the average stage's too, as in average_mb (§11.4)
    forward += (head_f + emb_forward + row[C_MTP_LAYERS] * (d_mtp[A_FORWARD] + d_mtp[A_EXPOSED_F])) / p
    weight += (head_w + row[C_MTP_LAYERS] * d_mtp[A_BACKWARD_WEIGHT]) / p
    if first_mb > max(last_mb, lead):   # work: the rank's layer passes and the head's costs for step_row
        leader_passes(row, work, True, all_moe, costs)
        return first_mb, average_mb, forward, weight, first_layers, 0.0, n_first, d_first, emb_first, offload
    if lead > last_mb:
        leader_passes(row, work, False, all_moe, costs)
        return lead, average_mb, forward, weight, middle, 0.0, 0.0, d_first, 0.0, offload
    return last_mb, average_mb, forward, weight, last, 1.0, n_last, d_last, emb_last, offload


@njit
def last_rank_layers(row):
    """Layers the last pipeline rank holds beside the LM head: the busiest rank's count, or one fewer when the
    loss takes a layer's slot in the split (``split_slots``: Megatron-Core ``get_num_layers_to_build`` with
    ``account_for_loss_in_pipeline_split`` builds one layer fewer in the last chunk of the last rank; Llama 3
    sec. 3.3.2, "the last model chunk on the last stage has only output projection and loss calculation").
    Counting that slot as a layer and the head beside it charged the head twice. An explicit pipeline layout
    (``last_stage_layers`` >= 0, Megatron-Core ``pipeline_model_parallel_layout``) states the count (§11.22)."""
    if explicit_layout(row):
        return row[C_LAST_STAGE_LAYERS]
    return layers_per_stage(row) - (1.0 if split_slots(row) > 0.0 else 0.0)


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


@njit
def step_row(row, work, out):
    """Every time result of one configuration into ``out`` (registry result indices): layer mix and per-layer
    passes (:func:`busiest_stage`), then the step composition."""
    p = row[C_PP]
    micro_batches = row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * row[C_DP])
    d_first, d_last, d_mtp = stack_vector(N_WORK), stack_vector(N_WORK), stack_vector(N_WORK)  # BF16 layers', no alloc
    terms = embedding_terms(row)    # the word embedding's (§11.44 1d, §11.43), once for the stages and the bubble
    stage_mb, average_mb, forward, weight, layers, share, n16, d16, emb, offload_layer = busiest_stage_into(
        row, work, d_first, d_last, d_mtp, terms)
    per_stage = layers + share * row[C_MTP_LAYERS] / model_copies(row)   # the busiest rank's layers
    offload = micro_batches * (per_stage * offload_layer + (per_stage - layers) * (mtp_offload_s(row, d_mtp)
                                                                                 - offload_layer))  # MTP: its own
    head_flops = 3.0 * work[W_FLOPS]
    # the head's forward costs, left by busiest_stage, on the busiest rank when it is the last (share 1)
    head_gemm = share * ((1.0 + BACKWARD_GEMM) * work[W_GEMM] + work[W_WGRAD])     # W_WGRAD: §11.46's read
    head_mem = share * 2.0 * work[W_MEM]
    head_tp = share * (work[W_TP] + TP_BACKWARD_PASSES * work[W_TP_BACKWARD])    # §11.42: the re-gathers backward
    head_tp_left = head_tp - share * TP_BACKWARD_PASSES * work[W_TP_HIDDEN]
    last_mb = stage_mb if share > 0.0 else average_mb
    bubble = host_bound_bubble(row, average_mb, forward, weight, last_mb, terms) \
        + fp8_weight_chain_s(row, per_stage * work[A_PARAMS])     # the other ranks' casts on mb 0's chain (§11.65 C)
    pp_comm, pp_exposed = pipeline_p2p(row, micro_batches)
    pp_exposed -= embedding_send_overlap(row, average_mb, last_mb, pp_exposed, terms)
    pp_exposed += chain_sends_nic_shared(row, work, per_stage)     # the chain sends beside the DP chunks' (§11.65)
    outside = _data_parallel_ranks(row, work, work[W_PARAMS], micro_batches, stage_mb, out)
    # per-layer FSDP runs without a pipeline only (passes.per_layer_fsdp), so never under an explicit layout
    fsdp_exposed = _fsdp_step(row, work, micro_batches, layers_per_stage(row), out)
    host_wait = host_wait_s(row, micro_batches, share > 0.0,     # issue beside Megatron-Core's syncs (§11.64)
                            micro_batches * host_wait_per_microbatch(row, per_stage, stage_mb))
    evaluation = eval_time(row, forward, micro_batches)      # the run's interleaved evaluation, per step (§11.17.1)
    step = micro_batches * stage_mb + host_wait + bubble + fsdp_exposed + pp_exposed + outside \
        + row[C_STEP_OVERHEAD_S] + offload + evaluation
    full, _ = recompute_share(row)
    flops = work[A_FLOPS]
    executed = micro_batches * (per_stage * (3.0 * flops + full * flops) + head_flops / p    # MTP layers: their own
                                + (per_stage - layers) * (3.0 + full) * (d_mtp[A_FLOPS] - flops))
    tokens = row[C_GLOBAL_BATCH] * row[C_SEQ_LEN]
    n = row[C_N_GPUS]
    peak = row[C_PEAK_FLOPS_8] if row[C_PRECISION] == PRECISION_FP8 and row[C_PEAK_FLOPS_8] > 0.0 \
        else row[C_PEAK_FLOPS_4] if row[C_PRECISION] == PRECISION_FP4 else row[C_PEAK_FLOPS_16]
    model_flops = model_flops_per_token(row)
    out[R_STEP_TIME] = step
    out[R_TOKENS_PER_S] = tokens / step
    out[R_TOKENS_PER_S_PER_GPU] = tokens / step / n
    out[R_FLOPS_PER_TOKEN] = model_flops
    out[R_MFU] = model_flops * tokens / (step * n * peak)
    out[R_HFU] = executed / (step * peak)
    out[R_TIME_GEMM] = micro_batches * (per_stage * work[A_GEMM] + head_gemm)
    out[R_TIME_ATTENTION] = micro_batches * per_stage * work[A_ATTN]
    emb, emb_mem = embedding_parts_of(emb, terms)    # its TP collectives, its dense gradient (§11.44 1d, §11.43)
    out[R_TIME_MEMORY_BOUND] = micro_batches * (per_stage * work[A_MEM] + head_mem + emb_mem)
    out[R_TIME_RECOMPUTE] = micro_batches * per_stage * work[A_RECOMPUTE]
    out[R_PIPELINE_BUBBLE] = bubble
    out[R_TIME_HOST_WAIT] = host_wait
    out[R_TIME_OFFLOAD] = offload
    out[R_TIME_EVAL] = evaluation
    out[R_COMM_TP] = micro_batches * (per_stage * work[A_TP_COMM] + head_tp + emb)   # emb: blocking (§11.44)
    out[R_COMM_CP] = micro_batches * per_stage * work[A_CP_COMM]
    out[R_COMM_EP] = micro_batches * per_stage * work[A_EP_COMM]
    out[R_COMM_PP] = pp_comm
    out[R_EXPOSED_TP] = micro_batches * (per_stage * work[A_TP_EXPOSED] + head_tp_left + emb)
    out[R_EXPOSED_CP] = micro_batches * per_stage * work[A_CP_EXPOSED]
    out[R_EXPOSED_EP] = micro_batches * per_stage * work[A_EP_EXPOSED]
    out[R_COMM_EP_SCALE_OUT] = micro_batches * per_stage * work[A_EP_SCALE_OUT]
    out[R_EXPOSED_PP] = pp_exposed
    add_bf16_layers(out, micro_batches * n16, d16)     # the busiest rank's BF16 layers, part by part (§11.39)
    add_mtp_layers(out, micro_batches * (per_stage - layers), work, d_mtp)     # its MTP layers at their own parts
