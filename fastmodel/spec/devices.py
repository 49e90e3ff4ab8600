"""The built-in device files (``specs/devices/*.toml``): datasheet and efficiency columns by device name.

Shared by the real-world training engine (run records, ``kind = "cluster"`` specs) and the serving engine:
each file lists the ``names`` it answers to and values of registry columns (``fastmodel.registry.lm``), each
with its source in the file's comments. Lookup is by lower-case name.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from fastmodel.errors import SpecError, nearest
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.registry.lm_lowprec import VENDORS
from fastmodel.registry.validators import column_problem

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib


@lru_cache(maxsize=None)
def _read_device_files() -> tuple[dict[str, dict[str, float]], dict[str, str], dict[str, list[str]]]:
    """Every built-in device file, read once: (name -> column -> value, name -> file stem), names in lower case,
    and file stem -> the names as the file writes them."""
    table: dict[str, dict[str, float]] = {}
    files: dict[str, str] = {}
    written: dict[str, list[str]] = {}
    for entry in resources.files("fastmodel.specs").joinpath("devices").iterdir():
        if not entry.name.endswith(".toml"):
            continue
        data = tomllib.loads(entry.read_text())
        names = data.pop("names")
        data["vendor"] = vendor_code(data.get("vendor"), f"specs/devices/{entry.name}")
        for key, value in data.items():
            if key not in COLUMN_INDEX:
                raise SpecError(f"specs/devices/{entry.name}", key, f"unknown column{nearest(key, COLUMN_INDEX)}")
            if problem := column_problem(COLUMNS[COLUMN_INDEX[key]], float(value)):
                raise SpecError(f"specs/devices/{entry.name}", key, problem)
        written[entry.name[: -len(".toml")]] = list(names)
        for name in names:
            table[name.lower()] = {k: float(v) for k, v in data.items()}
            files[name.lower()] = entry.name[: -len(".toml")]
    return table, files, written


def device_table() -> dict[str, dict[str, float]]:
    """Built-in device files, keyed by every name they list (lower case) -> column name -> value."""
    return _read_device_files()[0]


def device_files() -> dict[str, str]:
    """Every name a built-in device file lists (lower case) -> the file's stem (``"dgx-b200"`` -> ``"b200"``)."""
    return _read_device_files()[1]


def device_file_names() -> dict[str, list[str]]:
    """Each built-in device file's stem -> the GPU names it answers to, as written (``specs list``)."""
    return _read_device_files()[2]


def vendor_code(name, source: str | None = None) -> int:
    """The ``vendor`` column's code of a device file's ``vendor`` (``VENDORS``: "nvidia", "amd"). Every built-in
    device file states it; a missing or unknown name is a SpecError naming the file, the field and the choices."""
    if name is None:
        raise SpecError(source, "vendor", f"missing; write one of {', '.join(VENDORS)}")
    if not isinstance(name, str) or name.lower() not in VENDORS:
        raise SpecError(source, "vendor", f"unknown vendor {name!r}{nearest(str(name), VENDORS)}; choose one of "
                        f"{', '.join(VENDORS)}")
    return VENDORS[name.lower()]


def device_vendor(gpu: str) -> str:
    """The vendor name of a built-in device (``"nvidia"`` for a GPU with no device file: the registry default)."""
    return vendor_name(device_table().get(str(gpu).lower(), {}).get("vendor", 0.0))


def vendor_name(code: float) -> str:
    """The name of a ``vendor`` column's code (``VENDORS``)."""
    return next(name for name, value in VENDORS.items() if value == code)



def gpu_notes(gpu: str) -> list[str]:
    """``[no_device_note(gpu)]`` for a GPU with no built-in device file (its efficiencies are the registry's
    generic defaults, which a report or sweep must say), else none."""
    return [] if str(gpu).lower() in device_table() else [no_device_note(str(gpu))]


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


#: a stated HBM capacity within this fraction of the device file's is a reading of the same part's datasheet figure
#: (docs/model_memory.md "One capacity per GPU"): decimal "X GB" is 0.931 X GiB, and every listed GPU's CUDA-visible
#: total lies between 0.927 X GiB (L40S) and 0.999 X GiB (MI300X), so the readings of one part fall between -6.8% and
#: +7.9% of its device file; two parts that share a device name lie further apart (H100 NVL's "94 GB", 87.5 GiB,
#: against H100 SXM's 79.11 GiB: +10.7%; read as 94 GiB, +18.8%)
SAME_PART_SLACK = 0.085
#: a replacement closer than this is rounding of the datasheet figure and gets no note
HBM_NOTE_SLACK = 0.02


def device_hbm(gpu: str, stated: float | None, notes: list[str] | None = None) -> float | None:
    """The HBM capacity a plan on ``gpu`` may fill: its device file's ``hbm_bytes`` (``same_part_hbm``)."""
    return same_part_hbm(device_table().get(str(gpu).lower(), {}).get("hbm_bytes"), stated, gpu, notes)


def same_part_hbm(capacity: float | None, stated: float | None, gpu: str, notes: list[str] | None = None):
    """``capacity``, a device file's CUDA-visible total (what ``cudaMemGetInfo`` reports and what runs out), in
    place of a ``stated`` capacity that reads the same part (within ``SAME_PART_SLACK``); a stated figure further
    away (another part under the same name), or no device capacity, keeps ``stated``. Gaps above
    ``HBM_NOTE_SLACK`` are noted in ``notes``."""
    if not capacity or stated is None or isinstance(stated, bool) or not isinstance(stated, (int, float)):
        return stated if stated is not None else capacity
    gap = stated / capacity - 1
    if abs(gap) > SAME_PART_SLACK:
        if notes is not None:
            notes.append(f"system.hbm_bytes {stated / 2**30:.1f} GiB is {gap:+.0%} from the device file of {gpu} "
                         f"({capacity / 2**30:.2f} GiB): kept, another part's capacity")
        return float(stated)
    if abs(gap) > HBM_NOTE_SLACK and notes is not None:
        notes.append(f"system.hbm_bytes {stated / 2**30:.1f} GiB -> {capacity / 2**30:.2f} GiB: the CUDA-visible "
                     f"total in the device file of {gpu} (the same part's datasheet figure read another way)")
    return float(capacity)
