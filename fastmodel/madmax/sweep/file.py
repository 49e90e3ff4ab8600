"""MAD-Max sweep files: TOML that mirrors :func:`fastmodel.sweep` (model, system, task, semantics, axes).

    model = "llama2-70b"          # built-in name, path (relative to this file) or inline table
    system = "dc-a"
    task = "llm-pretrain"
    semantics = "default"         # or "madmax", or a table of Semantics fields with 'base'
    [axes]
    num_nodes = [16, 32, 64, 128, 256]
    flops_util = { start = 0.4, stop = 0.8, num = 9 }
    plan = "all"

``model`` and ``system`` may instead be axes (lists of spec names); then the top-level key may be left out.
``fastmodel.sweeps.file`` reads the file and chooses the engine; this module makes the MAD-Max plan of it.
"""

from __future__ import annotations

from pathlib import Path

from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest
from fastmodel.madmax.sweep.definition import UNIT_CONFIGS, Sweep
from fastmodel.sweeps.file import spec_ref

KEYS = ("model", "system", "task", "semantics", "axes", "unit_configs", "description")


def _flatten(prefix: str, table: dict) -> dict:
    out = {}
    for key, value in table.items():
        if isinstance(value, dict) and "start" not in value:      # a range table {start, stop, ...} is a leaf
            out.update(_flatten(f"{prefix}.{key}", value))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def _dotted_axes(axes: dict) -> dict:
    """``axes`` with TOML's unquoted dotted keys read as the full paths they spell: ``model.hidden = [4096, 8192]``
    in ``[axes]`` is the table ``model = {hidden = [...]}`` to TOML, and becomes the axis ``"model.hidden"`` (the
    documented quoted form). A table whose leaves are all single values stays an inline spec of that axis."""
    out = {}
    for name, value in axes.items():
        flat = _flatten(name, value) if name in ("model", "system", "task") and isinstance(value, dict) else {}
        if any(isinstance(v, (list, dict)) for v in flat.values()):
            out.update(flat)
        else:
            out[name] = value
    return out


def _resolve(source: str, data: dict, base: Path) -> tuple[dict, dict]:
    """(data with model/system/task resolved relative to the file, axes) of a MAD-Max sweep file."""
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise SpecError(source, unknown[0], f"unknown key{nearest(unknown[0], KEYS)}")
    if not isinstance(data.get("axes"), dict):
        raise SpecError(source, "axes", "required: a table of axis = values")
    data, axes = dict(data), _dotted_axes(dict(data["axes"]))
    for key in ("model", "system", "task"):
        if key in data:
            data[key] = spec_ref(data[key], base)
    for key in ("model", "system"):  # spec axes: paths relative to this file, first value as the base spec
        if key in axes:
            values = axes[key] if isinstance(axes[key], list) else [axes[key]]
            axes[key] = [spec_ref(v, base) for v in values]
            if key not in data and axes[key]:
                data[key] = axes[key][0]
    for key in ("model", "system", "task"):
        if key not in data:
            raise SpecError(source, key, "required key missing")
    return data, axes


def sweep_plan_from_file(source: str, data: dict, base: Path, unit_configs: int | None = None) -> Sweep:
    """The MAD-Max sweep of a parsed sweep file (``fastmodel.sweeps.file.load_sweep_file``); errors name it."""
    data, axes = _resolve(source, data, base)
    try:
        return Sweep(data["model"], data["system"], data["task"], axes, data.get("semantics", "default"),
                     unit_configs or data.get("unit_configs", UNIT_CONFIGS))
    except SweepError as error:
        raise SweepError(f"{source}: {error}") from None
    except SpecError as error:
        if error.source is None:  # an inline model/system/task table or the semantics table: name this file
            raise SpecError(source, error.field, error.reason) from None
        raise
    except FastmodelError:
        raise
