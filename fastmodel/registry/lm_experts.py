"""Plan columns of how a stack runs its local routed experts (docs/model.md §11.57).

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays under the line cap; ``kernels/roofline.py`` (the expert GEMMs) and ``kernels/lm/moe.py``
(``sequential_mlp_time``) read them.
"""

from __future__ import annotations

EXPERT_PLAN_ROWS = (
    ("moe_grouped_gemm", "1", 1, "1: the local experts run as one grouped GEMM per projection (Megatron-Core "
     "--moe-grouped-gemm: TEGroupedMLP / GroupedMLP; every other stack's grouped kernels); 0: Megatron-Core's "
     "SequentialMLP, a Python loop of one MLP per local expert, each with its own fc1, activation and fc2 kernels "
     "on its own rows (Megatron-LM 23e00ed megatron/core/transformer/moe/experts.py, docs/model.md §11.57). A "
     "record's plan.moe_grouped_gemm; no stack profile sets it.", 0, 1, False, "flag"),
)
