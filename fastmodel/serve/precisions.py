"""Weight / compute and KV-cache precisions of the serving model: name -> (code, bytes per element).

Kept apart from ``fastmodel.serve.api`` (and numpy) so that the CLI can list the choices without importing it.

``fp4``: NVFP4 weights, E2M1 values in 16-element blocks with one E4M3 scale each (4 + 8/16 = 4.5 bits per
weight; NVIDIA, "Introducing NVFP4", 2025). On a device with FP4 tensor cores (``peak_flops_4 > 0``) the
GEMMs run W4A4 at the FP4 peak; elsewhere (Hopper) the weights are dequantised inside 16-bit GEMMs
(weight-only, as vLLM's Marlin/Triton MXFP4 kernels and TensorRT-LLM's H200 path do), where the engine has such a
path (``fp4_refusal``; TensorRT-LLM has none below Hopper: ``no_fp4``, docs/model_serving.md S63). Its KV cache defaults to
FP8, as NVIDIA's ModelOpt FP4/FP8 checkpoints declare (``kv_cache_quant_algo: FP8``).

``mxfp4``: OCP MX FP4 weights, E2M1 values in 32-element blocks with one E8M0 scale each (4 + 8/32 = 4.25 bits
per weight; OCP Microscaling Formats (MX) v1.0, 2023), as OpenAI released gpt-oss (``quantization_config``
``quant_method: mxfp4``). Which activations the FP4 GEMMs take is the engine's choice (the ``fp4_act`` column,
``fastmodel.serve.profiles.fp4_activation``). Its KV cache defaults to FP8 like ``fp4``'s: an assumption kept from
the records' earlier ``fp4`` reading (gpt-oss's checkpoint declares no KV format, and the engines' ``auto`` would be
BF16; docs/model_serving.md S12 says what that would change; the vLLM 0.10.2 gpt-oss records state BF16 from their
launchers, S45).
"""

#: precision name -> (compute precision code, bytes per weight element)
PRECISIONS = {"bf16": (0, 2.0), "fp16": (0, 2.0), "fp8": (1, 1.0), "fp4": (0, 4.5 / 8.0), "mxfp4": (0, 4.25 / 8.0),
              "int8": (0, 1.0), "int4": (0, 0.5)}
#: precisions whose weights are FP4 (the fp4_gemm column)
FP4_PRECISIONS = ("fp4", "mxfp4")
#: precisions whose KV cache is FP8 unless kv_precision says otherwise
FP8_KV_DEFAULT = ("fp8", "fp4", "mxfp4")
#: FP8_KV_DEFAULT as a sentence says it ("fp8, fp4 or mxfp4"): serve --search's refusal of --kv-precision
FP8_KV_DEFAULT_SAID = f"{', '.join(FP8_KV_DEFAULT[:-1])} or {FP8_KV_DEFAULT[-1]}"
#: the KV precision's default in one sentence, from FP8_KV_DEFAULT: the serving task's kv_precision field
#: (serve/spec.py) and `serve --kv-precision` (cli/serve.py) say it alike
KV_DEFAULT_SAID = f"Default: fp8 with {FP8_KV_DEFAULT_SAID} weights, else bf16."
KV_PRECISIONS = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}

#: models whose only published 4-bit checkpoint is MXFP4 with just the routed experts quantised (the model's
#: name as a record or spec gives it, lower case, organisation prefix dropped): OpenAI gpt-oss, released with
#: ``quantization_config`` ``quant_method: mxfp4`` and attention, router, embeddings and LM head left in BF16
#: (``modules_to_not_convert``, huggingface.co/openai/gpt-oss-120b config.json; OpenAI gpt-oss model card, 2025)
MXFP4_EXPERT_CHECKPOINTS = frozenset({"gpt-oss-120b", "gpt-oss-20b"})

#: models whose published FP8 checkpoint is block-scaled (one FP32 scale per 128 x 128 weight block, activations
#: quantised per token in groups of 128 along K; the name as above): Qwen's FP8 releases ("fine-grained fp8
#: quantization with block size of 128", huggingface.co/Qwen/Qwen3-235B-A22B-FP8 model card; config.json
#: ``quantization_config`` ``weight_block_size: [128, 128]``), and DeepSeek-V3 (with V3-Base, and R1, which is
#: DeepSeek-V3-Base trained further and published in the same format), released in FP8 only: its config.json
#: ``quantization_config`` is ``quant_method: fp8``, ``fmt: e4m3``, ``weight_block_size: [128, 128]``, activations
#: ``dynamic`` (deepseek-ai/DeepSeek-V3@0b39205 README_WEIGHTS.md "FP8 Weight Documentation"). A serving record
#: that states ``fp8_block`` (``aic.moe_quant_mode`` / ``gemm_quant_mode``) is block-scaled too
#: (``block_fp8_checkpoint``). Read by the engine's expert kernel
#: (``fastmodel.serve.engine_kernels.expert_kernel_eff``, docs/model_serving.md S29).
BLOCK_FP8_CHECKPOINTS = frozenset({"qwen3-235b-a22b-fp8", "qwen3-30b-a3b-fp8", "deepseek-v3", "deepseek-v3-base",
                                   "deepseek-r1"})
#: the quantisation mode a serving record's ``aic`` block gives a block-scaled FP8 checkpoint
BLOCK_FP8_MODE = "fp8_block"


def block_fp8_checkpoint(model_name: str | None, precision: str, aic: dict | None = None) -> bool:
    """True when ``precision`` is ``fp8`` and the checkpoint is block-scaled FP8: the model is published so
    (``BLOCK_FP8_CHECKPOINTS``; the name lower case, organisation prefix dropped), or the record's ``aic`` block
    says so (``moe_quant_mode``, else ``gemm_quant_mode``, equal to ``fp8_block``). A plain ``fp8`` there does not
    make a published block-scaled checkpoint per-tensor: it names the operation of aiconfigurator's own performance
    database, and the engines build their FP8 method from the checkpoint's ``quantization_config``
    (``weight_block_size``; docs/model_serving.md S29, S42)."""
    if precision != "fp8":
        return False
    stated = (aic.get("moe_quant_mode") or aic.get("gemm_quant_mode")) if isinstance(aic, dict) else None
    name = str(model_name or "").strip().lower().rsplit("/", 1)[-1]
    return name in BLOCK_FP8_CHECKPOINTS or stated == BLOCK_FP8_MODE


def published_fp4_checkpoint(model_name: str | None, precision: str, quantized_layers: str | None):
    """(precision, quantized_layers, note) with a generic ``fp4`` of a model in ``MXFP4_EXPERT_CHECKPOINTS`` read
    as the checkpoint that model is published in (``mxfp4``, experts only), since no other FP4 checkpoint of
    it exists; an explicit ``quantized_layers`` is kept. Anything else is returned as given, without a note."""
    name = str(model_name or "").strip().lower().rsplit("/", 1)[-1]
    if precision != "fp4" or name not in MXFP4_EXPERT_CHECKPOINTS:
        return precision, quantized_layers or "all", None
    layers = quantized_layers or "experts"
    return "mxfp4", layers, (f"serve.precision fp4 of {model_name}: read as its published MXFP4 checkpoint "
                             f"(quantized_layers {layers}; fastmodel/serve/precisions.py MXFP4_EXPERT_CHECKPOINTS)")


def published_precision_columns(model_name, precision: str, kv_precision: str | None = None) -> dict:
    """``serve.api.precision_columns`` of the published checkpoint of a model named by ``model_name``, with
    ``quant_experts_only`` (none for a model given as columns, not a name): a generic fp4 of gpt-oss is its MXFP4 experts-only checkpoint
    (:func:`published_fp4_checkpoint`), in one configuration and at each value of a precision axis alike."""
    from fastmodel.serve.api import precision_columns

    if not isinstance(model_name, str):
        return precision_columns(precision, kv_precision)
    precision, layers, _ = published_fp4_checkpoint(model_name, precision, None)
    return {**precision_columns(precision, kv_precision), "quant_experts_only": quant_experts_only(layers)}


def quant_experts_only(layers: str | None) -> float:
    """The ``quant_experts_only`` column of a checkpoint whose quantized layers are ``layers`` (a record's
    ``serve.quantized_layers``, or :func:`published_fp4_checkpoint`'s reading): 1.0 for ``"experts"`` (only the
    routed experts' weights in the checkpoint's format, fastmodel/registry/lm_engine.py), else 0.0. One derivation
    for a record's lowering (serve/records.py) and a named model's published checkpoint in a sweep."""
    return 1.0 if layers == "experts" else 0.0


def checkpoint_model_name(model, set_columns) -> str | None:
    """The name a sweep reads ``model``'s published checkpoint by (:func:`published_precision_columns`, at each
    value of a precision axis): ``model`` when it is a name; None when it is given as columns, or when the sweep
    sets ``quant_experts_only`` itself (in ``set_columns``, its axes and fixed columns: the sweep's value stands,
    not the checkpoint's). One rule for ``serve.api.sweep`` and the sweep file's plan (serve/sweep_plan.py)."""
    return None if "quant_experts_only" in set_columns or not isinstance(model, str) else model


def weight_only_note(precision: str, gpu: str) -> str:
    """The note of ``precision`` weights on a GPU without tensor cores of that width, which run weight-only,
    dequantised into 16-bit GEMMs: FP4 on Hopper (docs/model_serving.md S12), FP8 on Ampere where the engine does
    (vLLM's FP8 Marlin, ``fp8_weight_only``, S55). One wording for a record's lowering and ``fastmodel serve``."""
    if precision == "fp8":
        return (f"fp8 on {gpu} (no FP8 tensor cores): weight-only W8A16, dequantised into 16-bit GEMMs as the "
                "engine's FP8 Marlin does (docs/model_serving.md S55)")
    return f"{precision} on {gpu} (no FP4 tensor cores): weight-only, dequantised into 16-bit GEMMs"


def fp4_refusal(precision: str, device: dict, fp4_weight_only_cc: float, engine: str, gpu: str) -> str | None:
    """Why ``precision`` (FP4 weights) cannot run on ``gpu`` (its columns ``device``: ``peak_flops_4``,
    ``compute_capability``, ``vendor``) under ``engine`` (its label), or None: no FP4 tensor cores, an NVIDIA
    compute capability stated and below the one the engine's weight-only FP4 starts at (``fp4_weight_only_cc``,
    ``fastmodel.serve.profiles.FP4_WEIGHT_ONLY_CC``; docs/model_serving.md S63). The kernel's ``no_fp4`` rule
    (kernels/serve/evaluate.py ``no_fp4_path``) in one configuration's words, for ``serve`` and a record."""
    cc = float(device.get("compute_capability") or 0.0)
    if precision not in FP4_PRECISIONS or float(device.get("peak_flops_4") or 0.0) > 0.0:
        return None
    if float(device.get("vendor") or 0.0) != 0.0 or cc <= 0.0 or cc >= fp4_weight_only_cc:
        return None
    return (f"{precision} on {gpu} (compute capability {cc:.1f}, no FP4 tensor cores): {engine} runs FP4 weights "
            f"weight-only from compute capability {fp4_weight_only_cc:.1f} on, none below (vLLM's and SGLang's "
            "FP4 Marlin / Triton kernels run from 8.0; docs/model_serving.md S63)")
