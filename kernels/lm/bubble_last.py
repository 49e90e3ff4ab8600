"""The pipeline bubble when the last rank is the busiest (docs/model.md §11.43).

The closed form of ``kernels/lm/pipeline.py`` charges ``(p - 1)/v`` micro-batches of the average stage,
exact when every stage is alike. When the stages differ and the last rank (the one with the LM head) is the
busiest, the last rank never waits once its first forward has arrived: the first micro-batch's forward
crosses the other ranks, the last rank runs its ``m`` micro-batches back to back, and the last backward
crosses the other ranks back. With ``t_k`` one micro-batch on rank ``k`` (forward plus backward):

    1F1B:          T = m t_last + sum_{k < p-1} t_k              = (m - 1) max_k t_k + sum_k t_k
    interleaved:   T = m t_last + sum_{k < p-1} t_k / v           (each rank's v chunks alike, the head on the last)

so the bubble is ``(p t_avg - t_last) / v``, ``(t_last - t_avg) / v`` below the average stage's ``(p - 1)/v
t_avg``. GPipe's makespan is the same when the last stage also has the largest forward and the largest
backward (as with the head added to a stage like the others). The exact scheduler (``fastmodel/lm/
pipeline_program.py``) gives these to 1e-9 on random stage times (tests/lm/test_bubble_last.py).

Domain (:func:`credit_applies`): 1F1B at v = 1 for any stage times with the last rank the busiest; interleaved
and GPipe only where the ranks before the last hold alike chunks of no more layers than the last: no BF16 first
layers (§11.39: rank 0's chunk 0 heavier; on a Llama 3 70B pp 4 vp 5 plan the exact bubble is then 0.207 s,
above both forms, 0.179 and 0.174 s) and no explicit layout (§11.22). Rank 0's chunk 0 a layer lighter (the
embedding in the split) keeps the interleaved credit: the exact makespan is then at most the credited one.
Outside the domain, or when a rank other than the last is the busiest (the makespan is then no sum of stage
times; §11.43), the average stage's bubble stays. ZB-H1 and DualPipe keep their own closed forms.

The word embedding's TP collectives and dense gradient, ``e = e_F + e_B`` a micro-batch on rank 0's first chunk
(§11.44 item 1d, ``first_rank.embedding_stage``: ``e_B`` holds the dense gradient, §11.43), are in ``t_0`` and so
in ``t_avg``: the 1F1B and GPipe sums hold them once, exactly. Under interleaving the credited form holds ``e / v``
where the exact schedule waits ``p e``: rank 0 runs the group's ``p`` chunk-0 forwards (Megatron-Core's groups of
``p`` micro-batches, §11.45) before the chunk-1 forward the last rank's next chunk waits for, and ``p`` chunk-0
backwards after its last chunk-1 backward, each ``e_F`` (``e_B``) longer, so :func:`embedding_warmup` adds ``(p -
1/v) e`` (the exact scheduler to 1e-9 with the other chunks alike, ``tests/lm/test_bubble_last.py``). Where rank
0's first chunk is a layer lighter (the embedding in the split, or uneven stages) that layer's slack takes it: the
exact makespan grows by ``e`` there, which the credited form, an upper bound on that shape, already covers by the
layer's margin.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.bf16_layers import bf16_rank_layers
from fastmodel.kernels.lm.layout import (
    C_LAYERS, C_PIPELINE_SCHEDULE, C_PP, C_UNEVEN_STAGES, C_VP, SCHED_DUALPIPE, SCHED_GPIPE, SCHED_ZB_H1,
)
from fastmodel.kernels.lm.memory_states import explicit_layout, split_slots


@njit
def credit_applies(row):
    """True where :func:`last_rank_bubble_credit` is exact (module docstring): a pipeline under 1F1B, GPipe or
    interleaved, and under GPipe or interleaved the ranks before the last alike and no heavier than it: no BF16
    first layers, no explicit layout, and under GPipe no embedding and loss in the split (the last rank then
    holds a layer fewer than the middle ones, so its forward or backward need not be the largest)."""
    schedule = int(row[C_PIPELINE_SCHEDULE])
    if row[C_PP] <= 1.0 or schedule == SCHED_ZB_H1 or schedule == SCHED_DUALPIPE:
        return False
    gpipe = schedule == SCHED_GPIPE
    if row[C_VP] <= 1.0 and not gpipe:
        return True
    if bf16_rank_layers(row)[0] > 0.0 or explicit_layout(row):
        return False
    return not (gpipe and split_slots(row) > 0.0)


@njit
def last_rank_bubble_credit(row, last_mb, average_mb, terms):
    """Seconds the average stage's bubble ``(p - 1)/v t_avg`` charges above the exact schedule when the last
    rank, ``last_mb`` seconds per micro-batch, is the busiest and the stages average ``average_mb``:
    ``(last_mb - average_mb) / v`` where :func:`credit_applies` (1F1B; GPipe and interleaved with the ranks
    before the last alike), less the interleaved schedule's wait on the first rank's embedding
    (:func:`embedding_warmup`); 0 elsewhere (ZB-H1, DualPipe, no pipeline, BF16 first layers or an explicit layout
    under GPipe or interleaved) and where the last rank is not above the average. The embedding's interleaved wait
    is charged only here, inside the credit's domain: where the credit does not apply (the first or a middle rank
    leads, ``host_bound_bubble`` passes ``average_mb``, or an explicit layout / BF16 first layers) the closed form's
    ``(p - 1)/v t_avg`` holds the embedding's ``e / v`` only, though the same schedule waits up to ``p e``.
    ``terms``: the configuration's ``first_rank.embedding_terms`` (``step.step_row`` evaluates them once)."""
    if not credit_applies(row) or last_mb <= average_mb:
        return 0.0
    return (last_mb - average_mb) / max(row[C_VP], 1.0) - embedding_warmup(row, terms)


@njit
def embedding_warmup(row, terms):
    """Seconds the interleaved makespan waits on the word embedding's TP collectives and dense gradient beyond the ``e / v`` the
    credited form holds (module docstring): ``(p - 1/v) e`` for v > 1 where rank 0's first chunk holds a full
    chunk of layers (no embedding in the split; without uneven stages or with L a multiple of p v); 0 at v = 1
    (the sum form holds ``e`` once) and where that chunk is a layer lighter; ``e`` a micro-batch of
    ``first_rank.embedding_stage`` (0 at pp 1, and without TP and ``embedding_dense_grad``), from ``terms``, the
    configuration's ``first_rank.embedding_terms``."""
    p, v = row[C_PP], max(row[C_VP], 1.0)
    if v <= 1.0 or split_slots(row) > 0.0:
        return 0.0
    if row[C_UNEVEN_STAGES] > 0.0 and row[C_LAYERS] % (p * v) != 0.0:
        return 0.0
    forward, backward, _ = terms
    return (p - 1.0 / v) * (forward + backward)
