"""The transformer layers a low-precision run keeps in BF16 (docs/model.md §11.39): Megatron-LM's
``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``
(NVIDIA/Megatron-LM@d98e8a6 megatron/core/fp4_utils.py 247-263 ``get_fp4_context``, fp8_utils.py 711-726
``is_first_last_bf16_layer``: layer ``l`` runs under a ``nullcontext``, i.e. in BF16, when ``l < start`` or
``l >= L - end``); the NVFP4 pretraining paper's "selective high-precision layers" (arXiv 2509.25149).

Such a layer runs every GEMM at 16 bits and casts nothing: its passes are those of the row at precision bf16. The
first ``start`` layers sit on the first pipeline rank, the last ``end`` on the last (Megatron-Core builds layers in
order, ``get_transformer_layer_offset``), both on the one rank without a pipeline; under interleaving only an end
chunk's ``L / (pp vp)`` are the end rank's, and the rule table refuses more (:func:`bf16_layers_cap`, [A]):

    dt_first = start (t16 - t),   dt_last = end (t16 - t)

per micro-batch, ``t`` and ``t16`` the average layer's time (``passes.layer_time``) at the row's GEMM format and at
bf16. ``kernels/lm/step.py`` ``busiest_stage`` adds them to the ranks that hold them pass by pass
(:func:`bf16_end_work`: the average stage's F and W, so the bubble follows) and ``step_row`` part by part to the
busiest rank's breakdown (:func:`add_bf16_layers`), so the step stays the sum of its parts. Memory
(``kernels/lm/memory.py`` ``memory_row``): a rank holding n of its L_s layers in BF16 takes each memory kind at
every phase as ``m + (n / L_s)(m16 - m)``, ``m16`` the same phase at bf16 (weights without the NVFP4/FP8 forms,
16-bit saved GEMM inputs; docs/model_memory.md "NVFP4 (issue 26)").
"""

import math

import numpy as np

from fastmodel.kernels.jit import njit, stack_vector
from fastmodel.kernels.lm.fp4 import low_precision_gemms
from fastmodel.kernels.lm.memory_states import stage_layers
from fastmodel.kernels.lm.layout import (
    C_BF16_LAYERS_END,
    C_BF16_LAYERS_START,
    C_FP8_PARAMS,
    C_FP8_RECIPE,
    C_LAYERS,
    C_PIPELINE_SCHEDULE,
    C_PP,
    C_PRECISION,
    C_VP,
    FP8_DELAYED,
    N_COLUMNS,
    PRECISION_BF16,
    PRECISION_FP8,
    SCHED_DUALPIPE,
    R_COMM_CP,
    R_COMM_EP,
    R_COMM_EP_SCALE_OUT,
    R_COMM_TP,
    R_EXPOSED_CP,
    R_EXPOSED_EP,
    R_EXPOSED_TP,
    R_TIME_ATTENTION,
    R_TIME_GEMM,
    R_TIME_MEMORY_BOUND,
    R_TIME_RECOMPUTE,
)
from fastmodel.kernels.lm.passes import (
    A_ATTN,
    A_CP_COMM,
    A_CP_EXPOSED,
    A_EP_COMM,
    A_EP_EXPOSED,
    A_EP_SCALE_OUT,
    A_GEMM,
    A_MEM,
    A_RECOMPUTE,
    A_TP_COMM,
    A_TP_EXPOSED,
    N_WORK,
    layer_passes_of,
)


#: (breakdown part, layer accumulator) pairs: a layer's GEMM, attention, memory-bound and recompute seconds and each
#: group's collective and exposed seconds, as one layer adds them to the step's breakdown (``add_bf16_layers``,
#: ``mtp_breakdown.add_mtp_layers``).
LAYER_PARTS = (
    (R_TIME_GEMM, A_GEMM),
    (R_TIME_ATTENTION, A_ATTN),
    (R_TIME_MEMORY_BOUND, A_MEM),
    (R_TIME_RECOMPUTE, A_RECOMPUTE),
    (R_COMM_TP, A_TP_COMM),
    (R_COMM_CP, A_CP_COMM),
    (R_COMM_EP, A_EP_COMM),
    (R_EXPOSED_TP, A_TP_EXPOSED),
    (R_EXPOSED_CP, A_CP_EXPOSED),
    (R_EXPOSED_EP, A_EP_EXPOSED),
    (R_COMM_EP_SCALE_OUT, A_EP_SCALE_OUT),
)

@njit
def bf16_row(row):
    """The row at 16-bit GEMMs: a BF16 layer runs every GEMM at 16 bits, casts nothing and holds no low-precision
    weight forms or saved inputs (its parameters are built outside the FP8/FP4 context too). A new vector, for the
    Python callers (timelines, tests); kernels write it into a frame vector (:func:`bf16_row_into`)."""
    return bf16_row_into(row, row.copy())


@njit
def bf16_row_into(row, wide):
    """:func:`bf16_row` written into the caller's ``wide`` (``N_COLUMNS``, e.g. ``jit.stack_vector(N_COLUMNS)``),
    which it returns: the kernels of a plan with BF16 layers allocate no row per configuration
    (docs/performance.md, 2026-12-07 "BF16 layers without heap vectors")."""
    wide[:] = row
    wide[C_PRECISION] = PRECISION_BF16
    wide[C_FP8_PARAMS] = 0.0
    return wide


@njit
def bf16_layers_cap(row):
    """Most BF16 layers an end may hold: L without a pipeline; ``floor(L / pp)`` with one (Megatron-LM refuses
    more under FP8: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py 1533-1557,
    ``num_layers // pipeline_model_parallel_size``); under interleaving (vp > 1) the end chunk's
    ``floor(L / (pp vp))``: more would sit on the next ranks' chunks (``get_transformer_layer_offset``), which the
    model does not place [A] (docs/model.md §11.39)."""
    if row[C_PP] <= 1.0:
        return row[C_LAYERS]
    return float(math.floor(row[C_LAYERS] / (row[C_PP] * max(row[C_VP], 1.0))))


@njit
def bf16_layers_delayed(row):
    """True when an FP8 run keeps layers in BF16 under delayed scaling, stated or unstated (Megatron-Core's default
    recipe is delayed, transformer_config.py 594-596): Megatron-LM raises "Delayed scaling does not support first /
    last layer in BF16." (transformer_config.py 1527-1530; fp8_utils.py 883-888)."""
    if row[C_PRECISION] != PRECISION_FP8 or row[C_BF16_LAYERS_START] + row[C_BF16_LAYERS_END] <= 0.0:
        return False
    return row[C_FP8_RECIPE] == 0.0 or row[C_FP8_RECIPE] == FP8_DELAYED


@njit
def bf16_layers_above_stage(row):
    """True when a low-precision run keeps more BF16 layers at an end than :func:`bf16_layers_cap` (the rule table
    asks it of every point: the cap is taken only for a low-precision row)."""
    if not low_precision_gemms(row):
        return False
    cap = bf16_layers_cap(row)
    return row[C_BF16_LAYERS_START] > cap or row[C_BF16_LAYERS_END] > cap


@njit
def bf16_layers_dualpipe(row):
    """True when a low-precision run keeps BF16 layers under DualPipe: it puts stages s and pp - 1 - s on rank s
    (``pipeline.mirror_stage``), so the first and last layers sit on both end ranks, which the model, giving the
    first layers to rank 0 and the last to rank pp - 1 (:func:`bf16_stage_layers`), does not place; Megatron-LM,
    whose flags these are, runs no DualPipe (megatron/core/pipeline_parallel/schedules.py@d98e8a6
    ``get_forward_backward_func``: no pipelining, 1F1B, interleaved 1F1B) [A]."""
    return (low_precision_gemms(row) and row[C_PIPELINE_SCHEDULE] == SCHED_DUALPIPE
            and row[C_BF16_LAYERS_START] + row[C_BF16_LAYERS_END] > 0.0)


@njit
def bf16_rank_layers(row):
    """(first rank, last rank) BF16 layers: ``bf16_layers_start`` and ``bf16_layers_end``, each at most
    :func:`bf16_layers_cap` (the rule table refuses more, ``bf16_layers_above_stage``); without a pipeline
    (0, start + end) at most L; (0, 0) under 16-bit GEMMs."""
    if not low_precision_gemms(row):
        return 0.0, 0.0
    layers = row[C_LAYERS]
    if row[C_PP] <= 1.0:
        return 0.0, min(row[C_BF16_LAYERS_START] + row[C_BF16_LAYERS_END], layers)
    cap = bf16_layers_cap(row)
    return min(row[C_BF16_LAYERS_START], cap), min(row[C_BF16_LAYERS_END], cap)


@njit
def bf16_stage_layers(row, stage):
    """BF16 layers held by pipeline rank ``stage`` (:func:`bf16_rank_layers`): the first rank's, the last's, both
    on the one rank without a pipeline."""
    first, last = bf16_rank_layers(row)
    return (first if stage == 0.0 else 0.0) + (last if stage == row[C_PP] - 1.0 else 0.0)


@njit(error_model='numpy')
def bf16_stage_share(row, stage):
    """The share ``s`` of pipeline rank ``stage``'s layers (``memory_states.stage_layers``: dense + MoE) it holds in
    BF16 (:func:`bf16_stage_layers`), at most 1: its memory at every phase is ``m + s (m16 - m)`` (module docstring;
    ``kernels/lm/memory.py`` peak and ``fastmodel/lm/memory_timeline.py`` moments). 0 without asking
    ``stage_layers`` when the rank holds none (``memory_row`` asks it for every rank of every point)."""
    held = bf16_stage_layers(row, stage)
    if held <= 0.0:
        return 0.0
    dense, moe, _ = stage_layers(row, stage)
    return min(1.0, held / max(dense + moe, 1.0))


@njit
def bf16_layer_work(row, moe_only):
    """One BF16 layer's accumulators (``passes.A_*``: its passes, breakdown and communication) minus the row's layer
    of the same kind (the average layer, or the MoE layer when ``moe_only``, ``layer_passes_of``): what each part
    of the breakdown grows by per BF16 layer and micro-batch. A new vector (:func:`bf16_layer_work_into`)."""
    into = np.empty(N_WORK)
    bf16_layer_work_into(row, moe_only, into)
    return into


@njit
def bf16_layer_work_into(row, moe_only, into):
    """:func:`bf16_layer_work` written into the caller's ``into`` (``N_WORK``). The 16-bit row and the row's own
    accumulators go in frame vectors (``jit.stack_vector``), both accumulator vectors zeroed first as the heap
    vectors before them were (``np.zeros``; slots the passes leave unwritten stay 0 - 0), and the difference is
    taken slot by slot, the same subtraction: the same bits, nothing allocated per configuration."""
    wide = bf16_row_into(row, stack_vector(N_COLUMNS))
    base = stack_vector(N_WORK)
    into[:] = 0.0
    base[:] = 0.0
    layer_passes_of(wide, into, moe_only)
    layer_passes_of(row, base, moe_only)
    for k in range(N_WORK):
        into[k] = into[k] - base[k]


@njit
def bf16_end_work(row, last_moe):
    """(first rank's count, its :func:`bf16_layer_work`, last rank's count, its work) of :func:`bf16_rank_layers`;
    the last rank's layers of the MoE kind when ``last_moe`` (``step.last_rank_all_moe``), zeros where none
    (:func:`bf16_end_work_into` in new vectors)."""
    first_work = np.empty(N_WORK)
    last_work = np.empty(N_WORK)
    first, last = bf16_end_work_into(row, last_moe, first_work, last_work)
    return first, first_work, last, last_work


@njit
def bf16_end_work_into(row, last_moe, first_work, last_work):
    """(first rank's count, last rank's count) of :func:`bf16_rank_layers`, their :func:`bf16_layer_work` written
    into the caller's ``first_work`` and ``last_work`` (``N_WORK`` each; zeros where an end holds none). The step
    kernel passes frame vectors (``jit.stack_vector``), so a plan without BF16 layers, every point of a 16-bit
    sweep, allocates nothing here (docs/performance.md, 2026-12-06 evening), nor one with them
    (:func:`bf16_layer_work_into`, 2026-12-07). Where both ends hold BF16 layers of the same kind (not
    ``last_moe``) the last's accumulators are the first's, copied: the same function of the same row."""
    first, last = bf16_rank_layers(row)
    _end_work(row, False, first, first_work)
    if first > 0.0 and last > 0.0 and not last_moe:
        last_work[:] = first_work   # both ends of the same kind (the mix's average): the same accumulators, once
    else:
        _end_work(row, last_moe, last, last_work)
    return first, last


@njit(inline="always")
def _end_work(row, moe_only, count, into):
    if count > 0.0:
        bf16_layer_work_into(row, moe_only, into)
    else:
        into[:] = 0.0


@njit
def add_bf16_layers(out, count, work):
    """Add ``count`` (micro-batches x BF16 layers on the busiest rank) times one BF16 layer's extra accumulators
    ``work`` (:func:`bf16_layer_work`) to the step's breakdown in ``out``: GEMM, attention, memory-bound and
    recompute seconds, and each group's collective and exposed seconds, so that the parts still add up to the step
    (docs/model.md §11.39)."""
    if count <= 0.0:
        return
    for result, slot in LAYER_PARTS:
        out[result] += count * work[slot]
