"""Columns of PyTorch-native stacks' kernels: PyTorch SDPA's FlashAttention-2 backend, DTensor TP plans (and
whether the SP input is gathered again for the weight gradient), FSDP1's gradient passes; and Transformer Engine
1.x's QKV copies around the flash-attn package (``fa_qkv_prepare``, ``kernels/lm/attn_layout.py``, docs/model.md
§11.60).

Rows of ``fastmodel.registry.lm`` (name, units, default, doc, lo, hi, fittable, option), kept here so the registry
module stays readable. docs/model.md §11.3 ("Attention through PyTorch SDPA") gives the equation and sources;
``kernels/roofline.py`` ``attention_time`` reads them, the stack profiles set ``attn_fa2``; ``attn_eff_fwd`` (the
forward-only efficiency of serving prefill, docs/model_serving.md §S48) is read by ``attention_fwd_time``;
``attn_tile_q``/``attn_tile_kv`` (the flash kernels' grids, docs/model.md §11.51) by ``attention_grid_share``;
``mma_flops_per_exp``/``attn_eff_mma_flops_per_exp`` (the softmax exponentials' rate, §11.58) by ``exp_rate_scale``.
"""

from __future__ import annotations

SDPA_PLAN_ROWS = (
    ("attn_fa2", "1", 0, "1: attention runs FlashAttention-2 kernels (PyTorch scaled_dot_product_attention's flash "
     "backend, first in its priority order where cuDNN attention is not preferred) at attn_eff_fa2 of the device; "
     "0: the device's attn_eff (Transformer Engine / cuDNN fused attention). Set by the stack.", 0, 1, False, "flag"),
    ("tp_per_projection", "1", 0, "1: the tensor-parallel plan redistributes the input of each column-parallel "
     "projection on its own (DTensor ColwiseParallel on q, k, v and on gate, up: 3 + 2 per layer, docs/model.md "
     "§11.6 'Per-projection TP'); 0: one redistribution before attention and one before the MLP (Megatron's f "
     "operator, TorchTitan's PrepareModuleInput). Set by the stack.", 0, 1, False, "flag"),
    ("sp_wgrad_regather", "1", 1, "1: under sequence parallelism each column-parallel GEMM saves its input as the "
     "local sequence slice and all-gathers it again in backward for the weight gradient: QKV and FC1, in a MoE "
     "layer QKV and a shared expert's FC1 (Megatron-Core LinearWithGradAccumulationAndAsyncCommunication.backward, Transformer Engine Linear / "
     "LayerNormLinear; docs/model.md §11.41); 0: autograd saves the gathered input (PyTorch DTensor plans: "
     "TorchTitan, KempnerForge). Set by the stack.", 0, 1, False, "flag"),
    ("interleave_any_microbatches", "1", 0, "1: PyTorch's rule for the interleaved pipeline schedule: "
     "ScheduleInterleaved1F1B runs m >= pp micro-batches in max(1, floor(m / pp)) rounds and refuses m not a "
     "multiple of that round count (torch/distributed/pipelining/schedules.py at pytorch@00722e6, "
     "ScheduleInterleaved1F1B.__init__; TorchTitan): pp 4 runs m = 6, refuses m = 9; the model keeps its groups of "
     "pp, an approximation when m is not a multiple of pp (docs/model.md §11.45); 0: Megatron-Core's rule, m a "
     "multiple of pp. Either refusal is schedule_not_runnable. Set by the stack.", 0, 1, False, "flag"),
    ("fsdp1_grad_passes", "1", 0, "Memory-bound passes (each a read + write of 2 B per element) FSDP1 runs over "
     "each unit's unsharded 16-bit gradient on the compute stream before its reduce-scatter, once per micro-batch "
     "(docs/model.md §11.26): autograd's concatenation of the views' gradients into the FlatParameter's "
     "(split_with_sizes backward: cat) and the predivide div_ (_reduce_grad, _div_if_needed). 2: FSDP1; 0: other "
     "stacks (FSDP2's copy-in is fsdp_copy_out's). Set by the stack. The passes alone: which stack runs FSDP1 (its "
     "FP32 shard, flat-gradient memory, root unit) is fsdp_version's (review16 #3, mend18).", 0, 4, False, "number"),
    ("fa_qkv_prepare", "1", 0, "1: Transformer Engine 1.x's FlashAttention path copies the interleaved QKV "
     "projection [s, b, h, 3, d] into separate contiguous [3, b, s, h, d] q, k, v before the flash-attn kernel and "
     "their gradients back after it (TE 09ba842 attention.py _PrepareQKVForFA, tex.fa_prepare_fwd / fa_prepare_bwd): "
     "a read and a write of the tokens' (a / t)(2 d_qk + d_v) elements at 2 B in each direction (docs/model.md "
     "§11.60); 0: the attention kernel reads the projection's layout (cuDNN fused attention, SDPA). Charged only where "
     "TE copies: attn_fa2, head dim 128, kv_heads = heads, >= 512 tokens; refused with attn_fa2 false.", 0, 1, False,
     "flag"),
)

SDPA_DEVICE_ROWS = (
    ("attn_eff_fa2", "1", 0.0, "Attainable fraction of the 16-bit peak for FlashAttention-2 kernels, forward + "
     "backward (H100: up to 335 TFLOP/s, Dao 2023 sec. 4.1); 0: the same as attn_eff. A device fact (not fitted).", 0, 1),
    ("attn_eff_fwd", "1", 0.0, "Attainable fraction of the 16-bit peak for flash-attention forward kernels alone, on "
     "the causal FLOP count: serving prefill, which runs no backward (B200: 0.372, the forward half of the "
     "microbenchmark attn_eff comes from, docs/model_serving.md S48); 0: the same as attn_eff. A device fact (not "
     "fitted).", 0, 1),
    ("attn_tile_q", "tokens", 0.0, "Query rows of one flash-attention forward CTA: the forward grid is batch x local "
     "heads x ceil(s / attn_tile_q) CTAs over sm_count SMs, the causal ones longest first (docs/model.md §11.51; "
     "B200: 256, FlashAttention-4's sm100 forward, 2 x 128-row Q tiles per CTA; Hopper, A100: 128, FA3/FA2); 0: "
     "no grid quantization. A device fact (not fitted).", 0, 4096),
    ("attn_tile_kv", "tokens", 0.0, "Key rows of one flash-attention backward CTA: the backward grid is batch x "
     "local heads x ceil(s / attn_tile_kv) CTAs (docs/model.md §11.51; 128 on B200, Hopper, A100: FA4 sm100, FA3, "
     "FA2 backward key tiles); 0: no grid quantization. A device fact (not fitted).", 0, 4096),
    ("mma_flops_per_exp", "FLOP", 0.0, "Dense 16-bit tensor-core FLOPs per MUFU exponential, both per SM per clock: "
     "the softmax's exp2 against the attention matmuls (H100 4,096 / 16 = 256, B200 8,192 / 16 = 512, B300 and "
     "GB300 8,192 / 32 = 256; docs/model.md §11.58); 0: not stated. A device fact (not fitted).", 0, 1e5),
    ("attn_eff_mma_flops_per_exp", "FLOP", 0.0, "mma_flops_per_exp of the device attn_eff and attn_eff_fwd were "
     "measured on, where the file carries another device's (B300, GB300: B200's 512): the measured time split into "
     "its MMA and exponential parts by that device's rates, the exponential part at this device's (docs/model.md "
     "§11.58); 0: measured on this device, no rescaling. A device fact (not fitted).", 0, 1e5),
)
