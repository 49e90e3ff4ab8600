"""Pipeline schedules of decoder-LM training in closed form (docs/model.md §11.7).

One owner for everything a pipeline schedule decides in the real-world model: the bubble a step pays,
the micro-batches a rank holds at its peak, the model copies a rank holds, and the point-to-point sends
that stay exposed. The step (``kernels/lm/step.py``) and memory (``kernels/lm/memory_*.py``) ask this
module; the exact scheduler path (``fastmodel/lm/pipeline_program.py``) lays the same schedules out op by op
and tests these closed forms.

Stage times are per micro-batch on the average pipeline stage, split in passes (``kernels/lm/passes.py``):
``F`` the forward, ``B`` the backward for inputs (with recompute), ``W`` the backward for weights, all with
their exposed communication; ``t = F + B + W``. With ``p`` stages, ``v`` chunks per rank:

    GPipe, 1F1B        (p - 1) t                         Huang et al. 2019; Narayanan et al. 2021 eq. 1
    interleaved 1F1B   (p - 1) / v x t                   Narayanan et al. 2021 eq. 2
    ZB-H1              (p - 1) (F + B - min(B, W))        Qi et al., ICLR 2024, sec. 3.1 (T_B: input part)
    DualPipe           (p/2 - 1) (F&B + B' - 3 W)         DeepSeek-V3 report Table 2 (B' = B + W the full
                                                          backward; F&B = F + B': the two overlapped chunks
                                                          share the GPU, the overlap hides communication)

ZB-H1 derivation (uniform stages): stage s keeps 1F1B's order and in-flight count but sends its input
gradient after B, before W, and defers s of its W passes to the end of the step. The last stage starts
(p - 1) F late and never waits; the backward chain of the last micro-batch crosses the p - 1 boundaries at
B each, during which the deferred W passes run: ``T = m t + (p - 1) F + (p - 1) B - (p - 1) W`` while
W <= B (the paper's case), ``m t + (p - 1) F`` beyond. The exact scheduler path
(``fastmodel/lm/pipeline_program.py``) reproduces both for uniform stages. DualPipe:
``(p/2 - 1)(F + B' + B' - 3 W) = (p/2 - 1)(F + 2B - W)``, exact for F = B = W (the report's Fig. 5); for
other ratios the exact schedule differs by at most (p/2 - 1) F on the ratios tested.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_GLOBAL_BATCH, C_HIDDEN, C_MICRO_BATCH, C_PIPELINE_SCHEDULE, C_PP, C_SEQUENCE_PARALLEL, C_SEQ_LEN,
    C_TP, C_VP, SCHED_DUALPIPE, SCHED_GPIPE, SCHED_INTERLEAVED, SCHED_ZB_H1,
)
from fastmodel.kernels.lm.layer import ACT_BYTES
from fastmodel.kernels.nccl import p2p_time


@njit(error_model='numpy')
def microbatches(row):
    """Micro-batches per step per pipeline: ``m = global_batch / (micro_batch * dp)`` (at least 1)."""
    return max(row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * row[C_DP]), 1.0)


@njit
def pipeline_bubble(row, average, forward, weight):
    """Seconds a step waits in the pipeline's warm-up and cool-down, beyond ``m`` micro-batches of the
    busiest stage: ``average`` = F + B + W of one micro-batch on the average stage, ``forward`` its F and
    ``weight`` its W (module docstring)."""
    p = row[C_PP]
    if p <= 1.0:
        return 0.0
    schedule = int(row[C_PIPELINE_SCHEDULE])
    backward = average - forward - weight
    if schedule == SCHED_ZB_H1:
        return (p - 1.0) * (forward + backward - min(backward, weight))
    if schedule == SCHED_DUALPIPE:
        return (0.5 * p - 1.0) * max(0.0, forward + 2.0 * backward - weight)
    return (p - 1.0) / row[C_VP] * average


@njit(error_model='numpy')
def microbatches_in_flight(row, stage):
    """Micro-batches whose activations pipeline rank ``stage`` holds at its peak (in units of the rank's
    ``L/pp`` layers).

    1F1B and ZB-H1: ``min(pp - stage, m)`` (Narayanan et al. 2021, Sec. 2.2.1; ZB-H1 keeps 1F1B's in-flight
    count, Qi et al. 2024 sec. 3.1). Interleaved with ``v`` chunks: Megatron warms up
    ``2 (pp - stage - 1) + (v - 1) pp`` chunks and holds one more, each ``1/v`` of the rank's layers:
    ``min(2 (pp - stage - 1) + (v - 1) pp + 1, m v) / v``; on the first rank this is
    ``pp (1 + (pp - 1)/(pp v))`` (Korthikanti Sec. 4.2.3). GPipe: all ``m`` (Huang et al. 2019). DualPipe:
    ``pp + 1`` on every rank (DeepSeek-V3 report Table 2). Without a pipeline, micro-batches run one after
    the other: 1.
    """
    pp = row[C_PP]
    m = microbatches(row)
    if pp <= 1:
        return 1.0
    schedule = int(row[C_PIPELINE_SCHEDULE])
    if schedule == SCHED_GPIPE:
        return m
    if schedule == SCHED_DUALPIPE:
        return min(pp + 1.0, m)
    v = row[C_VP]
    if schedule == SCHED_INTERLEAVED and v > 1:
        chunks = 2.0 * (pp - stage - 1.0) + (v - 1.0) * pp + 1.0
        return min(chunks, m * v) / v
    return min(pp - stage, m)


@njit(inline="always")
def mirror_stage(row, stage):
    """The second model stage rank ``stage`` holds, or -1: DualPipe places stage ``s`` and ``pp - 1 - s`` on
    rank ``s`` (DeepSeek-V3 report sec. 3.2.1; deepseek-ai/DualPipe ``dualpipe.py``: two modules per rank),
    hence 2x parameters per device."""
    if row[C_PP] > 1.0 and int(row[C_PIPELINE_SCHEDULE]) == SCHED_DUALPIPE:
        return row[C_PP] - 1.0 - stage
    return -1.0


@njit
def model_copies(row):
    """Copies of the model's layers the pipeline holds (2 under DualPipe, :func:`mirror_stage`; else 1)."""
    return 2.0 if mirror_stage(row, 0.0) >= 0.0 else 1.0


@njit
def pipeline_p2p(row, micro_batches):
    """(seconds, exposed seconds) of the pipeline's point-to-point sends in one step: a micro-batch's activations
    forward and gradients backward at every virtual-stage boundary; what is exposed are the sends of the
    warm-up and cool-down, and for one-chunk 1F1B-like schedules (1F1B, GPipe, ZB-H1) also one pair per
    micro-batch. DualPipe overlaps the steady state's sends with the paired forward and backward chunks
    (DeepSeek-V3 report sec. 3.2.1), as interleaving does."""
    t = row[C_TP]
    p = row[C_PP]
    v = row[C_VP]
    c = row[C_CP]
    d = row[C_DP]
    b = row[C_MICRO_BATCH]
    pp_comm = 0.0
    pp_exposed = 0.0
    if p > 1.0:
        nbytes = ACT_BYTES * b * row[C_SEQ_LEN] / c * row[C_HIDDEN]
        if row[C_SEQUENCE_PARALLEL] > 0.0:
            nbytes = nbytes / t
        send = p2p_time(row, nbytes, t * c * d)
        pp_comm = 2.0 * (micro_batches * v + p - 1.0) * send      # every send of the schedule's critical path
        steady = v <= 1.0 and int(row[C_PIPELINE_SCHEDULE]) != SCHED_DUALPIPE
        pp_exposed = 2.0 * (p - 1.0) * send + (2.0 * micro_batches * send if steady else 0.0)
    return pp_comm, pp_exposed
