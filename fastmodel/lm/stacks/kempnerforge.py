"""KempnerForge (Kempner Institute, PyTorch FSDP2 + DTensor TP, torch.compile): stack ``kempnerforge``.

Defaults from KempnerInstitute/KempnerForge@01b461a (2026-04):

- **a 16-bit model** (``master_weights = false``): ``kempnerforge/config/training.py`` ``TrainConfig.param_dtype``
  maps ``mixed_precision`` bf16 (the default), and fp8 ("FP8 compute with bf16 master weights"), to
  ``torch.bfloat16`` as "the master weight dtype"; ``kempnerforge/distributed/parallel.py``
  ``build_parallel_model`` casts the model to it (``Transformer(...).to(dtype=param_dtype)``, or
  ``model.to(dtype=param_dtype)`` after TP), so the parameters FSDP2 shards, the gradients and the AdamW
  moments (``torch.zeros_like(param)``) are BF16: 8 bytes per parameter, not 16;
- FSDP2 per-parameter sharding (``fully_shard`` per ``TransformerBlock``, ``parallel.py`` ``apply_fsdp2``,
  ``reduce_dtype = torch.float32``: ``default_mp_policy``), so the gathered layer is copied out of the
  all-gather buffer and its gradients into the FP32 reduce-scatter buffer (``fsdp_copy_out``, docs/model.md
  §11.6 "FSDP2 copies") and gradients are reduced in FP32; no FSDP when the mesh has no
  data-parallel dimension;
- tensor parallelism as a DTensor plan per projection (``kempnerforge/distributed/tensor_parallel.py``
  ``_build_block_tp_plan``): ``ColwiseParallel`` on each of ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``,
  ``up_proj`` and ``RowwiseParallel`` on ``o_proj`` and ``down_proj``, with no ``PrepareModuleInput`` on the
  attention or MLP module, so each projection redistributes its own input (``tp_per_projection``, docs/model.md
  §11.6 "Per-projection TP");
- ``compile_model = True`` by default (``TrainConfig``), eager element-wise ops otherwise.
"""

from fastmodel.lm.stacks.base import StackProfile


def defaults(execution, framework: str | None) -> dict:
    # compiled by default: ``resolve`` turns torch_compile into fused element-wise kernels; eager when a run says so
    return {"master_weights": False, "fsdp_version": 2, "fsdp_copy_out": True, "grad_reduce_dtype": "fp32", "torch_compile": True,
            "fused_kernels": False, "selective_policy": "op", "tp_per_projection": True,
            "sp_wgrad_regather": False}


PROFILE = StackProfile(
    name="kempnerforge",
    title="KempnerForge (FSDP2, pure BF16)",
    names=("kempnerforge",),
    source="KempnerInstitute/KempnerForge@01b461a kempnerforge/config/training.py (TrainConfig.param_dtype, "
           "compile_model), kempnerforge/distributed/parallel.py (build_parallel_model, apply_fsdp2, "
           "default_mp_policy), kempnerforge/distributed/tensor_parallel.py (_build_block_tp_plan)",
    defaults=defaults,
)
