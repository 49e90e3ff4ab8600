"""The calibration file: a human-readable TOML overlay on the built-in device and network values.

A calibration names, per device, the fitted values of the registry's
``fittable`` columns (``fastmodel.registry.lm``); everything it leaves out keeps
its physical, built-in value (``specs/devices/*.toml``). Layout::

    [calibration]                          # what it was fitted on, and when
    format = 2
    fitted_on = "runs.jsonl"
    runs = 32
    fitted_at = "2026-11-30T14:00:00Z"

    [device."H100-SXM-80GB"]               # a device name of specs/devices (any alias)
    attn_eff = 0.41
    gemm_eff.bf16 = 0.71                   # GEMM efficiency by precision (bf16/fp16 share one value)
    gemm_eff.fp8 = 0.55
    inter.eff = 0.78                       # network tier: intra (NVLink domain) or inter (scale-out)
    inter.latency_s = 9e-6

    [framework]
    step_overhead_s = 0.05                 # every run, every device

    [stack."megatron-core"]                # runs whose framework resolves to this stack profile
    compute_eff = 0.93                     # share of the modelled kernel speed the stack attains

A device without a built-in file is allowed when its table says
``custom = true`` (otherwise an unknown name is a typo and an error). Every
value is checked against the registry bounds; errors name file, field path and
reason, with the nearest valid key.

A *stack* is the software a run used, keyed by :func:`stack_key` (the profile the model resolves, e.g.
``fms-fsdp``; ``default:TEXT`` for a framework text naming none); a ``[stack."NAME"]`` table applies only to
evaluations whose key is NAME. Format 1 keyed stacks by framework text and is read only without ``[stack]``
tables (docs/calibration.md, "The calibration file").
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.lm.calibrate.stack_tables import DEVICES_FIELD, applies, parse_stacks
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.registry.validators import column_problem

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib

FORMAT = 2
#: formats read: 1 keyed ``[stack]`` tables by framework text and is read only without them (``stack_tables.parse_stacks``)
READ_FORMATS = (1, 2)
#: prefix of the key of a framework text that names no stack profile (:func:`stack_key`)
DEFAULT_PREFIX = "default:"

#: registry column -> field of the ``[framework]`` table (applies to every run)
FRAMEWORK_FIELDS: dict[str, str] = {"step_overhead_s": "step_overhead_s"}
#: readable field paths of fittable columns; any other fittable column keeps its registry name
_FIELD_PATHS = {
    "gemm_eff_16": "gemm_eff.bf16",
    "gemm_eff_8": "gemm_eff.fp8",
    "intra_eff": "intra.eff",
    "intra_latency": "intra.latency_s",
    "inter_eff": "inter.eff",
    "inter_latency": "inter.latency_s",
}
#: registry column -> field of a ``[stack."NAME"]`` table (applies to runs of that software stack)
STACK_FIELDS: dict[str, str] = {"stack_compute_eff": "compute_eff", "host_layer_s": "host_layer_s",
                                "host_op_s": "host_op_s"}
#: registry column -> field path inside a ``[device."NAME"]`` table: every fittable column (registry order)
#: except the framework and stack ones
DEVICE_FIELDS: dict[str, str] = {c.name: _FIELD_PATHS.get(c.name, c.name) for c in COLUMNS
                                 if c.fittable and c.name not in FRAMEWORK_FIELDS and c.name not in STACK_FIELDS}

HEADER_FIELDS = {
    "format": int, "fitted_on": str, "runs": int, "fitted_at": str, "sha256": str, "fastmodel": str,
    "objective": str, "folds": int, "cv_step_time_mape": float, "step_time_mape_before": float,
    "step_time_mape_after": float, "selection": str, "note": str,
}
HEADER_REQUIRED = ("format", "fitted_on", "fitted_at")


@lru_cache(maxsize=None)
def device_aliases() -> dict[str, str]:
    """Every name of a built-in device file (lower case) -> the file's first (canonical) name."""
    aliases: dict[str, str] = {}
    for entry in resources.files("fastmodel.specs").joinpath("devices").iterdir():
        if entry.name.endswith(".toml"):
            names = tomllib.loads(entry.read_text()).get("names", [])
            for name in names:
                aliases[name.lower()] = names[0]
    return aliases


_VERSION = re.compile(r"\bv?\d[\w.]*")
#: a wheel's CUDA build tag (``+cu121``): the same stack built for another CUDA
_CUDA_BUILD = re.compile(r"\+\s*cu\d+\b")


def stack_name(framework: str | None) -> str | None:
    """The software stack a framework text names: lower case, up to the first ``(`` or ``,``, version
    numbers and CUDA build tags (``+cu124``) dropped, spaces collapsed (``"PyTorch 1.10 FSDP (minGPT)"`` -> ``"pytorch fsdp"``); None when
    the text is missing or names nothing."""
    if not isinstance(framework, str):
        return None
    head = re.split(r"[(,;]", framework, maxsplit=1)[0].lower()
    name = " ".join(_VERSION.sub(" ", _CUDA_BUILD.sub(" ", head)).split())
    return name or None


def stack_key(framework: str | None, stack: str | None = None) -> str | None:
    """The calibration key of an evaluation's software stack: the name of the profile the model uses for it
    (``profile_for(framework, stack)``); for the ``default`` profile, which says only that no profile was
    named, ``default:`` + the framework text reduced by :func:`stack_name` (one key per unknown stack, so
    llm.c and a DDP script are not calibrated together), and None when no text says what ran."""
    from fastmodel.lm.stacks import profile_for

    profile, _ = profile_for(framework, stack)
    if profile.name != "default":
        return profile.name
    text = stack_name(framework)
    return DEFAULT_PREFIX + text if text else None


def record_stack_key(record) -> str | None:
    """:func:`stack_key` of a run record (``fastmodel.lm.records.RunRecord``): its framework text and stack."""
    return stack_key(record.raw.get("framework"), record.raw.get("stack"))


def canonical_device(gpu: str) -> str:
    """The canonical built-in name of ``gpu`` (its device file's first name), or ``gpu`` itself."""
    return device_aliases().get(gpu.lower(), gpu)


@dataclass(frozen=True)
class Calibration:
    """Fitted values by device (canonical name -> column -> value), for every run (``framework``) and by
    software stack (:func:`stack_key` -> column -> value)."""
    header: dict = field(default_factory=dict)
    devices: dict[str, dict[str, float]] = field(default_factory=dict)
    framework: dict[str, float] = field(default_factory=dict)
    stacks: dict[str, dict[str, float]] = field(default_factory=dict)
    custom: frozenset = frozenset()          # device names without a built-in file
    source: str = ""
    digest: str = ""                         # sha256 of the file's bytes (read_calibration)
    #: stack key -> the (canonical) devices its values apply to; a stack absent here: every device
    stack_devices: dict[str, tuple] = field(default_factory=dict)

    def values_for(self, gpu: str, stack: str | None = None) -> dict[str, float]:
        """Column values the calibration sets for a run on ``gpu`` whose software stack has key ``stack``
        (:func:`stack_key`; its ``[framework]`` values and its ``[stack]`` table included where the table's
        ``devices`` name ``gpu`` or the table names none)."""
        out = dict(self.framework)
        out.update(self.devices.get(canonical_device(gpu), {}))
        if applies(self.stack_devices, stack, canonical_device(gpu)):
            out.update(self.stacks.get(stack, {}))
        return out

    def fingerprint(self) -> str:
        """sha256 of the file it was read from, else of its TOML text (an in-memory calibration)."""
        if self.digest:
            return self.digest
        import hashlib

        return hashlib.sha256(to_toml(self).encode("utf-8")).hexdigest()

    def describe(self) -> str:
        """One line: where it came from and what it was fitted on."""
        h = self.header
        runs = f", {h['runs']} runs" if "runs" in h else ""
        return f"calibration {self.source or '(in memory)'}: fitted on {h.get('fitted_on', '?')}{runs} " \
               f"at {h.get('fitted_at', '?')}"


# --- reading -------------------------------------------------------------------------------------

def _bounded(value: Any, column: str, where: str, source: str) -> float:
    col = COLUMNS[COLUMN_INDEX[column]]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(source, where, f"expected a number, got {value!r}")
    if problem := column_problem(col, value):
        raise SpecError(source, where, problem)
    return float(value)


def _flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _quote(name: str) -> str:
    return f'"{name}"'


#: what a calibration file is, for a file of another kind given as one
WRITTEN_BY = "give the TOML file 'fastmodel calibrate RUNS -o cal.toml' writes (run records are fitted into one)"


def _another_input(data: dict) -> str | None:
    """What a TOML document given as a calibration is instead (a sweep file, a model, system or task spec), or None."""
    if isinstance(data.get("axes"), dict):
        return "a sweep file (it has [axes])"
    for what, keys in (("a model spec", ("family", "layers", "hidden", "num_layers")),
                       ("a system spec", ("gpu", "devices_per_node", "num_nodes")),
                       ("a task spec", ("global_batch", "kind"))):
        if any(key in data for key in keys):
            return what
    return None


def parse_calibration(data: dict, source: str = "<calibration>") -> Calibration:
    """Check a parsed calibration document; raises SpecError naming ``source``, field path and reason."""
    top = ("calibration", "device", "framework", "stack")
    if not any(key in top for key in data) and (what := _another_input(data)):
        raise SpecError(source, "", f"{what}, not a calibration: {WRITTEN_BY}")
    for key in data:
        if key not in top:
            raise SpecError(source, key, f"unknown table{nearest(key, top)}; expected one of {', '.join(top)}")
    header = data.get("calibration")
    if not isinstance(header, dict):
        raise SpecError(source, "calibration", "missing [calibration] header (format, fitted_on, fitted_at)")
    for key, value in header.items():
        kind = HEADER_FIELDS.get(key)
        if kind is None:
            raise SpecError(source, f"calibration.{key}", f"unknown field{nearest(key, HEADER_FIELDS)}")
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise SpecError(source, f"calibration.{key}", f"expected {kind.__name__}, got {value!r}")
    for key in HEADER_REQUIRED:
        if key not in header:
            raise SpecError(source, f"calibration.{key}", "required field missing")
    if header["format"] not in READ_FORMATS:
        raise SpecError(source, "calibration.format", f"unsupported format {header['format']}; this fastmodel "
                                                      f"reads formats {', '.join(map(str, READ_FORMATS))}")

    path_to_column = {path: col for col, path in DEVICE_FIELDS.items()}
    path_to_column["gemm_eff.fp16"] = "gemm_eff_16"
    devices: dict[str, dict[str, float]] = {}
    custom = set()
    device_block = data.get("device", {})
    if not isinstance(device_block, dict):
        raise SpecError(source, "device", "expected tables [device.\"NAME\"]")
    aliases = device_aliases()
    for name, table in device_block.items():
        where = f"device.{_quote(name)}"
        if not isinstance(table, dict):
            raise SpecError(source, where, f"expected a table, got {table!r}")
        is_custom = table.get("custom", False)
        if not isinstance(is_custom, bool):
            raise SpecError(source, f"{where}.custom", f"expected true or false, got {is_custom!r}")
        if name.lower() not in aliases and not is_custom:
            raise SpecError(source, where, f"no built-in device of this name{nearest(name, sorted(set(aliases.values())))}"
                                           f"; set custom = true for a device without a built-in file")
        key = canonical_device(name)
        if key in devices:
            raise SpecError(source, where, f"names the same device as another table ({key})")
        values: dict[str, float] = {}
        for path, value in _flatten({k: v for k, v in table.items() if k != "custom"}).items():
            column = path_to_column.get(path)
            if column is None:
                raise SpecError(source, f"{where}.{path}",
                                f"unknown field{nearest(path, list(path_to_column))}; fittable fields: "
                                f"{', '.join(DEVICE_FIELDS.values())}")
            value = _bounded(value, column, f"{where}.{path}", source)
            if column in values and values[column] != value:
                raise SpecError(source, f"{where}.{path}", "gemm_eff.bf16 and gemm_eff.fp16 are one value "
                                                           "(16-bit GEMMs); give one")
            values[column] = value
        devices[key] = values
        if is_custom:
            custom.add(key)

    framework_block = data.get("framework", {})
    if not isinstance(framework_block, dict):
        raise SpecError(source, "framework", "expected a table [framework]")
    framework: dict[str, float] = {}
    for path, value in _flatten(framework_block).items():
        column = {p: c for c, p in FRAMEWORK_FIELDS.items()}.get(path)
        if column is None:
            raise SpecError(source, f"framework.{path}", f"unknown field{nearest(path, FRAMEWORK_FIELDS.values())}")
        framework[column] = _bounded(value, column, f"framework.{path}", source)
    stacks, scopes = parse_stacks(data.get("stack", {}), source, header["format"])
    return Calibration(header=dict(header), devices=devices, framework=framework, custom=frozenset(custom),
                       source=source, stacks=stacks, stack_devices=scopes)


def read_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration TOML file."""
    import hashlib

    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SpecError(str(path), "", f"cannot read: {error.strerror or error}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        if raw.lstrip().startswith(b"{"):     # run records (JSON lines) given as the calibration
            raise SpecError(str(path), "", f"JSON, not a calibration: {WRITTEN_BY}") from None
        raise SpecError(str(path), "", f"invalid TOML: {error}") from None
    cal = parse_calibration(data, str(path))
    return dataclasses.replace(cal, digest=hashlib.sha256(raw).hexdigest())


def as_calibration(calibration: "Calibration | str | Path | None") -> Calibration | None:
    """A Calibration from itself, a path, or None."""
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    if not isinstance(calibration, (str, os.PathLike)):
        raise SpecError(None, "calibration", "expected a path to a 'fastmodel calibrate' TOML file or a "
                        f"Calibration, got {type(calibration).__name__}")
    return read_calibration(calibration)


# --- applying ------------------------------------------------------------------------------------

def apply_calibration(records: list, calibration: "Calibration | str | Path | None") -> list:
    """Run records (``fastmodel.lm.records.RunRecord``) with the calibration's values in their columns.

    ``None`` returns the records unchanged: nothing fitted is applied unless asked for.
    """
    cal = as_calibration(calibration)
    if cal is None:
        return list(records)
    out = []
    for record in records:
        values = cal.values_for(record.gpu, record_stack_key(record))
        if not values:
            out.append(record)
            continue
        columns = overlay_columns(record.columns, values)
        note = f"calibrated ({cal.source or 'in memory'})"
        out.append(dataclasses.replace(record, columns=columns, notes=record.notes + (note,)))
    return out


def overlay_columns(columns: np.ndarray, values: dict[str, float]) -> np.ndarray:
    """A copy of a column vector (or table, columns first) with ``values`` set by column name."""
    out = np.array(columns, dtype=np.float64, copy=True)
    for name, value in values.items():
        out[COLUMN_INDEX[name]] = value
    return out


# --- writing -------------------------------------------------------------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(float(f"{value:.6g}"))
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


#: prefix of a stack's key in ``to_toml``'s ``comments`` / ``device_notes`` (device names never start so)
STACK_GROUP = "stack:"


def to_toml(cal: Calibration, comments: dict[tuple[str | None, str], str] | None = None,
            device_notes: dict[str | None, list[str]] | None = None, precision_names: dict | None = None) -> str:
    """The calibration as TOML text; ``comments[(device|None, column)]`` is appended to a value's line,
    ``device_notes[device|None]`` are comment lines closing a table, ``precision_names[device]`` chooses
    ``bf16`` or ``fp16`` for the 16-bit GEMM key."""
    comments = comments or {}
    device_notes = device_notes or {}
    precision_names = precision_names or {}
    lines = ["# fastmodel calibration: an overlay on the built-in device and network values.",
             "# Only the values below change; everything else keeps its physical (datasheet) value.",
             "# Apply with --calibration FILE; edit freely (values are checked against the registry bounds).",
             "", "[calibration]"]
    for key in HEADER_FIELDS:
        if key in cal.header:
            lines.append(f"{key} = {_toml_value(cal.header[key])}")

    def value_line(path: str, value: float, comment: str | None) -> str:
        text = f"{path} = {_toml_value(float(value))}"
        return f"{text:32s} # {comment}" if comment else text

    names = sorted(set(cal.devices) | {d for d in device_notes if d is not None and not d.startswith(STACK_GROUP)})
    for name in names:
        lines += ["", f"[device.{_quote(name)}]"]
        if name in cal.custom or name.lower() not in device_aliases():
            lines.append("custom = true")
        for column, path in DEVICE_FIELDS.items():
            if column in cal.devices.get(name, {}):
                if column == "gemm_eff_16":
                    path = f"gemm_eff.{precision_names.get(name, 'bf16')}"
                lines.append(value_line(path, cal.devices[name][column], comments.get((name, column))))
        lines += [f"# {note}" for note in device_notes.get(name, [])]
    if cal.framework or device_notes.get(None):
        lines += ["", "[framework]"]
        for column, path in FRAMEWORK_FIELDS.items():
            if column in cal.framework:
                lines.append(value_line(path, cal.framework[column], comments.get((None, column))))
        lines += [f"# {note}" for note in device_notes.get(None, [])]
    for name in sorted(set(cal.stacks) | {g[len(STACK_GROUP):] for g in device_notes
                                          if isinstance(g, str) and g.startswith(STACK_GROUP)}):
        group = STACK_GROUP + name
        lines += ["", f"[stack.{_quote(name)}]"]
        if name in cal.stack_devices:
            lines.append(f"{DEVICES_FIELD} = [{', '.join(_toml_value(d) for d in cal.stack_devices[name])}]")
        for column, path in STACK_FIELDS.items():
            if column in cal.stacks.get(name, {}):
                lines.append(value_line(path, cal.stacks[name][column], comments.get((group, column))))
        lines += [f"# {note}" for note in device_notes.get(group, [])]
    return "\n".join(lines) + "\n"


def write_calibration(text: str, path: str | Path) -> None:
    """Write calibration TOML text atomically (checked by reading it back first)."""
    from fastmodel.io.atomic import atomic_write

    parse_calibration(tomllib.loads(text), str(path))
    with atomic_write(path) as handle:
        handle.write(text)
