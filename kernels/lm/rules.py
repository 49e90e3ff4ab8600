"""Legality rules of real-world plans, per configuration (the one rule table; docs/model.md §11.9).

``plan_status_row`` returns the code (``fastmodel.registry.lm.STATUSES``) of the
first rule a configuration breaks, 0 when it is legal. Grids call it inside
their fused pass; ``fastmodel.lm.rules`` applies it to tables and turns it into
PlanErrors for single configurations.
"""

import numpy as np

from fastmodel.kernels.columns import C_GRAD_ACCUM_BYTES, C_WGRAD_FUSED_ACCUMULATION
from fastmodel.kernels.lm.bf16_layers import bf16_layers_above_stage, bf16_layers_delayed, bf16_layers_dualpipe
from fastmodel.kernels.lm.fp4 import fp4_supported
from fastmodel.kernels.lm.fp8 import fp8_recipe_supported
from fastmodel.kernels.jit import njit, prange, stack_vector
from fastmodel.kernels.lm.layout import (
    C_CP, C_CP_ALGORITHM, CP_ALLTOALL, C_DP, C_EMBEDDING_LOSS_IN_SPLIT, C_EP, C_GLOBAL_BATCH, C_HEADS, C_KV_HEADS, C_LAST_STAGE_LAYERS, C_LAYERS,
    C_MICRO_BATCH, C_MOE_A2A_OVERLAP, C_MOE_EXPERTS, C_PIPELINE_SCHEDULE, A2A_DUALPIPE, SCHED_DUALPIPE,
    C_MOE_TOPK, C_N_GPUS, C_PEAK_FLOPS_8, C_PP, C_PRECISION, C_SEQ_LEN, C_TP, C_UNEVEN_STAGES, C_VP, PRECISION_FP8,
    C_MLA, C_TP_PER_PROJECTION, C_INTERLEAVE_ANY_MICROBATCHES, C_SCHEDULE_STATED,
    SCHED_1F1B, SCHED_INTERLEAVED, N_COLUMNS,
)
from fastmodel.kernels.lm.memory_offload import offload_conflict
from fastmodel.kernels.lm.memory_states import explicit_layout, split_slots
from fastmodel.kernels.lm.moe import expert_tp
from fastmodel.kernels.lm.moe_dispatch import node_limit_short
from fastmodel.kernels.lm.pipeline import is_multiple, schedule_status
from fastmodel.registry.lm import STATUS_CODES

ST_DEVICES = STATUS_CODES["devices_not_divisible"]
ST_HEADS = STATUS_CODES["heads_not_divisible"]
ST_LAYERS = STATUS_CODES["layers_not_divisible"]
ST_BATCH = STATUS_CODES["batch_not_divisible"]
ST_EXPERTS = STATUS_CODES["experts_not_divisible"]
ST_SEQUENCE = STATUS_CODES["sequence_not_divisible"]
ST_EP_DENSE = STATUS_CODES["ep_without_experts"]
ST_NO_FP8 = STATUS_CODES["no_fp8"]
ST_NO_FP4 = STATUS_CODES["no_fp4"]
ST_NODE_LIMIT = STATUS_CODES["node_limit_below_topk"]
ST_TOPK = STATUS_CODES["topk_above_experts"]
ST_FP8_RECIPE = STATUS_CODES["fp8_recipe_unsupported"]
ST_OFFLOAD = STATUS_CODES["offload_conflict"]
ST_LAYOUT = STATUS_CODES["layout_not_runnable"]
ST_SCHEDULE = STATUS_CODES["schedule_not_runnable"]
ST_BF16_DELAYED = STATUS_CODES["bf16_layers_delayed"]
ST_BF16_ABOVE = STATUS_CODES["bf16_layers_above_stage"]
ST_BF16_DUALPIPE = STATUS_CODES["bf16_layers_dualpipe"]
ST_TP_PER_PROJECTION = STATUS_CODES["tp_per_projection_unsupported"]
ST_WGRAD_TWICE = STATUS_CODES["wgrad_accumulation_twice"]


@njit
def plan_status_row(row):
    """Code of the first broken rule of one configuration (0: legal). A tp group wider than one NVLink domain
    is legal: its collectives span domains and ``kernels/nccl.py`` prices them (docs/model.md §11.18). A stated
    schedule its vp refuses comes first: no other rule is read for a schedule the plan cannot run (§11.9)."""
    if stated_schedule_refused(row):
        return ST_SCHEDULE
    tp = row[C_TP]
    pp = row[C_PP]
    cp = row[C_CP]
    ep = row[C_EP]
    dp = row[C_DP]
    if not is_multiple(row[C_N_GPUS], tp * pp * cp) or abs(tp * pp * cp * dp - row[C_N_GPUS]) > 0.5 or dp < 1.0:
        return ST_DEVICES
    if not is_multiple(row[C_HEADS], tp) or (not is_multiple(row[C_KV_HEADS], tp) and not is_multiple(tp, row[C_KV_HEADS])):
        return ST_HEADS
    if cp > 1.0 and row[C_CP_ALGORITHM] == CP_ALLTOALL and not is_multiple(row[C_HEADS], tp * cp):
        return ST_HEADS
    # an explicit layout places every layer itself: Megatron-Core asks no divisibility of it (§11.25); with the
    # embedding and the loss in the split it divides L + 2 slots (split_slots; transformer_config.py@d98e8a6 2370-2415)
    slots = row[C_LAYERS] + split_slots(row)
    if not is_multiple(slots, pp * row[C_VP]) and row[C_UNEVEN_STAGES] <= 0.0 and not explicit_layout(row):
        return ST_LAYERS
    micro_batches = row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * dp)
    if micro_batches < 1.0 or not is_multiple(micro_batches, 1.0):
        return ST_BATCH
    status = schedule_status(row, micro_batches)
    if status:
        return status
    if overlap_needs_dualpipe(row) or interleaved_remainder(row, micro_batches):
        return ST_SCHEDULE
    experts = row[C_MOE_EXPERTS]
    # a spec file refuses k > E (fastmodel/lm/spec.py); a grid can cross a moe_experts axis with a moe_topk axis
    if experts > 0.0 and row[C_MOE_TOPK] > experts:
        return ST_TOPK
    if expert_mesh_broken(row):
        return ST_EXPERTS
    if cp > 1.0 and not is_multiple(row[C_SEQ_LEN], 2.0 * cp):
        return ST_SEQUENCE
    if experts <= 0.0 and ep > 1.0:
        return ST_EP_DENSE
    if node_limit_short(row):
        return ST_NODE_LIMIT
    if row[C_PRECISION] == PRECISION_FP8 and row[C_PEAK_FLOPS_8] <= 0.0:
        return ST_NO_FP8
    if row[C_PRECISION] == PRECISION_FP8 and not fp8_recipe_supported(row):
        return ST_FP8_RECIPE
    if not fp4_supported(row):
        return ST_NO_FP4
    if bf16_layers_delayed(row):            # docs/model.md §11.39
        return ST_BF16_DELAYED
    if bf16_layers_above_stage(row):
        return ST_BF16_ABOVE
    if bf16_layers_dualpipe(row):
        return ST_BF16_DUALPIPE
    if offload_conflict(row):
        return ST_OFFLOAD
    if layout_broken(row):
        return ST_LAYOUT
    if row[C_TP_PER_PROJECTION] > 0.0 and tp > 1.0 and (experts > 0.0 or row[C_MLA] > 0.0):     # §11.42 item 4
        return ST_TP_PER_PROJECTION
    if row[C_WGRAD_FUSED_ACCUMULATION] > 0.0 and row[C_GRAD_ACCUM_BYTES] > 0.0:     # §11.46: one accumulation
        return ST_WGRAD_TWICE
    return 0


@njit
def expert_mesh_broken(row):
    """True when the expert mesh cannot exist (``experts_not_divisible``): routed experts that ep does not divide,
    or, MoE parallel folding, an expert mesh etp x ep x edp that does not refold the attention mesh tp x cp x dp
    (etp x ep not dividing it). No framework builds the model so: ``validate`` refuses a record that states one
    (``fastmodel.lm.rules.expert_mesh_refusal``) where it predicts plans breaking other rules."""
    experts = row[C_MOE_EXPERTS]
    if experts <= 0.0:
        return False
    ep = row[C_EP]
    return not is_multiple(experts, ep) or not is_multiple(row[C_TP] * row[C_CP] * row[C_DP], expert_tp(row) * ep)


@njit
def stated_schedule_refused(row):
    """True when the plan states its pipeline schedule (``schedule_stated``, set by the lowering) and its vp
    refuses it, as the execution spec does (``ExecutionSpec._consistent``, fastmodel/lm/execution.py):
    'interleaved' needs vp > 1, every other schedule runs one stage per rank. Where the lowering derived the
    schedule from vp (interleaved exactly where vp > 1) the pair always agrees. A single run or a record never gets
    here (the spec refuses the pair first); a sweep crossing a ``pipeline_schedule`` axis, or a stated schedule,
    with a ``vp`` axis does, and gets ``schedule_not_runnable`` at those points rather than the other schedule's
    numbers (docs/model.md §11.9)."""
    if row[C_SCHEDULE_STATED] <= 0.0:
        return False
    return (row[C_PIPELINE_SCHEDULE] == SCHED_INTERLEAVED) != (row[C_VP] > 1.0)


@njit
def overlap_needs_dualpipe(row):
    """True when ``moe_a2a_overlap`` is DualPipe's (the all-to-all hidden inside DualPipe's forward-backward chunk
    pairs, DeepSeek-V3 report sec. 3.2.1) under another pipeline schedule: only DualPipe pairs the chunks so, and
    the execution spec refuses the pair (fastmodel/lm/execution.py); a sweep's ``moe_a2a_overlap`` axis under
    another schedule, the execution's or an axis's, gets ``schedule_not_runnable`` there, never batch-level overlap
    instead."""
    return row[C_MOE_A2A_OVERLAP] == A2A_DUALPIPE and int(row[C_PIPELINE_SCHEDULE]) != SCHED_DUALPIPE


@njit
def interleaved_remainder(row, micro_batches):
    """True when the interleaved schedule (``vp > 1``) would run a number of micro-batches ``m`` that is not a
    multiple of ``pp`` (docs/model.md §11.45). Megatron-Core refuses it at every version: up to core_r0.9
    ``forward_backward_pipelining_with_interleaving`` raised "number of microbatches is not divisible by
    pipeline-model-parallel-size when using interleaved schedule"; from NVIDIA/Megatron-LM@4295be1a6c (core_r0.10)
    on, it raises when ``0 < m mod N < pp`` with ``N = microbatch_group_size_per_vp_stage``, whose default is ``pp``
    (model_parallel_config.py ``__post_init__``; schedules.py@d98e8a6 lines 1170-1181), which is the same rule.
    Under ``interleave_any_microbatches`` (PyTorch's ``ScheduleInterleaved1F1B``, TorchTitan) the rule is PyTorch's:
    ``__init__`` sets ``number_of_rounds = max(1, n_microbatches // pp_group_size)`` and raises ValueError when
    ``n_microbatches % number_of_rounds != 0`` (torch/distributed/pipelining/schedules.py at
    pytorch/pytorch@00722e648b74), so p = 4 runs m = 6 (1 round) and refuses m = 9 (2 rounds).
    Fewer micro-batches than ``pp`` are ``too_few_microbatches`` (checked before)."""
    schedule = int(row[C_PIPELINE_SCHEDULE])
    interleaved = row[C_VP] > 1.0 and (schedule == SCHED_INTERLEAVED or schedule == SCHED_1F1B)
    if not interleaved or row[C_PP] <= 1.0:
        return False
    if row[C_INTERLEAVE_ANY_MICROBATCHES] > 0.0:        # PyTorch's ScheduleInterleaved1F1B (TorchTitan)
        return not is_multiple(micro_batches, max(1.0, np.floor(micro_batches / row[C_PP] + 1e-9)))
    return not is_multiple(micro_batches, row[C_PP])


@njit
def layout_broken(row):
    """True when ``last_stage_layers`` (an explicit pipeline layout's last rank, docs/model.md §11.22, §11.25)
    states a layout Megatron-Core refuses (NVIDIA/Megatron-LM@0823c73): set (not the -1 default) but not a whole
    number >= 0 (no layout string says it); above the model's layers, or at pp = 1 other than all of them
    (``PipelineParallelLayerLayout.validate_layer_layout``: the layout's decoder layers must match ``num_layers``);
    beside ``embedding_loss_in_split`` (TransformerConfig: "pipeline_model_parallel_layout cannot be set with other
    pipeline layout arguments"). Short and empty stages run, so every count 0 .. L at pp > 1 is accepted
    (``fastmodel.lm.rules.layout_reason`` says which rule)."""
    n = row[C_LAST_STAGE_LAYERS]
    if n == -1.0:
        return False
    if n < 0.0 or not is_multiple(n, 1.0) or n > row[C_LAYERS]:
        return True
    if row[C_EMBEDDING_LOSS_IN_SPLIT] > 0.0:
        return True
    return row[C_PP] <= 1.0 and abs(n - row[C_LAYERS]) > 0.5


#: configurations per prange chunk of :func:`plan_status_table`
CHUNK_ROWS = 256


@njit
def _status_rows(table, column_step, row_step, status, lo, hi):
    # each configuration copied into a frame vector (kernels/jit.py stack_vector), as evaluate.py and grid.py
    # do: the rules compile for the one contiguous row type the grid kernel passes; the table is read as one
    # vector (kernels/lm/evaluate.py table_memory), so C and Fortran tables share one compile
    row = stack_vector(N_COLUMNS)
    for r in range(lo, hi):
        for c in range(N_COLUMNS):
            row[c] = table[c * column_step + r * row_step]
        status[r] = plan_status_row(row)


@njit(parallel=True)
def plan_status_table(table, column_step, row_step, status):
    """``plan_status_row`` of every configuration of a table into ``status`` (n of them), chunks in parallel;
    column ``c`` of configuration ``r`` is ``table[c * column_step + r * row_step]``
    (kernels/lm/evaluate.py ``table_memory``)."""
    n = status.shape[0]
    for chunk in prange((n + CHUNK_ROWS - 1) // CHUNK_ROWS):
        lo = chunk * CHUNK_ROWS
        _status_rows(table, column_step, row_step, status, lo, min(n, lo + CHUNK_ROWS))
