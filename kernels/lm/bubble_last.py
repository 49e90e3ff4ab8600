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
pipeline_program.py``) gives these to 1e-9 on random stage times (tests/lm/test_bubble_last.py). When a rank
other than the last is the busiest the makespan is no sum of stage times (the critical path changes rank
several times; §11.43) and the average stage's bubble stays, an upper bound. ZB-H1 and DualPipe keep their
own closed forms.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_PIPELINE_SCHEDULE, C_PP, C_VP, SCHED_DUALPIPE, SCHED_ZB_H1


@njit
def last_rank_bubble_credit(row, last_mb, average_mb):
    """Seconds the average stage's bubble ``(p - 1)/v t_avg`` charges above the exact schedule when the last
    rank, ``last_mb`` seconds per micro-batch, is the busiest and the stages average ``average_mb``:
    ``(last_mb - average_mb) / v`` for 1F1B, GPipe and interleaved (module docstring); 0 for ZB-H1, DualPipe
    and without a pipeline."""
    schedule = int(row[C_PIPELINE_SCHEDULE])
    if row[C_PP] <= 1.0 or schedule == SCHED_ZB_H1 or schedule == SCHED_DUALPIPE:
        return 0.0
    return max(0.0, last_mb - average_mb) / max(row[C_VP], 1.0)
