"""The exact pipeline path: a pipeline schedule as a Program with one stream per stage (docs/model.md §11.7.1).

The real-world model composes a training step in closed form (``kernels/lm/step.py``: ``m x t_mb + bubble``,
the bubble the schedule's, ``kernels/lm/pipeline.py``). This module builds the same step op by op so the
generic scheduler (``kernels/schedule.py``) can time it exactly and test the closed form:

- one stream per pipeline stage (stream s = stage s), so ``stages <= layout.MAX_STREAMS``;
- ops ``F(k, j)`` and ``B(k, j)``: forward and backward of micro-batch j on virtual stage
  k = chunk x p + position (``kernels/lm/pipeline_orders.virtual_stage``: one chunk per stage unless the schedule is
  interleaved; DualPipe's second direction runs from the last rank to the first); schedules that split the
  backward run ``I(k, j)`` (inputs) and ``W(k, j)`` (weights) instead of ``B(k, j)``;
- dependencies ``F(k, j)`` after ``F(k - 1, j)``; ``B(k, j)`` (or ``I``) after ``F(k, j)`` and the backward of
  ``(k + 1, j)``; ``W(k, j)`` after ``I(k, j)``; an overlapped pair's forward also after its backward's input;
- each stage's ops in the order of its schedule (``kernels/lm/pipeline_orders.stage_order``), emitted in a topological
  order that keeps every stage's order, so the list scheduler starts an op at the end of the
  stage's previous op or of its dependencies, whichever is later.

Point-to-point sends are optional (``sends=True``): each stage then has a second stream, p + s,
for its outgoing sends, so a send overlaps the stage's next op and the stage's sends leave in
its order (``stages <= MAX_STREAMS / 2``); ``F(k + 1, j)`` waits for the send after ``F(k, j)``,
``B(k - 1, j)`` for the send after ``B(k, j)``. Without them a send takes no time (the closed
form adds ``exposed_pp`` separately).

Cost slots, with n = p v model stages along a chain (p under DualPipe) and position q = k mod n: forward
slot q, full backward ``n + q``, a send ``2 n``, backward for inputs ``2 n + 1 + q``, for weights
``3 n + 1 + q`` (:func:`pipeline_slots` builds the row from per-stage seconds).

No repeated phase (``ProgramBuilder.begin_repeat``) is used: in the 1F1B steady state stage
s - 1 runs one micro-batch ahead of stage s, so the forward of a steady-state round depends on
the previous round of its neighbour, while a phase's dependency refers to an earlier op of the
same round. The Program lists every op instead (2 m v p ops; a few thousand for real plans).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.kernels.lm.pipeline_orders import SCHEDULES, chain_length, check_shape, stage_order, virtual_stage
from fastmodel.kernels.streams import CAT_ALL2ALL, CAT_GEMM, MAX_STREAMS
from fastmodel.schedule.program import Program, ProgramBuilder

__all__ = ["SCHEDULES", "PipelineTimes", "pipeline_program", "pipeline_slots", "schedule_pipeline", "stage_order"]


def _check(schedule: str, stages: int, micro_batches: int, virtual_stages: int, sends: bool) -> None:
    check_shape(schedule, stages, micro_batches, virtual_stages)
    streams = 2 * stages if sends else stages
    if streams > MAX_STREAMS:
        raise ValueError(f"a pipeline Program has one stream per stage{' and one for its sends' if sends else ''}: "
                         f"{stages} stages need {streams} streams, more than the scheduler's {MAX_STREAMS} "
                         f"(kernels/madmax/layout.py MAX_STREAMS)")


def _key(kind: str, virtual: int, micro_batch: int) -> str:
    return f"{kind}{virtual}.{micro_batch}"


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
