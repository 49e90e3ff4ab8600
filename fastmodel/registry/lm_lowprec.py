"""Plan columns of low-precision storage: the optimizer's moments, the activations cached below 16 bits and the FP32
copy an fp16 optimizer makes of 16-bit gradients.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays readable. They state the memory savers of the DeepSeek-V3 report (arXiv 2412.19437 sec. 3.2.3
and 3.3.3); docs/model_memory.md gives the equations, kernels/lm/memory_states.py and memory_activations.py read them.
"""

from __future__ import annotations

#: dtype of the optimizer's moments (Adam m and v, SGD momentum) beside an FP32 master copy: FP32 (ZeRO paper,
#: K = 12), or BF16 (DeepSeek-V3 report, arXiv 2412.19437 sec. 3.3.3, "Low-Precision Optimizer States")
OPTIMIZER_MOMENTS = {"fp32": 0, "bf16": 1}
#: FP8 training recipes (Megatron-Core ``--fp8-recipe``, megatron/core/enums.py ``Fp8Recipe``; Transformer Engine
#: transformer_engine/common/recipe/__init__.py at TE d0067d0): 0 unstated (the generic cast count of docs/model.md
#: §11.4), 1 ``DelayedScaling`` (amax history), 2 ``Float8CurrentScaling`` (tensor-wise, amax of the tensor itself),
#: 3 ``MXFP8BlockScaling`` (1x32 blocks, E8M0 scales; Blackwell), 4 ``Float8BlockScaling`` (1x128 activation and
#: gradient blocks, 128x128 weight blocks, FP32 scales; DeepSeek-V3 sec. 3.3). The other names are aliases: NeMo /
#: Megatron-Bridge ``fp8_cs`` / ``fp8_mx`` / ``fp8_sc`` (sub-channel) and the TE class names (docs/model.md §11.19)
FP8_RECIPES = {"unstated": 0, "delayed": 1, "tensorwise": 2, "current": 2, "fp8_cs": 2, "mxfp8": 3, "fp8_mx": 3,
               "blockwise": 4, "subchannel": 4, "fp8_sc": 4}

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
    ("fp8_recipe", "code", 0, "FP8_RECIPES, the FP8 scaling recipe of an fp8 run: 0 unstated (the generic cast "
     "count), 1 delayed, 2 tensorwise (current scaling), 3 mxfp8 (1x32 E8M0 blocks, needs compute capability "
     "10.x), 4 blockwise (1x128 / 128x128 FP32-scaled blocks); casts, GEMM rate and FP8 copies per docs/model.md "
     "§11.19.", 0, 4, False, "code"),
    ("fp8_weight_transpose_per_use", "1", 0, "1: one FP8 form of each GEMM weight is kept across micro-batches "
     "and the other orientation is made per micro-batch by a transpose of the 128x128-block data (read 1 B, "
     "write 1 B per element) and freed after its GEMM (DeepSeek's training framework: deepseek-ai/profile-data "
     "train.json, docs/model.md §11.50); 0: every FP8 form the recipe needs is cached across micro-batches "
     "(Transformer Engine). FP8 GEMMs only.", 0, 1, False, "flag"),
    ("bf16_layers_start", "1", 0, "Leading transformer layers whose linears stay in BF16 under fp8/fp4 GEMMs "
     "(Megatron-LM --first-last-layers-bf16 with --num-layers-at-start-in-bf16; megatron/core/fp4_utils.py and "
     "fp8_utils.py get_fp*_context: a nullcontext for those layers). 0: the framework's default (the flag is off; "
     "with it on, 1 each). Charged on the first pipeline rank at the 16-bit layer time (docs/model.md §11.39).",
     0, 4096, False, "number"),
    ("bf16_layers_end", "1", 0, "Trailing transformer layers whose linears stay in BF16 under fp8/fp4 GEMMs "
     "(--num-layers-at-end-in-bf16; the NVFP4 pretraining recipe keeps its last blocks in BF16, arXiv "
     "2509.25149). 0: the framework's default. Charged on the last pipeline rank (docs/model.md §11.39).",
     0, 4096, False, "number"),
    ("step_grad_copy_bytes", "bytes", 0, "Bytes per local parameter of the gradient copies the optimizer step "
     "allocates and holds until the next step's zero_grad (memory only, an optimizer transient): 4 in MegaBlocks' "
     "Megatron-LM fork under fp16 (optimizer.py _copy_model_grads_to_main_grads, main_grad.float(); the routed "
     "experts' 16-bit .grad, outside the gradient buffer, is freed as it is copied; docs/model_memory.md). "
     "0: the step reads the stored gradients. Set by the stack.", 0, 16, False, "number"),
    ("ddp_bucket_copy", "1", 0, "1: a DDP whose gradient reduction overlaps the backward (overlap_grad_reduce, "
     "sharding ddp) is PyTorch's DistributedDataParallel at gradient_as_bucket_view=False, the default: its Reducer "
     "holds a flat bucket copy of every gradient, stored_grad_bytes per parameter (memory only; Megatron-LM "
     "2021-22's --DDP-impl torch, its one overlapping DDP; docs/model_memory.md). Set by the stack.",
     0, 1, False, "flag"),
)

#: the GPU's vendor (a device file's ``vendor``): it decides the software that runs there, i.e. the FP8 recipes of
#: Transformer Engine's ROCm fork (docs/model.md §11.19) and the serving engines (TensorRT-LLM is NVIDIA-only,
#: docs/model_serving.md S56)
VENDORS = {"nvidia": 0, "amd": 1}

#: device rows of the FP8 recipes (rows of ``fastmodel.registry.lm.DEVICE_COLUMNS``)
FP8_DEVICE_ROWS = (
    ("vendor", "code", 0, "VENDORS, the GPU's vendor: 0 nvidia, 1 amd (a device file writes the name). AMD parts "
     "run ROCm: no MXFP8 or blockwise FP8 recipe on CDNA 3 (docs/model.md §11.19) and no TensorRT-LLM "
     "(docs/model_serving.md S56).", 0, 1),
    ("compute_capability", "1", 0.0, "NVIDIA compute capability major.minor (9.0 Hopper, 10.0 B200/GB200, 10.3 "
     "B300/GB300); decides the FP8 recipes' layouts and support (docs/model.md §11.19). 0: not stated (no recipe is "
     "refused for it; Hopper's layouts assumed).", 0, 100),
    ("w4a4_gemm_rate", "1", 0.0, "Share of peak_flops_4 x gemm_eff_8 a serving engine's NVFP4 W4A4 GEMM attains at "
     "prefill row counts: the measured FP4 / FP8 speedup at the same shapes over the datasheet ratio peak_flops_4 / "
     "peak_flops_8 (B200, vLLM's CUTLASS kernels: 1.534 / 2 = 0.767, docs/model_serving.md S59; built, no device "
     "file states it). 0: 1, FP4 at peak_flops_4 / peak_flops_8 times FP8's rate. NVFP4 training reads "
     "NVFP4_GEMM_RATE instead. A device fact (not fitted).", 0, 1),
)
