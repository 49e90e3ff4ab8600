"""Weight / compute and KV-cache precisions of the serving model: name -> (code, bytes per element).

Kept apart from ``fastmodel.serve.api`` (and numpy) so that the CLI can list the choices without importing it.

``fp4``: NVFP4 weights, E2M1 values in 16-element blocks with one E4M3 scale each (4 + 8/16 = 4.5 bits per
weight; NVIDIA, "Introducing NVFP4", 2025). On a device with FP4 tensor cores (``peak_flops_4 > 0``) the
GEMMs run W4A4 at the FP4 peak; elsewhere (Hopper) the weights are dequantised inside 16-bit GEMMs
(weight-only, as vLLM's Marlin/Triton MXFP4 kernels and TensorRT-LLM's H200 path do). Its KV cache defaults to
FP8, as NVIDIA's ModelOpt FP4/FP8 checkpoints declare (``kv_cache_quant_algo: FP8``).

``mxfp4``: OCP MX FP4 weights, E2M1 values in 32-element blocks with one E8M0 scale each (4 + 8/32 = 4.25 bits
per weight; OCP Microscaling Formats (MX) v1.0, 2023), as OpenAI released gpt-oss (``quantization_config``
``quant_method: mxfp4``). Which activations the FP4 GEMMs take is the engine's choice (the ``fp4_act`` column,
``fastmodel.serve.profiles.fp4_activation``). Its KV cache defaults to FP8 like ``fp4``'s: an assumption kept from
the records' earlier ``fp4`` reading (gpt-oss's checkpoint declares no KV format, and the engines' ``auto`` would be
BF16; docs/model_serving.md S12 says what that would change).
"""

#: precision name -> (compute precision code, bytes per weight element)
PRECISIONS = {"bf16": (0, 2.0), "fp16": (0, 2.0), "fp8": (1, 1.0), "fp4": (0, 4.5 / 8.0), "mxfp4": (0, 4.25 / 8.0), "int8": (0, 1.0),
              "int4": (0, 0.5)}
#: precisions whose weights are FP4 (the fp4_gemm column)
FP4_PRECISIONS = ("fp4", "mxfp4")
#: precisions whose KV cache is FP8 unless kv_precision says otherwise
FP8_KV_DEFAULT = ("fp8", "fp4", "mxfp4")
KV_PRECISIONS = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
