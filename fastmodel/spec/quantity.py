"""Numbers with units in spec files.

Spec fields are stored in SI base units (bytes, bytes/s, FLOP/s). A spec file
may write them as plain numbers in those units (``1555e9``) or as strings with
a unit (``"1555 GB/s"``, ``"312 TFLOP/s"``, ``"40 GiB"``). Plain numbers that are
implausibly small for the field are rejected with a hint, because the most
common mistake is writing ``1555`` meaning GB/s.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field, WithJsonSchema

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

#: a count written with a unit suffix (``"8k"``, ``"4Ki"``): 8k tokens is 8000 or 8192, so a count takes the number
COUNT_SUFFIX = re.compile(r"\s*\d+(\.\d+)?\s*[kKmM]i?\s*")
COUNT_HINT = "a count takes no unit suffix; write the whole number (8k tokens: 8000 or 8192)"


def count_suffix_hint(value) -> str:
    """``"; " + COUNT_HINT`` for a text that is a count with a unit suffix (``"8k"``), else ''."""
    return f"; {COUNT_HINT}" if isinstance(value, str) and COUNT_SUFFIX.fullmatch(value) else ""


_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")

# kind -> (accepted unit stems, plausibility floor for a plain number, example)
_KINDS = {
    "bytes": (("B",), 1e3, "'40 GB' or 40e9"),
    "bytes_per_s": (("B/s", "Bps"), 1e6, "'1555 GB/s' or 1555e9"),
    "flop_per_s": (("FLOP/s", "FLOPS", "OP/s", "OPS", "FLOP/S"), 1e6, "'312 TFLOP/s' or 312e12"),
    "seconds": (("s",), 0.0, "'3.4 us' or 3.4e-6"),
    "duration": (("s",), 0.0, "'2s' or '50ms'"),     # a service-level target (TTFT, TPOT), not a device latency
}
#: a registry column's units -> the kind of quantity a unit string of it is read as (a sweep axis value, '80 GB'):
#: one table for the training and serving sweeps (fastmodel/lm/sweep.py, fastmodel/serve/sweep_file.py)
COLUMN_UNIT_KINDS = {"bytes": "bytes", "bytes/s": "bytes_per_s", "FLOP/s": "flop_per_s", "s": "seconds"}
#: prefixes below one, accepted for seconds and durations only (``"3.4 us"``; ``"25 mB/s"`` stays an error)
_SUBUNIT = {"m": 1e3, "u": 1e6, "n": 1e9}  # divisors: 3.4 / 1e6 is exactly 3.4e-6
#: kind -> largest plausible value of one device, node link or port (1000x beyond today's hardware)
CEILINGS = {"bytes": 1e16, "bytes_per_s": 1e16, "flop_per_s": 1e19, "seconds": 1.0, "duration": 86400.0}
_CEILING_TEXT = {"bytes": "10 PB", "bytes_per_s": "10 PB/s", "flop_per_s": "10 EFLOP/s", "seconds": "1 s",
                 "duration": "1 day"}


def _bounded(number: float, kind: str, value) -> float:
    if number > CEILINGS[kind]:
        raise ValueError(f"{value!r} is implausibly large for {kind.replace('_per_', '/')} "
                         f"(at most {_CEILING_TEXT[kind]}); values are in SI base units")
    return number


def parse_quantity(value, kind: str) -> float:
    """Convert ``value`` (number or unit string) of ``kind`` to SI base units."""
    stems, floor, example = _KINDS[kind]
    if isinstance(value, bool):
        raise ValueError(f"expected a number in {kind.replace('_per_', '/')}, got a boolean")
    if isinstance(value, (int, float)):
        number = float(value)
        if 0 < number < floor:
            raise ValueError(
                f"{value!r} is implausibly small for {kind.replace('_per_', '/')}; "
                f"values are in SI base units: write e.g. {example}"
            )
        return _bounded(number, kind, value)
    if not isinstance(value, str):
        raise ValueError(f"expected a number or a string with units, got {type(value).__name__}")
    match = _QUANTITY.match(value.replace("\u00b5", "u"))
    if not match:
        raise ValueError(f"cannot read {value!r} as a quantity; write e.g. {example}")
    number, unit = float(match.group(1)), match.group(2)
    if unit == "":
        return parse_quantity(number, kind)
    for stem in stems:
        if unit.endswith(stem):
            prefix = unit[: -len(stem)]
            if prefix in _PREFIX:
                return _bounded(number * _PREFIX[prefix], kind, value)
            if prefix in _BINARY:
                return _bounded(number * _BINARY[prefix], kind, value)
            if kind in ("seconds", "duration") and prefix in _SUBUNIT:
                return _bounded(number / _SUBUNIT[prefix], kind, value)
    raise ValueError(f"unknown unit {unit!r} for {kind.replace('_per_', '/')}; write e.g. {example}")


def _validator(kind: str):
    return BeforeValidator(lambda value: parse_quantity(value, kind))


def _schema(kind: str, bound: str):
    """JSON Schema of a quantity: a number in SI base units or a string with a unit."""
    example = _KINDS[kind][2]
    return WithJsonSchema({"anyOf": [{"type": "number", bound: 0},
                                     {"type": "string", "description": f"a number with a unit, e.g. {example}"}]})


Bytes = Annotated[float, _validator("bytes"), Field(gt=0), _schema("bytes", "exclusiveMinimum")]
BytesPerSecond = Annotated[float, _validator("bytes_per_s"), Field(gt=0), _schema("bytes_per_s", "exclusiveMinimum")]
FlopPerSecond = Annotated[float, _validator("flop_per_s"), Field(gt=0), _schema("flop_per_s", "exclusiveMinimum")]
#: a latency (one hop of a collective), seconds; 0 allowed
Latency = Annotated[float, _validator("seconds"), Field(ge=0), _schema("seconds", "minimum")]


def _fraction(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 < value <= 100:
        raise ValueError(f"{value} looks like a percentage; utilizations are fractions in (0, 1], e.g. {value / 100:g}")
    return value


Utilization = Annotated[float, BeforeValidator(_fraction), Field(gt=0, le=1)]
Fraction = Annotated[float, BeforeValidator(_fraction), Field(ge=0, le=1)]
