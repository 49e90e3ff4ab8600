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
copies per rank come from the pipeline schedule (``kernels/lm/pipeline.py``), and the data-parallel reduction,
optimizer step and per-layer FSDP collectives from ``kernels/lm/dp_step.py``. Every communication term is a
collective of ``kernels.nccl`` on its own process group and stream; "exposed" is the part not hidden behind the
compute it overlaps with (``kernels/lm/parallel.py``).
"""

import numpy as np

from fastmodel.kernels.jit import njit, stack_vector
from fastmodel.kernels.lm.layer import (
    W_FLOPS, W_GEMM, W_MEM, W_PARAMS, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, W_WGRAD, model_flops_per_token, recompute_share,
)
from fastmodel.kernels.lm.layout import (
    C_LAST_STAGE_LAYERS, C_DP, C_GLOBAL_BATCH, C_MTP_LAYERS, C_MICRO_BATCH, C_N_GPUS, C_PEAK_FLOPS_4, C_PEAK_FLOPS_8,
    C_PEAK_FLOPS_16, C_PP, C_PRECISION, C_SEQ_LEN, C_STEP_OVERHEAD_S, PRECISION_FP4, PRECISION_FP8, R_COMM_CP,
    R_COMM_EP, R_COMM_EP_SCALE_OUT, R_COMM_PP, R_COMM_TP, R_EXPOSED_CP, R_EXPOSED_EP, R_EXPOSED_PP, R_EXPOSED_TP,
    R_FLOPS_PER_TOKEN, R_HFU, R_MFU, R_PIPELINE_BUBBLE, R_STEP_TIME, R_TIME_HOST_WAIT, R_TIME_ATTENTION, R_TIME_GEMM,
    R_TIME_MEMORY_BOUND, R_TIME_OFFLOAD, R_TIME_RECOMPUTE, R_TOKENS_PER_S, R_TOKENS_PER_S_PER_GPU, R_TIME_EVAL,
)
from fastmodel.kernels.lm.memory_states import explicit_layout, layers_per_stage, split_slots
from fastmodel.kernels.lm.offload_time import forward_backward, mtp_offload_s, offload_layer_from
from fastmodel.kernels.lm.bf16_layers import add_bf16_layers, bf16_end_work_into
from fastmodel.kernels.lm.first_rank import embedding_ends, embedding_parts_of, embedding_terms
from fastmodel.kernels.lm.rank_lead import (
    last_rank_all_moe, last_rank_layer_time, leader_passes, middle_rank_can_lead, other_ranks_mb, priced_by_kind,
)
from fastmodel.kernels.lm.mtp_breakdown import add_mtp_layers, mtp_layer_into
from fastmodel.kernels.lm.passes import (
    A_ATTN, A_BACKWARD_WEIGHT, A_CP_COMM, A_CP_EXPOSED, A_EP_COMM, A_EXPOSED_F, A_FLOPS, A_FORWARD, A_EP_EXPOSED,
    A_EP_SCALE_OUT, A_MTP_EXPERT_PARAMS, A_MTP_PARAMS, A_GEMM, A_MEM, A_PARAMS, A_RECOMPUTE, A_TP_COMM, A_TP_EXPOSED,
    BACKWARD_GEMM, N_KIND_COSTS, N_WORK, TP_BACKWARD_PASSES, head_passes, layer_passes, layer_passes_keeping,
    layer_time,
)
from fastmodel.kernels.lm.host_step import embedding_send_overlap, eval_time, host_bound_bubble, host_wait_per_microbatch
from fastmodel.kernels.lm.chain_nic import chain_sends_nic_shared
from fastmodel.kernels.lm.fp8 import fp8_weight_chain_s
from fastmodel.kernels.lm.host_syncs import host_wait_s
from fastmodel.kernels.lm.straggler import add_straggler
from fastmodel.kernels.lm.pipeline import model_copies, pipeline_p2p
from fastmodel.kernels.lm.dp_step import (  # noqa: F401 - the end ranks' names, re-exported for step's callers
    END_FIRST, END_LARGER, END_LAST, _data_parallel_ranks, _fsdp_step, ends_alike, mtp_module_params, tied_head_copy,
)
from fastmodel.kernels.lm.optimizer_step import optimizer_bytes_per_param, optimizer_step_bytes  # noqa: F401 - re-exported


def busiest_stage(row, work):
    """(t_mb, t_avg, F_avg, W_avg, layers, head share, n16, d16, emb): one micro-batch on the busiest stage and on the
    average stage, the average stage's forward and weight-gradient passes (what the pipeline schedule's bubble reads),
    the busiest rank's layers and share of the LM head (1: the last rank; 0: a middle or the first rank,
    :func:`last_rank_layers`), the BF16 layers it holds with one's accumulators beyond its kind's
    (``bf16_layers.bf16_layer_work``, §11.39) and its seconds of the word embedding's TP collectives and dense
    gradient a micro-batch at pp > 1 (``first_rank.embedding_ends``, §11.44). Leaves the busiest rank's layer
    accumulators in ``work[A_*]`` and the head's parameters and FLOPs in ``work[W_*]``. ``d16`` is a new vector
    (:func:`busiest_stage_into`). Called from Python (timeline, pipeline report): a plain function, so it runs the
    compiled ``busiest_stage_into`` and ``embedding_terms`` at ``step_row``'s types, not one more compile (~1 s)."""
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
    step = add_straggler(row, micro_batches * stage_mb + host_wait + bubble + fsdp_exposed + pp_exposed + outside
                         + row[C_STEP_OVERHEAD_S] + offload + evaluation, out)   # the slowest GPU's wait (§11.68)
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
