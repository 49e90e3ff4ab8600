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

SCHEDULES = ("1f1b", "interleaved", "gpipe")


def stage_order(schedule: str, stages: int, micro_batches: int, stage: int,
                virtual_stages: int = 1) -> list[tuple[str, int, int]]:
    """The ops of pipeline rank ``stage`` in the order it runs them: ``("F" | "B", micro-batch, chunk)``.

    - ``gpipe``: every forward, then every backward, micro-batches in order (Huang et al. 2019);
    - ``1f1b``: ``min(p - s - 1, m)`` warm-up forwards, then one forward and one backward in turn,
      then the remaining backwards (PipeDream-Flush; Narayanan et al. 2021 §2.2, Fig. 4 top);
    - ``interleaved``: the same with v model chunks per rank and ``min(2 (p - s - 1) + (v - 1) p, m v)``
      warm-up forwards; forwards go through the chunks in groups of p micro-batches (chunk 0 for
      micro-batches 0..p-1, chunk 1 for the same, ...), backwards through the chunks in reverse
      (Narayanan et al. 2021 §2.2, Fig. 4 bottom; Megatron-LM's interleaved schedule).
    """
    p, m, v, s = stages, micro_batches, virtual_stages, stage
    if schedule == "gpipe":
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
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


def _key(kind: str, virtual: int, micro_batch: int) -> str:
    return f"{kind}{virtual}.{micro_batch}"


def pipeline_program(stages: int, micro_batches: int, schedule: str = "1f1b", virtual_stages: int = 1,
                     sends: bool = False) -> Program:
    """The Program of one training step's pipeline: stream s runs stage s's forwards and backwards in the
    order of ``schedule`` (:func:`stage_order`), stream p + s its sends (``sends``); slots as
    :func:`pipeline_slots` lays them out.

    Raises ValueError for an unknown schedule, more streams than ``layout.MAX_STREAMS``, virtual stages
    without the interleaved schedule, or an interleaved schedule whose micro-batches are not a multiple
    of the stages.
    """
    p, m, v = int(stages), int(micro_batches), int(virtual_stages)
    _check(schedule, p, m, v, sends)
    orders = [stage_order(schedule, p, m, s, v) for s in range(p)]
    last = p * v - 1
    builder = ProgramBuilder()
    cursor = [0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        progress = False
        for s in range(p):
            while cursor[s] < len(orders[s]):
                kind, j, chunk = orders[s][cursor[s]]
                k = chunk * p + s
                arrive = "S" if sends else ""      # a stage waits for its neighbour's send, or its op
                if kind == "F":
                    deps = [_key(arrive + "F", k - 1, j)] if k > 0 else []
                else:
                    deps = [_key("F", k, j)] + ([_key(arrive + "B", k + 1, j)] if k < last else [])
                if not all(builder.has(d) for d in deps):
                    break
                slot = k if kind == "F" else p * v + k
                builder.op(_key(kind, k, j), s, slot, CAT_GEMM, deps)
                if sends and (k < last if kind == "F" else k > 0):
                    # no point-to-point category exists: ALL2ALL labels the busy-time sum, which this path skips
                    builder.op(_key("S" + kind, k, j), p + s, 2 * p * v, CAT_ALL2ALL, [_key(kind, k, j)])
                cursor[s] += 1
                remaining -= 1
                progress = True
        if not progress:   # every stage waits on another: the orders deadlock (a bug in stage_order)
            raise RuntimeError(f"pipeline schedule {schedule!r} deadlocks at stage cursors {cursor}")
    return builder.build()


def pipeline_slots(forward, backward, stages: int, virtual_stages: int = 1, send: float = 0.0) -> np.ndarray:
    """The cost-slot row of a pipeline Program: ``forward`` and ``backward`` seconds per virtual stage, each a
    scalar (every stage alike), shape (p,) (per stage; each chunk 1/v of it) or (v, p) (per chunk and stage);
    then ``send``, the seconds of one point-to-point send (read only by a Program with sends)."""
    p, v = int(stages), int(virtual_stages)

    def per_virtual(seconds) -> np.ndarray:
        a = np.asarray(seconds, dtype=np.float64)
        if a.ndim == 0 or a.shape == (p,):
            a = np.broadcast_to(a / v, (v, p))
        if a.shape != (v, p):
            raise ValueError(f"per-stage seconds: a scalar, shape ({p},) or ({v}, {p}) expected, got {a.shape}")
        return a.reshape(-1)      # virtual stage k = chunk x p + stage

    return np.concatenate([per_virtual(forward), per_virtual(backward), [float(send)]])


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
