"""Op orders of the pipeline schedules on the exact path (plain Python; docs/model.md §11.7.1): the ops each rank
runs in order (:func:`stage_order`, with :func:`zb_h1_order` and :func:`dualpipe_order`), the shapes a schedule
runs (:func:`check_shape`) and the chain of virtual stages (:func:`virtual_stage`, :func:`chain_length`).

``fastmodel/lm/pipeline_program.py`` and the memory timeline (``fastmodel/lm/memory_timeline.py``) read them; the
closed forms of the same schedules are ``kernels/lm/pipeline.py``. Moved out of ``kernels/lm/pipeline.py`` (which
re-exports these names) when that module reached the 450-line limit; no change to any function.
"""

from __future__ import annotations

from fastmodel.registry.lm import PIPELINE_SCHEDULES

SCHEDULES = tuple(PIPELINE_SCHEDULES)

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
