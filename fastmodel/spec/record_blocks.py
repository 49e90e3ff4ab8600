"""Typed blocks of measured-run records, shared by the engines that read records (RUNS.md, SERVE_RUNS.md).

A record block is strict like a spec file: counts are integers, booleans come only from JSON booleans, strings
are never read as numbers, keys outside the schema are refused with the nearest valid key, magnitudes stay in
the registry's column bounds, and JSON ``null`` means "absent". :func:`first_error` turns a pydantic
``ValidationError`` into the one-line ``FILE[:LINE]: block.field: reason`` every input error has.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from fastmodel.errors import FieldValueError, SpecError, UnsupportedError, nearest
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.registry.validators import checker


def bounds(column: str, default: Any = ..., *, zero_unset: bool = False, **kw) -> Any:
    """A Field checked like the registry column ``column`` (``fastmodel.registry.lm``): its bounds and forbidden
    intervals, with the reason every input path gives (``fastmodel.registry.validators.column_problem``).
    ``zero_unset``: the column's 0 is its "not set" code (``moe_tp`` 0: tp x attention_dp / ep); a spec or record
    says "not set" by leaving the field out (null), so a 0 there is refused saying so (:data:`ZERO_UNSET`)."""
    field = Field(default, json_schema_extra=column_schema(column), **kw)
    field.metadata.append(column_check(column))
    if zero_unset:
        field.metadata.append(AfterValidator(_not_zero))
    return field


def column_schema(column: str) -> dict:
    """What the JSON Schema of a :func:`bounds` field says of the registry column ``column``, the bounds its check
    applies: ``units`` (the registry's, "1" for a share or a count of nothing) and ``minimum`` / ``maximum``
    where finite (``fastmodel specs schema serve-task``; the forbidden intervals are the check's alone)."""
    col = COLUMNS[COLUMN_INDEX[column]]
    said: dict = {"units": col.units}
    for key, value in (("minimum", col.lo), ("maximum", col.hi)):
        if abs(value) != float("inf"):
            said[key] = int(value) if float(value).is_integer() else value
    return said


def column_check(column: str) -> AfterValidator:
    """The registry column ``column``'s check as a pydantic ``AfterValidator`` (for a type: ``Annotated[int,
    column_check("batch_size")]``), so a spec or record bound is the column's, not a copy of it."""
    return AfterValidator(checker(COLUMNS[COLUMN_INDEX[column]]))


#: the reason a 0 is refused where the column's 0 means "not set" (``bounds(..., zero_unset=True)``)
ZERO_UNSET = "0 is the registry's code for 'not set'; leave the field out (or null) for its default"


def _not_zero(value):
    if value == 0:
        raise ValueError(ZERO_UNSET)
    return value


def drop_nulls(data: Any, fields) -> Any:
    """``data`` without the known fields set to null (an unknown key stays, to be refused even when null)."""
    return {k: v for k, v in data.items() if v is not None or k not in fields} if isinstance(data, dict) else data


class Block(BaseModel):
    """A strict record block: no unknown key, no coercion, no inf/nan, nulls are absent."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data):
        return drop_nulls(data, cls.model_fields)


def _block_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class a field's annotation holds (``X``, ``X | None``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def field_path(root: type[BaseModel], loc: tuple) -> tuple[tuple, type[BaseModel]]:
    """(``loc`` cut after the field, the block class that holds that field): walks ``root``'s fields, so the
    union-member tags pydantic appends (``int``, ``literal['unknown']``) are dropped."""
    block = root
    path: list = []
    for part in loc:
        path.append(part)
        field = block.model_fields.get(str(part))
        inner = _block_of(field.annotation) if field is not None else None
        if inner is None:
            break
        block = inner
    return tuple(path), block


#: engines' names for a field the schema spells otherwise. The MTP / draft depth ``serve.spec_tokens`` (k draft
#: tokens per decode step, docs/model_serving.md S18) is: vLLM ``--speculative-config`` key ``num_speculative_tokens``
#: (vllm@f19b16d vllm/config/speculative.py ``SpeculativeConfig``, method ``"mtp"``); SGLang
#: ``--speculative-num-steps`` (the drafting depth, docs.sglang.io "Speculative Decoding"; at
#: ``--speculative-eagle-topk 1`` SGLang sets ``speculative_num_draft_tokens = speculative_num_steps + 1``, the
#: verified token counted, python/sglang/srt/server_args.py, so DeepSeek MTP's minimum is steps 1, draft tokens 2);
#: TensorRT-LLM ``speculative_config`` ``decoding_type: MTP`` ``num_nextn_predict_layers``
#: (TensorRT-LLM@fcd3f31 tensorrt_llm/llmapi/llm_args.py ``MTPDecodingConfig``: N modules, N draft tokens); the
#: checkpoint's ``num_nextn_predict_layers`` (DeepSeek-V3's MTP depth D, report sec. 2.2)
SYNONYMS = {"mtp_depth": "spec_tokens", "mtp": "spec_tokens", "num_speculative_tokens": "spec_tokens",
            "speculative_num_steps": "spec_tokens", "speculative_num_draft_tokens": "spec_tokens",
            "num_nextn_predict_layers": "spec_tokens", "draft_tokens": "spec_tokens"}
#: a synonym that is not the same count: how to convert it
SYNONYM_REMARKS = {"speculative_num_draft_tokens": "; SGLang counts the verified token too: spec_tokens = "
                                                   "speculative_num_draft_tokens - 1 at --speculative-eagle-topk 1"}


def _synonym(name: str, fields) -> str:
    """`` (the schema calls it 'x')`` when ``name`` is an engine's name for the field ``x`` of ``fields``, with
    the conversion when the engine counts otherwise (``SYNONYM_REMARKS``)."""
    target = SYNONYMS.get(name.lower())
    remark = SYNONYM_REMARKS.get(name.lower(), "")
    return f" (the schema calls it '{target}'{remark})" if target in fields else ""


#: pydantic's error types of a value that should have been a number
_NUMBER_TYPES = ("float_type", "int_type", "float_parsing", "int_parsing")


def first_error(error: ValidationError, source: str | None, root: type[BaseModel], prefix: tuple = ()) -> SpecError:
    """The first problem of a record's validation as one line ``source: block.field: reason`` (typos first:
    an unknown key often explains a missing one). An unknown key or a value outside a list is an
    ``UnsupportedError`` (``validate`` counts the record as a miss; every other command stops on it)."""
    errors = sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc, _ = field_path(root, tuple(first["loc"]))
    blamed = first.get("ctx", {}).get("error")
    if isinstance(blamed, FieldValueError):
        loc = (*loc, *blamed.path)
    field = ".".join(map(str, (*prefix, *loc))) or "record"
    if first["type"] == "extra_forbidden":
        owner = field_path(root, loc[:-1])[1]
        reason = "unknown field" + (_synonym(str(loc[-1]), owner.model_fields) or
                                    nearest(str(loc[-1]), owner.model_fields))
    elif first["type"] == "missing":
        reason = "required field missing"
    else:
        reason = first["msg"].removeprefix("Value error, ")
        if first["type"] not in ("value_error", "model_type") and "input" in first:
            reason += f" (got {first['input']!r:.100})"
        if first["type"] in _NUMBER_TYPES and re.fullmatch(r"\s*[-+.\deE]+\s*[A-Za-z/%][\w/%. ]*", str(first.get("input"))):
            reason += "; a record states plain numbers in SI units (bytes, FLOP/s, bytes/s, s), no unit text"
        if first["type"] == "literal_error":
            # matched on the value's first word, its name ("moun (block matrices)" -> 'muon')
            words = str(first.get("input")).strip().split() or [""]
            reason += nearest(words[0].lower(), re.findall(r"'([^']*)'", first["ctx"]["expected"]))
    # may be right for a later schema: an unknown key, a choice outside the list
    unsupported = first["type"] in ("extra_forbidden", "literal_error") or getattr(blamed, "unsupported", False)
    return (UnsupportedError if unsupported else SpecError)(source, field, reason)
