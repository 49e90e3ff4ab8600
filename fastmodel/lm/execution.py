"""How a training run executes: ``ExecutionSpec``, every execution option of the real-world model once.

A field whose name is a registry column (``fastmodel.registry.lm``) lowers to that column as it is (booleans
as 0/1, code names through their code table); the few that are not columns (``vp = "unknown"``,
``pipeline_schedule`` left to the virtual stages, ``grad_reduce_dtype``, ``recompute_num_layers``) are
lowered by ``fastmodel.lm.lowering``. A field left ``None`` is decided by the run's software stack
(``fastmodel.lm.stacks``: ``stack``, or the profile the ``framework`` text names), else the column's
default. A run record's ``plan`` block accepts these same fields (``fastmodel.lm.record_schema``).

To add an execution option: its registry column with ``option`` set (``"flag"``, ``"number"`` or ``"code"``)
and its use in ``kernels/lm``: :data:`ExecutionSpec` derives the field (``None``: the stack decides, else the
column's default), run records accept it, sweeps take it as an axis. A field that needs more (a type of its
own, a default other than the column's, a check) is declared here by hand, with the profiles' defaults in
``fastmodel/lm/stacks/``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    create_model,
    model_validator,
)

from fastmodel.errors import FieldValueError
from fastmodel.lm.router_balance import BALANCE_METHODS
from fastmodel.lm.stacks import STACK_NAMES
from fastmodel.registry.lm import (
    CODE_TABLES,
    COLLECTIVE_ALGORITHMS,
    COLUMN_INDEX,
    COLUMNS,
    CP_ALGORITHMS,
    LOSS_IMPLS,
    OFFLOAD_MODULES,
    OPTIMIZER_CODES,
    PIPELINE_SCHEDULES,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    RECOMPUTE_MODULES,
    SELECTIVE_POLICIES,
    SHARDING_CODES,
)
from fastmodel.registry.validators import checker
from fastmodel.spec.columns import boolean_name
from fastmodel.spec.record_blocks import bounds

#: bytes per gradient element of the data-parallel reduction, by ``grad_reduce_dtype``
GRAD_REDUCE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}

#: why ``grad_accum_bytes`` > 0 is refused beside ``wgrad_fused_accumulation`` (docs/model.md §11.46): one reason,
#: the execution spec's and the lowering's (a stack that fuses, a plan that adds a pass)
WGRAD_TWICE = ("a separate gradient-accumulation pass beside wgrad_fused_accumulation: the fused weight-gradient "
               "GEMMs already accumulate into the main gradient (beta = 1, its read charged), so the main-gradient "
               "traffic would be charged twice (docs/model.md §11.46); set grad_accum_bytes = 0 or "
               "wgrad_fused_accumulation = false")



#: the registry column of the virtual stages: its bounds are ``vp``'s
_VP = COLUMNS[COLUMN_INDEX["vp"]]
_vp_check = checker(_VP)


def _virtual_stages(value):
    if value == "unknown" or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"expected a whole number >= {_VP.lo:g} or \"unknown\" (got {value!r})")


def _vp_in_column(value):
    return value if value == "unknown" else _vp_check(value)


#: virtual stages per pipeline rank: a count in the ``vp`` column's bounds, or "unknown" (the stack's rule)
VirtualStages = Annotated[int | Literal["unknown"], BeforeValidator(_virtual_stages), AfterValidator(_vp_in_column)]


def _names(codes: dict) -> type:
    """A Literal of a code table's names (so a code added to the registry is accepted at once)."""
    return Literal[tuple(codes)]  # type: ignore[valid-type]


class ExecutionSpec(BaseModel):
    """How a training run executes: the ``plan`` block of a run record without its mesh degrees."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    # software stack
    stack: _names(dict.fromkeys(STACK_NAMES)) | None = Field(  # type: ignore[valid-type]
        None, description="Stack profile by name (fastmodel/lm/stacks); default: the one `framework` names.")
    framework: str | None = Field("Megatron-Core", description="Framework text; picks the stack profile.")
    # pipeline
    vp: VirtualStages = Field(
        1, description="Virtual stages per pipeline rank; \"unknown\": the stack's rule (interleaved).")
    pipeline_schedule: _names(PIPELINE_SCHEDULES) | None = Field(  # type: ignore[valid-type]
        None, description="Default: interleaved when vp > 1, else 1f1b.")
    uneven_stages: bool = Field(False, description="Allow layers not divisible by pp x vp: the busiest stage "
                                                   "holds ceil(layers / (pp x vp)) x vp layers.")
    # data parallelism and sharding
    sharding: _names(SHARDING_CODES) = "distopt"  # type: ignore[valid-type]
    shard_degree: int | None = bounds("shard_degree", None, zero_unset=True,
                                      description="FSDP/HSDP shard group; default dp.")
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    collective_algorithm: _names(COLLECTIVE_ALGORITHMS) = "auto"  # type: ignore[valid-type]
    collective_bucket_bytes: float | None = bounds("collective_bucket_bytes", None)
    fsdp_copy_out: bool | None = None
    # tensor and context parallelism
    sequence_parallel: bool = True
    tp_comm_overlap: bool = False
    cp_algorithm: _names(CP_ALGORITHMS) | None = None  # type: ignore[valid-type]  # None: the stack's (ring)
    # batch and recompute
    micro_batch: int = bounds("micro_batch", 1)
    recompute: _names(RECOMPUTE_CODES) = "selective"  # type: ignore[valid-type]
    recompute_fraction: float | None = bounds("recompute_fraction", None)
    recompute_num_layers: NonNegativeInt | None = Field(None, le=4096)
    selective_policy: _names(SELECTIVE_POLICIES) | None = None  # type: ignore[valid-type]
    recompute_modules: list[_names(RECOMPUTE_MODULES)] | None = Field(  # type: ignore[valid-type]
        None, max_length=len(RECOMPUTE_MODULES),
        description="Megatron-Core recompute_modules under selective recompute; default [\"core_attn\"].")
    activation_offload: float = bounds("activation_offload", 0.0,
                                       description="Share of activations held in host memory.")
    activation_offload_modules: list[_names(OFFLOAD_MODULES)] | None = Field(  # type: ignore[valid-type]
        None, max_length=len(OFFLOAD_MODULES),
        description="Megatron-Core fine-grained activation offloading: the modules whose saved inputs go to host "
                    "memory (--offload-modules; docs/model_memory.md \"Fine-grained activation offloading\").")
    # precision recipe and optimizer
    precision: _names(PRECISION_CODES) = "bf16"  # type: ignore[valid-type]
    fp8_params: bool = False
    grad_reduce_dtype: _names(GRAD_REDUCE_BYTES) | None = Field(  # type: ignore[valid-type]
        None, description="Gradient dtype of the data-parallel reduction; default: the stack's, else fp32.")
    optimizer: _names(OPTIMIZER_CODES) = "adam"  # type: ignore[valid-type]
    # kernels the stack sets
    torch_compile: bool | None = Field(
        None, description="torch.compile (TorchInductor): element-wise chains fused, so fused_kernels defaults to "
                          "true (fastmodel/lm/stacks/__init__.py resolve).")
    loss_impl: _names(LOSS_IMPLS) | None = Field(  # type: ignore[valid-type]
        None, description="How the LM loss is computed (registry LOSS_IMPLS); default: the stack's, else "
                          "vocab_parallel.")
    fused_kernels: bool | None = None
    flash_attention: bool | None = None
    dropout: bool | None = None
    # MoE routing
    moe_balance: Literal[BALANCE_METHODS] | None = Field(  # type: ignore[valid-type]
        None, description="Router load balancing (fastmodel/lm/router_balance.py); sets moe_imbalance when the plan "
                          "leaves it unset (docs/model.md §11.14.5).")

    @model_validator(mode="before")
    @classmethod
    def _quantities(cls, data):
        """A bytes or bytes/s field given with its unit (``"25 MB"``, ``"10 GB/s"``), read as a sweep axis and a
        system spec read it (``-x collective_bucket_bytes=25MB`` was "Input should be a valid number")."""
        if not isinstance(data, dict):
            return data
        from fastmodel.spec.quantity import parse_quantity

        kinds = {"bytes": "bytes", "bytes/s": "bytes_per_s"}
        out = dict(data)
        for key, value in data.items():
            kind = kinds.get(COLUMNS[COLUMN_INDEX[key]].units) if key in COLUMN_INDEX else None
            if kind and isinstance(value, str):
                try:
                    out[key] = parse_quantity(value, kind)
                except ValueError as error:
                    raise FieldValueError((key,), str(error)) from None
        return out

    @model_validator(mode="after")
    def _consistent(self):
        interleaved = self.vp == "unknown" or self.vp > 1
        if self.pipeline_schedule == "interleaved" and not interleaved:
            raise FieldValueError(("vp",), "pipeline_schedule 'interleaved' needs vp > 1 (or \"unknown\")")
        if getattr(self, "moe_a2a_overlap", None) == "dualpipe" and self.pipeline_schedule != "dualpipe":
            raise FieldValueError(("moe_a2a_overlap",), "'dualpipe' overlaps the all-to-all inside DualPipe's "
                                  "chunk pairs: it needs pipeline_schedule = 'dualpipe' ('batch' is Megatron's "
                                  "overlap for the other schedules)")
        if getattr(self, "moe_dispatcher", None) == "deepep_ll":
            raise FieldValueError(("moe_dispatcher",), "'deepep_ll' is DeepEP's low-latency decode kernels, priced "
                                  "for serving only (docs/model_serving.md S39); training takes alltoall, allgather, "
                                  "deepep (flex) or einsum")
        offload = set(self.activation_offload_modules or ())
        if offload and self.activation_offload > 0:
            raise FieldValueError(("activation_offload_modules",), "fine-grained activation offloading cannot run "
                                  "with layer-level CPU offloading (activation_offload > 0), as Megatron-Core "
                                  "asserts (transformer_config.py@0823c73 line 1744)")
        if "attn_proj" in offload and "core_attn" not in offload:
            raise FieldValueError(("activation_offload_modules",), "attn_proj needs core_attn: the output projection's "
                                  "input is the core attention's output, which its backward needs "
                                  "(Megatron-Core transformer_config.py@0823c73 line 1764)")
        if (offload & {"expert_fc1", "moe_act"} and self.recompute == "selective"
                and "moe" in (self.recompute_modules or ())):
            raise FieldValueError(("activation_offload_modules",), "expert_fc1 and moe_act cannot be offloaded while "
                                  "selective recompute lists moe (Megatron-Core refuses the pair under selective "
                                  "granularity, transformer_config.py@0823c73 lines 1769-1779)")
        fwd, bwd = (getattr(self, f"moe_permute_{p}_bytes", None) or 0.0 for p in ("fwd", "bwd"))
        if (fwd > 0) != (bwd > 0):      # kernels/lm/moe.py reads bwd only with fwd > 0 (review15 #4)
            given, missing = ("fwd", "bwd") if fwd > 0 else ("bwd", "fwd")
            raise FieldValueError((f"moe_permute_{missing}_bytes",), f"moe_permute_{given}_bytes > 0 needs "
                                  f"moe_permute_{missing}_bytes > 0 too: a stack's own permutation bytes replace "
                                  "the generic count in both passes, so they are stated for both or neither "
                                  "(docs/model.md §11.61)")
        if getattr(self, "fa_qkv_prepare", None) and getattr(self, "attn_fa2", None) is False:
            raise FieldValueError(("fa_qkv_prepare",), "Transformer Engine copies the interleaved QKV only on its "
                                  "flash-attn path: fa_qkv_prepare needs attn_fa2 (TE 09ba842 attention.py "
                                  "~945-950; docs/model.md §11.60)")
        if getattr(self, "wgrad_fused_accumulation", None) and getattr(self, "grad_accum_bytes", None):
            raise FieldValueError(("grad_accum_bytes",), WGRAD_TWICE)
        if interleaved and self.pipeline_schedule not in (None, "interleaved"):
            raise FieldValueError(("pipeline_schedule",), f"{self.pipeline_schedule} runs one stage per rank; "
                                  "vp > 1 needs an interleaved schedule")
        return self

    def plan_block(self, **degrees) -> dict:
        """The ``plan`` block of a run record (RUNS.md) executing this way with mesh ``degrees``."""
        data = self.model_dump(exclude={"framework", "stack"})
        return {k: v for k, v in {**data, **degrees}.items() if v is not None}


def accumulated_twice(execution) -> str | None:
    """The refusal of a resolved execution (its stack applied) that fuses the weight-gradient accumulation and
    runs an accumulation pass besides (:data:`WGRAD_TWICE`, naming the stack that set one of them); else None.
    The lowering and the run records raise it, each under its own field path."""
    if execution.wgrad_fused_accumulation and execution.grad_accum_bytes:
        return f"{WGRAD_TWICE} (stack {execution.stack} sets one of the two)"
    return None


def option_fields(columns) -> dict[str, tuple]:
    """Pydantic fields of the registry columns marked as execution options (``Column.option``): true/false for a
    ``flag``, a number within the column's bounds for a ``number``, a name of its code table for a ``code`` (or
    the boolean a record may give, ``fastmodel.spec.columns.BOOLEAN_CODE_NAMES``: ``cuda_graphs = true`` is
    ``layer``); each ``None`` by default (the stack decides, else the column's default)."""
    fields = {}
    for column in columns:
        if not column.option:
            continue
        annotation = {"flag": bool, "number": Annotated[float, AfterValidator(checker(column))],
                      "code": Annotated[_names(CODE_TABLES.get(column.name, {})),  # type: ignore[valid-type]
                                        BeforeValidator(lambda value, name=column.name: boolean_name(name, value))],
                      }[column.option]
        fields[column.name] = (annotation | None, Field(None, description=column.doc))
    return fields


def with_options(base: type[BaseModel], columns) -> type[BaseModel]:
    """``base`` with a field for every execution-option column it does not declare itself."""
    extra = {name: field for name, field in option_fields(columns).items() if name not in base.model_fields}
    return create_model(base.__name__, __base__=base, __module__=base.__module__, **extra) if extra else base


#: every execution option: the fields above and one per registry column marked ``option``
ExecutionSpec = with_options(ExecutionSpec, COLUMNS)


def with_uneven_stages(execution, layers: int, pp: int):
    """``execution`` with ``uneven_stages`` on where ``pp x vp`` does not divide both ``layers`` and, with
    ``embedding_loss_in_split`` at pp > 1, the ``layers + 2`` slots Megatron-Core divides
    (``TransformerConfig.__post_init__``, NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py
    lines 2370-2415; the rule ``layers_not_divisible``, kernels/lm/rules.py); else ``execution`` itself. A run
    record, or a stack's own vp rule, that does not divide them ran its stages unevenly (the ``layers`` test alone
    was the rule before the two slots)."""
    chunks = pp * execution.vp
    slots = layers + (2 if execution.embedding_loss_in_split and pp > 1 else 0)
    if execution.uneven_stages or (layers % chunks == 0 and slots % chunks == 0):
        return execution
    return execution.model_copy(update={"uneven_stages": True})
