"""Plan columns of how a stack runs its local routed experts (docs/model.md §11.57) and moves their rows (§11.61).

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays under the line cap; ``kernels/roofline.py`` (the expert GEMMs) and ``kernels/lm/moe.py``
(``sequential_mlp_time``, ``stack_permute_time``) read them.
"""

from __future__ import annotations

EXPERT_PLAN_ROWS = (
    ("moe_grouped_gemm", "1", 1, "1: the local experts run as one grouped GEMM per projection (Megatron-Core "
     "--moe-grouped-gemm: TEGroupedMLP / GroupedMLP; every other stack's grouped kernels); 0: Megatron-Core's "
     "SequentialMLP, a Python loop of one MLP per local expert, each with its own fc1, activation and fc2 kernels "
     "on its own rows (Megatron-LM 23e00ed megatron/core/transformer/moe/experts.py, docs/model.md §11.57). A "
     "record's plan.moe_grouped_gemm; no stack profile sets it.", 0, 1, False, "flag"),
    ("moe_permute_fwd_bytes", "bytes", 0.0, "HBM bytes per routed row and hidden element that the stack's own "
     "token permutation path moves in one MoE layer forward (every forward it runs: the recomputed one too), "
     "counted op by op from its source; with it the generic PERMUTE_BYTES_PER_ELEMENT x permutation pairs and its "
     "2x backward convention are not charged (docs/model.md §11.61). 0: the generic count. The stack profile sets "
     "it (TorchTitan's all-to-all path when its MoE block runs eager: 38).", 0, 1e3, False, "number"),
    ("moe_permute_bwd_bytes", "bytes", 0.0, "... and in the backward pass of that path (autograd's gathers, "
     "scatters, casts and the routing-score product's two gradients; docs/model.md §11.61). Stated with "
     "moe_permute_fwd_bytes: both > 0 or neither (an execution refuses one alone, naming the other). The stack "
     "profile sets it (TorchTitan's all-to-all path: 60).", 0, 1e3, False,
     "number"),
    ("moe_combine_saved_bytes", "bytes", 0.0, "Bytes per routed row and hidden element of the expert output that the "
     "combine saves for the routing score's gradient (stored activations, docs/model_memory.md \"MoE block\"). 0: the "
     "generic 2 (the BF16 expert output). The stack profile sets it: TorchTitan's all-to-all path run eager, 4 (its "
     "FP32 cast of the routed output times the scores, models/moe/moe.py lines 539-543 at 022f885f34, docs/model.md "
     "§11.61).", 0, 16, False, "number"),
)
