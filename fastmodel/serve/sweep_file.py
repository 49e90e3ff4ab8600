"""Serving sweeps: a sweep file whose task has ``kind = "serve"``, or ``fastmodel.sweep`` of a serving task.

    model = "llama3.1-70b"               # a serving model name or a family-"lm" spec
    system = "H100"                      # a device (specs/devices) or a cluster spec (its gpu)
    task = "serve-chat"
    [axes]                               # device, precision, kv_precision, concurrency, or any column
    device = ["H100", "H200"]
    tp = [1, 2, 4, 8]
    batch_size = [1, 4, 16, 64, 256]

The grid is the Cartesian product of the axes, in the order written; each axis a list, a scalar or a range
table. Every error names the file (or, from Python, the argument), the field and the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fastmodel.errors import SpecError, nearest
from fastmodel.serve.sweep_plan import SPECIAL_AXES, ServeSweepPlan
from fastmodel.spec.quantity import count_suffix_hint
from fastmodel.sweeps.file import axis_values, check_keys, raw_spec, spec_ref

KEYS = ("model", "system", "task", "semantics", "axes", "unit_configs", "description")
#: axes whose every value must be a positive whole number
_COUNTS = ("concurrency", "batch_size", "tp", "pp", "ep", "instances", "input_len", "output_len")


def model_columns(source: str | None, spec: Any, base: Path) -> tuple[str, dict, list[str]]:
    """(name, model columns, notes) of a serving model name or a family-"lm" model spec (``fastmodel.serve.models.
    serving_model``: the one mapping); an error names ``source`` (the sweep file)."""
    from fastmodel.serve.models import serving_model

    try:
        name, values, notes = serving_model(spec, base)
    except SpecError as error:
        if error.source and source:    # the sweep file's key, then the spec's own source, field and reason
            raise type(error)(source, "model", str(error)) from None
        if error.source:
            raise
        raise type(error)(source, error.field, error.reason) from None
    return name, values, notes


def device_of(source: str | None, system: Any, axes: dict, base: Path) -> str:
    """The device of a ``system`` given as a device name or a cluster spec (its gpu); a device axis' first
    value when there is no system."""
    from fastmodel.serve.api import device_columns
    from fastmodel.spec.devices import device_table

    if system is None:
        if "device" not in axes:
            raise SpecError(source, "system", "required: a device (e.g. \"H100\") or a device axis")
        return axes["device"][0]
    name = system
    if not (isinstance(system, str) and system.lower() in device_table()):
        data = raw_spec(system, base, "system")
        if isinstance(data, dict) and data.get("kind") == "cluster" and isinstance(data.get("gpu"), str):
            name = data["gpu"]
    try:
        device_columns(name)
    except SpecError as error:
        raise SpecError(source, "system", error.reason) from None
    return name


def quantities(source: str | None, name: str, values: list) -> list:
    """An axis's unit strings ('80 GB', '450 GB/s', '2ms') in SI units where its column is a quantity (bytes,
    bytes/s, FLOP/s, s), as a training sweep reads them (``fastmodel.spec.quantity.COLUMN_UNIT_KINDS``); other
    values as they are."""
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
    from fastmodel.spec.quantity import COLUMN_UNIT_KINDS, parse_quantity

    kind = COLUMN_UNIT_KINDS.get(COLUMNS[COLUMN_INDEX[name]].units) if name in COLUMN_INDEX else None
    if kind is None:
        return values
    try:
        return [parse_quantity(value, kind) if isinstance(value, str) else value for value in values]
    except ValueError as error:
        raise SpecError(source, f"axes.{name}", str(error)) from None


def check_values(source: str | None, axes: dict[str, list]) -> None:
    """Every axis value must name a device or precision, or be a non-negative number (counts positive whole)."""
    from fastmodel.serve.api import device_columns, precision_columns
    from fastmodel.spec.columns import encode

    for name, values in axes.items():
        for value in values:
            try:
                if name == "device":
                    device_columns(value)
                elif name == "precision":
                    precision_columns(value)
                elif name == "kv_precision":
                    precision_columns("bf16", value)
                else:
                    number = encode(name, value)
                    if isinstance(number, bool) or not isinstance(number, (int, float)) \
                            or not math.isfinite(number) or number < 0:
                        raise SpecError(None, name, f"{value!r} is not a non-negative number{count_suffix_hint(value)}")
                    if name in _COUNTS and number != int(number):    # the training sweeps' rule
                        raise SpecError(None, name, f"every value must be a whole number (got {value!r})")
                    if name in _COUNTS and number < 1:
                        raise SpecError(None, name, f"{value!r} is not a positive integer")
            except SpecError as error:
                raise SpecError(source, f"axes.{name}", error.reason) from None


def serve_plan(source: str | None, model: Any, system: Any, task: Any, axes: dict, base: Path,
               unit_configs: int | None = None) -> ServeSweepPlan:
    """The serving plan of a model, system, serving task and raw axes; errors name ``source`` (a file)."""
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.api import by_column_name
    from fastmodel.serve.spec import TRAINING_COLUMNS, load_serve_task

    if not isinstance(axes, dict) or not axes:
        raise SpecError(source, "axes", "required: a table of axis = values (e.g. tp = [1, 2, 4])")
    try:
        task = load_serve_task(spec_ref(task, base))
    except SpecError as error:
        raise error if error.source else SpecError(source, error.field, error.reason) from None
    name, columns, notes = model_columns(source, model, base)
    names = [*SPECIAL_AXES, *COLUMN_INDEX]
    values = {}
    for axis, spec in by_column_name(axes, source, "axes.").items():     # host_step_s: serve_step_overhead_s
        if axis == "engine":        # not 'engine_nvidia_only': the engine is the task's, one per sweep
            raise SpecError(source, "axes.engine", "not an axis: the serving task's engine field names the one "
                            "engine of a sweep (engine = \"vllm\"); serve --search --engine trtllm,vllm compares "
                            "engines")
        if axis not in names:
            raise SpecError(source, f"axes.{axis}", f"unknown axis{nearest(axis, names)}")
        if axis in TRAINING_COLUMNS:
            raise SpecError(source, f"axes.{axis}", TRAINING_COLUMNS[axis])
        values[axis] = quantities(source, axis, axis_values(source, axis, spec))
    if "batch_size" in values and "concurrency" in values:
        raise SpecError(source, "axes.concurrency", "sweep batch_size or concurrency, not both")
    device = device_of(source, system, values, base)
    check_values(source, values)
    check_speculation(source, task, values)
    try:
        return ServeSweepPlan(name, columns, device, task, values, unit_configs, notes=notes)
    except SpecError as error:       # a column's bound (kv_cache_mem_fraction = [0]): the axis it came from
        field = f"axes.{error.field}" if error.field in values else error.field
        raise SpecError(source, field, error.reason) from None


def check_speculation(source: str | None, task: Any, values: dict) -> None:
    """Speculative decoding in a sweep as ``fastmodel serve`` and a record take it: draft tokens at any load mode
    (docs/model_serving.md S18) with their acceptance rate given (the task's default 0 rejected every draft,
    silently)."""
    drafts = values.get("spec_tokens", [task.spec_tokens])
    if not any(k > 0 for k in drafts):
        return
    field = "axes.spec_tokens" if "spec_tokens" in values else "task.spec_tokens"
    if "spec_acceptance" not in values and "spec_acceptance" not in task.model_fields_set:
        raise SpecError(source, field, "give spec_acceptance too (the draft tokens' acceptance rate, 0 to 1), in "
                        "the task or as an axis")


def training_only(source: str | None, field: str) -> SpecError:
    """The refusal of what only a training sweep takes, in a serving sweep, by ``field``: ``semantics`` other than
    'default', else a calibration or an execution. One wording for a serving sweep file
    (:func:`sweep_plan_from_file`) and ``fastmodel.sweep``'s door (``fastmodel.serve.api.sweep_plan``)."""
    if field == "semantics":
        return SpecError(source, field, "serving sweeps run under the 'default' semantics only")
    return SpecError(source, field, "applies to training sweeps of the real-world model, not to serving")


def sweep_plan_from_file(source: str, data: dict, base: Path, unit_configs: int | None = None,
                         calibration: Any = None) -> ServeSweepPlan:
    """The plan of a parsed serving sweep file; a calibration is refused (it applies to training)."""
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.spec import TRAINING_COLUMNS, ServeTaskSpec

    refused = [key for key in data if key not in KEYS and key in TRAINING_COLUMNS]   # not "an axis, under [axes]"
    if refused:
        raise SpecError(source, refused[0], TRAINING_COLUMNS[refused[0]])
    check_keys(source, data, KEYS, ("model", "task"),
               ((ServeTaskSpec.model_fields, "a field of the serving task, in its file or an inline task table "
                 "(task = {name = \"t\", kind = \"serve\", ...})"),
                ((*SPECIAL_AXES, *COLUMN_INDEX), "an axis, under [axes]")))
    if calibration is not None:     # the argument (the CLI's --calibration, friendly names it), never the file's
        raise training_only(None, "calibration")
    if data.get("semantics", "default") != "default":
        raise training_only(source, "semantics")
    return serve_plan(source, data["model"], data.get("system"), data["task"], data.get("axes"), base,
                      unit_configs or data.get("unit_configs"))
