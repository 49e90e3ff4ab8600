"""Sweep files: TOML that mirrors :func:`fastmodel.sweep` (model, system, task, semantics, axes).

    model = "llama2-70b"          # built-in name, path (relative to this file) or inline table
    system = "dc-a"
    task = "llm-pretrain"
    semantics = "default"         # or "madmax", or a table of Semantics fields with 'base'
    [axes]
    num_nodes = [16, 32, 64, 128, 256]
    flops_util = { start = 0.4, stop = 0.8, num = 9 }
    plan = "all"

``model`` and ``system`` may instead be axes (lists of spec names); then the
top-level key may be left out.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest
from fastmodel.spec.loader import builtin_names, read_file
from fastmodel.sweep import UNIT_CONFIGS, Sweep

KEYS = ("model", "system", "task", "semantics", "axes", "unit_configs", "description")


def _spec_ref(value, base: Path):
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


def _read(path: str) -> tuple[str, dict, dict]:
    """(source, data with model/system/task resolved relative to the file, axes) of a sweep file."""
    path = locate(path)
    data = read_file(Path(path))
    source = str(path)
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise SpecError(source, unknown[0], f"unknown key{nearest(unknown[0], KEYS)}")
    if not isinstance(data.get("axes"), dict):
        raise SpecError(source, "axes", "required: a table of axis = values")
    base = Path(path).parent
    axes = dict(data["axes"])
    for key in ("model", "system", "task"):
        if key in data:
            data[key] = _spec_ref(data[key], base)
    for key in ("model", "system"):  # spec axes: paths relative to this file, first value as the base spec
        if key in axes:
            values = axes[key] if isinstance(axes[key], list) else [axes[key]]
            axes[key] = [_spec_ref(v, base) for v in values]
            if key not in data and axes[key]:
                data[key] = axes[key][0]
    for key in ("model", "system", "task"):
        if key not in data:
            raise SpecError(source, key, "required key missing")
    return source, data, axes


def load_sweep_file(path: str, unit_configs: int | None = None) -> Sweep:
    """Read and validate a sweep file (or a built-in sweep name); errors name the file."""
    source, data, axes = _read(path)
    try:
        return Sweep(
            data["model"],
            data["system"],
            data["task"],
            axes,
            data.get("semantics", "default"),
            unit_configs or data.get("unit_configs", UNIT_CONFIGS),
        )
    except SweepError as error:
        raise SweepError(f"{source}: {error}") from None
    except SpecError as error:
        if error.source is None:  # an inline model/system/task table or the semantics table: name this file
            raise SpecError(source, error.field, error.reason) from None
        raise
    except FastmodelError:
        raise
