"""Sweep files of every engine: a TOML file (or a built-in sweep name) -> the engine's sweep plan.

The file is read here, its engine chosen by content (``fastmodel.engines.for_sweep``: a ``kind = "serve"``
task is serving, a ``family = "lm"`` model or ``kind = "cluster"`` system the real-world training model, else
MAD-Max) and handed to that engine's door (``sweep_plan_from_file``), which checks its keys and axes and names
the file in every error. Paths inside the file (model, system, task, spec axes) are relative to it.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest
from fastmodel.spec.loader import builtin_names, read_file, resolve_source


def spec_ref(value, base: Path):
    """A name stays a name; a relative path is taken relative to the sweep file."""
    if isinstance(value, str) and (value.endswith((".toml", ".json")) or "/" in value):
        path = Path(value)
        return str(path if path.is_absolute() else base / path)
    return value


def locate(path: str) -> str:
    """The file of a sweep path or built-in sweep name."""
    if not Path(path).exists() and path in builtin_names("sweep"):
        return str(resources.files("fastmodel.specs").joinpath("sweeps", f"{path}.toml"))
    if not Path(path).exists() and not path.endswith(".toml"):
        raise SpecError(path, None, f"no such sweep file or built-in sweep{nearest(path, builtin_names('sweep'))}")
    return path


def raw_spec(value, base: Path, kind: str):
    """The raw content of a model, system or task named in a sweep file (None when unreadable: the engine's
    loader says why)."""
    if not isinstance(value, (str, dict)):
        return None
    try:
        return resolve_source(spec_ref(value, base), kind)[0]
    except SpecError:
        return None


def check_keys(source: str, data: dict, allowed, required, homes: tuple = ()) -> None:
    """SpecError for the first top-level key not in ``allowed`` (with the nearest one) or ``required`` missing.
    ``homes``: (names, where) pairs saying where a field that is not a top-level key goes (``micro_batch``: under
    [execution]; ``input_len``: the serving task's, or an axis), said instead of a nearest key."""
    unknown = [k for k in data if k not in allowed]
    if unknown:
        where = [place for names, place in homes if unknown[0] in names]
        hint = f": not a top-level key but {' or '.join(where)}" if where else nearest(unknown[0], allowed)
        raise SpecError(source, unknown[0], f"unknown key{hint}")
    for key in required:
        if key not in data:
            raise SpecError(source, key, "required key missing")


def field_error(source: str, field: str, error: FastmodelError) -> SpecError:
    """An error of one part of a sweep file as ``file: field: reason`` (an ``axis NAME:`` prefix dropped)."""
    reason = error.reason if isinstance(error, SpecError) else str(error)
    for prefix in (f"axis {field.split('.')[-1]!r}: ", f"axis {field.split('.')[-1]}: "):
        if reason.startswith(prefix):
            reason = reason[len(prefix):]
    return SpecError(source, field, reason)


def axis_values(source: str, name: str, spec: Any) -> list:
    """The values of axis ``name`` of a sweep file (a list, a scalar or a range table); SpecError naming
    ``axes.NAME`` for an empty axis or a duplicate value."""
    from fastmodel.sweeps.ranges import expand

    try:
        values = expand(name, spec)
    except SweepError as error:
        raise field_error(source, f"axes.{name}", error) from None
    if not values:
        raise SpecError(source, f"axes.{name}", "empty list")
    keys = [json.dumps(v) if not isinstance(v, float) else repr(v) for v in values]
    if len(set(keys)) != len(keys):
        dup = next(v for v, k in zip(values, keys) if keys.count(k) > 1)
        raise SpecError(source, f"axes.{name}", f"duplicate value {dup!r}")
    return [v.item() if isinstance(v, np.generic) else v for v in values]


#: every task kind of every engine (MAD-Max's pretrain / finetune / inference, serving's serve)
TASK_KINDS = ("pretrain", "finetune", "inference", "serve")


def _task_first(source: str, value, base: Path):
    """The raw task of a sweep file; a task that cannot be read, or whose ``kind`` no engine has, is named here,
    before the engine is chosen from it: a misspelt serving task (``serve-chatt``, ``kind = "serv"``) would
    otherwise make a training sweep, whose first complaint is the serving device given as its system."""
    if not isinstance(value, (str, dict)):
        return None
    try:
        data, where = resolve_source(spec_ref(value, base), "task")
    except SpecError as error:
        raise SpecError(error.source or source, error.field or "task", error.reason) from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if isinstance(data, dict) and "kind" in data and kind not in TASK_KINDS:
        raise SpecError(where if where else source, "task.kind",
                        f"unknown kind {kind!r}{nearest(str(kind), TASK_KINDS)}; one of {', '.join(TASK_KINDS)}")
    return data


def _not_a_spec(source: str, data: dict) -> None:
    """A model, system or task spec given as a sweep file (none of a sweep file's keys), or a run or serving record
    or a batch case: one line saying which it is and where it goes, instead of its first key as an unknown one
    (``family: unknown key``, ``id: unknown key``)."""
    from fastmodel.spec.detect import is_run_record, is_serve_record

    if is_run_record(data) or is_serve_record(data) or (isinstance(data, dict) and "case" in data):
        what = "a serving record (SERVE_RUNS.md); evaluate it with fastmodel serve FILE" if is_serve_record(data) \
            else "a run record (RUNS.md); evaluate it with fastmodel run -m FILE" if is_run_record(data) \
            else "a batch case; evaluate it with fastmodel batch (one case per line)"
        raise SpecError(source, None, f"not a sweep file but {what}")
    if not isinstance(data, dict) or any(key in data for key in ("model", "system", "task", "axes")):
        return
    kind = data.get("kind")
    what = "model" if "family" in data else "system" if kind == "cluster" or "device" in data or "tiers" in data \
        else "task" if kind is not None else None
    if what is not None:
        raise SpecError(source, None, f"a {what} spec, not a sweep file (model, system and task keys and an [axes] "
                        f"table: fastmodel specs show llama3_70b_h100_plans); evaluate it with fastmodel run --{what} "
                        "FILE, or name it in a sweep file")


def load_sweep_file(path: str, unit_configs: int | None = None, calibration: Any = None):
    """The sweep plan of a sweep file or built-in sweep name (any engine); errors name the file.
    ``calibration`` (a ``Calibration``) applies to engines with fitted efficiencies (a SpecError otherwise)."""
    from fastmodel import engines

    path = locate(path)
    if str(path).lower().endswith(".jsonl"):   # was "invalid TOML: Invalid statement (at line 1, column 1)"
        raise SpecError(str(path), None, "a JSON-lines file, not a sweep file (TOML or JSON: model, system, task and "
                        "[axes]); its records or cases go to fastmodel batch, validate or calibrate")
    data = read_file(Path(path))
    _not_a_spec(str(path), data)
    base = Path(path).parent
    axes = data.get("axes") if isinstance(data.get("axes"), dict) else {}
    for key in ("model", "system", "task"):
        if isinstance(data.get(key), list):
            axis = f"; MAD-Max sweeps take several as an axis: [axes] {key} = [...]" if key != "task" else ""
            raise SpecError(str(path), key, f"expected one {key} (a built-in name or a path), got a list{axis}")
    model = data.get("model", (axes.get("model") or [None])[0] if isinstance(axes.get("model"), list)
                     else axes.get("model"))
    task = _task_first(str(path), data.get("task"), base)
    engine = engines.for_sweep(raw_spec(model, base, "model"), raw_spec(data.get("system"), base, "system"), task)
    return engine.door().sweep_plan_from_file(str(path), data, base, unit_configs, calibration)


__all__ = ["axis_values", "check_keys", "field_error", "load_sweep_file", "locate", "raw_spec", "spec_ref"]
