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

A schedule lives here whole: its closed form (the jitted functions), the shapes it runs (:func:`schedule_status`
for grids, :func:`check_shape` for the exact path) and its op order for the exact path and the memory timeline
(:func:`stage_order`, plain Python); a new one: its name in ``registry/lm.py`` ``PIPELINE_SCHEDULES``, its parts here.
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
from fastmodel.registry.lm import PIPELINE_SCHEDULES, STATUS_CODES

SCHEDULES = tuple(PIPELINE_SCHEDULES)
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


# ---- op orders of the exact path (plain Python; docs/model.md §11.7.1) ----
# An op is ``(kind, micro-batch, chunk)``: kind ``"F"`` forward, ``"B"`` full backward, ``"I"`` backward for
# inputs only, ``"W"`` backward for weights, ``"P"`` a forward overlapped with the backward after it (it starts
# when both have their inputs); chunk is the rank's model chunk (interleaved) or DualPipe's direction.
# ``fastmodel/lm/pipeline_program.py`` turns the orders into a Program for the generic scheduler.

def stage_order(schedule: str, stages: int, micro_batches: int, stage: int,
                virtual_stages: int = 1) -> list[tuple[str, int, int]]:
    """The ops of pipeline rank ``stage`` in the order it runs them: ``(kind, micro-batch, chunk)`` (module
    docstring).

    - ``gpipe``: every forward, then every backward, micro-batches in order (Huang et al. 2019);
    - ``1f1b``: ``min(p - s - 1, m)`` warm-up forwards, then one forward and one backward in turn,
      then the remaining backwards (PipeDream-Flush; Narayanan et al. 2021 §2.2, Fig. 4 top);
    - ``interleaved``: the same with v model chunks per rank and ``min(2 (p - s - 1) + (v - 1) p, m v)``
      warm-up forwards; forwards go through the chunks in groups of p micro-batches (chunk 0 for
      micro-batches 0..p-1, chunk 1 for the same, ...), backwards through the chunks in reverse
      (Narayanan et al. 2021 §2.2, Fig. 4 bottom; Megatron-LM's interleaved schedule);
    - ``zb_h1`` (:func:`zb_h1_order`) and ``dualpipe`` (:func:`dualpipe_order`, chunk = direction).
    """
    p, m, v, s = stages, micro_batches, virtual_stages, stage
    if schedule == "gpipe":
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    if schedule == "zb_h1":
        return zb_h1_order(p, m, s)
    if schedule == "dualpipe":
        return dualpipe_order(p, m, s)
    if schedule == "1f1b":
        warmup = min(p - s - 1, m)
        forwards = [("F", j, 0) for j in range(m)]
        backwards = [("B", j, 0) for j in range(m)]
    elif schedule == "interleaved":
        warmup = min(2 * (p - s - 1) + (v - 1) * p, m * v)

        def unit(k: int, forward: bool) -> tuple[str, int, int]:
            group, within = divmod(k, p * v)
            chunk = within // p
            return ("F" if forward else "B", group * p + within % p, chunk if forward else v - 1 - chunk)

        forwards = [unit(k, True) for k in range(m * v)]
        backwards = [unit(k, False) for k in range(m * v)]
    else:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
    order = forwards[:warmup]
    for i in range(len(forwards) - warmup):
        order += [forwards[warmup + i], backwards[i]]
    return order + backwards[len(forwards) - warmup:]


def zb_h1_order(stages: int, micro_batches: int, stage: int) -> list[tuple[str, int, int]]:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, sec. 3.1): 1F1B's order and in-flight
    count, with each backward split into ``I`` (input gradient, sent at once) and ``W`` (weight gradient).
    Stage s defers its first ``min(s, m)`` W passes: after the backward of micro-batch i it runs W(i - s)
    when i >= s, and the deferred W passes close the step, where 1F1B's stage waits in the cool-down
    (the handcrafted schedule of the paper's Fig. 3; sail-sg/zero-bubble-pipeline-parallelism, DeepSpeed
    ``ZeroBubbleH1Pipeline``: a stage's first ``stage_id`` steady steps run B without W)."""
    p, m, s = stages, micro_batches, stage
    warmup = min(p - s - 1, m)
    order = [("F", j, 0) for j in range(warmup)]
    for i in range(m):
        if warmup + i < m:
            order.append(("F", warmup + i, 0))
        order.append(("I", i, 0))
        if i >= s:
            order.append(("W", i - s, 0))
    return order + [("W", j, 0) for j in range(max(0, m - s), m)]


def dualpipe_order(stages: int, micro_batches: int, stage: int) -> list[tuple[str, int, int]]:
    """DualPipe (DeepSeek-V3 report sec. 3.2.1, Fig. 5; deepseek-ai/DualPipe ``dualpipe.py``, ``DualPipe.step``):
    m/2 micro-batches enter at rank 0 (direction 0, model stage s on rank s) and m/2 at rank p - 1
    (direction 1, model stage p - 1 - s on rank s); chunk = direction. With h = min(s, p - 1 - s) the rank's
    distance from its end of the pipeline and n = p/2, its eight steps, in the direction a rank calls
    "phase 0" (its own: 0 on the first half of the ranks, 1 on the second) and "phase 1" (the other):

    1. 2 (n - h - 1) forwards of phase 0;          2. h + 1 pairs: forward phase 0, forward phase 1;
    3. n - h - 1 times: I phase 1, W, forward phase 1;
    4. m/2 - p + h + 1 times: forward 0 & backward 1, forward 1 & backward 0: overlapped pairs, the forward
       (kind ``"P"``) starting once both the pair's inputs have arrived (``_forward_backward_chunk`` receives
       both, then computes), the backward right after it (the two share the GPU; the overlap hides their
       communication); the middle ranks run their first pair as a plain forward and backward;
    5. n - h - 1 times: backward phase 1, forward 1 & backward 0;
    6. h + 1 times: backward 1, backward 0 (from the middle of the step on as I, W deferred);
    7. n - h - 1 times: W, I phase 0;                8. h + 1 W.

    W passes run in the order their I passes ran (the weight-gradient store is a FIFO queue)."""
    p, m, s = stages, micro_batches, stage
    n, h, half = p // 2, min(s, p - 1 - s), m // 2
    own = 0 if s < n else 1
    nxt = {0: 0, 1: 0}
    deferred: list[tuple[str, int, int]] = []
    order: list[tuple[str, int, int]] = []

    def run(kind: str, phase: int) -> None:
        chunk = own if phase == 0 else 1 - own
        if kind == "W":
            order.append(deferred.pop(0))
            return
        key = "F" if kind in "FP" else "B"
        j = nxt[chunk] if key == "F" else order_count(chunk)
        if key == "F":
            nxt[chunk] += 1
        order.append((kind, j, chunk))
        if kind == "I":
            deferred.append(("W", j, chunk))

    def order_count(chunk: int) -> int:
        return sum(1 for kind, _, c in order if c == chunk and kind in "BI")

    for _ in range(2 * (n - h - 1)):
        run("F", 0)
    for _ in range(h + 1):
        run("F", 0)
        run("F", 1)
    for _ in range(n - h - 1):
        run("I", 1)
        run("W", 0)
        run("F", 1)
    for i in range(half - p + h + 1):
        run("F" if i == 0 and h == n - 1 else "P", 0)     # the middle ranks' first pair is not overlapped
        run("B", 1)
        run("P", 1)
        run("B", 0)
    for _ in range(n - h - 1):
        run("B", 1)
        run("P", 1)
        run("B", 0)
    split = False
    for i in range(h + 1):
        split = split or (i == (h + 1) // 2 and h % 2 == 1)
        run("I" if split else "B", 1)
        split = split or (i == (h + 1) // 2 and h % 2 == 0)
        run("I" if split else "B", 0)
    for _ in range(n - h - 1):
        run("W", 0)
        run("I", 0)
    while deferred:
        run("W", 0)
    return order


def exact_schedule(code: int, vp: int) -> tuple[str, int]:
    """(schedule name, virtual stages) whose op order a rank runs for the column codes: 1F1B's code or the
    interleaved code run the interleaved order only with ``vp > 1`` (1F1B otherwise); the other schedules have
    one chunk per rank."""
    name = {c: n for n, c in PIPELINE_SCHEDULES.items()}[int(code)]
    if name in ("1f1b", "interleaved"):
        return ("interleaved", int(vp)) if vp > 1 else ("1f1b", 1)
    return name, 1


def check_shape(schedule: str, stages: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError for an unknown schedule or a shape it cannot run."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
    if stages < 1 or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(f"stages, micro_batches and virtual_stages must be >= 1, got {stages}, {micro_batches}, "
                         f"{virtual_stages}")
    if schedule == "interleaved":
        if virtual_stages < 2:
            raise ValueError("the interleaved schedule needs virtual_stages >= 2")
        if micro_batches % stages:
            raise ValueError(f"the interleaved schedule runs micro-batches in groups of the {stages} stages; "
                             f"{micro_batches} micro-batches is not a multiple")
    elif virtual_stages != 1:
        raise ValueError(f"virtual_stages = {virtual_stages} needs the interleaved schedule, not {schedule!r}")
    if schedule == "dualpipe" and (stages % 2 or micro_batches % 2 or micro_batches < 2 * stages):
        raise ValueError(f"DualPipe needs an even number of stages and an even number of micro-batches, at least "
                         f"2 x stages; got {stages} stages, {micro_batches} micro-batches")


def virtual_stage(schedule: str, stages: int, stage: int, chunk: int) -> int:
    """Index k of chunk ``chunk`` of rank ``stage``: ``chunk x p + position``, where the position along the
    chunk's chain of model stages is the rank's, except DualPipe's direction 1, which runs from rank p - 1 to
    rank 0 (position p - 1 - stage)."""
    if schedule == "dualpipe" and chunk == 1:
        return stages + stages - 1 - stage
    return chunk * stages + stage


def chain_length(schedule: str, stages: int, virtual_stages: int) -> int:
    """Model stages a micro-batch crosses: p v, or p under DualPipe (each direction a chain of its own). The
    cost slot of virtual stage k is its position ``k % chain_length``."""
    return stages if schedule == "dualpipe" else stages * virtual_stages
