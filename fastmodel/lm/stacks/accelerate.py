"""Hugging Face Accelerate's FSDP plugin: stack ``accelerate``.

Defaults from Accelerate's own source, huggingface/accelerate@16cb6eb (2026-07-24),
``src/accelerate/utils/dataclasses.py`` ``FullyShardedDataParallelPlugin``:

- ``fsdp_version`` 1 (FSDP1: flat parameters, views of the all-gather output, no copy-out; its two gradient passes
  ``fsdp1_grad_passes = 2``, docs/model.md §11.26), ``reshard_after_forward``
  ``'FULL_SHARD'``, ``limit_all_gathers = True``, ``backward_prefetch`` None ("NO_PREFETCH"),
  ``forward_prefetch = False``: ``fsdp_backward_prefetch = none`` (one unit gathered at a time, the backward's
  all-gathers behind the reduce-scatters, ``overlap_param_gather`` false; the forward's still overlap). That is
  the default of the plugin built in code and of HF Trainer (``fsdp_config.get("backward_prefetch",
  "NO_PREFETCH")``); ``accelerate config`` -- the usual launch -- offers ``FSDP_BACKWARD_PREFETCH =
  ["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"]`` (``utils/constants.py``) with BACKWARD_PRE first, the
  default answer (``commands/config/cluster.py``). So an FSDP record on this stack that does not state
  ``fsdp_backward_prefetch`` gets ``none`` with a note saying so (review14 #13);
- ``set_mixed_precision``: ``param_dtype`` and ``reduce_dtype`` both the run's mixed-precision dtype, so
  gradients are reduced in BF16 (FP16 under fp16): ``grad_reduce_dtype`` is the training dtype, not FP32.

The model code (Transformers) is eager PyTorch unless the run compiles it (``plan.torch_compile``).
"""

from fastmodel.lm.stacks.base import StackProfile
from fastmodel.lm.stacks.pytorch_fsdp import fsdp1_prefetch


def defaults(execution, framework: str | None) -> dict:
    dtype = "fp16" if execution.precision == "fp16" else "bf16"
    return {"fused_kernels": False, "selective_policy": "op", "fsdp_copy_out": False, "fsdp_version": 1, "fsdp1_grad_passes": 2, "grad_reduce_dtype": dtype,
            **fsdp1_prefetch(execution, "none", True)}


#: the note of an Accelerate FSDP record that does not state its backward prefetch
PREFETCH_NOTE = ("fsdp_backward_prefetch assumed none (Accelerate's FullyShardedDataParallelPlugin and HF Trainer "
                 "default; `accelerate config` writes BACKWARD_PRE, which would hide the backward's gathers)")


def parse_notes(execution, framework: str | None) -> list[str]:
    """The assumed ``none`` named, for an FSDP run that does not state ``fsdp_backward_prefetch``."""
    if execution.sharding == "fsdp" and execution.fsdp_backward_prefetch is None:
        return [PREFETCH_NOTE]
    return []


PROFILE = StackProfile(
    name="accelerate",
    title="Hugging Face Accelerate (FSDP1 plugin)",
    names=("accelerate", "hf accelerate", "huggingface accelerate"),
    source="huggingface/accelerate@16cb6eb src/accelerate/utils/dataclasses.py (FullyShardedDataParallelPlugin "
           "defaults; set_mixed_precision: reduce_dtype = the mixed-precision dtype)",
    defaults=defaults,
    parse_notes=parse_notes,
)
