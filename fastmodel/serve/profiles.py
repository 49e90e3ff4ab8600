"""Serving engines as documented profiles: the scheduler defaults that set a deployment's batch under load.

A record's ``framework`` (``"TensorRT-LLM 1.0.0rc3"``, ``"vLLM 0.18.0"``, ``"SGLang 0.5.6.post2"``) names the
engine (its first word) and version (its second, when it looks like one). Each profile holds the engine's
documented defaults at that version, with the source of every value (docs/sources/serving_facts.md §1); the first
two rows by the device's memory and name (``profiles_device.device_limits``, docs/model_serving.md S58):

| column | TensorRT-LLM | vLLM V1 | SGLang 0.5.6.post2 |
|---|---|---|---|
| ``max_num_tokens`` (token budget) | 8192 | 8192 (>= 70 GiB, not A100), else 2048 | ``chunked_prefill_size`` 2048/4096/8192/16384 (S58) |
| ``max_batch_size`` | 2048 | ``max_num_seqs`` 1024 (>= 70 GiB, not A100), else 256 | 4096 (the request-pool cap) |
| ``chunked_prefill`` | 0 (off by default) | 1 | 1 |
| ``mixed_prefill`` | 1 (in-flight batching) | 1 (decodes first, prefill fills the budget) | 0 (prefill first, decodes wait; no mixed chunk) |
| ``overlap_step`` | 1 (overlap scheduler on) | 0 up to 0.12, 1 from 0.15.1 (async scheduling) | 1 (overlap scheduler on) |
| ``kv_on_demand`` | 0 (GUARANTEED_NO_EVICT) | 1 (paged blocks on demand) | 1 |
| ``custom_allreduce_bytes`` | 4 MiB (AUTO lookup table: NCCL above) | 8 MiB (``CustomAllreduce``) | 8 MiB |
| ``kv_write_kernel`` | 0 | 1 (``reshape_and_cache_flash`` before attention, 0.10.2-0.18.0) | 0 (not read) |
| ``chunk_kv_local`` | 0 (not read: whole context) | 0 up to 0.12.0, 1 from 0.15.1 (hybrid KV cache manager, S60) | 0 (not read) |
| ``kv_budget_of_total`` | 0 (share of the memory its warm-up left free) | 1 (share of the whole device, S66) | 0 (S66: not applied) |
| ``kv_snapshot_after_nccl`` | 0 (not read) | 0 at 0.10.2, 1 from 0.11.0 (snapshot after NCCL set-up, S66) | 0 (not read) |

Sources: TensorRT-LLM ``TorchLlmArgs`` (``max_num_tokens``, ``max_batch_size``, ``enable_chunked_prefill``,
``disable_overlap_scheduler``) and its "Useful Runtime Options" and overlap-scheduler pages; vLLM
``vllm/engine/arg_utils.py`` (v0.11.2: 1892-1911; v0.18.0: 2008-2026) and ``vllm/config/scheduler.py``
(v0.11.2: 140 async scheduling off; v0.15.1 ``vllm/config/vllm.py:590-622`` auto-on), ``vllm/v1/core/sched/
scheduler.py`` (running requests first); SGLang v0.5.6.post2 ``python/sglang/srt/server_args.py`` (291, 522-523,
728-836) and ``managers/scheduler.py`` (1702-1711, prefill first).

A version the table does not know, or none recorded, takes the engine's newest profile; an engine it does not
know takes TensorRT-LLM's (the default of the sweep columns); both say so in a note. No per-iteration CPU time
is set (``serve_step_overhead_s`` and ``host_req_s`` stay 0, S36): no engine publishes one at these versions.
TensorRT-LLM's profile sets ``host_op_s`` (the host issue time of its eager prompt-carrying iterations,
kernels/serve/host.py).
``lockstep_columns`` sets ``client_rounds`` 1 for a prefill-first engine (SGLang) under a fixed-length client: the
closed loop stays in lockstep and every round is a start wave (docs/model_serving.md S32).

The engines' tables (names, vendors, known versions, profile columns, sourced constants) are
``fastmodel/serve/profiles_tables.py``, re-exported here.
"""

from __future__ import annotations

import re

from fastmodel.errors import SpecError
from fastmodel.serve.profiles_tables import (  # noqa: F401 - the engines' tables, re-exported
    CUSTOM_AR_SGLANG,
    CUSTOM_AR_TRTLLM,
    CUSTOM_AR_VLLM,
    DEFAULT_ENGINE,
    ENGINE_LABELS,
    ENGINE_NAMES,
    ENGINE_VENDORS,
    FP4_WEIGHT_ONLY_CC,
    FP8_WEIGHT_ONLY_VLLM,
    GIB,
    HOST_OP_S_EAGER,
    KNOWN_VERSIONS,
    KV_WRITE_KERNEL_VLLM,
    PROFILE_COLUMNS,
    RECORD_ENGINE_COLUMNS,
    SCHED_HOST,
    VENDOR_DEFAULT_ENGINE,
    VLLM_CHUNK_KV_LOCAL_FIRST,
    VLLM_SNAPSHOT_AFTER_NCCL_FIRST,
)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_framework(framework: str | None) -> tuple[str | None, tuple[int, ...] | None]:
    """(engine key or None, version tuple or None) of a record's ``framework``."""
    words = str(framework or "").strip().split()
    if not words:
        return None, None
    head = words[0].lower().rstrip(",")
    engine = next((key for key, names in ENGINE_NAMES.items() if head in names), None)
    version = None
    if len(words) > 1:
        match = _VERSION.match(words[1])
        if match:
            version = tuple(int(g) for g in match.groups() if g is not None)
    return engine, version


def default_engine_note(vendor: str = "nvidia") -> str:
    """The one-line note of every serving path that evaluates without an engine (docs/model_serving.md S13; on a
    device TensorRT-LLM does not run on, S56)."""
    engine = VENDOR_DEFAULT_ENGINE.get(vendor, DEFAULT_ENGINE)
    if engine != DEFAULT_ENGINE:
        return (f"no engine given: {ENGINE_LABELS[DEFAULT_ENGINE]}, the default engine, does not run on an "
                f"{vendor.upper()} device; the {ENGINE_LABELS[engine]} profile at its newest version is used "
                f"(docs/model_serving.md S56)")
    return (f"no engine given: the default engine, the {ENGINE_LABELS[DEFAULT_ENGINE]} profile at its newest "
            f"version, is used (docs/model_serving.md S13)")


def engine_runs_on(engine: str | None, vendor: str) -> bool:
    """Whether ``engine`` (a key; None: the default engine) runs on a ``vendor`` device (``ENGINE_VENDORS``)."""
    return vendor in ENGINE_VENDORS.get(engine or DEFAULT_ENGINE, ("nvidia",))


def engine_not_on_device(engine: str, vendor: str, device=None) -> str:
    """The one-line reason an engine is refused on a device of another vendor (docs/model_serving.md S56)."""
    where = f"{device} is an {vendor.upper()} device" if device else f"the device is {vendor.upper()}"
    others = [key for key, vendors in ENGINE_VENDORS.items() if vendor in vendors]
    return (f"{ENGINE_LABELS.get(engine, engine)} runs on NVIDIA GPUs only and {where}; choose "
            f"{' or '.join(others)} (docs/model_serving.md S56)")


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def engine_label(engine: str, version: tuple[int, ...] | None) -> str:
    """``"vllm"`` or ``"vllm 0.10.2"``: an engine choice as text that ``engine_choice`` reads back."""
    return engine if version is None else f"{engine} {_dotted(version)}"


def engine_choice(text, field: str = "--engine", source=None, vendor: str = "nvidia",
                  device=None) -> tuple[str, tuple[int, ...] | None, list[str]]:
    """(engine key, version or None, notes) of an engine a user names: ``"vllm"``, ``"vLLM 0.10.2"``,
    ``"TensorRT-LLM 1.0.0rc3"``, read by ``parse_framework`` as a record's ``framework`` is. None or "" is the
    default engine of a ``vendor`` device (``VENDOR_DEFAULT_ENGINE`` at its newest version, with
    ``default_engine_note``). An unknown engine, a second word that is no version, or a version outside
    ``KNOWN_VERSIONS`` is a SpecError naming the choices. ``device`` (its name) given: an engine that does not run
    on its vendor is a SpecError too (``engine_not_on_device``; a sweep passes none and the kernel marks the point
    ``engine_not_on_device``, S56)."""
    from fastmodel.errors import nearest

    words = str(text or "").strip().split()
    if not words:
        return VENDOR_DEFAULT_ENGINE.get(vendor, DEFAULT_ENGINE), None, [default_engine_note(vendor)]
    engine, version = parse_framework(" ".join(words))
    if engine is not None and device is not None and not engine_runs_on(engine, vendor):
        raise SpecError(source, field, engine_not_on_device(engine, vendor, device))
    if engine is None:
        aliases = [alias for key, names in ENGINE_NAMES.items() for alias in (key, *names)]
        raise SpecError(source, field, f"unknown engine {words[0]!r}{nearest(words[0], aliases)}; choose one of "
                        f"{', '.join(ENGINE_NAMES)}, optionally with a version (e.g. \"vllm 0.18.0\")")
    if len(words) == 1:
        return engine, None, []
    known = KNOWN_VERSIONS[engine]
    padded = None if version is None else (version + (0, 0))[:3]
    if len(words) > 2 or padded not in known:
        near = " ".join(words[1:])
        if padded is not None:
            near = f"; nearest {_dotted(min(known, key=lambda k: (_distance(k, padded), k)))}"
        else:
            near = f" ({near!r} is not a version)"
        raise SpecError(source, field, f"{ENGINE_LABELS[engine]} version {' '.join(words[1:])!r} is not known{near}; "
                        f"known: {', '.join(map(_dotted, known))}")
    return engine, padded, []


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """How far apart two versions are, major first: the absolute differences of each number."""
    return tuple(abs(x - y) for x, y in zip(a, b))


def engine_profile(text, hbm_bytes: float, field: str = "--engine", source=None, vendor: str = "nvidia",
                   device=None, device_name: str = "") -> tuple[dict[str, float], list[str]]:
    """(profile columns, notes) of an engine a user names (``engine_choice``; None: the ``vendor``'s default
    engine, noted) on a GPU of ``hbm_bytes``: what ``fastmodel serve`` (with and without --search),
    ``fastmodel.serve.api``'s ``evaluate`` and ``sweep`` and serving sweep files evaluate with. ``device`` given
    (one evaluation), an engine that does not run there is refused (S56); ``device_name``: the device's reported
    name (S58). A record's ``framework`` names its engine through ``record_engine``, whose profile is the same
    ``profile_columns``."""
    engine, version, notes = engine_choice(text, field, source, vendor, device)
    return profile_columns(engine, version, hbm_bytes, vendor, device_name), notes


def _sched_host(engine: str) -> dict[str, float]:
    """The profile's last columns: the scheduler loop's host time (S36), weight-only FP8 (vLLM's FP8 Marlin, S55;
    0 elsewhere), the compute capability weight-only FP4 starts at (S63),
    whether the engine runs on NVIDIA GPUs only (S56) and the FP8 KV pool's conversion at every
    forward (0 on CUDA; SGLang's ROCm variant sets it, ``profiles_vendor``, S58)."""
    step, per_request = SCHED_HOST[engine]
    return {"serve_step_overhead_s": step, "host_req_s": per_request,
            "fp8_weight_only": FP8_WEIGHT_ONLY_VLLM if engine == "vllm" else 0.0,
            "fp4_weight_only_cc": FP4_WEIGHT_ONLY_CC[engine],
            "engine_nvidia_only": 0.0 if "amd" in ENGINE_VENDORS[engine] else 1.0, "kv_pool_upcast": 0.0}


def profile_columns(engine: str | None, version: tuple[int, ...] | None, hbm_bytes: float,
                    vendor: str = "nvidia", device_name: str = "") -> dict[str, float]:
    """The serving columns of an engine's profile at a version, on a GPU of ``hbm_bytes`` from ``vendor`` whose
    driver reports ``device_name`` (``profiles_device.reported_name``; the token budget and batch cap read both,
    S58): :data:`PROFILE_COLUMNS`, with the columns its source on that vendor's platform sets otherwise
    (``profiles_vendor.VENDOR_VARIANTS``, docs/model_serving.md S57)."""
    from fastmodel.serve.profiles_vendor import vendor_variant

    engine = engine or DEFAULT_ENGINE
    return {**_cuda_profile(engine, version, hbm_bytes, device_name), **vendor_variant(engine, vendor)}


def _cuda_profile(engine: str, version: tuple[int, ...] | None, hbm_bytes: float, device_name: str = "") -> dict[
        str, float]:
    """:func:`profile_columns` as each engine's CUDA source sets them; the token budget and batch cap by the
    device's memory and name (``profiles_device.device_limits``, S58)."""
    from fastmodel.serve.profiles_device import device_limits

    limits = device_limits(engine, hbm_bytes, device_name)
    if engine == "vllm":
        return {**limits, "chunked_prefill": 1, "mixed_prefill": 1,
                "overlap_step": 1 if version is None or version >= (0, 15, 1) else 0, "kv_on_demand": 1,
                "custom_allreduce_bytes": CUSTOM_AR_VLLM, "host_op_s": 0.0, "host_ops_layer": 0.0,
                "kv_write_kernel": KV_WRITE_KERNEL_VLLM, **_sched_host("vllm"),
                "chunk_kv_local": 1 if version is None or version >= VLLM_CHUNK_KV_LOCAL_FIRST else 0,
                "kv_budget_of_total": 1,
                "kv_snapshot_after_nccl": 1 if version is None or version >= VLLM_SNAPSHOT_AFTER_NCCL_FIRST else 0}
    if engine == "sglang":
        return {**limits, "chunked_prefill": 1, "mixed_prefill": 0, "overlap_step": 1, "kv_on_demand": 1,
                "custom_allreduce_bytes": CUSTOM_AR_SGLANG, "host_op_s": 0.0, "host_ops_layer": 0.0,
                "kv_write_kernel": 0.0, **_sched_host("sglang"), "chunk_kv_local": 0, "kv_budget_of_total": 0,
                "kv_snapshot_after_nccl": 0}
    return {**limits, "chunked_prefill": 0, "mixed_prefill": 1,
            "overlap_step": 1, "kv_on_demand": 0, "custom_allreduce_bytes": CUSTOM_AR_TRTLLM,
            "host_op_s": HOST_OP_S_EAGER, "host_ops_layer": 0.0, "kv_write_kernel": 0.0, **_sched_host("trtllm"),
            "chunk_kv_local": 0, "kv_budget_of_total": 0, "kv_snapshot_after_nccl": 0}


def fp4_activation(engine: str | None, precision: str, moe_backend: str = "default") -> tuple[float, str | None]:
    """(``fp4_act`` code, note) of an engine's FP4-weight GEMMs on a device with FP4 tensor cores: NVFP4 (``fp4``)
    checkpoints run W4A4 (2); an MXFP4 checkpoint (``mxfp4``, gpt-oss) runs W4A8 with MXFP8 activations (1) on
    TensorRT-LLM (examples/models/core/gpt_oss/README.md, "MoE Support Matrix": Blackwell mxfp8 x mxfp4) and
    W4A16 (0) on vLLM (``vllm/model_executor/layers/quantization/mxfp4.py`` ``get_mxfp4_backend``: on SM100 with
    FlashInfer and no opt-in variable, ``SM100_FI_MXFP4_BF16``), W4A8 (1) when the deployment opts in
    (``moe_backend = "flashinfer_mxfp8"``: ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` selects
    ``SM100_FI_MXFP4_MXFP8_TRTLLM``, whose ``apply`` quantizes the input with ``mxfp8_quantize``, ``mxfp4.py``
    66-73, 816-818 @v0.10.2; docs/model_serving.md S45). SGLang's choice is not sourced here: W4A16 like vLLM's,
    with a note."""
    if precision != "mxfp4":
        return 2.0, None
    engine = engine or DEFAULT_ENGINE
    if engine == "trtllm":
        return 1.0, None
    if engine == "vllm":
        return (1.0 if moe_backend == "flashinfer_mxfp8" else 0.0), None
    return 0.0, f"{engine}: activations of MXFP4 GEMMs not sourced; BF16 (W4A16) assumed, as vLLM's default"


def expert_row_tiles(engine: str | None, precision: str) -> tuple[float, float]:
    """(``expert_tile_min``, ``expert_tile_max``) of the grouped expert kernel an engine runs for FP4-weight
    experts on a device with FP4 tensor cores; (0, 0): the GEMM library's tiles. vLLM's default SM100 MXFP4
    backend ``SM100_FI_MXFP4_BF16`` calls FlashInfer's ``trtllm_fp4_block_scale_moe``
    (``vllm/model_executor/layers/quantization/mxfp4.py`` @007d500, ``Mxfp4MoEMethod.apply``), whose launcher
    (``csrc/trtllm_fused_moe_kernel_launcher.cu`` @00d4865, ``FP4BlockScaleLauncher.getSupportedTileNums``,
    ``computeSelectedTileN``) tiles tokens per expert at the next power of two of tokens x top_k / experts,
    clamped to {8, 16, 32, 64} at BF16 activations. TensorRT-LLM's and SGLang's MXFP4 MoE backend for these runs
    is not sourced here: library tiles."""
    if precision == "mxfp4" and (engine or DEFAULT_ENGINE) == "vllm":
        return 8.0, 64.0
    return 0.0, 0.0


def moe_dispatcher(engine: str | None, ep: float, top_k: float, multi_node_nvlink: bool, stated: str = "default") -> float:
    """``moe_dispatcher`` code of an engine's expert-parallel MoE under attention DP: 1 (all-gather the tokens,
    reduce-scatter the outputs) by default in vLLM (``vllm/config/parallel.py`` ``ParallelConfig.all2all_backend =
    "allgather_reducescatter"``) and SGLang (``python/sglang/srt/server_args.py`` ``moe_a2a_backend = "none"``);
    TensorRT-LLM runs its all-to-all (0) only when ``moe_ep_size > top_k`` on a multi-node-NVLink system
    (``tensorrt_llm/_torch/modules/fused_moe/fused_moe_trtllm_gen.py`` ``enable_alltoall``: also attention DP and
    ``MnnvlMemory.supports_mnnvl()``: an NVLink domain wider than one node, the GB200/GB300 NVL racks; the
    caller reads it from the system's ``nvlink_domain_size`` against ``gpus_per_node``), else the all-gather.
    ``stated = "deepep_ll"`` (``serve.moe_a2a``: SGLang ``--moe-a2a-backend deepep --deepep-mode low_latency``,
    vLLM ``--all2all-backend deepep_low_latency``, TensorRT-LLM WideEP's ``AlltoallMethodType.DeepEPLowLatency``)
    is DeepEP's low-latency kernels (4; docs/model_serving.md S39) wherever EP has a dispatch to run."""
    if stated == "deepep_ll":
        return 4.0
    if (engine or DEFAULT_ENGINE) == "trtllm" and ep > top_k and multi_node_nvlink:
        return 0.0
    return 1.0


def lockstep_rounds(mixed_prefill: float, fixed_lengths: bool) -> float | None:
    """``client_rounds`` of a closed loop that stays in lockstep, else None (the column's default). An engine that
    runs prefill first and never mixes prompt chunks into decode iterations (``mixed_prefill`` 0: SGLang
    0.5.6.post2 ``managers/scheduler.py`` ``get_next_batch_to_run`` 1691-1709, "Run prefill first if possible")
    prefills the whole start wave before any of it decodes again; with identical output lengths (``ignore_eos``)
    the wave then decodes in one batch, finishes in one iteration and comes back together: every round is a start
    wave, i.e. 1 round (docs/model_serving.md S32). Mixing engines (vLLM, TensorRT-LLM) let the first prompts decode
    while later ones prefill, which staggers the wave; random lengths break it up too."""
    return 1.0 if mixed_prefill <= 0.0 and fixed_lengths else None


def lockstep_columns(fixed_lengths: bool, mixed_prefill: float, load: str, notes: list[str]) -> dict[str, float]:
    """``{"client_rounds": 1}`` (and a note) for a concurrency-load record whose client gives every request the
    same lengths (``serve.fixed_lengths``) and that ``lockstep_rounds`` keeps in lockstep, else no column."""
    rounds = lockstep_rounds(mixed_prefill, fixed_lengths) if load == "concurrency" else None
    if rounds is None:
        return {}
    notes.append("fixed-length client (serve.fixed_lengths): a prefill-first engine keeps the closed loop in "
                 "lockstep, every round is a start wave (docs S32)")
    return {"client_rounds": rounds}


def record_engine(framework: str | None, vendor: str = "nvidia") -> tuple[str, tuple[int, ...] | None, list[str]]:
    """(engine, version, notes) a record's ``framework`` runs on a ``vendor`` device: the engine it names, or the
    vendor's default engine (``VENDOR_DEFAULT_ENGINE``, S56) when it names none or no known one, so the profile
    and every engine-dependent column of the record read one engine."""
    engine, version = parse_framework(framework)
    default = VENDOR_DEFAULT_ENGINE.get(vendor, DEFAULT_ENGINE)
    if engine is None and not str(framework or "").strip():
        return default, None, [default_engine_note(vendor)]
    if engine is None:
        return default, None, [f"framework {framework!r} is not a known serving engine (TensorRT-LLM, vLLM, SGLang): "
                               f"the {ENGINE_LABELS[default]} profile, the default engine of an {vendor.upper()} device, "
                               f"is used"]
    if version is None:
        return engine, None, [f"framework {framework!r}: no version recorded, the newest {engine} profile is used"]
    return engine, version, []


def deployment_limits(serve) -> dict[str, float]:
    """The token budget and batch cap a record states the deployment set (``serve.max_num_tokens``,
    ``serve.max_batch_size``), replacing the engine profile's defaults, and the client's rounds
    (``serve.num_requests`` / ``serve.concurrency`` under a concurrency load: ``client_rounds``); absent: no column.
    aiconfigurator's generated benchmark sets all three (docs/model_serving.md S34)."""
    out = {key: float(getattr(serve, key)) for key in ("max_num_tokens", "max_batch_size")
           if getattr(serve, key) is not None}
    if serve.num_requests is not None and serve.load == "concurrency":
        out["client_rounds"] = serve.num_requests / serve.concurrency
    return out


def _vllm_flags(serve, engine: str | None, notes: list[str], source=None) -> None:
    """Refuse vLLM's launcher flags on another engine, note them on vLLM (docs/model_serving.md S45):
    ``serve.moe_backend = "flashinfer_mxfp8"`` (``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``, priced by
    ``fp4_activation``), ``serve.allreduce_norm_fusion`` (``pass_config.enable_fi_allreduce_fusion``, priced by
    ``engine_kernels.linear_kernels``) and ``serve.query_quant_kernel`` (the image's FP8 query quantization kernel,
    priced by ``engine_kernels.query_quant_kernel``, S54)."""
    flags = {"serve.moe_backend": serve.moe_backend == "flashinfer_mxfp8",
             "serve.allreduce_norm_fusion": serve.allreduce_norm_fusion is not None,
             "serve.query_quant_kernel": serve.query_quant_kernel is not None}
    for field, stated in flags.items():
        if stated and engine != "vllm":
            raise SpecError(source, field, f"a vLLM launcher flag (docs/model_serving.md S45); the record's engine "
                            f"is {engine or 'unknown'}")
    if flags["serve.moe_backend"]:
        notes.append("serve.moe_backend = flashinfer_mxfp8: MXFP4 experts with MXFP8 activations (W4A8) on FP4 "
                     "tensor cores; docs S45")
    if flags["serve.allreduce_norm_fusion"]:
        notes.append(f"serve.allreduce_norm_fusion = {str(serve.allreduce_norm_fusion).lower()}: the deployment's "
                     "allreduce+RMSNorm fusion flag replaces the version's default; docs S45")
    if flags["serve.query_quant_kernel"]:
        notes.append(f"serve.query_quant_kernel = {str(serve.query_quant_kernel).lower()}: the image's FP8 query "
                     "quantization kernel replaces the version's rule where it exists (an FP8 KV cache on SM90 or "
                     "SM100; elsewhere the flag prices nothing); docs S54")


def stated_flags(serve, engine: str | None, mixed_prefill: float, notes: list[str], source=None) -> dict[str, float]:
    """The columns a serving record's client and deployment flags set over the engine profile: ``deployment_limits``
    (S34), then ``lockstep_columns`` (S32: a lockstep loop re-forms the wave every round, whatever the rounds).
    ``serve.moe_backend = "marlin"`` (vLLM's Marlin MoE, S33) is refused outside vLLM and noted (priced in
    ``engine_kernels.expert_kernel_eff``, S38); ``"triton"`` (TensorRT-LLM's ``moe_config.backend: TRITON``, S37) is
    refused outside TensorRT-LLM (priced in ``records._triton_moe_host_ops``), as is ``"trtllm_gen"`` (its
    TRTLLM-Gen MoE, priced by ``engine_kernels.expert_hide_rows``, S47), and vLLM's launcher flags
    outside vLLM (``_vllm_flags``, S45); ``serve.moe_a2a = "deepep_ll"``
    without attention DP (no dispatch to price, S39) and a budget stated for SGLang (read as its
    ``chunked_prefill_size``) are noted."""
    if serve.moe_backend == "marlin":
        if engine != "vllm":
            raise SpecError(source, "serve.moe_backend", f"'marlin' is vLLM's Marlin MoE kernel (VLLM_MXFP4_USE_MARLIN); "
                            f"the record's engine is {engine or 'unknown'}")
        notes.append("serve.moe_backend = marlin: the experts run at Marlin MoE's published share of the 16-bit "
                     "peak on Hopper (FlagGems PR #4350, H100), conversion included; docs S38")
    if serve.moe_backend in ("triton", "trtllm_gen") and engine != "trtllm":
        name = {"triton": "TRITON", "trtllm_gen": "TRTLLM"}[serve.moe_backend]
        raise SpecError(source, "serve.moe_backend", f"'{serve.moe_backend}' is TensorRT-LLM's moe_config.backend "
                        f"{name}; the record's engine is {engine or 'unknown'}")
    _vllm_flags(serve, engine, notes, source)
    if serve.moe_a2a == "deepep_ll" and serve.attention_dp <= 1:
        notes.append("serve.moe_a2a = deepep_ll without attention DP: every rank holds every token, so there is no "
                     "dispatch to price; the experts' outputs go through the TP allreduce (docs S39)")
    if engine == "sglang" and serve.max_num_tokens is not None:
        notes.append("serve.max_num_tokens on SGLang is read as the step's token budget (chunked_prefill_size), not "
                     "--max-prefill-tokens (docs S34)")
    return {**deployment_limits(serve), **lockstep_columns(serve.fixed_lengths, mixed_prefill, serve.load, notes)}
