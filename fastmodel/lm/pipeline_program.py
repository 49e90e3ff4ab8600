"""The exact pipeline path: a pipeline schedule as a Program with one stream per stage (docs/model.md §11.7.1).

The real-world model composes a training step in closed form (``kernels/lm/step.py``:
``m x t_mb + (p - 1)/v x t_avg``, slowest and average stage). This module builds the same step op by op so the
generic scheduler (``kernels/schedule.py``) can time it exactly and test the closed form:

- one stream per pipeline stage (stream s = stage s), so ``stages <= layout.MAX_STREAMS``;
- ops ``F(k, j)`` and ``B(k, j)``: forward and backward of micro-batch j on virtual stage
  k = chunk x p + stage (one chunk per stage unless the schedule is interleaved);
- dependencies ``F(k, j)`` after ``F(k - 1, j)``; ``B(k, j)`` after ``B(k + 1, j)`` and ``F(k, j)``;
- each stage's ops in the order of its schedule (:func:`stage_order`), emitted in a topological
  order that keeps every stage's order, so the list scheduler starts an op at the end of the
  stage's previous op or of its dependencies, whichever is later.

Point-to-point sends are optional (``sends=True``): each stage then has a second stream, p + s,
for its outgoing sends, so a send overlaps the stage's next op and the stage's sends leave in
its order (``stages <= MAX_STREAMS / 2``); ``F(k + 1, j)`` waits for the send after ``F(k, j)``,
``B(k - 1, j)`` for the send after ``B(k, j)``. Without them a send takes no time (the closed
form adds ``exposed_pp`` separately).

Cost slots: forward of virtual stage k is slot k, its backward slot ``p v + k``, a send slot
``2 p v`` (:func:`pipeline_slots` builds the row from per-stage seconds).

No repeated phase (``ProgramBuilder.begin_repeat``) is used: in the 1F1B steady state stage
s - 1 runs one micro-batch ahead of stage s, so the forward of a steady-state round depends on
the previous round of its neighbour, while a phase's dependency refers to an earlier op of the
same round. The Program lists every op instead (2 m v p ops; a few thousand for real plans).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.kernels.streams import CAT_ALL2ALL, CAT_GEMM, MAX_STREAMS
from fastmodel.schedule.program import Program, ProgramBuilder

SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb_h1", "dualpipe")
#: schedules that split the backward into B (inputs) and W (weights): their orders hold "I" and "W" ops
SPLIT_BACKWARD = ("zb_h1", "dualpipe")


def stage_order(schedule: str, stages: int, micro_batches: int, stage: int,
                virtual_stages: int = 1) -> list[tuple[str, int, int]]:
    """The ops of pipeline rank ``stage`` in the order it runs them: ``(kind, micro-batch, chunk)`` with kind
    ``"F"`` forward, ``"B"`` full backward, ``"I"`` backward for inputs only, ``"W"`` backward for weights,
    ``"P"`` a forward paired with the backward after it (DualPipe's overlapped chunks).

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


def _check(schedule: str, stages: int, micro_batches: int, virtual_stages: int, sends: bool) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
    if stages < 1 or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(f"stages, micro_batches and virtual_stages must be >= 1, got {stages}, {micro_batches}, "
                         f"{virtual_stages}")
    streams = 2 * stages if sends else stages
    if streams > MAX_STREAMS:
        raise ValueError(f"a pipeline Program has one stream per stage{' and one for its sends' if sends else ''}: "
                         f"{stages} stages need {streams} streams, more than the scheduler's {MAX_STREAMS} "
                         f"(kernels/madmax/layout.py MAX_STREAMS)")
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


def _key(kind: str, virtual: int, micro_batch: int) -> str:
    return f"{kind}{virtual}.{micro_batch}"


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


def _deps(builder: ProgramBuilder, kind: str, k: int, j: int, position: int, chain: int, sends: bool) -> list | None:
    """Keys ``kind``(k, j) waits for, or None while one is not emitted yet."""
    arrive = "S" if sends else ""      # a stage waits for its neighbour's send, or its op
    if kind in "FP":
        deps = [_key(arrive + "F", k - 1, j)] if position > 0 else []
    elif kind == "W":
        deps = [_key("I", k, j)]
    else:
        deps = [_key("F", k, j)]
        if position < chain - 1:
            if sends:
                deps.append(_key("SB", k + 1, j))
            else:
                deps.append(_key("I" if builder.has(_key("I", k + 1, j)) else "B", k + 1, j))
    return deps if all(builder.has(d) for d in deps) else None


def pipeline_program(stages: int, micro_batches: int, schedule: str = "1f1b", virtual_stages: int = 1,
                     sends: bool = False) -> Program:
    """The Program of one training step's pipeline: stream s runs stage s's ops in the order of ``schedule``
    (:func:`stage_order`), stream p + s its sends (``sends``); slots as :func:`pipeline_slots` lays them out.
    A backward (full ``B`` or input-only ``I``) waits for its forward and the next stage's backward; a ``W``
    for its ``I``; a send follows every op whose result another rank needs.

    Raises ValueError for an unknown schedule, more streams than ``layout.MAX_STREAMS``, virtual stages
    without the interleaved schedule, an interleaved schedule whose micro-batches are not a multiple
    of the stages, or a DualPipe shape its implementation refuses.
    """
    p, m, v = int(stages), int(micro_batches), int(virtual_stages)
    _check(schedule, p, m, v, sends)
    orders = [stage_order(schedule, p, m, s, v) for s in range(p)]
    chain = chain_length(schedule, p, v)
    builder = ProgramBuilder()
    cursor = [0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        progress = False
        for s in range(p):
            while cursor[s] < len(orders[s]):
                kind, j, chunk = orders[s][cursor[s]]
                k = virtual_stage(schedule, p, s, chunk)
                position = k % chain
                deps = _deps(builder, kind, k, j, position, chain, sends)
                if kind == "P" and deps is not None:     # an overlapped pair waits for both its inputs
                    kind_b, j_b, chunk_b = orders[s][cursor[s] + 1]
                    k_b = virtual_stage(schedule, p, s, chunk_b)
                    pair = _deps(builder, kind_b, k_b, j_b, k_b % chain, chain, sends)
                    deps = None if pair is None else deps + [d for d in pair if d != _key("F", k_b, j_b)]
                if deps is None:
                    break
                kind = "F" if kind == "P" else kind
                slot = {"F": 0, "B": chain, "I": 2 * chain + 1, "W": 3 * chain + 1}[kind] + position
                builder.op(_key(kind, k, j), s, slot, CAT_GEMM, deps)
                if sends and (position < chain - 1 if kind == "F" else kind in "BI" and position > 0):
                    # no point-to-point category exists: ALL2ALL labels the busy-time sum, which this path skips
                    name = "SF" if kind == "F" else "SB"
                    builder.op(_key(name, k, j), p + s, 2 * chain, CAT_ALL2ALL, [_key(kind, k, j)])
                cursor[s] += 1
                remaining -= 1
                progress = True
        if not progress:   # every stage waits on another: the orders deadlock (a bug in stage_order)
            raise RuntimeError(f"pipeline schedule {schedule!r} deadlocks at stage cursors {cursor}")
    return builder.build()


def pipeline_slots(forward, backward, stages: int, virtual_stages: int = 1, send: float = 0.0,
                   weight=0.0) -> np.ndarray:
    """The cost-slot row of a pipeline Program: ``forward`` and ``backward`` (full: inputs and weights) seconds
    per virtual stage, each a scalar (every stage alike), shape (p,) (per stage; each chunk 1/v of it) or
    (v, p) (per chunk and stage); then ``send``, the seconds of one point-to-point send (read only by a
    Program with sends); then the backward split of schedules that split it: ``backward - weight`` for inputs,
    ``weight`` for weights (``weight`` shaped as ``backward``). Under DualPipe the p positions of a direction's
    chain are the p stages (v = 1)."""
    p, v = int(stages), int(virtual_stages)

    def per_virtual(seconds) -> np.ndarray:
        a = np.asarray(seconds, dtype=np.float64)
        if a.ndim == 0 or a.shape == (p,):
            a = np.broadcast_to(a / v, (v, p))
        if a.shape != (v, p):
            raise ValueError(f"per-stage seconds: a scalar, shape ({p},) or ({v}, {p}) expected, got {a.shape}")
        return a.reshape(-1)      # virtual stage k = chunk x p + stage

    full, weights = per_virtual(backward), per_virtual(weight)
    return np.concatenate([per_virtual(forward), full, [float(send)], full - weights, weights])


@dataclass(frozen=True)
class PipelineTimes:
    """One scheduled pipeline step (seconds): per op start and end, per stage busy and idle time."""

    makespan: float
    busy: np.ndarray      # (p,) seconds each stage computes (sends not counted)
    idle: np.ndarray      # (p,) makespan - busy: the stage's bubble
    start: np.ndarray     # (n_ops,) in the Program's op order
    end: np.ndarray

    @property
    def bubble_fraction(self) -> np.ndarray:
        """Idle over busy time per stage (Narayanan et al. 2021 eq. 1: (p - 1)/m for uniform 1F1B)."""
        return self.idle / self.busy


def schedule_pipeline(program: Program, slots) -> PipelineTimes:
    """Schedule ``program`` (:func:`pipeline_program`) with the slot row ``slots`` (:func:`pipeline_slots`) on
    the generic scheduler (``engine.schedule``: ``kernels/schedule.py``, every op scheduled)."""
    from fastmodel.schedule.run import schedule

    start, end, makespan = schedule(program, slots)
    compute = program.op_category == CAT_GEMM
    busy = np.bincount(program.op_stream[compute].astype(np.int64), weights=(end - start)[compute])
    return PipelineTimes(makespan, busy, makespan - busy, start, end)
