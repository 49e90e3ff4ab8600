"""MaxText on JAX/XLA: stack ``maxtext``.

Defaults from MaxText's own configuration, AI-Hypercomputer/maxtext@e591f30 (2026-08-22),
``src/maxtext/configs/base.yml``: ``weight_dtype: "float32"`` (line 174) and ``dtype: "bfloat16"`` (line 114),
so the FP32 weights are the master copy and the optimizer's moments inherit their dtype (``mu_dtype`` unset,
line 993); ``grad_dtype: "float32"`` (line 111): gradients are reduced in FP32 (``grad_reduce_dtype =
"fp32"``). XLA fuses element-wise operations into their producers (``fused_kernels``): one pass over each
tensor, no eager intermediates kept. ``remat_policy: 'full'`` (line 358) is the configuration's default; a
record states its recompute.
"""

from fastmodel.lm.stacks.base import StackProfile


def defaults(execution, framework: str | None) -> dict:
    return {"fused_kernels": True, "grad_reduce_dtype": "fp32", "fsdp_copy_out": False}


PROFILE = StackProfile(
    name="maxtext",
    title="MaxText (JAX/XLA)",
    names=("maxtext",),
    source="AI-Hypercomputer/maxtext@e591f30 src/maxtext/configs/base.yml (weight_dtype float32, dtype bfloat16, "
           "grad_dtype float32, remat_policy full)",
    defaults=defaults,
)
