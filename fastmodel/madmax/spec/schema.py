"""JSON Schemas of the spec kinds (``fastmodel specs schema KIND``)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field, TypeAdapter

from fastmodel.madmax.families import MODEL_FAMILIES
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec


def json_schema(kind: str) -> dict:
    """The JSON Schema of ``kind`` ('model', 'system', 'task' or 'serve-task': a serving task, ``kind = "serve"``,
    ``fastmodel.serve.spec.ServeTaskSpec``; its registry-bounded fields carry ``units``, ``minimum``, ``maximum``)."""
    if kind == "model":
        families = tuple(MODEL_FAMILIES.values())
        schema = TypeAdapter(Annotated[Union[families], Field(discriminator="family")]).json_schema()
    elif kind == "system":
        schema = SystemSpec.model_json_schema()
    elif kind == "task":
        schema = TaskSpec.model_json_schema()
    elif kind == "serve-task":     # the model the serving loader validates against (load_serve_task)
        from fastmodel.serve.spec import ServeTaskSpec

        schema = ServeTaskSpec.model_json_schema()
        schema["title"] = "fastmodel serving task spec (kind = \"serve\")"
    else:
        raise ValueError(kind)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("title", f"fastmodel {kind} spec")
    return schema
