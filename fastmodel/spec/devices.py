"""The built-in device files (``specs/devices/*.toml``): datasheet and efficiency columns by device name.

Shared by the real-world training engine (run records, ``kind = "cluster"`` specs) and the serving engine:
each file lists the ``names`` it answers to and values of registry columns (``fastmodel.registry.lm``), each
with its source in the file's comments. Lookup is by lower-case name.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastmodel.errors import SpecError, nearest
from fastmodel.registry.lm import COLUMN_INDEX

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib


@lru_cache(maxsize=None)
def device_table() -> dict[str, dict[str, float]]:
    """Built-in device files, keyed by every name they list (lower case) -> column name -> value."""
    table: dict[str, dict[str, float]] = {}
    for entry in resources.files("fastmodel.specs").joinpath("devices").iterdir():
        if not entry.name.endswith(".toml"):
            continue
        data = tomllib.loads(entry.read_text())
        names = data.pop("names")
        for key in data:
            if key not in COLUMN_INDEX:
                raise SpecError(f"specs/devices/{entry.name}", key, f"unknown column{nearest(key, COLUMN_INDEX)}")
        for name in names:
            table[name.lower()] = {k: float(v) for k, v in data.items()}
    return table

