"""The one check of a value of a registry column, for every input path that reads one.

A column (``fastmodel.registry.lm.Column``) bounds its values to ``[lo, hi]`` and may declare, in its
registry row, ``Forbidden`` open intervals inside that range, each with the reason a value there is refused
(``usable_hbm_fraction``: a set share below 0.1 reads as a reserve typed by mistake). Specs (the model's fields,
execution options, a serving task's fields, through ``fastmodel.spec.record_blocks.bounds``; a cluster's
``efficiency`` table at lowering), device files, sweep axes, calibration overlays and run records all call
:func:`column_problem`, so a value gets the same reason whichever path reads it; each path adds its file and
field. Dependency-free, like the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Forbidden:
    """Values strictly between ``lo`` and ``hi`` are refused: "<value> <reason>"."""

    lo: float
    hi: float
    reason: str


def _number(value: float) -> str:
    return f"{value:.12g}"


def column_problem(column: Any, value: float) -> str | None:
    """Why ``value`` is not a value of ``column`` (None when it is): outside ``[column.lo, column.hi]`` (units
    named unless the column is dimensionless or a code), or inside one of ``column.forbid``'s open intervals."""
    if not column.lo <= value <= column.hi:
        units = "" if column.units in ("1", "code") else f" {column.units}"
        return f"{_number(value)} is outside [{_number(column.lo)}, {_number(column.hi)}]{units}"
    gap = next((gap for gap in column.forbid if gap.lo < value < gap.hi), None)
    return None if gap is None else f"{_number(value)} {gap.reason}"


def checker(column: Any):
    """A pydantic ``AfterValidator`` function of ``column``: the value back, or ValueError(``column_problem``);
    ``None`` (an absent optional field) passes."""

    def check(value):
        if value is not None and (problem := column_problem(column, value)):
            raise ValueError(problem)
        return value

    return check
