"""Pipeline schedules of decoder-LM training in closed form (docs/model.md §11.7).

What a schedule decides: the bubble (the average stage's closed form; ``bubble_last.py`` credits it when the
last rank is the busiest, ``host_step.py`` stretches it on host-bound stages; §11.43), the micro-batches a rank
holds at its peak, the model copies a rank holds, the exposed point-to-point sends. The step (``step.py``) and
memory (``memory_*.py``) ask here; ``fastmodel/lm/pipeline_program.py`` lays the schedules out op by op and tests
these closed forms.

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

A schedule's closed form (the jitted functions) and the shapes it runs on grids (:func:`schedule_status`) live
here; its op order for the exact path and the memory timeline and the shapes that path runs (``stage_order``,
``check_shape``, plain Python) in ``kernels/lm/pipeline_orders.py``, re-exported here. A new schedule: its name in
``registry/lm.py`` ``PIPELINE_SCHEDULES``, its parts in the two modules.
"""

from __future__ import annotations

import numpy as np

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_COLLECTIVE_OVERHEAD_S, C_CP, C_CUDA_GRAPH_MICROBATCH_BUFFERS, C_CUDA_GRAPHS, C_DP, C_GLOBAL_BATCH, C_HIDDEN,
    C_MICRO_BATCH, C_PIPELINE_SCHEDULE, C_PP, C_PP_ENGINE_DEEPSPEED, C_SEQUENCE_PARALLEL, C_SEQ_LEN,
    C_TP, C_VP, SCHED_1F1B, SCHED_DUALPIPE, SCHED_GPIPE, SCHED_INTERLEAVED, SCHED_ZB_H1,
)
from fastmodel.kernels.lm.layer import ACT_BYTES
from fastmodel.kernels.lm.pipeline_2021 import sync_exchanges, sync_p2p
from fastmodel.kernels.nccl import allgather_time, p2p_time
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.lm.pipeline_orders import (  # noqa: F401 - the exact path's op orders, re-exported
    SCHEDULES, chain_length, check_shape, dualpipe_order, exact_schedule, stage_order, virtual_stage, zb_h1_order,
)
from fastmodel.registry.lm import STATUS_CODES

ST_MICROBATCHES = STATUS_CODES["too_few_microbatches"]
ST_SCHEDULE = STATUS_CODES["schedule_not_runnable"]


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

    1F1B and ZB-H1: ``min(pp - stage, m)`` (Narayanan et al. 2021, Sec. 2.2.1; ZB-H1 keeps 1F1B's count of
    micro-batches not through their input-gradient pass, Qi et al. 2024 sec. 3.1, and adds its deferred weight
    gradients: kernels/lm/memory_chunks.py ``zb_h1_held_bytes``, which the memory peak uses). Interleaved with ``v`` chunks: Megatron warms up
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


@njit(error_model='numpy')
def dualpipe_direction_in_flight(row, stage):
    """(forward-direction, reverse-direction) micro-batches rank ``stage`` holds at its peak under DualPipe: of
    model stage ``stage`` (direction 0) ``pp - stage``, of the mirror stage ``pp - 1 - stage`` (direction 1)
    ``stage + 1``; ``pp + 1`` in all (DeepSeek-V3 report Table 2), split by direction as the schedule lays them
    out (deepseek-ai/DualPipe ``dualpipe.py``, :func:`dualpipe_order`; tests/lm/test_memory_dualpipe.py walks
    it). Scaled to :func:`microbatches_in_flight` when there are fewer micro-batches."""
    pp = row[C_PP]
    scale = microbatches_in_flight(row, stage) / (pp + 1.0)
    return (pp - stage) * scale, (stage + 1.0) * scale


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
def pipeline_drain(row, layers, backward):
    """Seconds the last pipeline rank's last backward ends before the first rank's (docs/model.md §11.27): the
    last micro-batch's backward leaves rank p - 1 and crosses ranks p - 2 .. 0, one chunk each (chunk 0 under the
    interleaved schedule), ``(p - 1) layers / v`` layers of ``backward`` seconds (``layers``: another rank's),
    while the last rank has nothing left to run (1F1B, GPipe, interleaved: Narayanan et al. 2021 Fig. 3-4; the
    exact path's orders, :func:`stage_order`). 0 for ZB-H1 and DualPipe, whose deferred weight passes fill that
    time, and without a pipeline. The sends between the ranks are not added (a lower bound)."""
    p = row[C_PP]
    schedule = int(row[C_PIPELINE_SCHEDULE])
    if p <= 1.0 or schedule == SCHED_ZB_H1 or schedule == SCHED_DUALPIPE:
        return 0.0
    return max((p - 1.0) * layers / max(row[C_VP], 1.0), 0.0) * backward


@njit
def pipeline_p2p(row, micro_batches):
    """(seconds, exposed seconds) of the pipeline's point-to-point sends in one step: a micro-batch's activations
    forward and gradients backward at every virtual-stage boundary; exposed: the warm-up's and cool-down's, and
    for one-chunk 1F1B-like schedules (1F1B, GPipe, ZB-H1) one pair per micro-batch. DualPipe overlaps the steady
    state's with the paired chunks (DeepSeek-V3 report sec. 3.2.1), as interleaving does.

    Warm-up and cool-down: the first micro-batch's forward crosses every boundary of its chain of virtual
    stages before its backward starts, and the last one's backward crosses them back, so ``2 (n - 1)`` sends
    are exposed with ``n = p v`` chain stages under the interleaved schedule (the last rank's chunk c hands
    over to the first rank's chunk c + 1: Megatron-Core ``forward_backward_pipelining_with_interleaving``,
    ``recv_tensor_from_previous_stage``, a blocking ``send_forward_recv_forward`` per warm-up chunk;
    megatron/core/pipeline_parallel/schedules.py, NVIDIA/Megatron-LM@d98e8a6) and ``n = p`` otherwise (DualPipe:
    each direction a chain of p). The exact pipeline path adds exactly these for uniform stages
    (tests/lm/test_pipeline_program.py); it refuses DeepSpeed's and Megatron-LM 2021's blocking sends
    (:func:`deepspeed_p2p`, ``pipeline_2021.sync_p2p``, §11.52; ``fastmodel.lm.pipeline.send_time``)."""
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
        if deepspeed_engine(row):
            return deepspeed_p2p(row, micro_batches, nbytes)
        if sync_exchanges(row):
            return sync_p2p(row, micro_batches, nbytes)
        send = p2p_time(row, nbytes, t * c * d)
        pp_comm = 2.0 * (micro_batches * v + p - 1.0) * send      # every send of the schedule's critical path
        steady = v <= 1.0 and int(row[C_PIPELINE_SCHEDULE]) != SCHED_DUALPIPE
        chain = p * max(v, 1.0)                                    # virtual stages a micro-batch crosses
        pp_exposed = 2.0 * (chain - 1.0) * send + (2.0 * micro_batches * send if steady else 0.0)
    return pp_comm, pp_exposed


@njit
def deepspeed_engine(row):
    """DeepSpeed's PipelineEngine runs this pipeline (``pp_engine_deepspeed``): ``TrainSchedule``, 1F1B, one chunk."""
    return row[C_PP_ENGINE_DEEPSPEED] > 0.0 and row[C_VP] <= 1.0 and int(row[C_PIPELINE_SCHEDULE]) == SCHED_1F1B


@njit
def deepspeed_exposed_counts(m, p):
    """(sends, gathers) on the critical path of DeepSpeed's ``TrainSchedule`` with blocking point-to-point
    calls, counted by an event simulation of the schedule's command order (docs/model.md §11.31;
    tests/lm/test_deepspeed_pipe.py repeats it): a forward step runs RecvActivation, SendGrad, ForwardPass, a
    backward step SendActivation, RecvGrad, BackwardPass, and each blocking send waits for its receive. The
    gathers: a stage's forward gathers its received input (not the first stage), its backward the output and
    the received gradient (not the last stage)."""
    if m <= 1.0:
        return 2.0 * (p - 1.0), 3.0 * (p - 1.0)
    if p <= 2.0:
        return 2.0 * m, 2.0 * m
    return 4.0 * m + 2.0 * p - 8.0, 3.0 * m + 3.0 * p - 8.0


@njit
def deepspeed_p2p(row, micro_batches, nbytes):
    """(seconds, exposed seconds) of DeepSpeed's pipeline sends (docs/model.md §11.31). With TP, each rank sends
    its 1/t slice of the ``nbytes`` activation or gradient (``PartitionedTensor``, ``is_pipe_partitioned =
    is_model_parallel``, microsoft/DeepSpeed v0.5.4 ``runtime/pipe/engine.py`` lines 115-116, 590-600, 892-896);
    the receiver rebuilds the whole tensor by ``PartitionedTensor.full()`` (``runtime/utils.py`` lines 693-721):
    a zero-filled buffer, the local slice copied in, an all-gather over the TP group, a clone, (3 + 2/t)
    ``nbytes`` through HBM beside the gather, plus the clone of the received slice (2/t). Blocking: seconds =
    exposed seconds."""
    t = row[C_TP]
    p = row[C_PP]
    part = nbytes / t
    send = p2p_time(row, part, t * row[C_CP] * row[C_DP])
    gather = 0.0
    if t > 1.0:
        gather = allgather_time(row, nbytes, t, 1.0) + row[C_COLLECTIVE_OVERHEAD_S] \
            + memory_bound_time(row, (3.0 + 4.0 / t) * nbytes)
    sends, gathers = deepspeed_exposed_counts(micro_batches, p)
    exposed = sends * send + gathers * gather     # all blocking: ``comm_pp`` counts the critical path's sends
    return exposed, exposed


@njit(inline="always")
def is_multiple(a, b):
    """``a`` is an integer multiple of ``b`` (to 1e-9 relative): the divisibility test of the rule table."""
    return abs(a - b * np.floor(a / b + 0.5)) <= 1e-9 * max(1.0, abs(a))


@njit
def schedule_status(row, micro_batches):
    """0 when the schedule runs ``micro_batches`` per step on ``pp`` stages, else the status code.

    Fewer micro-batches than stages: Megatron's 1F1B runs them (its warm-up is ``min(p - rank - 1, m)``,
    megatron/core/pipeline_parallel/schedules.py, ``forward_backward_pipelining_without_interleaving``) and
    the bubble grows; so does GPipe; its interleaved schedule asserted ``m % p == 0`` (megatron/training.py,
    2021-23), and ZB-H1 and DualPipe need their warm-up (``too_few_microbatches``). DualPipe needs an even
    number of ranks and of micro-batches, at least twice the ranks (deepseek-ai/DualPipe ``dualpipe.py``
    ``step()``; ``schedule_not_runnable``), and runs its modules eagerly: per-layer CUDA graphs (``cuda_graphs``
    layer, or a Transformer Engine ``_order``: ``cuda_graph_microbatch_buffers``) are refused beside it (§11.27,
    §11.37: DualPipe@3da1bbe calls ``self.module[phase](*inputs)`` and defers weight gradients through
    ``WeightGradStore``, which one captured backward graph per layer cannot split; a whole-step graph can)."""
    pp = row[C_PP]
    if pp <= 1.0:
        return 0
    schedule = int(row[C_PIPELINE_SCHEDULE])
    plain = row[C_VP] <= 1.0 and (schedule == SCHED_1F1B or schedule == SCHED_GPIPE)
    if micro_batches < pp and not plain:
        return ST_MICROBATCHES
    if schedule == SCHED_DUALPIPE and (
            not is_multiple(pp, 2.0) or not is_multiple(micro_batches, 2.0) or micro_batches < 2.0 * pp
            or row[C_CUDA_GRAPH_MICROBATCH_BUFFERS] > 0.0 or row[C_CUDA_GRAPHS] == 1.0):
        return ST_SCHEDULE
    return 0
