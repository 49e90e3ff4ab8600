"""Serving task specs (``kind = "serve"``): one LLM serving workload for ``fastmodel sweep`` files.

    name = "chat-1k-128"
    kind = "serve"
    input_len = 1024
    output_len = 128
    batch_size = 64            # or concurrency = 64, or max_throughput = true (or leave it to a sweep axis)
    precision = "bf16"         # bf16 | fp16 | fp8 | fp4 | mxfp4 | int8 | int4 (weight-only)
    tp = 4
    engine = "vllm 0.18.0"     # optional: trtllm, vllm, sglang [VERSION]; default TensorRT-LLM (docs S13)

The fields are the serving columns of ``fastmodel.serve.api`` (docs/model_serving.md);
a sweep axis of the same name overrides the task's value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fastmodel.errors import SpecError
from fastmodel.serve.precisions import KV_DEFAULT_SAID
from fastmodel.serve.training_columns import TRAINING_COLUMNS  # noqa: F401  (re-exported)
from fastmodel.spec.record_blocks import bounds

#: the load modes of a serving configuration, each a field of the same name in a task, a record's serve block
#: and ``fastmodel.serve.api.columns``
LOAD_FIELDS = ("batch_size", "concurrency", "max_throughput")


def given_loads(batch_size, concurrency, max_throughput) -> list[str]:
    """The load modes given, in :data:`LOAD_FIELDS` order: ``batch_size`` and ``concurrency`` when set (not None),
    ``max_throughput`` when true."""
    return [name for name, value in zip(LOAD_FIELDS, (batch_size, concurrency, max_throughput or None))
            if value is not None]


def not_one_load(given: list[str]) -> str | None:
    """The refusal of a configuration that gives other than exactly one load mode (``given``, :func:`given_loads`):
    one configuration (``fastmodel.serve.api.load_columns``) and a record's serve block alike; None for one."""
    if len(given) == 1:
        return None
    return f"give exactly one of {', '.join(LOAD_FIELDS)}" + (f" (got {', '.join(given)})" if given else "")


class ServeTaskSpec(BaseModel):
    """An LLM serving workload: lengths, at most one load mode, precisions and the instance's plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    kind: Literal["serve"]
    description: str = ""
    input_len: int = bounds("input_len", description="Prompt tokens per request.")
    output_len: int = bounds("output_len", description="Generated tokens per request.")
    batch_size: int | None = bounds("batch_size", None, description="Static batch of requests.")
    concurrency: int | None = bounds("batch_size", None, description="Requests in flight (continuous batching).")
    max_throughput: bool = Field(False, description="As many requests as the KV cache holds.")
    # the precisions a precision axis and `serve --precision` take (fastmodel.serve.precisions.PRECISIONS)
    precision: Literal["bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4"] = "bf16"
    kv_precision: Literal["bf16", "fp16", "fp8"] | None = Field(None, description=KV_DEFAULT_SAID)
    kv_cache_mem_fraction: float = bounds("kv_cache_mem_fraction", 0.9,
                                          description="Share of free HBM for the KV cache (vLLM profile, "
                                                      "kv_budget_of_total 1: f x HBM - the rest; S66).")
    tp: int = bounds("tp", 1)
    pp: int = bounds("pp", 1)
    ep: int = bounds("ep", 1)
    instances: int = bounds("instances", 1, description="Serving instances in the cluster.")
    spec_tokens: int = bounds("spec_tokens", 0, description="Speculative decoding: draft tokens per decode step "
                              "(any load; docs/model_serving.md S18).")
    spec_acceptance: float = bounds("spec_acceptance", 0.0,
                                    description="Speculative decoding: a draft token's acceptance.")
    engine: str | None = Field(None, description="The serving engine whose profile sets the scheduler columns: "
                               "trtllm, vllm or sglang, optionally with a known version (\"vLLM 0.18.0\"); "
                               "default: TensorRT-LLM's newest profile (docs/model_serving.md S13).")

    @model_validator(mode="after")
    def _one_load_mode(self):
        given = given_loads(self.batch_size, self.concurrency, self.max_throughput)
        if len(given) > 1:
            raise ValueError(f"give at most one load mode of {', '.join(LOAD_FIELDS)} (got {', '.join(given)})")
        return self

    @property
    def load_mode(self) -> str | None:
        if self.batch_size is not None:
            return "batch"
        if self.concurrency is not None:
            return "concurrency"
        return "max_throughput" if self.max_throughput else None


def serve_task_schema() -> dict:
    """The JSON Schema of a serving task (``fastmodel specs schema serve-task``): the model :func:`load_serve_task`
    validates against, its registry-bounded fields with the column's ``units``, ``minimum`` and ``maximum``
    (``fastmodel.spec.record_blocks.column_schema``)."""
    schema = ServeTaskSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = 'fastmodel serving task spec (kind = "serve")'
    return schema


def is_serve_task(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "serve"


def load_serve_task(spec: Any) -> ServeTaskSpec:
    """A serving task from a built-in name, a .toml/.json path, a dict or a spec object; a field naming a column
    serving refuses (``TRAINING_COLUMNS``) is refused with its reason."""
    from fastmodel.spec.loader import resolve_source, validate

    if isinstance(spec, ServeTaskSpec):
        return spec
    data, source = resolve_source(spec, "task")
    if not is_serve_task(data):
        raise SpecError(source, "task.kind", f"{data.get('kind') if isinstance(data, dict) else data!r} is not a "
                        "serving task (kind = \"serve\")")
    refused = [key for key in data if key in TRAINING_COLUMNS]     # recompute = "full": not "unknown field"
    if refused:
        raise SpecError(source, f"task.{refused[0]}", TRAINING_COLUMNS[refused[0]])
    return validate(ServeTaskSpec, data, source, "task")
