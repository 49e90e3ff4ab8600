"""The registry: every name fastmodel outputs or reads, declared once, dependency-free.

One package, one module per engine (each under 450 lines), and what they share:

- ``registry.variables`` -- what a result variable is (:class:`~.variables.Variable`: dims, dtype, units,
  ``better``, the engines producing it, aliases) and what a status is; the variables several engines
  produce (``step_time``, ``time_gemm``, ``weight_memory``, ``memory_per_device``, ``fits_memory``);
- ``registry.madmax`` -- the MAD-Max engine: result variables, status codes with messages, parameter
  columns (spec path, units, the family trait that fills them). ``kernels/madmax/layout.py`` derives
  ``R_*``, ``STATUS_*``, ``COLUMNS`` and ``P_*`` from it;
- ``registry.lm`` -- the real-world training model: parameter columns (units, bounds, ``fittable``; serving
  columns too: one column vector for both), integer codes, result variables, memory kinds, statuses.
  ``kernels/lm/layout.py`` derives ``C_*``, ``R_*`` and codes;
- ``registry.serve`` -- serving: result variables and statuses (``kernels/serve/layout.py`` derives ``S_*``
  and ``ST_*``).

Each engine module names its ``ENGINE``, ``RESULTS`` (kernel rows, in order), ``STATUSES``, ``COORDS`` (the
coordinates of dimensions beyond the grid) and ``GROUPED`` (dataset variables made of several rows, e.g.
the real-world ``memory`` by ``memory_kind``). Datasets, JSON records, ``batch`` lines, plots (direction,
units, labels) and ``best`` read them through the functions below. The kernels' on-disk cache is keyed by the
modules each engine's kernels compile in (``kernels/jit.py``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Mapping

from fastmodel.registry import lm, madmax, serve
from fastmodel.registry.variables import ENGINE_NAMES, SHARED, Status, Variable

#: each engine's registry module
ENGINES: dict[str, ModuleType] = {"madmax": madmax, "lm": lm, "serve": serve}


def engine_registry(engine: str) -> ModuleType:
    """The registry module of ``engine`` (``madmax``, ``lm`` or ``serve``)."""
    return ENGINES[engine]


def dataset_variables(engine: str) -> tuple[tuple[Variable, tuple[str, ...]], ...]:
    """``(variable, its result rows)`` of every dataset variable of ``engine``, in row order: a variable
    with ``dims`` takes one row per coordinate (``GROUPED``), every other variable its own row."""
    module = ENGINES[engine]
    grouped = {row: (var, rows) for var, rows in module.GROUPED for row in rows}
    out, seen = [], set()
    for result in module.RESULTS:
        if result.name in grouped:
            var, rows = grouped[result.name]
            if var.name not in seen:
                seen.add(var.name)
                out.append((var, rows))
            continue
        out.append((result, (result.name,)))
    return tuple(out)


def _catalogue() -> dict[str, Variable]:
    found: dict[str, Variable] = {}
    for engine in ENGINE_NAMES:
        for var, _ in dataset_variables(engine):
            found.setdefault(var.name, var)
        for result in ENGINES[engine].RESULTS:
            found.setdefault(result.name, result)
    return found


#: every variable of every engine by name (the real-world memory rows ``memory_<kind>`` included)
VARIABLES: dict[str, Variable] = _catalogue()
#: alias -> the variable's one name
ALIASES: dict[str, str] = {alias: var.name for var in VARIABLES.values() for alias in var.aliases}


def canonical(name: str) -> str:
    """The one name of a variable given by its name or an alias (``iteration_time`` -> ``step_time``)."""
    return ALIASES.get(name, name)


def variable(name: str) -> Variable | None:
    """The registry's variable of ``name`` (or of its alias), else None."""
    return VARIABLES.get(canonical(name))


def attrs(name: str) -> dict[str, str]:
    """xarray attrs of variable ``name`` (units, long_name, description, ``better``)."""
    return VARIABLES[canonical(name)].attrs()


def better(name: str, attrs: dict | None = None) -> str:
    """Which way variable ``name`` improves: ``"min"``, ``"max"`` or ``""`` (no direction, or no registry
    variable). A dataset variable's own ``better`` attr wins, then the registry (aliases included)."""
    if attrs and attrs.get("better") in ("min", "max"):
        return str(attrs["better"])
    found = variable(name)
    return found.better if found is not None else ""


def statuses(engine: str) -> tuple[Status, ...]:
    """The status codes of ``engine``, in code order."""
    return ENGINES[engine].STATUSES


def status_attrs(engine: str) -> dict:
    """xarray attrs of a ``status`` variable of ``engine``: its codes, names and messages."""
    found = statuses(engine)
    return {"long_name": "status", "units": "1",
            "description": "Why a point has no result: " + "; ".join(
                f"{code} {s.name}: {s.message}" for code, s in enumerate(found)),
            "flag_values": list(range(len(found))), "flag_meanings": " ".join(s.name for s in found)}


def status_names(status) -> list[str]:
    """The code names of a ``status`` variable, in code order, as :func:`status_attrs` wrote them (its
    ``flag_meanings``); [] for None or a variable without them. Code ``i`` of a result is ``status_names(...)[i]``
    (a plot's copy may append ``does_not_fit``: ``fastmodel.plot.data``)."""
    return str(status.attrs.get("flag_meanings", "")).split() if status is not None else []


#: coordinates that are no parameter column of the real-world model: long_name, units of a numeric one (None:
#: labels), description
COORDINATES: dict[str, tuple[str, str | None, str]] = {
    "plan": ("plan", None, "The parallelism plan of the point (docs/usage.md, Plans)."),
    "memory_kind": ("memory kind", None, "What the bytes of memory hold (fastmodel.registry.lm.MEMORY_KINDS: "
                    "weights, gradients, optimizer, activations, kv_cache, buffers, overhead; docs/model_memory.md)."),
    "num_nodes": ("num nodes", "1", "Nodes in the job."),
    "device": ("device", None, "The device (specs/devices)."),
    "precision": ("precision", None, "Compute and weight precision."),
    "kv_precision": ("kv precision", None, "KV-cache precision."),
    "concurrency": ("concurrency", "requests", "Requests in flight (continuous batching, a closed loop)."),
    "engine": ("engine", None, "The serving engine's profile (docs/model_serving.md)."),
    "prefill_tp": ("prefill tp", "1", "Tensor-parallel degree of a prefill instance (disaggregated serving)."),
    "prefill_workers": ("prefill workers", "1", "Prefill instances (disaggregated serving)."),
    "decode_tp": ("decode tp", "1", "Tensor-parallel degree of a decode instance (disaggregated serving)."),
    "decode_workers": ("decode workers", "1", "Decode instances (disaggregated serving)."),
}


def coordinate_attrs(name: str, given: Mapping | None = None, numeric: bool = False, columns: bool = True) -> dict:
    """xarray attrs of a coordinate: ``given`` (the engine's: the field it sets, its units), then a ``long_name``
    (the name spaced, as fastmodel's figures label an axis), a ``description`` and, when ``numeric``, ``units``
    ('1' for a count): :data:`COORDINATES`, else (``columns``) the real-world model's parameter column."""
    out = dict(given or {})
    long_name, units, text = COORDINATES.get(name, (name.replace("_", " "), None, ""))
    if name not in COORDINATES and columns and name in lm.COLUMN_INDEX:
        column = lm.COLUMNS[lm.COLUMN_INDEX[name]]
        units, text = (None if column.units == "code" else column.units), column.doc
    out.setdefault("long_name", long_name)
    if text:
        out.setdefault("description", text)
    if numeric and units:
        out.setdefault("units", units)
    return out


def label_coordinates(ds, columns: bool = True):
    """``ds`` with every coordinate labelled by :func:`coordinate_attrs` (in place; returned)."""
    for name in ds.coords:
        ds[name].attrs = coordinate_attrs(str(name), ds[name].attrs, ds[name].dtype.kind in "iuf", columns)
    return ds


__all__ = ["ALIASES", "COORDINATES", "ENGINES", "SHARED", "VARIABLES", "Status", "Variable", "attrs", "better",
           "canonical", "coordinate_attrs", "dataset_variables", "engine_registry", "label_coordinates", "status_attrs",
           "status_names", "statuses", "variable"]
