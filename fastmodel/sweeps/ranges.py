"""Axis values as a sweep gives them: a list, a scalar, or a range table ``{start, stop, num|step, scale}``.

Shared by every engine's sweep axes. A range is sized from its definition before any value is made (an axis
holds at most :data:`MAX_AXIS_VALUES`), and linear ranges are computed in decimal from the numbers as written,
so ``{start = 0.4, stop = 0.8, num = 9}`` holds exactly 0.6.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any

import numpy as np

from fastmodel.errors import SweepError, nearest

#: most values one axis may have (a range is sized before any value is made)
MAX_AXIS_VALUES = 100_000


def _decimal(value: float) -> Decimal:
    """The decimal the user wrote: ``0.4`` -> Decimal('0.4'), not 0.40000000000000002220..."""
    return Decimal(repr(float(value)))


def range_size(name: str, spec: dict) -> int:
    """Number of values of a range table, computed from its definition alone (nothing materialized)."""
    unknown = set(spec) - {"start", "stop", "num", "step", "scale"}
    if unknown:
        key = sorted(unknown)[0]
        raise SweepError(f"axis {name}: unknown range key {key!r}{nearest(key, ['start', 'stop', 'num', 'step', 'scale'])}")
    if "num" in spec and "step" in spec:
        raise SweepError(f"axis {name}: give either 'num' or 'step', not both")
    start, stop = spec.get("start"), spec.get("stop")
    for key, value in (("start", start), ("stop", stop)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SweepError(f"axis {name}: a range needs numeric, finite 'start' and 'stop' (got {key} = {value!r})")
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise SweepError(f"axis {name}: scale must be 'linear' or 'log' (got {scale!r})")
    if scale == "log" and (start <= 0 or stop <= 0):
        raise SweepError(f"axis {name}: a log range needs positive start and stop")
    if "num" in spec:
        num = spec["num"]
        if isinstance(num, float) and num.is_integer():
            num = int(num)
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise SweepError(f"axis {name}: 'num' must be a positive integer (got {num!r})")
        count = num
    elif "step" in spec:
        step = spec["step"]
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
            raise SweepError(f"axis {name}: 'step' must be a finite number (got {step!r})")
        if scale == "log":  # multiplicative step
            if step <= 1:
                raise SweepError(f"axis {name}: a log step must be > 1 (got {step!r})")
            if stop < start:
                raise SweepError(f"axis {name}: step {step} does not go from {start} to {stop}")
            count = int(math.floor(math.log(stop / start) / math.log(step) + 1e-9)) + 1
        else:
            if step == 0 or (stop - start) / step < 0:
                raise SweepError(f"axis {name}: step {step} does not go from {start} to {stop}")
            with localcontext() as ctx:
                ctx.prec = 50
                count = int((_decimal(stop) - _decimal(start)) / _decimal(step)) + 1  # exact decimal count
    else:
        raise SweepError(f"axis {name}: a range needs 'num' or 'step'")
    if count > MAX_AXIS_VALUES:
        raise SweepError(f"axis {name}: the range has {count:,} values; an axis may have at most "
                         f"{MAX_AXIS_VALUES:,} (use fewer points or a coarser step)")
    return count


def expand(name: str, spec: Any) -> list:
    """Axis values from a list, a scalar, or a range table {start, stop, num|step, scale}.

    Linear ranges are computed in decimal from the numbers as written, so
    ``{start = 0.4, stop = 0.8, num = 9}`` holds exactly 0.6 (not
    0.6000000000000001) and a filter ``flops_util=0.6`` finds it.
    """
    if isinstance(spec, dict):
        count = range_size(name, spec)
        start, stop = spec["start"], spec["stop"]
        with localcontext() as ctx:
            ctx.prec = 50
            first = _decimal(start)
            if spec.get("scale", "linear") == "log":
                if "num" in spec:
                    ratio = (_decimal(stop) / first) ** (Decimal(1) / max(count - 1, 1))
                else:
                    ratio = _decimal(spec["step"])
                values = [float(first * ratio**k) for k in range(count)]
                if "num" in spec:
                    values[-1] = float(stop)
                return values
            if "num" in spec:
                if count == 1:
                    return [float(first)]
                step = (_decimal(stop) - first) / (count - 1)
            else:
                step = _decimal(spec["step"])
            values = [float(first + k * step) for k in range(count)]
        if isinstance(start, int) and isinstance(stop, int) and all(v.is_integer() for v in values):
            return [int(v) for v in values]
        return values
    if isinstance(spec, (list, tuple, np.ndarray, range)):
        if len(spec) > MAX_AXIS_VALUES:
            raise SweepError(f"axis {name}: {len(spec):,} values; an axis may have at most {MAX_AXIS_VALUES:,}")
        return list(spec)
    return [spec]


__all__ = ["MAX_AXIS_VALUES", "expand", "range_size"]
