"""Serving columns of the kernels an engine runs: FP4 GEMMs, grouped-expert tiles, its scheduler's iteration
shape, its own allreduce and the kernels around its quantized linears.

Rows of ``fastmodel.registry.lm.SERVE_COLUMNS`` (name, units, default, doc, lo, hi), kept here so the registry
module stays readable; the last, ``context_len``, is the served model's context bound (the built-in serving models
set it). The engine profiles set them (``fastmodel/serve/profiles.py``,
``fastmodel/serve/engine_kernels.py``); docs/model_serving.md gives the equations. ``COLUMN_ALIASES``: older
names of a column that a user may still write (``host_step_s``).
"""

from __future__ import annotations

ENGINE_KERNEL_ROWS = (
    ("fp4_gemm", "1", 0, "1: FP4 weights (NVFP4, 4.5 bits per weight): GEMMs on FP4 tensor cores where the device "
     "has them (peak_flops_4 > 0), else weight-only (16-bit compute).", 0, 1),
    ("fp4_act", "1", 2, "Activations of FP4-weight GEMMs on a device with FP4 tensor cores: 2 FP4 (NVFP4 W4A4), "
     "1 FP8 (MXFP8 x MXFP4, W4A8: the FP8 peak), 0 16-bit (W4A16: the 16-bit peak); set by the engine profile.", 0, 2),
    ("quant_experts_only", "1", 0, "1: only the routed experts' weights are in the checkpoint's format (weight_bytes, "
     "fp4_gemm); attention, dense MLPs and shared experts stay BF16 (gpt-oss's MXFP4 checkpoint).", 0, 1),
    ("expert_tile_min", "tokens", 0, "Smallest row (token) tile of the grouped expert GEMM kernel (0: the GEMM "
     "library's 16); set by the engine profile (FlashInfer trtllm-gen FP4 MoE: 8).", 0, 1024),
    ("expert_tile_max", "tokens", 0, "Largest row (token) tile of the grouped expert GEMM kernel (0: gemm_tile_m); "
     "set by the engine profile (FlashInfer trtllm-gen FP4 MoE at BF16 activations: 64).", 0, 1024),
    ("expert_gemm_eff", "1", 0.0, "Share of the GEMM format's datasheet peak the engine's routed-expert grouped GEMM "
     "kernel attains at large M (0: the device's gemm_eff of that format); set by the engine profile (SGLang's "
     "Triton block-FP8 fused MoE on Hopper: 0.19, S29; vLLM's Marlin MoE on Hopper: 0.304, conversion included, S38).",
     0, 1),
    ("expert_hide_rows", "tokens", 0.0, "Routed rows per local expert (M top_k / E) below which the expert kernel "
     "hides its MMA under its weight stream, max(c, w) (0: never); vLLM's Marlin MoE: 14.4, one 16-row MMA block "
     "with up to 4 thread blocks per SM (docs/model_serving.md S38).", 0, 1024),
    ("expert_align_rows", "tokens", 0.0, "Row alignment of a contiguous-layout grouped expert kernel that launches "
     "over its worst-case buffer, round_up(M top_k + (E / ep) (A - 1), A) rows (every token's top-k, local or "
     "not), and computes every A-row block "
     "(0: only the routed rows' tiles); vLLM 0.12's DeepGEMM MoE on Hopper: 128 (docs/model_serving.md S42).", 0, 1024),
    ("expert_ffn_align", "1", 0.0, "Multiple the engine rounds each routed expert's per-device intermediate width "
     "(moe_ffn / expert TP) up to when it lays out the weights; the padded width is computed and streamed (0: none); "
     "vLLM's MXFP4 MoE: Marlin 128, FlashInfer on SM100 256, Triton 64 (docs/model_serving.md S46).", 0, 4096),
    ("expert_hidden_align", "1", 0.0, "Multiple the engine rounds the routed experts' hidden size up to (0: none); "
     "vLLM's MXFP4 MoE: Marlin and FlashInfer on SM100 256 (docs/model_serving.md S46).", 0, 4096),
    ("mixed_prefill", "1", 1, "1: prefill chunks ride in the decode iterations (vLLM V1, TRT-LLM in-flight "
     "batching); 0: prefill batches run alone and stall decodes (SGLang default).", 0, 1),
    ("chunked_prefill", "1", 0, "1: a prompt longer than the free token budget is cut into chunks; 0: a prompt "
     "enters whole (the budget grows to hold it, TRT-LLM default).", 0, 1),
    ("overlap_step", "1", 1, "1: the scheduler overlaps step n+1's CPU work with step n (TRT-LLM/SGLang overlap "
     "scheduler, vLLM async scheduling): the first token leaves one iteration later.", 0, 1),
    ("batch_wait_iters", "iterations", 0, "TensorRT-LLM batch waiting (batch_wait_timeout_iters; 0: off, the "
     "engine's default): a prompt is held up to this many iterations while others decode, to enter with more "
     "prompts (docs/model_serving.md S31).", 0, 1 << 16),
    ("batch_wait_tokens_ratio", "1", 0.0, "TensorRT-LLM batch waiting (batch_wait_max_tokens_ratio): the hold ends "
     "once the held prompts' tokens plus the decodes reach this share of max_num_tokens (0: no token "
     "threshold).", 0, 1),
    ("spec_tokens", "tokens", 0, "Speculative decoding (MTP, EAGLE): draft tokens proposed per decode step (0: "
     "off); concurrency load only.", 0, 64),
    ("spec_acceptance", "1", 0.0, "Speculative decoding: probability that a draft token is accepted.", 0, 1),
    ("host_req_s", "s", 0.0, "Host (CPU) seconds the engine's per-iteration loop spends per running request on a "
     "rank (input preparation, sampler update, output handling); added to serve_step_overhead_s "
     "(docs/model_serving.md S36; 0: off).", 0, 1e-2),
    ("kv_pool_upcast", "1", 0, "1: the engine's attention converts each layer's whole FP8 KV pool (K and V, as "
     "allocated) to 16 bits at every forward before its kernel runs, (1 + 2 B / kv_bytes) x the pool at the HBM rate "
     "(SGLang's aiter backend on ROCm; docs/model_serving.md S58); 0: the kernel reads the cache as stored.", 0, 1),
    ("kv_budget_of_total", "1", 0, "How the engine sizes its KV cache from kv_cache_mem_fraction f: 0 f x (HBM - "
     "weights - workspace - framework), the share of what its warm-up run left free (TensorRT-LLM "
     "free_gpu_memory_fraction); 1 f x HBM - weights - workspace - (framework less what the start-up snapshot "
     "already holds, kv_snapshot_after_nccl), the share of the whole device that the rest comes out of (vLLM "
     "gpu_memory_utilization: it subtracts only the non-torch memory added after its snapshot; "
     "docs/model_serving.md S66).", 0, 1),
    ("kv_snapshot_after_nccl", "1", 0, "Read with kv_budget_of_total 1 (vLLM): what its start-up memory snapshot "
     "already holds lies in the (1 - f) headroom, not in the memory subtracted from f x HBM. 1: the snapshot is "
     "taken after the NCCL communicators and custom-allreduce buffers are set up (vLLM >= 0.11.0), so they and the "
     "CUDA context are outside the subtraction; 0: before them (vLLM 0.10.2), only the context is "
     "(kernels/serve/memory.py snapshot_bytes; docs/model_serving.md S66).", 0, 1),
    ("kv_write_kernel", "kernels", 0, "Kernels of its own the engine launches per layer and iteration to write each "
     "step's new keys and values into the paged KV cache before the attention kernel: 1 vLLM V1 "
     "reshape_and_cache_flash (docs/model_serving.md S45); 2 SGLang on ROCm, K and V index-puts in sequence (S57); "
     "0: the model's one attention kernel per layer.", 0, 2),
    ("q_quant_kernel", "1", 0, "1: the engine's attention backend quantizes each step's queries to FP8 with a kernel "
     "of its own before the attention kernel (vLLM 0.10.2 with an FP8 KV cache: ops.scaled_fp8_quant in its "
     "FlashAttention backend, and in its FlashInfer backend on the TRTLLM path), one more launch per layer and "
     "iteration; 0: none, or fused by torch.compile into the kernel before (vLLM 0.12.0 and later) "
     "(docs/model_serving.md S54).", 0, 1),
    ("custom_allreduce_bytes", "bytes", 0, "Largest allreduce run by the engine's own P2P kernel (0: NCCL).", 0, 1 << 40),
    ("act_quant_inputs", "bits", 0, "Inputs of a layer's quantized linears the engine quantizes in a kernel of "
     "their own (bits: 1 QKV, 2 output projection, 4 gate/up, 8 down, 16 an MoE layer's input to MXFP8 before the "
     "fused expert op; 0: none, or fused into the kernel before); set by the engine profile "
     "(kernels/serve/quant_kernels.py).", 0, 31),
    ("allreduce_norm_fusion", "1", 0, "1: a TP allreduce that runs the engine's own kernel also does the residual "
     "add, RMSNorm and the next linear's input quantization (vLLM fuse_allreduce_rms); set by the engine "
     "profile.", 0, 1),
    ("context_len", "tokens", 0, "The model's context: most tokens one request may hold, prompt and output "
     "together (config.json max_position_embeddings, vLLM's default max_model_len); input_len + output_len above "
     "it is context_exceeded (docs/model_serving.md S40). 0: not stated, no bound.", 0, 1 << 24),
    ("fp8_weight_only", "1", 0, "1: FP8 weights on a device without FP8 tensor cores (peak_flops_8 = 0) run "
     "weight-only, dequantised inside 16-bit GEMMs (W8A16: vLLM's FP8 Marlin, its Fp8LinearMethod and Fp8MoEMethod "
     "below compute capability 8.9); 0: such a configuration is refused (no_fp8). Set by the engine profile "
     "(docs/model_serving.md S55).", 0, 1),
    ("fp4_weight_only_cc", "1", 0, "Lowest NVIDIA compute capability at which the engine runs FP4 weights (fp4, "
     "mxfp4) on a device without FP4 tensor cores (peak_flops_4 = 0) weight-only, dequantised inside 16-bit GEMMs "
     "(vLLM's and SGLang's FP4 Marlin / Triton kernels from 8.0, TensorRT-LLM's Hopper MoE path from 9.0); below it "
     "such a configuration is refused (no_fp4). 0: no bound. A device that states no compute capability (AMD) is "
     "not refused. Set by the engine profile (docs/model_serving.md S63).", 0, 100),
    ("engine_nvidia_only", "1", 0, "1: the engine runs on NVIDIA GPUs only (TensorRT-LLM: CUDA and TensorRT, its "
     "supported-hardware page lists NVIDIA architectures only), so a device whose vendor is not nvidia is "
     "engine_not_on_device; 0: it runs on AMD (ROCm) too (vLLM, SGLang). Set by the engine profile "
     "(docs/model_serving.md S56).", 0, 1),
)

#: an older name of a column -> the column: what a user may still write where a column is named (a keyword of
#: ``fastmodel.serve.api``, a serving sweep axis). ``host_step_s`` (S36's constant loop time) and
#: ``serve_step_overhead_s`` were two columns of one quantity, the host time of an engine iteration that does not
#: depend on its requests; they are one, under the fittable name (a calibration overlay's device table may name
#: it; serving records themselves are not calibrated) (docs/model_serving.md S36)
COLUMN_ALIASES = {"host_step_s": "serve_step_overhead_s"}


def column_name(name: str) -> str:
    """The column a user's ``name`` means: itself, or the column an older name (``COLUMN_ALIASES``) stands for."""
    return COLUMN_ALIASES.get(name, name)
