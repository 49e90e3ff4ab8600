"""Kinds of batch lines: each kind claims lines by their content and turns a
group of its lines into parameter tables for the fused kernels (or results).

Each engine names its kinds (``Engine.batch_kinds``, fastmodel/engines.py; the
classes live in the wings' ``batch`` modules); :func:`kinds_for` builds them.

The batch driver (:mod:`fastmodel.io.batch`) parses a chunk of lines, asks each
kind in :data:`KINDS` (first match wins) whether it claims a line, and hands
each kind all of its lines of the chunk at once. A kind returns a
:class:`Prepared`: a reason per bad line, its own output columns (e.g.
``plan``) and :class:`Table` s -- one structure key + semantics + a parameter
table (``layout.COLUMNS`` x m) built with numpy per group of lines, never per
line -- or, for kinds that evaluate their lines themselves, results by registry name. The driver merges tables of the same structure across kinds and runs
each through the kernels once.

To add a kind: write a class with ``name``, ``engine`` (the registry engine whose result variables its lines
carry: ``madmax``, ``lm``, ``serve``), ``columns`` (its extra output columns and their types,
``{"plan": "string"}``), ``claims(case) -> bool``
(cheap: look at keys), ``prepare(cases, default_semantics) -> Prepared`` and,
if it returns Tables, ``evaluate_into(key, semantics, params, out)``; name it
in its engine's ``batch_kinds``. The MAD-Max spec lines come last and claim
every line no other kind claims (so a line with a missing key gets that reason).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson

from fastmodel.errors import NESTED_TOO_DEEP, FastmodelError


@dataclass
class Table:
    """Legal configurations of one structure: ``params`` (COLUMNS x m) for ``rows`` (positions in the group)."""

    key: Any            # lower.StructureKey
    semantics: Any      # semantics.Semantics
    params: np.ndarray
    rows: np.ndarray    # int64


@dataclass
class Prepared:
    """What a kind made of a group of lines (positions 0..n-1 of the group)."""

    errors: dict[int, str] = field(default_factory=dict)        # position -> one-line reason
    columns: dict[str, list] = field(default_factory=dict)      # kind's output column -> value per position
    tables: list[Table] = field(default_factory=list)
    results: dict[str, list] = field(default_factory=dict)      # result variable -> value per position, for
                                                                # kinds that evaluate their lines themselves


class Kind(Protocol):
    name: str
    engine: str                 # the registry engine whose result variables its lines carry
    columns: dict[str, str]     # output column -> its type: "string" or "float64"

    def claims(self, case: dict) -> bool: ...

    def prepare(self, cases: list[dict], default_semantics) -> Prepared: ...

    # kinds that return Tables also evaluate them (one structure, all legal) into ``out`` (the rows of their
    # engine's registry RESULTS x m):
    # def evaluate_into(self, key, semantics, params, out) -> None: ...


def load_json(line: str):
    """One JSON value of a line; a FastmodelError with json's message and column."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise FastmodelError(f"invalid JSON: {error.msg} at column {error.colno}") from None
    except RecursionError:        # [[[[... thousands deep: json recurses once per level
        raise FastmodelError(f"invalid JSON: {NESTED_TOO_DEEP}") from None


def one_line(reason: object) -> str:
    return " ".join(str(reason).split())


def lower_all(cases, lower) -> tuple[list, dict[int, str]]:
    """``([(index, lower(case)), ...], {index: one-line error})``: every case lowered, a spec error kept as its
    line's message instead of stopping the batch."""
    lowered, errors = [], {}
    for j, case in enumerate(cases):
        try:
            lowered.append((j, lower(case)))
        except FastmodelError as error:
            errors[j] = one_line(error)
    return lowered, errors


def internal_error(error: BaseException) -> str:
    return f"internal error ({type(error).__name__}: {one_line(error)}); please report it"


_MISSING = object()
_SORT = orjson.OPT_SORT_KEYS
_DUMPS = orjson.dumps


def _content_key(value) -> object:
    """A hashable key of a spec value by its canonical content (a name stays itself)."""
    if type(value) is str:
        return value
    if value is _MISSING:
        return _MISSING
    try:
        return orjson.dumps(value, option=_SORT)
    except TypeError:  # pragma: no cover - JSON input only holds JSON types
        return repr(value)


class _LRU(OrderedDict):
    """A bounded memo (batch files may name millions of distinct specs)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key, value):
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


def kinds_for(calibration=None) -> list:
    """The line kinds of a batch, every engine's (fastmodel/engines.py), in claim order: the MAD-Max spec
    lines last, as they claim every line no other kind claims. Kinds that take a calibration (the
    real-world model's run records) get ``calibration`` (a ``Calibration`` or None)."""
    from fastmodel import engines

    kinds = []
    for engine in engines.ENGINES.values():
        for cls in engine.batch_kind_classes():
            kinds.append(cls(calibration) if getattr(cls, "takes_calibration", False) else cls())
    return kinds


def __getattr__(name: str):
    """``KINDS``: the batch's default kinds (no calibration), built on first use."""
    if name == "KINDS":
        value = kinds_for(None)
        globals()["KINDS"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
