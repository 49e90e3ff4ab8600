"""A filter's bare number that is likely a unit slip (``best --where tpot<13.8``, ``plot pareto --where``).

A value without a unit compared with a variable in seconds or bytes is read in that unit (``best.where_mask``):
``tpot<13.8`` is 13.8 s. When such a filter keeps no point, ``best._keeps_none`` says so; when it keeps every
point, nothing did, and the ranking silently ignored the filter the user meant (13.8 ms). :func:`unit_slips`
names those; ``serve --search`` notes a bare ``--tpot 50`` read as 50 s (:func:`flag_slip_note`, called by
``cli/serve_search.py``). A value is bare by one rule for both (:func:`bare_number`).

Both say it only where it is plausible (:func:`slip_hint`): the number, read in the unit a slip likely meant
(ms for seconds, GiB for bytes), keeps some point and not the same points as read as written. ``step_time<5``
on steps of 1.8-3.1 s (5 ms keeps none), ``step_time>0`` (0 is 0 in any unit) and ``memory_per_device<1e11``
(1e11 GiB keeps every point too) are valid filters and get no note (review17 F4).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from fastmodel.analysis.best import _EXPR, _UNIT_KINDS, _compare

#: a variable's units -> (the unit's word, the unit a slip likely meant, that unit in the variable's)
_MEANT = {"s": ("seconds", "ms", 1e-3), "bytes": ("bytes", "GiB", 2.0 ** 30)}


def bare_number(text) -> float | None:
    """The number a filter's or an option's value spells without a unit (``"13.8"``, ``"50"``), else None
    (``"13.8ms"``, ``"fast"``): the value read in the base unit of what it is compared with (seconds, bytes)."""
    try:
        return float(str(text))
    except ValueError:
        return None


def flag_slip_note(flag: str, text: str, seconds: float, plausible_s: float) -> str | None:
    """``serve --search``'s note on an SLO option ``flag`` given as the bare number ``text`` (``seconds`` as read)
    above ``plausible_s``, where milliseconds are likelier meant (``cli/serve_search.SECONDS_PLAUSIBLE``); None for
    a value with a unit or a plausible one."""
    if bare_number(text) is None or seconds <= plausible_s:
        return None
    return (f"{flag} {text} reads as {seconds:g} s (a number without a unit is seconds); write e.g. "
            f"{text}{_MEANT['s'][1]} for milliseconds")


def slip_hint(values: xr.DataArray, op: str, text: str) -> str | None:
    """``"NAME is in seconds, so a bare T is T seconds; give a unit, e.g."`` (the caller appends its example) when
    ``NAME OP T`` compares a bare nonzero number with a variable in seconds or bytes and reading T in the meant
    unit keeps some finite point and a different set than T as written; else None."""
    units = values.attrs.get("units")
    if units not in _MEANT or op is None:
        return None
    value = bare_number(text)
    if value is None:       # carries a unit (13.8ms) or is not a number: read as written
        return None
    if not np.isfinite(value) or value == 0:
        return None
    word, _, scale = _MEANT[units]
    finite = np.isfinite(values)
    written = _compare(values, op, value) & finite
    meant = _compare(values, op, value * scale) & finite
    if not bool(meant.any()) or bool((written == meant).all()):
        return None
    return f"{values.name} is in {word}, so a bare {text} is {text} {word}; give a unit, e.g."


def meant_unit(values: xr.DataArray) -> str:
    """The unit a slip on ``values`` (in seconds or bytes) likely meant: ms or GiB."""
    return _MEANT[values.attrs["units"]][1]


def unit_slips(ds: xr.Dataset, expressions: list[str]) -> list[str]:
    """One line per ``expressions`` item of the form ``NAME OP NUMBER`` (OP an inequality, NUMBER without a unit,
    NAME a variable whose ``units`` is s or bytes) that keeps every point where NAME is finite, when
    :func:`slip_hint` finds the slip plausible."""
    said = []
    for expression in expressions:
        match = _EXPR.match(expression)
        if not match:
            continue
        negate, name, op, text = match.groups()
        if negate or op not in ("<", "<=", ">", ">=") or name not in ds \
                or ds[name].attrs.get("units") not in _UNIT_KINDS:
            continue
        values = ds[name]
        finite = np.isfinite(values)
        try:
            keeps_all = bool(_compare(values, op, float(text)).where(finite, True).all())
        except ValueError:
            continue
        hint = slip_hint(values, op, text) if keeps_all and bool(finite.any()) else None
        if hint:
            said.append(f"--where {expression.strip()} keeps every point: {hint} {name}{op}{text}{meant_unit(values)}")
    return said
