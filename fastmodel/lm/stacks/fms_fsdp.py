"""IBM's fms-fsdp trainer (PyTorch FSDP1 underneath): stack ``fms-fsdp``.

Defaults from fms-fsdp's own source at the commit current when the PyTorch blog "Maximizing training throughput
using PyTorch FSDP" (IBM + Meta, 2024-03-13) was published, foundation-model-stack/fms-fsdp@7746dac (2024-03-13):

- ``fms_fsdp/config/training.py`` ``train_config``: ``mixed_precision = True``, ``use_torch_compile = False``
  (``docs/configurations.md``: "recommended to NOT use compile at this stage");
- ``fms_fsdp/utils/train_utils.py`` ``get_policies``: with mixed precision on and BF16 supported (CUDA >= 11,
  NCCL >= 2.10) the policy is ``bfSixteen`` (``fms_fsdp/policies/mixed_precision.py``: ``param_dtype``,
  ``reduce_dtype`` and ``buffer_dtype`` all ``torch.bfloat16``), so gradients are reduce-scattered (and, under
  HSDP, all-reduced across nodes) in BF16: ``grad_reduce_dtype = "bf16"``, not the FP32 of FSDP's
  ``MixedPrecision`` examples that the ``pytorch-fsdp`` profile leaves to the registry default;
- ``main_training.py``: ``FullyShardedDataParallel(..., limit_all_gathers=True, use_orig_params=False)`` with the
  FSDP1 defaults for prefetch (``backward_prefetch`` BACKWARD_PRE, no forward prefetch): flat parameters, views of
  the all-gather output (no copy-out); activation checkpointing by ``apply_activation_checkpointing`` with the
  non-reentrant wrapper over whole ``LLaMABlock`` s (``fms_fsdp/policies/ac_handler.py``).

- FSDP1's two passes over each unit's unsharded BF16 gradient before its reduce-scatter, autograd's ``cat`` of the
  ``torch.split`` views' gradients and the predivide ``div_`` of ``_reduce_grad`` (``fsdp1_grad_passes = 2``,
  docs/model.md §11.26).

- The optimizer step's passes beyond the fused AdamW kernel the model counts (``step_grad_passes``, in passes of
  the 4-B gradient shard FSDP1 stores, ``shape.stored_grad_bytes``: the reduced BF16 shard is cast back to the FP32
  parameter's dtype, docs/model.md §11.63 and its second note): ``fms_fsdp/utils/train_utils.py`` ``train`` calls
  ``model.clip_grad_norm_(cfg.grad_clip_thresh)`` every step -- FSDP1's (pytorch/pytorch@005df1d6
  ``torch/distributed/fsdp/fully_sharded_data_parallel.py`` ``clip_grad_norm_``) reads every local gradient for
  its FP32 norm and then ``grad.detach().mul_(clip_coef_clamped)``: 4 + 8 B of the FP32 sharded gradient -- and
  ``main_training.py`` builds ``optim.AdamW(model.parameters(), lr=..., betas=(0.9, 0.95), weight_decay=0.1)``
  with neither ``foreach`` nor ``fused``, which on CUDA runs ``_multi_tensor_adamw`` (torch's default,
  ``_default_to_fused_or_foreach(..., use_fused=False)``): 80 B per element (the count of §11.54,
  ``embedding_fp32.EMBEDDING_STEP_BYTES``, which reads an FP32 gradient) against the kernel's 10 + 16 + 4 = 30 B
  with a 4-B gradient. (12 + 50) / 4 = 15.5 passes; the step's 92 B per element are those of §11.63's 32 passes
  of a 2-B gradient (28 + 64).

Everything else is the ``pytorch-fsdp`` 2.x profile's: eager element-wise kernels, op-level selective recompute,
attention through SDPA's FlashAttention-2.
"""

from fastmodel.lm.stacks import pytorch_fsdp
from fastmodel.lm.stacks.base import StackProfile

#: bytes per local parameter of FSDP1's ``clip_grad_norm_`` (the FP32 norm's read 4, the in-place scale's read and
#: write 8) and of ``torch.optim.AdamW``'s foreach step beyond the fused kernel's count with a 4-B gradient
#: (80 - 30), over the 4 B of the FP32 gradient shard the model stores: the step's extra passes (module docstring;
#: docs/model.md §11.63, second note). Right only with FSDP1's FP32 shard (``shape.fsdp1_fp32_shards``: master
#: weights): ``optimizer_step`` multiplies it by ``stored_grad_bytes``, so a pure-BF16 plan (``master_weights``
#: false) gets 15.5 x 2 = 31 B, not the foreach count for 16-bit states (review16 #16; no record runs one)
STEP_GRAD_PASSES = (4.0 + 8.0 + 80.0 - 30.0) / 4.0


def defaults(execution, framework: str | None) -> dict:
    values = pytorch_fsdp.defaults(execution, framework)
    values.update({"fsdp_copy_out": False, "grad_reduce_dtype": "bf16", "step_grad_passes": STEP_GRAD_PASSES})
    return values


PROFILE = StackProfile(
    name="fms-fsdp",
    title="IBM fms-fsdp (FSDP1, bfSixteen)",
    names=("fms-fsdp",),
    source="foundation-model-stack/fms-fsdp@7746dac fms_fsdp/policies/mixed_precision.py (bfSixteen: param, reduce "
           "and buffer dtype BF16), fms_fsdp/utils/train_utils.py get_policies, main_training.py (FSDP1 arguments)",
    defaults=defaults,
)
