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



def no_device_note(gpu: str) -> str:
    """The note for a GPU with no built-in device file, naming the nearest device name only when it has the same
    model number (the first run of digits: "h100-sxn" -> 'h100-sxm-80gb', but "mi250x" gets no 'mi300x', a
    different device) and spells within difflib's 0.6 of it."""
    import difflib
    import re

    number = re.findall(r"\d+", gpu)[:1]
    same = [name for name in device_table() if re.findall(r"\d+", name)[:1] == number] if number else []
    match = difflib.get_close_matches(gpu.lower(), same, n=1, cutoff=0.6)
    hint = f" (did you mean '{match[0]}'?)" if match else ""
    return f"no built-in device file for {gpu!r}{hint}: generic efficiencies"
