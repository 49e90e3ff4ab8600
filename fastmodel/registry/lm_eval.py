"""Plan columns and result of the evaluation a training run interleaves with its steps.

Rows of ``fastmodel.registry.lm`` (plan: name, units, default, doc, lo, hi, fittable, option; result: name, units,
better, doc), kept here so the registry module stays under the line cap. docs/model.md §11.17.1 gives the equation
and sources; ``kernels/lm/host_step.py`` ``eval_time`` computes it. Source: Megatron-LM's training loop (the
stanford-futuredata/Megatron-LM fork 0bdc8181, megatron/training.py ``train`` lines 740-746 and ``evaluate`` lines
792-833): every ``--eval-interval`` steps, ``--eval-iters`` iterations of ``forward_backward_func(...,
forward_only=True)``, each a whole global batch (all ``get_num_microbatches()`` micro-batches of every data-parallel
rank) forward under ``torch.no_grad()``.
"""

from __future__ import annotations

EVAL_PLAN_ROWS = (
    (
        "eval_interval",
        "steps",
        0,
        "Training steps between two evaluations (Megatron-LM --eval-interval). With "
        "eval_iters > 0 the step time includes the evaluation's share, eval_iters / eval_interval forward-only global "
        "batches per step (docs/model.md §11.17.1): the per-step time of a run timed end to end. 0: no evaluation "
        "charged (a training step alone).",
        0,
        1e9,
        False,
        "number",
    ),
    (
        "eval_iters",
        "batches",
        0,
        "Forward-only global batches per evaluation (Megatron-LM --eval-iters: each "
        "iteration runs all micro-batches of the global batch with forward_only=True, docs/model.md §11.17.1). 0: no "
        "evaluation charged.",
        0,
        1e9,
        False,
        "number",
    ),
)

EVAL_RESULT_ROWS = (
    (
        "time_eval",
        "s",
        "min",
        "The run's evaluation per training step: eval_iters / eval_interval forward-only "
        "global batches (docs/model.md §11.17.1); 0 unless the plan states both.",
    ),
)
