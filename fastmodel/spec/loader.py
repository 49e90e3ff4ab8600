"""Reading specs, shared by every engine: built-in names, TOML/JSON files, dicts, and one-line errors.

:func:`resolve_source` turns a built-in name (``specs/``), a ``.toml``/``.json`` path or a dict into
(raw data, source label); :func:`validate` checks raw data against a pydantic spec class and turns its
first problem into a :class:`SpecError` naming the source, the field path and the reason (with the nearest
valid key for a typo). Each engine's loader builds on these (fastmodel/madmax/spec/loader.py,
fastmodel/lm/loader.py, fastmodel/serve/spec.py); :mod:`fastmodel.engines` loads a spec of any engine.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fastmodel.errors import NESTED_TOO_DEEP, FieldValueError, SpecError, nearest
from fastmodel.spec.quantity import count_suffix_hint

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
            reason += f" (got {first['input']!r})" + count_suffix_hint(first["input"])     # seq_len = "8k"
        if first["type"] == "literal_error" and isinstance(first.get("input"), str):
            # a name outside a code table: the nearest name, matched on the value's first word (its name)
            words = first["input"].strip().split()
            reason += nearest(words[0].lower() if words else "", re.findall(r"'([^']*)'", first["ctx"]["expected"]))
    if len(errors) > 1:
        reason += f" [and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''}]"
    return SpecError(source, field, reason)


def validate(cls: type[BaseModel], data: dict, source: str | None, kind: str):
    try:
        return cls.model_validate(plain_numbers(data))
    except ValidationError as error:
        raise validation_to_spec_error(error, cls, source, kind) from None


def plain_numbers(data: Any, depth: int = 0) -> Any:
    """``data`` (a spec dict from Python) with each numpy scalar as the Python number it holds (``np.int64(2)`` ->
    ``2``): the strict spec schemas take ``int``, and a notebook's values are often numpy's. Containers are
    rebuilt only down to the nesting any spec has (deeper data is left for the schema to refuse)."""
    if hasattr(data, "dtype") and getattr(data, "shape", None) == () and hasattr(data, "item"):
        return data.item()
    if depth > 8:
        return data
    if isinstance(data, dict):
        return {key: plain_numbers(value, depth + 1) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(plain_numbers(value, depth + 1) for value in data)
    return data


# --- reading ---------------------------------------------------------------

def read_file(path: Path) -> dict:
    """Parse a TOML or JSON file into a dict; errors name the file."""
    source = str(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise SpecError(source, None, "YAML is not read: write the spec as TOML (.toml) or JSON (.json)")
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
    except RecursionError:
        raise SpecError(source, None, f"invalid {'JSON' if path.suffix == '.json' else 'TOML'}: {NESTED_TOO_DEEP}") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(source, None, f"invalid TOML: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(source, None, "expected an object/table at the top level")
    return data


def _not_empty(data: dict, source: str, kind: str) -> dict:
    """``data`` of a spec file, refused when the file holds no field at all (an empty or comments-only file given
    as a model, system or task, which no engine would otherwise blame on the file)."""
    if not data and kind in ("model", "system", "task"):
        example = {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain"}[kind]
        raise SpecError(source, None, f"the file is empty: a {kind} spec needs its fields ('fastmodel specs show "
                                      f"{example}' prints one)")
    return data


def _device_hint(text: str, kind: str) -> str:
    """For a device name given as a system (``-s b300``): the built-in systems whose ``gpu`` is that device (the
    same device file), as the "did you mean", or, for a device no built-in system is built on, that it is a device
    (a cluster file states it as ``gpu``); "" for anything else."""
    from fastmodel.spec.devices import device_files

    stem = device_files().get(text.lower()) if kind == "system" else None
    if stem is None:
        return ""
    systems = [name for name in _builtin_names("system")
               if device_files().get(str(_builtin_data("system", name).get("gpu", "")).lower()) == stem]
    if not systems:
        return f"; {text!r} is a device with no built-in system (a kind = \"cluster\" file states it as gpu)"
    what = "the built-in system" if len(systems) == 1 else "the built-in systems"
    return f" (did you mean {' or '.join(map(repr, systems))}, {what} on device {text!r}?)"


def is_spec_file(spec: Any, kind: str) -> bool:
    """Whether :func:`resolve_source` reads ``spec`` from a file (a path, or a name that is no built-in ``kind``
    but a file here), not a built-in, dict or spec object: errors a file's own field causes name the file."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        return False
    text = str(spec)
    if Path(text).suffix in (".toml", ".json") or "/" in text or "\\" in text:
        return True
    return text not in _builtin_names(kind) and Path(text).exists()


def _file_data(path: Path, text: str, kind: str) -> dict:
    """The data of the ``kind`` spec file ``text``; a model file that is another input (JSON lines, a record, a
    sweep file, a cluster spec) is refused naming what it is (:mod:`fastmodel.spec.other_inputs`), read once."""
    from fastmodel.spec.other_inputs import refuse_jsonl_model, refuse_other_model

    if kind == "model":
        refuse_jsonl_model(text)
    data = _not_empty(read_file(path), text, kind)
    if kind == "model":
        refuse_other_model(data, text)
    return data


def resolve_source(spec: Any, kind: str) -> tuple[dict | BaseModel, str | None]:
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
            return _file_data(path, text, kind), text
        if text in names:  # a bare name means the built-in, even if a file of that name is here
            return _builtin_data(kind, text), text
        if path.exists():
            return _file_data(path, text, kind), text
        other = [k for k in ("model", "system", "task", "sweep") if k != kind and text in _builtin_names(k)]
        hint = f"; {text!r} is a built-in {other[0]}" if other else _device_hint(text, kind) or nearest(text, names)
        raise SpecError(None, kind, f"unknown built-in {kind} {text!r}{hint}; "
                        f"see 'fastmodel specs list' or pass a .toml/.json path")
    several = f" (several {kind}s: a MAD-Max sweep's {kind} axis, axes={{'{kind}': [...]}})" \
        if isinstance(spec, (list, tuple)) and kind in ("model", "system") else ""
    raise SpecError(None, kind, f"expected a name, a path or a dict, got {type(spec).__name__}{several}")
