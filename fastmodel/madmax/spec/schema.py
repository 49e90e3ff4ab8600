"""JSON Schemas of the spec kinds (``fastmodel specs schema KIND``)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field, TypeAdapter

from fastmodel.madmax.families import MODEL_FAMILIES
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec


def json_schema(kind: str) -> dict:
    """The JSON Schema of ``kind`` ('model', 'system' or 'task')."""
    if kind == "model":
        families = tuple(MODEL_FAMILIES.values())
        schema = TypeAdapter(Annotated[Union[families], Field(discriminator="family")]).json_schema()
    elif kind == "system":
        schema = SystemSpec.model_json_schema()
    elif kind == "task":
        schema = TaskSpec.model_json_schema()
    else:
        raise ValueError(kind)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("title", f"fastmodel {kind} spec")
    return schema
