"""MosaicML Composer and llm-foundry (PyTorch FSDP1 underneath): stack ``composer``.

Defaults from Composer's own source, mosaicml/composer@6405188 (2026-04-29):

- ``composer/utils/parallelism.py`` ``FSDPConfig``: ``sharding_strategy = 'FULL_SHARD'``, ``limit_all_gathers =
  True`` (``fsdp_limit_all_gathers``), ``forward_prefetch = False``, ``backward_prefetch = 'BACKWARD_POST'``
  (``fsdp_backward_prefetch = post``: one gathered unit at the backward's peak, ``fsdp_prefetched_units``), ``activation_checkpointing_reentrant = True``,
  ``mixed_precision = 'DEFAULT'``;
- ``composer/distributed/mosaic_parallelism.py`` ``get_mixed_precision``: ``DEFAULT`` gathers parameters in the
  training precision and reduces gradients in FP32 (``reduce_dtype = torch.float32``: ``grad_reduce_dtype =
  "fp32"``); ``PURE`` reduces in the training precision, ``FULL`` runs everything in FP32 (a record states
  either through ``plan.grad_reduce_dtype``).

FSDP1's flat parameters are views of the all-gather output (no copy-out); its two passes over each unit's
unsharded gradient before the reduce-scatter are counted (``fsdp1_grad_passes = 2``, docs/model.md §11.26; on
16-bit gradients: the FP32 cast and FP32 predivide of ``reduce_dtype = torch.float32`` are wider, not counted). The model code is eager PyTorch
(element-wise ops one kernel each, op-level selective recompute) unless the run compiles it
(``plan.torch_compile``).
"""

from fastmodel.lm.stacks.base import StackProfile
from fastmodel.lm.stacks.pytorch_fsdp import fsdp1_prefetch


def defaults(execution, framework: str | None) -> dict:
    return {"fused_kernels": False, "selective_policy": "op", "fsdp_copy_out": False, "fsdp_version": 1, "fsdp1_grad_passes": 2, "grad_reduce_dtype": "fp32",
            **fsdp1_prefetch(execution, "post", True)}


PROFILE = StackProfile(
    name="composer",
    title="MosaicML Composer / llm-foundry (FSDP1)",
    names=("composer", "llm-foundry", "llmfoundry", "mosaicml"),
    source="mosaicml/composer@6405188 composer/utils/parallelism.py (FSDPConfig defaults) and "
           "composer/distributed/mosaic_parallelism.py (get_mixed_precision: DEFAULT reduces in FP32)",
    defaults=defaults,
)
