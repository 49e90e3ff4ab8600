"""The typed schema of a serving record (``SERVE_RUNS.md``): the ``serve``, ``disagg`` and ``deployment``
blocks, the serving-only model and system fields, and SERVE_RUNS.md's cross-field invariants.

Strict like spec files and run records (``fastmodel.spec.record_blocks``): counts are integers, booleans
come only from JSON booleans, strings are never read as numbers, unknown keys are refused with the nearest
valid key, magnitudes stay in the registry's column bounds, JSON ``null`` means "absent". The ``model`` and
``system`` blocks shared with run records are checked by the training engine's record schema (reached
through ``fastmodel.engines``) after the serving-only fields below are taken out. ``measured`` is checked only
by ``validate`` (``MeasuredBlock``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fastmodel.errors import FieldValueError, SpecError
from fastmodel.serve.spec import given_loads, not_one_load
from fastmodel.spec.record_blocks import Block, bounds, column_check, first_error
from fastmodel.spec.records import require_blocks

Text = Annotated[str, Field(max_length=100_000)]
TextOrList = Text | list[Text]
#: a count of requests (a batch, requests in flight, requests sent): the ``batch_size`` column's bounds
Count = Annotated[int, column_check("batch_size")]

PRECISION_NAMES = ("bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4")
KV_PRECISION_NAMES = ("bf16", "fp16", "fp8")


def _fail(path: str, reason: str):
    raise FieldValueError(tuple(path.split(".")), reason)


class PoolBlock(Block):
    """One worker pool of a disaggregated deployment (SERVE_RUNS.md ``disagg.prefill`` / ``disagg.decode``)."""

    workers: int = Field(ge=1, le=1 << 20)
    tp: int = bounds("tp")
    pp: int = bounds("pp", 1)
    attention_dp: int = bounds("attention_dp", 1)
    moe_tp: int | None = bounds("moe_tp", None, zero_unset=True)
    ep: int = bounds("ep", 1)
    gpus_per_worker: int | None = Field(None, ge=1, le=1 << 20)
    aic_batch_size: Count | None = None

    @model_validator(mode="after")
    def _gpus(self):
        gpus = self.tp * self.attention_dp * self.pp
        if self.gpus_per_worker is not None and self.gpus_per_worker != gpus:
            _fail("gpus_per_worker", f"{self.gpus_per_worker} but tp*attention_dp*pp = {gpus}")
        return self


class DisaggBlock(Block):
    """SERVE_RUNS.md ``disagg``: the prefill and decode pools and the GPUs of the whole deployment."""

    prefill: PoolBlock
    decode: PoolBlock
    total_gpus: int = bounds("n_gpus")
    definition: Text | None = None

    @model_validator(mode="after")
    def _total(self):
        used = sum(p.workers * p.tp * p.attention_dp * p.pp for p in (self.prefill, self.decode))
        if used != self.total_gpus:
            _fail("total_gpus", f"{self.total_gpus} but the pools use {used} GPUs (workers x tp x attention_dp x pp)")
        return self


class DeploymentBlock(Block):
    """SERVE_RUNS.md ``deployment``: identical instances that shared the load (informational)."""

    replicas: int = Field(ge=1, le=1 << 20)
    global_concurrency: Count | None = None
    total_gpus: int | None = bounds("n_gpus", None)


class ServeBlock(Block):
    """SERVE_RUNS.md ``serve``: the instance's layout, formats, request lengths and one load mode."""

    mode: Literal["aggregated", "disagg"] = "aggregated"
    tp: int | None = bounds("tp", None)
    pp: int = bounds("pp", 1)
    ep: int = bounds("ep", 1)
    attention_dp: int = bounds("attention_dp", 1)
    moe_tp: int | None = bounds("moe_tp", None, zero_unset=True)
    precision: Literal[PRECISION_NAMES] = "bf16"  # type: ignore[valid-type]
    kv_precision: Literal[KV_PRECISION_NAMES] | None = None  # type: ignore[valid-type]
    quantized_layers: Literal["all", "experts"] = "all"
    input_len: int = bounds("input_len")
    output_len: int = bounds("output_len")
    batch_size: Count | None = None
    concurrency: Count | None = None
    max_throughput: bool | None = None
    num_requests: Count | None = None
    kv_cache_mem_fraction: float = bounds("kv_cache_mem_fraction", 0.9)
    # TensorRT-LLM batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio): off unless stated
    batch_wait_iters: int = bounds("batch_wait_iters", 0)
    batch_wait_tokens_ratio: float = bounds("batch_wait_tokens_ratio", 0.0)
    # the client gives every request exactly input_len / output_len tokens (no length spread, ignore_eos)
    fixed_lengths: bool = False
    # speculative decoding (MTP, EAGLE): draft tokens per decode step and their acceptance, at every load mode (a
    # disaggregated deployment's decode pool speculates; docs/model_serving.md S18)
    spec_tokens: int = bounds("spec_tokens", 0)
    spec_acceptance: float = bounds("spec_acceptance", 0.0)
    # the engine's routed-expert kernel when a deployment flag picks it (vLLM VLLM_MXFP4_USE_MARLIN=1: Marlin MoE;
    # TensorRT-LLM moe_config.backend TRITON: OpenAI-Triton MoE, docs/model_serving.md S37; vLLM
    # VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: FlashInfer's MXFP4 x MXFP8 MoE, W4A8, docs/model_serving.md S45;
    # TensorRT-LLM moe_config.backend TRTLLM: its TRTLLM-Gen MoE kernels, docs/model_serving.md S47)
    moe_backend: Literal["default", "marlin", "triton", "flashinfer_mxfp8", "trtllm_gen"] = "default"
    # the EP dispatch/combine kernels a deployment flag picks (SGLang --deepep-mode low_latency, vLLM
    # --all2all-backend deepep_low_latency): DeepEP's low-latency kernels (docs/model_serving.md S39)
    moe_a2a: Literal["default", "deepep_ll"] = "default"
    # vLLM's allreduce + RMSNorm fusion as the deployment's compilation config set it (pass_config.
    # enable_fi_allreduce_fusion; absent: the engine profile's, docs/model_serving.md S22, S45)
    allreduce_norm_fusion: bool | None = None
    # vLLM's attention backend quantizes the queries to FP8 in a kernel of its own (FP8 KV cache, vLLM 0.10.2:
    # FlashAttention on Hopper, FlashInfer's TRTLLM path on Blackwell; absent: the version's rule, docs S54)
    query_quant_kernel: bool | None = None
    # the engine's token budget and batch cap as the deployment set them (absent: the engine profile's default)
    max_num_tokens: int | None = bounds("max_num_tokens", None)
    max_batch_size: int | None = bounds("max_batch_size", None)

    @model_validator(mode="after")
    def _one_load(self):
        problem = not_one_load(given_loads(self.batch_size, self.concurrency, self.max_throughput))
        if problem:
            raise ValueError(problem)
        if self.mode == "aggregated" and self.tp is None:
            _fail("tp", "required field missing")
        if self.mode == "disagg" and self.concurrency is None:
            _fail("concurrency", "a disaggregated deployment is measured under a concurrency")
        if self.concurrency is not None and self.num_requests is not None and self.num_requests < self.concurrency:
            _fail("num_requests", f"{self.num_requests} requests cannot keep {self.concurrency} in flight")
        if self.spec_tokens and "spec_acceptance" not in self.model_fields_set:
            _fail("spec_acceptance", "required with spec_tokens (the draft tokens' acceptance rate, 0 to 1)")
        requests = self.batch_size or self.concurrency
        if requests is not None and requests % self.attention_dp:
            _fail("attention_dp", f"{self.attention_dp} does not divide the {requests} requests in flight")
        return self

    @property
    def load(self) -> str:
        return next(k for k in ("batch_size", "concurrency", "max_throughput") if getattr(self, k) not in (None, False))


class ServeModelExtras(BaseModel):
    """SERVE_RUNS.md model fields the run-record schema does not have (typed, then taken out)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    attention_bias: bool | None = None
    attention_sinks: bool | None = None


class ServeSystemExtras(BaseModel):
    """SERVE_RUNS.md system fields the run-record schema does not have (typed, then taken out), and those the
    serving lowering rewrites (the instance's GPU counts)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    peak_flops_fp4: float | None = bounds("peak_flops_4", None)
    gpus_per_tray: int | None = Field(None, ge=1, le=1 << 16)
    # fields the serving lowering rewrites before the run-record schema sees them: typed here
    n_gpus: int | None = bounds("n_gpus", None)
    gpus_per_node: int | None = bounds("gpus_per_node", None)
    nvlink_domain_size: int | None = bounds("domain_size", None)


#: quantisation modes an ``aic`` block may state: aiconfigurator's ``GEMMQuantMode`` and ``MoEQuantMode`` names
#: (ai-dynamo/aiconfigurator 095f58a5, aic-core/src/aiconfigurator_core/sdk/common.py lines 1214-1266; ``float16``
#: is the 16-bit name before cfc7fb05, #895, renamed it ``bfloat16``). The records state fp8, fp8_block and nvfp4.
GEMM_QUANT_MODES = ("bfloat16", "float16", "int8_wo", "int4_wo", "fp8", "fp8_static", "sq", "fp8_block", "fp8_ootb",
                    "nvfp4", "nvfp4_wo", "w4a16_nvfp4")
MOE_QUANT_MODES = ("bfloat16", "float16", "fp8", "int4_wo", "fp8_block", "w4afp8", "nvfp4", "nvfp4_wo", "w4a16_mxfp4",
                   "w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8_trtllm", "w4a16_mxfp4_cutlass", "w4a16_nvfp4")


class AicBlock(BaseModel):
    """The source's own row (aiconfigurator): informational, except the two quantisation modes, which pick the
    expert kernel's FP8 flavour (``fastmodel.serve.precisions.block_fp8_checkpoint``) and so are typed; a value
    outside aiconfigurator's names is refused with the nearest one. Other keys are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True)
    moe_quant_mode: Literal[MOE_QUANT_MODES] | None = None        # type: ignore[valid-type]
    gemm_quant_mode: Literal[GEMM_QUANT_MODES] | None = None      # type: ignore[valid-type]


class ServeRecordSchema(Block):
    """One SERVE_RUNS.md record; ``model`` and ``system`` are objects checked by the run-record schema."""

    id: str | int = ""
    source: Text = ""
    source_ref: Text | None = None
    framework: Text | None = None
    model: dict
    system: dict
    serve: ServeBlock
    disagg: DisaggBlock | None = None
    deployment: DeploymentBlock | None = None
    measured: Any = None
    assumptions: TextOrList | None = None
    flags: TextOrList | None = None
    notes: TextOrList | None = None
    aic: AicBlock | None = None      # the source's own row (aiconfigurator); its quant modes are read

    @model_validator(mode="after")
    def _invariants(self):
        check_invariants(self)
        return self


def check_invariants(record: ServeRecordSchema) -> None:
    """SERVE_RUNS.md's cross-field invariants; a FieldValueError naming the field to fix."""
    serve = record.serve
    # the model and system blocks are typed by the run-record schema afterwards: use only well-typed counts here
    n_gpus = record.system.get("n_gpus") if type(record.system.get("n_gpus")) is int else None
    # an ill-typed expert count (None here) skips only the checks that read it; the run-record schema names
    # model.moe_experts afterwards, and every other invariant below still runs
    experts = record.model.get("moe_experts", 0)
    experts = None if experts is not None and type(experts) is not int else max(0, experts or 0)
    if serve.mode == "disagg":
        if record.disagg is None:
            _fail("disagg", 'required block missing (serve.mode = "disagg")')
        if n_gpus is not None and record.disagg.total_gpus != n_gpus:
            _fail("disagg.total_gpus", f"{record.disagg.total_gpus} but system.n_gpus = {n_gpus}")
        for name in ("prefill", "decode"):
            _check_layout(getattr(record.disagg, name), experts, f"disagg.{name}")
        return
    if record.disagg is not None:
        _fail("serve.mode", 'a disagg block needs serve.mode = "disagg"')
    gpus = serve.tp * serve.attention_dp * serve.pp
    if n_gpus is not None and gpus != n_gpus:
        _fail("serve.tp", f"tp*attention_dp*pp = {gpus} but system.n_gpus = {n_gpus} (SERVE_RUNS.md: one instance)")
    _check_layout(serve, experts, "serve")


def _check_layout(block, experts: int | None, where: str) -> None:
    """Expert layout: moe_tp x ep = the GPUs of a pipeline stage (tp x attention_dp); ep divides the experts
    (not checked while ``experts`` is None: an ill-typed count, named by the run-record schema)."""
    group = block.tp * block.attention_dp
    if block.ep > 1 and experts == 0:
        _fail(f"{where}.ep", f"ep = {block.ep} needs a model with routed experts (model.moe_experts)")
    if experts and experts % block.ep:
        _fail(f"{where}.ep", f"{block.ep} does not divide the {experts} routed experts")
    if group % block.ep:
        _fail(f"{where}.ep", f"{block.ep} does not divide tp*attention_dp = {group}")
    if block.moe_tp is not None and block.moe_tp * block.ep != group:
        _fail(f"{where}.moe_tp", f"moe_tp*ep = {block.moe_tp * block.ep} but tp*attention_dp = {group}")


class MeasuredBlock(BaseModel):
    """SERVE_RUNS.md ``measured`` as ``validate`` reads it: positive, finite numbers; other keys informational."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)
    output_tokens_per_s: float | None = Field(None, gt=0, le=1e12)
    ttft_s: float | None = Field(None, gt=0, le=1e7)
    tpot_s: float | None = Field(None, gt=0, le=1e4)


def parse_serve_record(data: Any, source: str | None = None) -> ServeRecordSchema:
    """The record validated by its schema; a one-line SpecError ``source: block.field: reason``."""
    if not isinstance(data, dict):
        raise SpecError(source, "record", f"expected a JSON object (SERVE_RUNS.md), got {type(data).__name__}")
    require_blocks(data, ("model", "system", "serve"), source, "SERVE_RUNS.md")
    for block, extras in (("model", ServeModelExtras), ("system", ServeSystemExtras)):
        try:
            extras.model_validate(data[block])
        except ValidationError as error:
            raise first_error(error, source, extras, prefix=(block,)) from None
    try:
        return ServeRecordSchema.model_validate(data)
    except ValidationError as error:
        raise first_error(error, source, ServeRecordSchema) from None


def parse_measured(data: dict, source: str | None = None) -> MeasuredBlock:
    """The ``measured`` block checked (validate): a SpecError naming ``measured.<field>``."""
    if not isinstance(data.get("measured"), dict):
        raise SpecError(source, "measured", "expected an object with ttft_s, tpot_s or output_tokens_per_s")
    try:
        return MeasuredBlock.model_validate(data["measured"])
    except ValidationError as error:
        raise first_error(error, source, MeasuredBlock, prefix=("measured",)) from None
