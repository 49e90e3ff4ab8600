"""Which kernels an engine runs around its quantized linears (``act_quant_inputs``, ``allreduce_norm_fusion``;
priced by ``kernels/serve/quant_kernels.py``, docs/model_serving.md S22).

vLLM (V1, ``torch.compile`` at its default optimization level ``-O2``):

- **FP8 activations** (per-tensor static or per-token scales): Inductor generates the quantization into the
  RMSNorm kernel before the QKV and gate/up projections and into the SiLU-and-mul kernel before the down
  projection (docs/design/fusions.md @033b794, "RMSNorm + Quant" and "SiLU+Mul + Quant": "Inductor generates a
  faster fused kernel"; ``vllm/config/vllm.py`` @000fc94 ``enable_norm_fusion`` / ``enable_act_fusion`` leave it to
  Inductor when the custom ops are off). The attention output is quantized by a kernel of its own:
  ``fuse_attn_quant`` is ``IS_QUANTIZED``, which that file sets to ``False`` at every level ("Attention + Quant:
  Off by default"). Bits: ``OUT``.
- **NVFP4 activations** (W4A4 on Blackwell): "FP4 quant is always custom so Inductor cannot fuse it"
  (``enable_act_fusion``, which therefore turns ``fuse_act_quant`` on for NVFP4 models: SiLU+Mul+NVFP4 is one
  kernel on SM100); ``fuse_norm_quant`` has no NVFP4 pattern (fusions.md support matrix: FP8 schemes only), so the
  quantizations before the QKV and gate/up projections are kernels of their own, as is the attention output's.
  Bits: ``QKV | OUT | GATE_UP``.
- **16-bit activations** (BF16, and W4A16 MXFP4 experts: gpt-oss's attention is BF16): none.
- **MXFP8 MoE input** (W4A8 MXFP4 x MXFP8 experts on Blackwell, ``serve.moe_backend = "flashinfer_mxfp8"``:
  ``Mxfp4Backend.SM100_FI_MXFP4_MXFP8_TRTLLM``): ``apply_monolithic`` calls FlashInfer's ``mxfp8_quantize`` on
  the layer's input before ``trtllm_fp4_block_scale_moe`` (``quantization/mxfp4.py:1049-1055`` @v0.15.1,
  ``:816-818`` @v0.10.2), a kernel of its own (FlashInfer 0.6.1, the wheel's pin: ``fp8_quantization.py:147-174``
  -> ``thop/fp8Quantize.cpp:29-78`` -> one ``cudaLaunchKernelEx`` of ``quantize_with_block_size``,
  ``kernels/quantization.cu:92-121``). Bits: ``MOE_IN`` (docs/model_serving.md S47).
- **Allreduce + RMSNorm (+ quant)**: ``fuse_allreduce_rms`` is on at ``-O2`` when TP > 1 on SM90 or the SM100
  family with FlashInfer (``enable_allreduce_rms_fusion``, @000fc94); default since PR #34299 (merged
  2026-02-11, "Enable AR+rms fusion by default available for -O2"), i.e. from the first release after it (taken
  as 0.16.0); a record with no version takes the newest profile (profiles.py), so it is on. FlashInfer is
  assumed installed (vLLM's CUDA images ship it); the patterns cover FP16/BF16, FP8 static and (SM100) NVFP4.
  A record that states its deployment's flag (``serve.allreduce_norm_fusion``: the launcher's
  ``pass_config.enable_fi_allreduce_fusion``, default ``False`` at 0.10.2, ``config/compilation.py:88``) takes
  that instead (docs/model_serving.md S45).

TensorRT-LLM and SGLang: not counted here (0, 0). TensorRT-LLM's PyTorch backend quantizes a linear's input in
the linear unless it arrives quantized (``tensorrt_llm/_torch/modules/linear.py`` ``NVFP4LinearMethod.
_input_prepare``: ``fp4_quantize``), fuses allreduce + RMSNorm + quant at TP > 1 for Llama with hidden > 4096
(``modeling_llama.py`` ``PRE_MLP_FUSION`` / ``POST_MLP_FUSION``) and applies RoPE inside its attention op; a count
of its whole layer against S2's kernel list is needed before any of it is applied alone (docs S22).
"""

from __future__ import annotations

#: bits of ``act_quant_inputs`` (kernels/serve/quant_kernels.py QKV, OUT, GATE_UP, DOWN, MOE_IN)
QKV, OUT, GATE_UP, DOWN, MOE_IN = 1, 2, 4, 8, 16
#: first vLLM release with ``fuse_allreduce_rms`` on by default at -O2 (PR #34299, merged 2026-02-11)
VLLM_AR_NORM_FUSION = (0, 16)
#: device files of SM90 (Hopper) GPUs
SM90_DEVICES = ("h100-sxm-80gb", "h200-sxm-141gb", "gh200-96gb", "gh200-144gb")
#: device files of SM90 (Hopper) and SM100-family (Blackwell) GPUs, where vLLM's allreduce fusion runs
SM90_SM100_DEVICES = SM90_DEVICES + ("b200", "b300", "gb200", "gb300")
#: device files of SM100-family (Blackwell) GPUs, vLLM's ``is_device_capability_family(100)``
SM100_DEVICES = SM90_SM100_DEVICES[len(SM90_DEVICES):]


def linear_kernels(engine: str | None, version: tuple[int, ...] | None, precision: str,
                   fp4_cores: bool, sm90_or_sm100: bool, stated_fusion: bool | None = None,
                   moe_backend: str = "default") -> dict[str, float]:
    """(``act_quant_inputs``, ``allreduce_norm_fusion``) columns of an engine at a version for a checkpoint
    ``precision``; ``fp4_cores``: the device has FP4 tensor cores (NVFP4 runs W4A4); ``sm90_or_sm100``: vLLM's
    allreduce fusion is available on the device; ``stated_fusion``: the deployment's own
    ``pass_config.enable_fi_allreduce_fusion`` (``serve.allreduce_norm_fusion``, docs/model_serving.md S45), which
    replaces the version's default (None: the default); ``moe_backend``: the record's ``serve.moe_backend``
    (``"flashinfer_mxfp8"`` on FP4 tensor cores adds ``MOE_IN`` for an MXFP4 checkpoint)."""
    if engine != "vllm":
        return {"act_quant_inputs": 0.0, "allreduce_norm_fusion": 0.0}
    if precision == "fp8":
        bits = OUT
    elif precision == "fp4" and fp4_cores:
        bits = QKV | OUT | GATE_UP
    else:
        bits = 0
    if precision == "mxfp4" and fp4_cores and moe_backend == "flashinfer_mxfp8":
        bits |= MOE_IN
    default = version is None or version >= VLLM_AR_NORM_FUSION
    fusion = sm90_or_sm100 and (default if stated_fusion is None else stated_fusion)
    return {"act_quant_inputs": float(bits), "allreduce_norm_fusion": 1.0 if fusion else 0.0}


#: last vLLM release read whose attention backend quantizes the query to FP8 in a kernel of its own when the KV cache
#: is FP8: @v0.10.2 (wheel 26b999c71) the FlashAttention backend (Hopper's default) calls ``ops.scaled_fp8_quant(query
#: ..., layer._q_scale)`` -> ``torch.ops._C.static_scaled_fp8_quant`` (``vllm/v1/attention/backends/flash_attn.py:
#: 509-518``, ``_custom_ops.py:1273``) inside the attention op, and so does the FlashInfer backend (Blackwell's
#: default, ``platforms/cuda.py:333-345``) when its TRTLLM attention path is available (``flashinfer.py:285-289,
#: 770-777``; ``utils/flashinfer.py:157-178``: SM100 and NVIDIA's cubin repository reachable at start, a condition of
#: the run, so only a record states it on SM100); @v0.12.0 and @v0.18.0 the ``Attention`` layer quantizes it before the
#: op with ``QuantFP8`` ("quantizing with a simple torch operation enables torch.compile to fuse this into previous
#: ops", ``attention/layer.py:303-342`` @v0.12.0; ``model_executor/layers/attention/attention.py:362-409`` @v0.18.0),
#: no kernel of its own; 0.11.x not read, taken as 0.12; releases before 0.10.2 not read, taken as none (no kernel
#: charged where no source was read) (docs/model_serving.md S54)
VLLM_QUERY_QUANT_KERNEL_FIRST = (0, 10, 2)
VLLM_QUERY_QUANT_KERNEL_LAST = (0, 10, 2)


def query_quant_kernel(engine: str | None, version: tuple[int, ...] | None, sm90: bool, kv_fp8: bool,
                       stated: bool | None = None, sm100: bool = False) -> float:
    """``q_quant_kernel``: 1.0 where vLLM's attention backend quantizes each step's queries to FP8 in a kernel of its
    own: an FP8 KV cache and vLLM from ``VLLM_QUERY_QUANT_KERNEL_FIRST`` to ``_LAST`` (the versions read) on SM90 (FlashAttention), or a record's
    ``serve.query_quant_kernel`` on SM90 or SM100 (FlashInfer's TRTLLM path), which replaces the version's rule; else
    0.0 (docs/model_serving.md S54)."""
    if engine != "vllm" or not kv_fp8 or not (sm90 or sm100):
        return 0.0
    if stated is not None:
        return 1.0 if stated else 0.0
    read = version is not None and VLLM_QUERY_QUANT_KERNEL_FIRST <= version <= VLLM_QUERY_QUANT_KERNEL_LAST
    return 1.0 if sm90 and read else 0.0


def assumed_note(engine: str | None, version: tuple[int, ...] | None, fusion: float,
                 stated: bool | None = None) -> str | None:
    """The note a record gets when vLLM's allreduce+RMSNorm fusion is assumed on for want of a version (none when
    the record states it, ``stated``)."""
    if engine == "vllm" and version is None and fusion > 0.0 and stated is None:
        return ("vLLM without a version: allreduce+RMSNorm(+quant) fusion assumed on (fuse_allreduce_rms, -O2 "
                "default from 0.16); docs/model_serving.md S22")
    return None


#: share of the FP8 datasheet peak that the Triton block-FP8 GEMM family (a 128-deep FP8 ``tl.dot`` per K group,
#: then ``accumulator += dot * a_scale * b_scale`` in FP32: SGLang 0.5.6.post2 ``fused_moe_triton_kernels.py``
#: 535-545 and the dense ``fp8_kernel.py`` ``_w8a8_block_fp8_matmul`` 762) attains on Hopper at large M: the mean
#: of two published microbenchmarks, 354.8 TFLOP/s on H200 (SGLang PR #3893, m 4096, n 24576, k 7168: 4067.3 us;
#: 0.179 of 1979e12) and 406.5 TFLOP/s on H100 (vLLM PR #23280, N 2112, K 7168, M 8192: 0.205);
#: docs/model_serving.md S29
TRITON_BLOCK_FP8_SM90_EFF = 0.19


#: share of the 16-bit datasheet peak at which the model's grouped expert GEMM (``roofline.expert_gemm_roofline``:
#: row tile, wave quantization, ``gemm_k_half``) reproduces vLLM's Marlin MoE (``fused_marlin_moe``: two
#: ``moe_wna16_marlin_gemm``, the activation, ``moe_sum``; SM80 ``mma.sync``, weights converted in registers) on full
#: Hopper at 256 rows per expert: FlagGems PR #4350 (2026-06-25), H100 table, vLLM column, Mixtral E8 H4096 I14336
#: top-2 W4A16, 1,024 tokens, 2.720316 ms (265.3 TFLOP/s, 0.268 of 989.4e12 in raw FLOP); the same value reproduces
#: its 256- to 32,768-token rows within 2 % but 512 (9 %) (docs/model_serving.md S38)
MARLIN_MOE_SM90_EFF = 0.304
#: Marlin MoE's one-MMA-row-block regime: ``fused_marlin_moe`` takes ``block_size_m`` 8 or 16 while
#: ``M top_k / E / 16 < 0.9`` (``fused_marlin_moe.py`` 308-313 @v0.18.0), i.e. below 14.4 rows per local expert; there
#: ``marlin_mm`` runs ``thread_m_blocks`` 1 with up to 4 thread blocks per SM (``ops.cu`` ``determine_exec_config``),
#: and the published H100 rows at 1.5-8 rows per expert take their weight stream's time, max(c, w) (S38)
MARLIN_HIDE_ROWS = 0.9 * 16.0
#: TRTLLM-Gen's MXFP4 MoE on SM100 (FlashInfer ``trtllm_fp4_block_scale_moe``, TensorRT-LLM ``moe_config.backend:
#: TRTLLM``): its tokens are the N side of the MMA (``trtllm_fused_moe_runner.cu`` 209, 299: ``transposeMmaOutput =
#: true``; ``trtllm_batched_gemm_runner.cu`` 97, 137-141), tiled at the power of two of
#: ``M top_k / E`` clamped to its smallest tile, 8 (FlashInfer 0.6.1 ``trtllm_fused_moe_kernel_launcher.cu``
#: ``computeSelectedTileN`` 64-82, ``FP4BlockScaleLauncher::mBaseSupportedTileNums`` 1097); each CTA's load task
#: streams the weights through an ``mNumStages``-deep shared-memory pipeline while its MMA task consumes the
#: previous stages (``trtllmGen_bmm_export/GemmOptions.h`` 263-275, 316-319), so below one smallest tile per local
#: expert the MMA hides under the weight stream, max(c, w) (docs/model_serving.md S47)
TRTLLM_GEN_HIDE_ROWS = 8.0


def expert_kernel_eff(engine: str | None, block_fp8: bool, sm90: bool, marlin: bool = False) -> float:
    """``expert_gemm_eff`` of the routed-expert kernel an engine runs. SGLang runs block-FP8 experts through
    its Triton fused MoE (``Fp8MoEMethod.create_moe_runner`` @0.5.6.post2: the ``auto`` runner is ``TRITON``
    unless the all-to-all backend is DeepEP or Mooncake, where DeepGEMM runs; ``server_args.moe_a2a_backend``
    defaults to ``none``), which on Hopper attains ``TRITON_BLOCK_FP8_SM90_EFF`` of the FP8 peak. Every other
    engine, format and device: 0 (the device's ``gemm_eff``; vLLM 0.12 runs DeepGEMM for block-FP8 experts below TP 8
    when it is installed, ``quantization/fp8.py`` ``get_fp8_moe_backend``; TensorRT-LLM's Hopper FP8 MoE is not read).
    vLLM with Marlin MoE stated (``marlin``: ``serve.moe_backend``, S33) on SM90: ``MARLIN_MOE_SM90_EFF`` (S38)."""
    if engine == "vllm" and marlin and sm90:
        return MARLIN_MOE_SM90_EFF
    return TRITON_BLOCK_FP8_SM90_EFF if engine == "sglang" and block_fp8 and sm90 else 0.0


def trtllm_triton_moe(engine: str | None, stated: bool, four_bit: bool, fp4_cores: bool, sm90: bool) -> bool:
    """True when TensorRT-LLM runs 4-bit experts through ``TritonFusedMoE`` on an SM90 device without FP4 tensor
    cores and the record states ``serve.moe_backend = "triton"`` (``stated``; the recipe's ``moe_config.backend:
    TRITON``, S37). The ``gpt-oss-dev`` image's deployment guide (``blog9_Deploying_GPT_OSS_on_TRTLLM.md``, PR #6637
    2025-08-05 and PR #7101 2025-08-21: "`TRTLLM` MoE backend is not supported on Hopper, and `CUTLASS` backend
    support is still ongoing. Please enable `TRITON` backend ... if you are running on Hopper GPUs") is why the H200
    gpt-oss rows state it; the framework string is not read. A record without it keeps the newest profile's CUTLASS
    count (S21)."""
    return engine == "trtllm" and stated and four_bit and sm90 and not fp4_cores


def trtllm_gen_moe(engine: str | None, moe_backend: str, precision: str, sm100: bool) -> bool:
    """True when an MXFP4 checkpoint's experts run TRTLLM-Gen's MoE kernels, which are built for SM100-family GPUs
    only (``sm100``: the device is one of :data:`SM100_DEVICES`, as :func:`expert_padding` decides): vLLM's SM100 MXFP4
    backends (``SM100_FI_MXFP4_BF16`` by default, ``SM100_FI_MXFP4_MXFP8_TRTLLM`` with ``flashinfer_mxfp8``; both call
    FlashInfer's ``trtllm_fp4_block_scale_moe``, ``quantization/mxfp4.py`` 1040-1055 @v0.15.1), or TensorRT-LLM with
    ``moe_config.backend: TRTLLM`` stated (``serve.moe_backend = "trtllm_gen"``; its default is CUTLASS)."""
    if not (sm100 and precision == "mxfp4"):
        return False
    if engine == "vllm":
        return moe_backend in ("default", "flashinfer_mxfp8")
    return engine == "trtllm" and moe_backend == "trtllm_gen"


def expert_hide_rows(engine: str | None, sm90: bool, marlin: bool, trtllm_gen: bool = False) -> float:
    """``expert_hide_rows`` of the routed-expert kernel: ``MARLIN_HIDE_ROWS`` for vLLM's Marlin MoE stated on SM90
    (the rows ``expert_kernel_eff`` prices), ``TRTLLM_GEN_HIDE_ROWS`` for TRTLLM-Gen's MXFP4 MoE
    (:func:`trtllm_gen_moe`), else 0."""
    if engine == "vllm" and marlin and sm90:
        return MARLIN_HIDE_ROWS
    return TRTLLM_GEN_HIDE_ROWS if trtllm_gen else 0.0


#: row block of DeepGEMM's contiguous-layout grouped GEMM, the one vLLM 0.12 runs for block-FP8 experts on SM90
#: (``m_grouped_fp8_gemm_nt_contiguous``): ``get_mk_alignment_for_contiguous_layout()`` returns 128
#: (deepseek-ai/DeepGEMM@594953a ``csrc/utils/layout.hpp`` 96-98) and the SM90 heuristic offers only that block M for
#: ``GemmType::MGroupedContiguous`` (``csrc/jit_kernels/heuristics/common.hpp`` 159-161); each expert's rows are padded
#: to it (vLLM 0.12.0 ``fused_moe/deep_gemm_utils.py`` ``ep_scatter`` ``round_up_128``) and a block with any routed row
#: issues the full 128-row WGMMAs (``sm90_fp8_gemm_1d2d.cuh`` 240-305); docs/model_serving.md S42
DEEPGEMM_MOE_BLOCK_M = 128.0
#: the vLLM minor release whose FP8 MoE backend choice S42 read line by line (the ``vllm==0.12.0`` wheel)
VLLM_DEEPGEMM_MOE = (0, 12)
#: expert-TP size from which vLLM 0.12 turns DeepGEMM MoE off unless ``VLLM_MOE_USE_DEEP_GEMM`` is set
#: (``quantization/fp8.py`` ``get_fp8_moe_backend`` 169-178; vLLM PR #29346, 2025-11-24)
VLLM_DEEPGEMM_MOE_MAX_TP = 8


def deepgemm_moe_columns(engine: str | None, version: tuple[int, ...] | None, sm90: bool, block_fp8: bool,
                         expert_tp: float, ep: float, attention_dp: float) -> dict[str, float]:
    """``expert_tile_min``, ``expert_tile_max`` and ``expert_align_rows`` of the routed-expert kernel vLLM 0.12 runs
    for a block-FP8 checkpoint on SM90: DeepGEMM's contiguous grouped GEMM in ``DEEPGEMM_MOE_BLOCK_M``-row blocks
    over the worst-case buffer, every block computed (``deepgemm_moe_permute`` labels the unused tail expert 0,
    ``deep_gemm_utils.py`` 368-374, which DeepGEMM's ``is_computation_valid`` takes as valid), below
    ``VLLM_DEEPGEMM_MOE_MAX_TP`` expert-TP ranks (``expert_tp``: 1 under expert parallelism, vLLM's
    ``FusedMoEParallelConfig``) and without an all-to-all (EP with attention DP runs the modular all-to-all
    kernels instead; EP without DP keeps this path with an ``expert_map``) (``get_fp8_moe_backend``:
    ``VLLM_USE_DEEP_GEMM`` and ``VLLM_MOE_USE_DEEP_GEMM`` default 1, ``envs.py`` 1171-1175; with
    ``VLLM_USE_DEEP_GEMM_E8M0`` default 1 ``fused_experts`` takes DeepGEMM at every batch, ``fused_moe.py``
    1597-1601). It assumes the ``deep_gemm`` package is installed, as the Dynamo vLLM 0.12.0 container's
    ``install_vllm.sh`` does. Every other engine, version, device or layout: zeros, the library's tiles (S42)."""
    block = 0.0
    if (engine == "vllm" and version is not None and version[:2] == VLLM_DEEPGEMM_MOE and sm90 and block_fp8
            and not (ep > 1 and attention_dp > 1) and expert_tp < VLLM_DEEPGEMM_MOE_MAX_TP):
        block = DEEPGEMM_MOE_BLOCK_M
    return {"expert_tile_min": block, "expert_tile_max": block, "expert_align_rows": block}


def expert_kernel_columns(engine: str | None, block_fp8: bool, sm90: bool, marlin: bool,
                          trtllm_gen: bool = False) -> dict[str, float]:
    """``expert_gemm_eff`` (:func:`expert_kernel_eff`) and ``expert_hide_rows`` (:func:`expert_hide_rows`) of the
    routed-expert kernel an engine runs (docs/model_serving.md S29, S38, S47)."""
    return {"expert_gemm_eff": expert_kernel_eff(engine, block_fp8, sm90, marlin=marlin),
            "expert_hide_rows": expert_hide_rows(engine, sm90, marlin, trtllm_gen)}


#: (intermediate, hidden) multiples to which vLLM's MXFP4 MoE pads each expert's weights as it creates them
#: (``Mxfp4MoEMethod.create_weights``, ``model_executor/layers/quantization/mxfp4.py``: 180-215 @v0.10.2, 277-331
#: @v0.15.1, 320-373 @v0.18.0, the same rule at all three): Marlin ``round_up(I / tp, 128)`` and hidden 256 ("n % 256
#: == 0 and k % 128 == 0"); FlashInfer's SM100 TRT-LLM kernels (``SM100_FI_MXFP4_BF16``, ``..._MXFP8_TRTLLM``) 256 and
#: 256; the Triton ``matmul_ogs`` default 64 and no hidden pad (docs/model_serving.md S46)
VLLM_MXFP4_PAD = {"marlin": (128.0, 256.0), "flashinfer_sm100": (256.0, 256.0), "triton": (64.0, 0.0)}


def expert_padding(engine: str | None, mxfp4_experts: bool, sm90: bool, sm100: bool,
                   marlin: bool) -> dict[str, float]:
    """``expert_ffn_align`` and ``expert_hidden_align`` of vLLM's MXFP4 MoE (``mxfp4_experts``: a checkpoint whose
    experts only are MXFP4, gpt-oss): on SM100 FlashInfer's TRT-LLM kernels (``get_mxfp4_backend``'s default there,
    FlashInfer assumed installed as in vLLM's images; the W4A8 opt-in pads alike), on SM90 Marlin where the record
    states it (S33) else the Triton default; :data:`VLLM_MXFP4_PAD`. Every other engine, checkpoint or device: 0."""
    key = None
    if engine == "vllm" and mxfp4_experts:
        key = "flashinfer_sm100" if sm100 else ("marlin" if marlin else "triton") if sm90 else None
    ffn, hidden = VLLM_MXFP4_PAD[key] if key else (0.0, 0.0)
    return {"expert_ffn_align": ffn, "expert_hidden_align": hidden}


def device_is_one_of(device: dict, table: dict, names: tuple[str, ...]) -> bool:
    """True when the device file ``device`` is the file ``table`` (the device table) holds under one of ``names``
    (``SM90_DEVICES``, ``SM90_SM100_DEVICES``)."""
    return any(device is table.get(name) for name in names) if device else False
