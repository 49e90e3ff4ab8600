"""The ``[stack."NAME"]`` tables of a calibration file: their keys, their fields and the devices they apply to
(docs/calibration.md, "What is fitted" and "A stack's values apply on the devices of its runs").

A stack table may say ``devices = ["H100-SXM-80GB", ...]``: its values then apply only to runs of that stack on
those devices (any alias of their built-in files); without it, on every device. ``fastmodel calibrate`` always
writes it, naming the devices of the runs the values were fitted on: one stack on one GPU scales that GPU's
kernels together with the software's, so its runs identify the pair, not the software alone.
"""

from __future__ import annotations

from typing import Any

from fastmodel.errors import SpecError, nearest

#: field of a ``[stack."NAME"]`` table naming the devices its values apply to
DEVICES_FIELD = "devices"


def parse_stacks(block: Any, source: str, form: int) -> tuple[dict[str, dict[str, float]], dict[str, tuple]]:
    """``[stack."NAME"]`` tables: NAME a key of ``overlay.stack_key``, fields of ``STACK_FIELDS`` and
    ``devices``; none in format 1. Returns (values by stack, devices by stack for the tables that name them)."""
    from fastmodel.lm.calibrate.overlay import STACK_FIELDS, _bounded, _flatten, _quote

    if not isinstance(block, dict):
        raise SpecError(source, "stack", 'expected tables [stack."NAME"]')
    if form == 1 and block:
        raise SpecError(source, f"stack.{_quote(next(iter(block)))}", "format 1 keys [stack] tables by framework "
                        "text, format 2 by the stack profile the runs resolve to, and a text cannot be mapped to "
                        "one (runs of one text may resolve to several): refit with fastmodel calibrate, or delete "
                        "the [stack] tables")
    by_path = {p: c for c, p in STACK_FIELDS.items()}
    stacks: dict[str, dict[str, float]] = {}
    scopes: dict[str, tuple] = {}
    for name, table in block.items():
        where = f"stack.{_quote(name)}"
        if not isinstance(table, dict):
            raise SpecError(source, where, f"expected a table, got {table!r}")
        check_stack_key(name, where, source)
        if DEVICES_FIELD in table:
            scopes[name] = parse_devices(table[DEVICES_FIELD], f"{where}.{DEVICES_FIELD}", source)
        values: dict[str, float] = {}
        for path, value in _flatten({k: v for k, v in table.items() if k != DEVICES_FIELD}).items():
            column = by_path.get(path)
            if column is None:
                fields = [*STACK_FIELDS.values(), DEVICES_FIELD]
                raise SpecError(source, f"{where}.{path}", f"unknown field{nearest(path, fields)}")
            values[column] = _bounded(value, column, f"{where}.{path}", source)
        stacks[name] = values
    return stacks, scopes


def parse_devices(value: Any, where: str, source: str) -> tuple:
    """A stack table's ``devices``: a non-empty list of device names (any alias; custom names kept as given),
    returned as canonical names."""
    from fastmodel.lm.calibrate.overlay import canonical_device

    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise SpecError(source, where, f"expected a non-empty list of device names, got {value!r}")
    return tuple(sorted({canonical_device(v) for v in value}))


def check_stack_key(name: str, where: str, source: str) -> None:
    """A SpecError unless ``name`` is a stack profile's name (not ``default``) or ``default:`` + a reduced text."""
    from fastmodel.lm.calibrate.overlay import DEFAULT_PREFIX, _quote, stack_name
    from fastmodel.lm.stacks import STACK_NAMES

    profiles = [n for n in STACK_NAMES if n != "default"]
    if name in profiles:
        return
    if name.startswith(DEFAULT_PREFIX):
        text = name[len(DEFAULT_PREFIX):]
        if text and stack_name(text) == text:
            return
        raise SpecError(source, where, f"after {DEFAULT_PREFIX!r} the framework text lower case without versions "
                                       f"or parentheses: write {_quote(DEFAULT_PREFIX + (stack_name(text) or 'TEXT'))}")
    raise SpecError(source, where, f"not a stack profile{nearest(name, profiles)}; a stack table is named by the "
                                   f"profile its runs resolve to ({', '.join(profiles)}), or {DEFAULT_PREFIX!r} + "
                                   f"the framework text of a stack no profile names")


def applies(scopes: dict[str, tuple], stack: str | None, device: str) -> bool:
    """Whether the ``[stack]`` table of key ``stack`` applies to a run on (canonical) ``device``."""
    return stack is not None and (stack not in scopes or device in scopes[stack])
