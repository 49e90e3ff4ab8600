"""Plan columns of low-precision storage: the optimizer's moments and the activations cached below 16 bits.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays readable. They state the memory savers of the DeepSeek-V3 report (arXiv 2412.19437 sec. 3.2.3
and 3.3.3); docs/model_memory.md gives the equations, kernels/lm/memory_states.py and memory_activations.py read them.
"""

from __future__ import annotations

#: dtype of the optimizer's moments (Adam m and v, SGD momentum) beside an FP32 master copy: FP32 (ZeRO paper,
#: K = 12), or BF16 (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.3.3, "Low-Precision Optimizer States")
OPTIMIZER_MOMENTS = {"fp32": 0, "bf16": 1}

LOW_PRECISION_PLAN_ROWS = (
    ("optimizer_moments", "code", 0, "OPTIMIZER_MOMENTS, the dtype of the optimizer's moments beside the FP32 "
     "master copy: 0 fp32 (Adam 4 + 4 + 4 bytes per parameter), 1 bf16 (4 + 2 + 2; DeepSeek-V3 report sec. 3.3.3). "
     "A 16-bit model (master_weights 0) keeps 16-bit moments either way.", 0, 1, False, "code"),
    ("moe_act_input_fp8", "1", 0, "1: the experts' SwiGLU input is cached in FP8 (1 byte per element of the "
     "[rows, 2 f_e] gate/up output) and the SwiGLU output recomputed in backward, so neither the 16-bit SwiGLU "
     "input nor the down-projection input is kept (DeepSeek-V3 report sec. 3.3.3, Low-Precision Activation (2)); "
     "routed and shared experts, gated MLPs only (memory only).", 0, 1, False, "flag"),
    ("attn_out_e5m6", "1", 0, "1: the input of the linear after attention (the attention output) is cached once "
     "in the 12-bit E5M6 format, for both the attention backward and the linear's weight gradient, instead of a "
     "16-bit copy plus an FP8 copy (DeepSeek-V3 report sec. 3.3.3, Low-Precision Activation (1); memory only).",
     0, 1, False, "flag"),
    ("norm_recompute_fp8", "1", 0, "1: recomputing a norm (recompute_modules layernorm) recomputes the FP8 cast of "
     "its output the next linear reads too, so no form of the norm output is stored (DeepSeek-V3 report sec. "
     "3.2.3: recomputing all RMSNorm operations eliminates storing their outputs); 0: Transformer Engine keeps its "
     "own FP8 cast (memory only).", 0, 1, False, "flag"),
)
