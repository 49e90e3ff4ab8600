"""The typed schema of a training run record (``RUNS.md``): its blocks, their bounds and invariants.

Strict like spec files: counts are integers (a fractional layer count or TP degree is refused), booleans
come only from JSON booleans (``"false"`` is an error, not true), strings are never read as numbers, keys
outside the schema are refused with the nearest valid key, magnitudes stay inside the registry's column
bounds (``fastmodel.registry.lm``), and RUNS.md's invariants hold (``check_invariants``). JSON ``null``
means "absent". Informational fields (``source_ref``, ``assumptions``, ``flags``, ``notes``,
``recompute_detail``, ``network``...) are accepted and not read. ``measured`` is not checked here: only
``validate`` and ``calibrate`` read it (``MeasuredBlock``).

The ``plan`` block accepts every ``ExecutionSpec`` field under its own name (``PlanBlock`` is derived from
it), plus the mesh degrees and RUNS.md's batch and informational fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    create_model,
    model_validator,
)

from fastmodel.errors import FieldValueError, SpecError
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.spec import LMSpec
from fastmodel.lm.stacks import STACK_NAMES
from fastmodel.registry.lm import OPTIMIZER_CODES, PIPELINE_SCHEDULES, RECOMPUTE_CODES
from fastmodel.spec.record_blocks import Block, bounds, drop_nulls, first_error

# the strict block machinery is shared with the serving records (fastmodel/spec/record_blocks.py)
_bounds = bounds
_drop_nulls = drop_nulls
_Block = Block


Text = Annotated[str, Field(max_length=100_000)]
TextOrList = Text | list[Text]


class ModelBlock(LMSpec):
    """RUNS.md ``model``: an ``LMSpec`` (``name`` and ``ffn_kind`` optional) plus informational fields."""

    name: str = ""
    ffn_kind: Literal["gelu2", "swiglu3"] = "gelu2"
    activation: Text | None = None
    pos_emb: Text | None = None
    embedding_layernorm: bool | None = None
    moe_router: Text | None = None
    qk_norm: bool | None = None
    parallel_residual: bool | None = None   # GPT-NeoX/GPT-J: attention and MLP from one input; recorded, not modelled
    moe_min_capacity: NonNegativeInt | None = Field(None, le=1 << 30)

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data):
        if isinstance(data, dict) and "moe_node_limited_routing_max_nodes" in data:   # RUNS.md's longer name
            data = dict(data)
            data.setdefault("moe_max_nodes", data.pop("moe_node_limited_routing_max_nodes"))
        return _drop_nulls(data, cls.model_fields)


class SystemBlock(_Block):
    """RUNS.md ``system``: the device's datasheet numbers and the job's size, in SI units."""

    gpu: str = Field(min_length=1, max_length=200)
    n_gpus: int = _bounds("n_gpus")
    gpus_per_node: int = _bounds("gpus_per_node")
    nvlink_domain_size: int | None = _bounds("domain_size", None)
    peak_flops_bf16: float = _bounds("peak_flops_16")
    peak_flops_fp8: float | None = _bounds("peak_flops_8", None)
    hbm_bytes: float = _bounds("hbm_bytes")
    hbm_bw_bytes_s: float = _bounds("hbm_bw")
    intra_node_bw_bytes_s_per_gpu: float = _bounds("intra_bw")
    inter_node_bw_bytes_s_per_gpu: float = _bounds("inter_bw")
    network: Text | None = None
    inter_node_bw_assumed: bool | None = None
    intra_node_bw_measured_bytes_s_per_gpu: float | None = Field(None, gt=0, le=1e14)
    intra_node_bw_assumed: bool | None = None


#: names RUNS.md records use for a schedule: DeepSeek-V2's "zero-bubble" PP (report sec. 3.1.3, citing Qi et al.
#: 2024) is the handcrafted schedule at 1F1B's memory, ZB-H1
SCHEDULE_ALIASES = {"zero_bubble": "zb_h1", "zero-bubble": "zb_h1", "zb-h1": "zb_h1", "zbh1": "zb_h1"}


def _schedule_name(value: Any) -> Any:
    """``"interleaved 1F1B, sync P2P (...)"`` -> ``"interleaved"``: a schedule name (or an alias,
    ``SCHEDULE_ALIASES``), then an optional remark."""
    if isinstance(value, str):
        head = re.split(r"[\s,;(]", value.strip(), maxsplit=1)[0].lower()
        head = SCHEDULE_ALIASES.get(head, head)
        return head if head in PIPELINE_SCHEDULES else value
    return value


def _optimizer_name(value: Any) -> Any:
    """``"adamw (BF16 moments, FP32 master weights)"`` -> ``"adamw"``: an optimizer name, then a remark. The first
    word alone decides: ``"muon (block matrices) + adamw (tied embedding / lm_head)"`` is ``"muon"``, which is
    Muon on the layers' matrices and AdamW on the rest by definition (docs/model.md §11.7 "Muon")."""
    if isinstance(value, str):
        head = re.split(r"[\s,;(]", value.strip(), maxsplit=1)[0].lower()
        return head if head in OPTIMIZER_CODES else value
    return value


#: ExecutionSpec fields whose record default or type differs from an execution spec's (RUNS.md fill-ins)
_PLAN_OVERRIDES: dict[str, tuple] = {
    "sequence_parallel": (bool, False),
    "recompute": (Literal[(*RECOMPUTE_CODES, "unknown")], "none"),  # type: ignore[misc]
    "micro_batch": (int | None, _bounds("micro_batch", None)),
    "pipeline_schedule": (Annotated[Literal[tuple(PIPELINE_SCHEDULES)], BeforeValidator(_schedule_name)]  # type: ignore[misc]
                          | None, None),
    "optimizer": (Annotated[Literal[tuple(OPTIMIZER_CODES)], BeforeValidator(_optimizer_name)], "adam"),  # type: ignore[misc]
    # RUNS.md's precision list (bf16 | fp8 | fp16): fp4 (NVFP4) is for specs, sweeps and -x (docs/model.md §11.38)
    "precision": (Literal["bf16", "fp8", "fp16"], "bf16"),
}
#: RUNS.md plan fields that are no execution option: the mesh, the batch, and informational fields
_PLAN_FIELDS: dict[str, tuple] = {
    "tp": (int, _bounds("tp")), "pp": (int, _bounds("pp")), "cp": (int, _bounds("cp", 1)),
    "ep": (int, _bounds("ep", 1)), "etp": (int | None, _bounds("etp", None)), "dp": (int | None, _bounds("dp", None)),
    "global_batch": (int, _bounds("global_batch")), "grad_accum": (PositiveInt | None, Field(None, le=1 << 30)),
    "replicate_degree": (PositiveInt | None, Field(None, le=1 << 24)),
    "activation_offload_layers": (NonNegativeInt | None, Field(None, le=4096)),
    "recompute_detail": (Text | None, None),
    # a recipe name or text naming one (fastmodel/lm/fp8_recipe.py; record_specs reads it)
    "fp8_recipe": (Text | None, None),
    "moe_dispatch_detail": (Text | None, None),
    "zero_detail": (Text | None, None),
    # FSDP1 forward_prefetch and MixedPrecision's param_dtype and buffer_dtype (its reduce_dtype is
    # grad_reduce_dtype; docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter")
    "fsdp_forward_prefetch": (bool | None, None),
    "fsdp_param_dtype": (Literal["fp32", "bf16", "fp16"] | None, None),
    "fsdp_buffer_dtype": (Literal["fp32", "bf16", "fp16"] | None, None),
    "pipeline_layer_balance": (Text | None, None),
}
#: plan fields recorded but not modelled yet -> the value the model assumes (a note names any other value;
#: None: every value is noted)
#: (plan.moe_grouped_gemm is modelled since docs/model.md §11.57: the execution option of the same name)
UNMODELLED = {  # FSDP1 forward_prefetch: one more unit gathered in the forward, after the loss has none to gather
    # and before it no modelled moment; time only where the CPU is the bottleneck (FSDP docs), not modelled
    "fsdp_forward_prefetch": False}
EXECUTION_FIELDS = tuple(name for name in ExecutionSpec.model_fields if name not in ("framework", "stack"))

PlanBlock = create_model(
    "PlanBlock", __base__=_Block, __doc__="RUNS.md ``plan``: the mesh, the batch and every execution option.",
    **{**{name: (ExecutionSpec.model_fields[name].annotation, ExecutionSpec.model_fields[name])
          for name in EXECUTION_FIELDS}, **_PLAN_OVERRIDES, **_PLAN_FIELDS},
)


class RecordSchema(_Block):
    """One RUNS.md record: the three blocks, the software, and informational fields."""

    id: str | int = ""
    source: Text = ""
    source_ref: Text | None = None
    reliability: Text | None = None
    workload: Text | None = None
    framework: Text | None = None
    stack: Literal[STACK_NAMES] | None = None  # type: ignore[valid-type]
    model: ModelBlock
    system: SystemBlock
    plan: PlanBlock  # type: ignore[valid-type]
    measured: Any = None
    assumptions: TextOrList | None = None
    flags: TextOrList | None = None
    notes: TextOrList | None = None
    parallelism_kind: Text | None = None
    tier: Annotated[int, Field(ge=1, le=2)] | None = None   # (Literal[1, 2] took True for 1)
    tier2_reasons: TextOrList | None = None

    @model_validator(mode="after")
    def _invariants(self):
        check_invariants(self.model, self.system, self.plan)
        return self


def check_invariants(model, system, plan) -> None:
    """RUNS.md's cross-field invariants; a FieldValueError naming the field to fix."""
    def fail(path: str, reason: str):
        raise FieldValueError(tuple(path.split(".")), reason)

    replica = plan.tp * plan.pp * plan.cp
    if plan.dp is not None and replica * plan.dp != system.n_gpus:
        fail("plan.dp", f"tp*pp*cp*dp = {replica * plan.dp} but system.n_gpus = {system.n_gpus} (RUNS.md invariant)")
    if system.n_gpus % replica:
        fail("plan.tp", f"tp*pp*cp = {replica} does not divide system.n_gpus = {system.n_gpus}")
    dp = system.n_gpus // replica
    if plan.micro_batch is not None and plan.grad_accum is not None \
            and plan.micro_batch * dp * plan.grad_accum != plan.global_batch:
        fail("plan.global_batch", f"{plan.global_batch} != micro_batch*dp*grad_accum = "
             f"{plan.micro_batch}*{dp}*{plan.grad_accum} (RUNS.md invariant)")
    if plan.micro_batch is None and plan.grad_accum is not None and plan.global_batch % (dp * plan.grad_accum):
        fail("plan.grad_accum", f"global_batch {plan.global_batch} is not a multiple of dp*grad_accum = "
             f"{dp * plan.grad_accum}: micro_batch would be fractional")
    if plan.global_batch < (plan.micro_batch or 1) * dp:
        fail("plan.global_batch", f"{plan.global_batch} is smaller than micro_batch x dp = {(plan.micro_batch or 1) * dp}")
    if plan.shard_degree is not None and (plan.shard_degree > dp or dp % plan.shard_degree):
        fail("plan.shard_degree", f"{plan.shard_degree} must divide dp = {dp}")
    if plan.replicate_degree is not None and plan.shard_degree is not None \
            and plan.replicate_degree * plan.shard_degree != dp:
        fail("plan.replicate_degree", f"replicate_degree*shard_degree = {plan.replicate_degree * plan.shard_degree} "
             f"but dp = {dp}")
    if plan.vp != 1 and plan.pp == 1:
        fail("plan.vp", f"vp = {plan.vp!r} needs pp > 1 (virtual stages interleave a pipeline)")
    for key in ("recompute_num_layers", "activation_offload_layers"):
        if (getattr(plan, key) or 0) > model.layers:
            fail(f"plan.{key}", f"{getattr(plan, key)} exceeds the model's {model.layers} layers")


class MeasuredBlock(BaseModel):
    """RUNS.md ``measured``, as ``validate`` and ``calibrate`` read it: a positive, finite step time (and
    memory when given); other keys are informational."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)
    step_time_s: float = Field(gt=0, le=1e9)
    memory_gib: float | None = Field(None, gt=0, le=1e6)


#: the schema class of each block, to name the valid keys of a typo
BLOCKS: dict[str, type[BaseModel]] = {"": RecordSchema, "model": ModelBlock, "system": SystemBlock,
                                      "plan": PlanBlock, "measured": MeasuredBlock}


def record_error(error: ValidationError, source: str | None, prefix: tuple = ()) -> SpecError:
    """The first problem of a record's validation as one line ``source: block.field: reason`` (the strict-block
    rule of ``fastmodel.spec.record_blocks.first_error``, rooted at the block ``prefix`` names)."""
    return first_error(error, source, BLOCKS[prefix[0]] if prefix else RecordSchema, prefix)
