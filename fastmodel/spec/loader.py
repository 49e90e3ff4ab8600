"""Load specs from built-in names, TOML/JSON files or dicts, in either format.

``load_model`` / ``load_system`` / ``load_task`` accept a spec object, a dict
(fastmodel keys or the MAD-Max reference's keys, detected from the content),
a path to a ``.toml`` or ``.json`` file, or the name of a built-in spec in
``specs/``. Every error is a :class:`SpecError` naming the source, the field
path and the reason.
"""

from __future__ import annotations

import json
import numbers
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fastmodel.errors import FieldValueError, SpecError, nearest
from fastmodel.madmax.families import MODEL_FAMILIES, ModelSpec
from fastmodel.madmax.spec import madmax_format
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KINDS = ("model", "system", "task", "sweep")


# --- built-in library -------------------------------------------------------

def _library_dir(kind: str):
    return resources.files("fastmodel.specs").joinpath(f"{kind}s")


@lru_cache(maxsize=None)
def _builtin_names(kind: str) -> tuple[str, ...]:
    folder = _library_dir(kind)
    return tuple(sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml")))


def builtin_names(kind: str) -> list[str]:
    """Names of the built-in specs of ``kind`` (model, system or task)."""
    return list(_builtin_names(kind))


def builtin_text(kind: str, name: str) -> str:
    return _library_dir(kind).joinpath(f"{name}.toml").read_text()


@lru_cache(maxsize=None)
def _builtin_data(kind: str, name: str) -> dict:
    return tomllib.loads(builtin_text(kind, name))


# --- validation helpers -----------------------------------------------------

def _model_in(annotation) -> type[BaseModel] | None:
    """The spec class inside an annotation (``Sub``, ``Sub | None``, ``tuple[Sub, ...]``, ``Annotated[...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = getattr(annotation, "__origin__", None)
    for inner in (*getattr(annotation, "__args__", ()), origin):
        found = _model_in(inner) if inner is not None and inner is not annotation else None
        if found is not None:
            return found
    return None


def _fields_at(cls: type[BaseModel], path: tuple) -> list[str]:
    """Valid field names of the (nested) model reached by ``path`` from ``cls`` (list indices skipped)."""
    current: Any = cls
    for part in path:
        if isinstance(part, int):
            continue
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = _model_in(field.annotation)
    return list(current.model_fields) if current is not None else []


def validation_to_spec_error(error: ValidationError, cls: type[BaseModel], source: str | None, kind: str) -> SpecError:
    """The first pydantic error as a one-line :class:`SpecError`."""
    errors = sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden")  # typos explain "missing"
    first = errors[0]
    loc = tuple(first["loc"])
    blamed = first.get("ctx", {}).get("error")
    if isinstance(blamed, FieldValueError):  # a model validator pointing at a nested field
        loc += blamed.path
    field = ".".join([kind, *map(str, loc)]) if loc else kind
    if first["type"] == "extra_forbidden":
        reason = "unknown field" + nearest(str(loc[-1]), _fields_at(cls, loc[:-1]))
    elif first["type"] == "missing":
        reason = "required field missing"
    else:
        message = first["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, "):]
        reason = message
        if "input" in first and first["type"] not in ("value_error",) and not isinstance(first["input"], dict):
            reason += f" (got {first['input']!r})"
    if len(errors) > 1:
        reason += f" [and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}]"
    return SpecError(source, field, reason)


def validate(cls: type[BaseModel], data: dict, source: str | None, kind: str):
    try:
        return cls.model_validate(data)
    except ValidationError as error:
        raise validation_to_spec_error(error, cls, source, kind) from None


# --- reading ---------------------------------------------------------------

def read_file(path: Path) -> dict:
    """Parse a TOML or JSON file into a dict; errors name the file."""
    source = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(source, None, "no such file") from None
    except UnicodeDecodeError:
        raise SpecError(source, None, "not UTF-8 text") from None
    except OSError as error:
        raise SpecError(source, None, f"cannot read: {error.strerror}") from None
    text = text.lstrip("\ufeff")
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError(source, None, f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(source, None, f"invalid TOML: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(source, None, "expected an object/table at the top level")
    return data


def _resolve_source(spec: Any, kind: str) -> tuple[dict | BaseModel, str | None]:
    """Turn a name, path or dict into (data, source label)."""
    if isinstance(spec, BaseModel) or isinstance(spec, dict):
        return spec, None
    if isinstance(spec, Path) or isinstance(spec, str):
        text = str(spec)
        if not text.strip():
            raise SpecError(None, kind, f"empty {kind}: give a built-in name (see 'fastmodel specs list {kind}') "
                            "or a .toml/.json path")
        path = Path(text)
        names = _builtin_names(kind)
        if path.suffix in (".toml", ".json") or "/" in text or "\\" in text:
            return read_file(path), text
        if text in names:  # a bare name means the built-in, even if a file of that name is here
            return _builtin_data(kind, text), text
        if path.exists():
            return read_file(path), text
        other = [k for k in ("model", "system", "task", "sweep") if k != kind and text in _builtin_names(k)]
        hint = f"; {text!r} is a built-in {other[0]}" if other else nearest(text, names)
        raise SpecError(None, kind, f"unknown built-in {kind} {text!r}{hint}; "
                        f"see 'fastmodel specs list' or pass a .toml/.json path")
    raise SpecError(None, kind, f"expected a name, a path or a dict, got {type(spec).__name__}")


def load_model(spec: Any) -> ModelSpec:
    """A model spec from a name, path, dict (either format) or spec object."""
    from fastmodel.lm.spec import LMSpec

    if isinstance(spec, (*MODEL_FAMILIES.values(), LMSpec)):
        return spec
    data, source = _resolve_source(spec, "model")
    if madmax_format.is_madmax_model(data):
        data = madmax_format.model_to_spec(data, source, validate)
    family = data.get("family")
    if family == "lm":
        from fastmodel.lm.spec import LMSpec
        return validate(LMSpec, data, source, "model")
    if family is None:
        raise SpecError(source, "model.family", f"required field missing (one of {', '.join(MODEL_FAMILIES)})"
                        + ("; the spec is empty" if not data else ""))
    if not isinstance(family, str) or family not in MODEL_FAMILIES:
        raise SpecError(source, "model.family", f"unknown family {family!r}; one of {', '.join(MODEL_FAMILIES)}"
                        f"{nearest(str(family), MODEL_FAMILIES)}")
    return validate(MODEL_FAMILIES[family], data, source, "model")


def load_system(spec: Any, num_nodes: int | None = None) -> SystemSpec:
    """A system spec; ``num_nodes`` overrides the cluster size."""
    from fastmodel.lm.spec import ClusterSpec

    if isinstance(spec, ClusterSpec):
        from fastmodel.lm.loader import load_cluster
        return load_cluster(spec, num_nodes)
    if isinstance(spec, SystemSpec):
        system = spec
    else:
        data, source = _resolve_source(spec, "system")
        if isinstance(data, dict) and data.get("kind") == "cluster":
            from fastmodel.lm.loader import load_cluster
            return load_cluster(data if source is None else spec, num_nodes)
        if madmax_format.is_madmax_system(data):
            data = madmax_format.system_to_spec(data, source, validate)
        system = validate(SystemSpec, data, source, "system")
    if num_nodes is not None:
        if isinstance(num_nodes, numbers.Integral) and not isinstance(num_nodes, bool):
            num_nodes = int(num_nodes)
        system = system.with_nodes(num_nodes)
    return system


def load_task(spec: Any) -> TaskSpec:
    """A task spec from a name, path, dict (either format) or spec object."""
    if isinstance(spec, TaskSpec):
        return spec
    data, source = _resolve_source(spec, "task")
    if isinstance(data, dict) and data.get("kind") == "serve":
        raise SpecError(source, "task.kind", "a serving task (kind = \"serve\"): sweep it from a sweep file "
                        "('fastmodel sweep FILE.toml') or evaluate one configuration with 'fastmodel serve'")
    if madmax_format.is_madmax_task(data):
        data = madmax_format.task_to_spec(data, source, validate)
    task = validate(TaskSpec, data, source, "task")
    task._source = source
    return task


@lru_cache(maxsize=256)
def load_cached(kind: str, text: str):
    """Load a spec given as JSON text or a name (memoised, for batch mode)."""
    value = json.loads(text) if text.startswith("{") else text
    return {"model": load_model, "system": load_system, "task": load_task}[kind](value)
