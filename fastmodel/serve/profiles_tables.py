"""The serving engines' tables: the names a ``framework`` string may start with, the vendors each engine runs on,
the versions the model knows each engine at, the columns a profile sets, and each engine's documented constants
(custom all-reduce sizes, host issue time, vLLM's kernels and version thresholds, FP4 weight-only capabilities),
each with its source (docs/model_serving.md S13, S25, S36, S45, S55-S57, S60, S63, S66).

``fastmodel/serve/profiles.py`` looks them up (a record's ``framework``, ``--engine``) and builds each engine's
profile from them, re-exporting every name. Moved out of it when that module reached the 450-line limit; no value
changed.
"""

from __future__ import annotations

GIB = 2**30
#: engine key -> the names a framework string may start with
ENGINE_NAMES = {"trtllm": ("tensorrt-llm", "trt-llm", "tensorrt_llm", "trtllm"), "vllm": ("vllm",),
                "sglang": ("sglang",)}
DEFAULT_ENGINE = "trtllm"
#: the device vendors (a device file's ``vendor``) each engine runs on (docs/model_serving.md S56): TensorRT-LLM is
#: built on CUDA and TensorRT and lists NVIDIA architectures only (nvidia.github.io/TensorRT-LLM "Supported
#: Hardware": Blackwell, Hopper, Ada Lovelace, Ampere); vLLM runs on ROCm (docs.vllm.ai, GPU installation, "AMD
#: ROCm": MI200s gfx90a, MI300 gfx942, MI350 gfx950, ROCm 6.3 or above) and so does SGLang (docs.sglang.io,
#: "AMD GPUs": MI300X, built from the v0.5.6.post2 branch with ``sgl-kernel/setup_rocm.py``)
ENGINE_VENDORS = {"trtllm": ("nvidia",), "vllm": ("nvidia", "amd"), "sglang": ("nvidia", "amd")}
#: the default engine on each vendor's devices: TensorRT-LLM (newest) where it runs, vLLM (newest) on AMD, the
#: engine with the most versions ``profiles`` knows that runs there (S56)
VENDOR_DEFAULT_ENGINE = {"nvidia": DEFAULT_ENGINE, "amd": "vllm"}
#: largest allreduce (bytes) each engine runs with its own peer-to-peer kernel (kernels/serve/allreduce.py): vLLM
#: ``CustomAllreduce(max_size=8192 * 1024)`` (vllm/distributed/device_communicators/custom_all_reduce.py @00d618a),
#: SGLang ``CustomAllreduce._MAX_CAR_SIZE = 8192 * 1024`` (python/sglang/srt/distributed/device_communicators/
#: custom_all_reduce.py @004e656); TensorRT-LLM's AUTO strategy (cpp/tensorrt_llm/thop/allreduceOp.cpp
#: ``selectImplementation``) reads ``selectStrategyLookUpTable`` (cpp/tensorrt_llm/common/customAllReduceUtils.h
#: @005b299): on SM90 and SM100 at TP 4 and 8 ONESHOT/TWOSHOT up to 4 MiB (e.g. hidden 8192: up to 256 tokens), NCCL
#: above; the model takes 4 MiB for every TP size (TP 2 keeps the custom kernel to 8 MiB)
CUSTOM_AR_VLLM = CUSTOM_AR_SGLANG = 8192 * 1024
CUSTOM_AR_TRTLLM = 4 * 1024 * 1024 + 1          # the kernel's inclusive 4 MiB under the model's strict "<"
#: host seconds to issue one eager PyTorch operator (docs/model.md "Host issue time": 20 us within the 5-25 us of
#: CPU-side work per op J. Lin measures, an assumption [A]); set for TensorRT-LLM, whose prompt-carrying
#: iterations run eagerly (kernels/serve/host.py); vLLM (prompt iterations above its largest CUDA-graph capture
#: size, 512, run its compiled code ungraphed; no count of that code was read, docs/model_serving.md S25) and SGLang
#: (eager extend batches, its ops not counted here) keep 0
HOST_OP_S_EAGER = 20e-6
#: ``kv_write_kernel`` of vLLM V1: its attention layer stores the step's keys and values with its own
#: ``reshape_and_cache_flash`` kernel, then launches the attention kernel, in the FlashAttention backend (Hopper's
#: default) and the FlashInfer backend (Blackwell's) alike: vllm@v0.10.2 ``vllm/v1/attention/backends/
#: flash_attn.py:498`` (before ``flash_attn_varlen_func``) and ``flashinfer.py:798``; @v0.12.0 ``flash_attn.py:642``,
#: ``flashinfer.py:1157``; @v0.15.1 ``flash_attn.py:761-793``
#: (``do_kv_cache_update``; ``forward_includes_kv_cache_update = False``, :82) and ``flashinfer.py:1302``; @v0.18.0
#: ``flash_attn.py:93,797-819`` and ``flashinfer.py:393,1619-1635`` (docs/model_serving.md S45). TensorRT-LLM and
#: SGLang keep 0 (not read here)
KV_WRITE_KERNEL_VLLM = 1.0
#: vLLM runs FP8 checkpoints on GPUs without FP8 tensor cores (compute capability below 8.9) weight-only, W8A16, in
#: its FP8 Marlin kernels: ``Fp8LinearMethod.__init__`` sets ``use_marlin = not
#: current_platform.has_device_capability(89)`` and ``Fp8MoEMethod`` repacks its experts with
#: ``prepare_moe_fp8_layer_for_marlin`` (vllm@0071b24 vllm/model_executor/layers/quantization/fp8.py; FP8 Marlin is
#: vLLM PR #5975, July 2024, before every version ``profiles`` knows); vLLM docs "FP8 W8A8": "Turing/Ampere GPUs are
#: supported for W8A16 (weight-only FP8) utilizing Marlin kernels". TensorRT-LLM and SGLang's profile keep 0 (S55)
FP8_WEIGHT_ONLY_VLLM = 1.0
#: the lowest NVIDIA compute capability at which each engine runs FP4 weights (NVFP4 ``fp4``, MXFP4 ``mxfp4``) on a
#: GPU without FP4 tensor cores, weight-only (docs/model_serving.md S63): vLLM's FP4 Marlin kernels for NVFP4 and
#: MXFP4, linear and MoE (``is_fp4_marlin_supported``: ``has_device_capability(80)``, 75 in later trees;
#: vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py), SGLang's MXFP4 MoE on OpenAI's Triton
#: kernels (``Mxfp4Config.get_min_capability`` 80, python/sglang/srt/layers/quantization/mxfp4.py at
#: sgl-project/sglang@0043c43a), TensorRT-LLM's MXFP4 MoE on Hopper only (bf16 activations, TRITON or CUTLASS:
#: examples/models/core/gpt_oss/README.md "MoE Support Matrix", which lists Hopper and Blackwell alone).
#: Unsourced, kept (S63 "Kept as before"): TensorRT-LLM's NVFP4 on Hopper, and SGLang's 8.0 for NVFP4 (``fp4``)
#: and the dense layers of MXFP4 (only the MXFP4 MoE path is read; SGLang's NVFP4 below sm100 not at 0.5.6)
FP4_WEIGHT_ONLY_CC = {"trtllm": 9.0, "vllm": 8.0, "sglang": 8.0}
#: (serve_step_overhead_s, host_req_s) of each engine's scheduler loop per iteration (docs/model_serving.md S36): not set, no
#: engine publishes its loop's total host time per request at the records' versions (S36 lists what is published)
SCHED_HOST = {"trtllm": (0.0, 0.0), "vllm": (0.0, 0.0), "sglang": (0.0, 0.0)}
#: the first vLLM whose chunked layers keep only the current chunk's KV: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
#: defaults to "1" at 0.15.1 (vllm/envs.py:1472-1473) and 0.18.0 (:1440-1441), "0" at 0.10.2 (:1203-1205), 0.11.2
#: (:1378) and 0.12.0 (:1425), which turns the hybrid KV cache manager off (docs/model_serving.md S60)
VLLM_CHUNK_KV_LOCAL_FIRST = (0, 15, 1)
#: the first vLLM whose start-up memory snapshot follows the distributed set-up: ``init_device`` calls
#: ``init_worker_distributed_environment`` before ``MemorySnapshot()`` at 0.11.0 (vllm/v1/worker/gpu_worker.py:165-182)
#: and 0.11.2 (:220-240), after it at 0.10.2 (:175 snapshot, :193 set-up); vLLM PR #25359 (docs/model_serving.md S66)
VLLM_SNAPSHOT_AFTER_NCCL_FIRST = (0, 11, 0)
#: the columns an engine's profile sets (``profile_columns``): all that ``fastmodel serve --engine``, the API's
#: ``engine=`` and a serving sweep's ``engine`` set
PROFILE_COLUMNS = ("max_num_tokens", "max_batch_size", "chunked_prefill", "mixed_prefill", "overlap_step",
                   "kv_on_demand", "custom_allreduce_bytes", "host_op_s", "host_ops_layer", "kv_write_kernel",
                   "serve_step_overhead_s", "host_req_s", "fp8_weight_only", "fp4_weight_only_cc", "engine_nvidia_only",
                   "kv_pool_upcast", "chunk_kv_local", "kv_budget_of_total", "kv_snapshot_after_nccl")
#: engine-dependent columns a record's ``framework`` sets beyond its profile (``fastmodel/serve/records.py``
#: ``lower_serve_record``), as they depend on the record's device, checkpoint and launcher flags; ``--engine``
#: leaves them at the column defaults: FP4 activations (``fp4_activation``), the MoE dispatcher
#: (``moe_dispatcher``), the linear, query-quantization and expert kernels (``engine_kernels``) and a prefill-first
#: engine's lockstep client (``lockstep_columns``)
RECORD_ENGINE_COLUMNS = ("fp4_act", "moe_dispatcher", "act_quant_inputs", "allreduce_norm_fusion", "q_quant_kernel",
                         "expert_gemm_eff", "expert_hide_rows", "expert_tile_min", "expert_tile_max",
                         "expert_align_rows", "expert_ffn_align", "expert_hidden_align", "client_rounds")
#: how the engines are spelled in notes and errors
ENGINE_LABELS = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
#: the versions the model knows each engine at: the releases whose source ``profiles`` and ``engine_kernels`` read
#: (vLLM 0.10.2, 0.11.2, 0.12.0, 0.15.1, 0.18.0; SGLang 0.5.6.post2, above) and those the serving records carry
#: (TensorRT-LLM 1.0.0rc3, 1.2.0rc2, 1.3.0rc1/rc5; ``tests/data/serve_*.jsonl``). A version given by a user
#: (``--engine "vLLM 0.10.2"``, a sweep file's ``engine``) must be one of them (``engine_choice``; a record's need
#: not, it keeps its version). Its first three numbers count (1.0.0rc3 is 1.0.0; 0.12 is 0.12.0).
KNOWN_VERSIONS = {"trtllm": ((1, 0, 0), (1, 2, 0), (1, 3, 0)),
                  "vllm": ((0, 10, 2), (0, 11, 2), (0, 12, 0), (0, 15, 1), (0, 18, 0)),
                  "sglang": ((0, 5, 6),)}
