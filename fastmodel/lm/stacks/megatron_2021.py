"""Megatron-LM of 2021-22 and Megatron-DeepSpeed: stack ``megatron-2021``.

The Megatron papers' runs (Narayanan et al. 2021; Korthikanti et al. 2022) and Microsoft's Megatron-DeepSpeed
fork predate FlashAttention (2022) and Megatron's overlapped gradient reduction (2023): attention is unfused
(the s x s scores go through HBM), GPT-3-style dropout is on, and gradients are reduced (and distributed-
optimizer parameters gathered) after the backward pass, not overlapped with it. ZeRO-3 (``sharding = "fsdp"``)
in these codebases is DeepSpeed's, with DeepSpeed's communication defaults (``stacks.deepspeed``).

Named by ``megatron-deepspeed``, or explicitly (a record's top-level ``stack``): a ``framework`` text of
"Megatron-LM" alone reads as today's Megatron-Core, so the 2021-22 papers' records name this stack.
"""

from fastmodel.lm.stacks import deepspeed
from fastmodel.lm.stacks.base import StackProfile


def defaults(execution, framework: str | None) -> dict:
    values = {"dropout": True, "flash_attention": False, "overlap_grad_reduce": False,
              "overlap_param_gather": False}
    if execution.sharding == "fsdp":
        # ZeRO-3 exists in these codebases only through DeepSpeed: its communication defaults are DeepSpeed's
        values.update(deepspeed.defaults(execution, framework))
    return values


PROFILE = StackProfile(
    name="megatron-2021",
    title="Megatron 2021-22 / Megatron-DeepSpeed",
    names=("megatron-deepspeed",),
    source="Narayanan et al. SC21 and Korthikanti et al. 2022 (no FlashAttention, unoverlapped DP); "
           "ZeRO-3: the deepspeed profile's defaults",
    defaults=defaults,
)
