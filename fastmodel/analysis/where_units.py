"""A filter's bare number that is likely a unit slip (``best --where tpot<13.8``, ``plot pareto --where``).

A value without a unit compared with a variable in seconds or bytes is read in that unit (``best.where_mask``):
``tpot<13.8`` is 13.8 s. When such a filter keeps no point, ``best._keeps_none`` says so; when it keeps every
point, nothing did, and the ranking silently ignored the filter the user meant (13.8 ms). :func:`unit_slips`
names those, as ``serve --search`` notes a bare ``--tpot 50`` read as 50 s (``cli/serve_search.py``).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from fastmodel.analysis.best import _EXPR, _UNIT_KINDS, _compare

#: a variable's units -> (the unit's word, the unit a slip likely meant)
_MEANT = {"s": ("seconds", "ms"), "bytes": ("bytes", "GiB")}


def unit_slips(ds: xr.Dataset, expressions: list[str]) -> list[str]:
    """One line per ``expressions`` item of the form ``NAME OP NUMBER`` (OP an inequality, NUMBER without a unit,
    NAME a variable whose ``units`` is s or bytes) that keeps every point where NAME is finite."""
    said = []
    for expression in expressions:
        match = _EXPR.match(expression)
        if not match:
            continue
        negate, name, op, text = match.groups()
        if negate or op not in ("<", "<=", ">", ">=") or name not in ds \
                or ds[name].attrs.get("units") not in _UNIT_KINDS:
            continue
        try:
            value = float(text)
        except ValueError:      # carries a unit (13.8ms) or is not a number: read as written
            continue
        values = ds[name]
        finite = np.isfinite(values)
        if not np.isfinite(value) or not bool(finite.any()) or not bool(_compare(values, op, value)
                                                                          .where(finite, True).all()):
            continue
        word, meant = _MEANT[ds[name].attrs["units"]]
        said.append(f"--where {expression.strip()} keeps every point: {name} is in {word}, so a bare {text} is "
                    f"{text} {word}; give a unit, e.g. {name}{op}{text}{meant}")
    return said
