"""Inventory of the numeric constants the real-world model reads, and the tables of docs/model.md Appendix B.

``python tests/constants_inventory.py`` prints the inventory: every key of the device files
(``specs/devices/*.toml``) with its value per device, every field a stack profile (``fastmodel/lm/stacks``)
sets, and every module-level UPPER_CASE constant with a number in it under ``fastmodel/lm``, ``fastmodel/serve``,
``kernels/lm``, ``kernels/serve``, every top-level ``kernels/*.py`` (``roofline``, ``nccl``, ``schedule``,
``streams``, ...; not ``kernels/madmax``, the MAD-Max engine) and ``fastmodel/spec/devices.py``.
``tests/meta/test_constants_documented.py`` checks each against its row in docs/model.md "Appendix B. Constants
and their sources".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MODEL_DOC = ROOT / "docs" / "model.md"
DEVICE_DIR = ROOT / "specs" / "devices"
STACK_DIR = ROOT / "fastmodel" / "lm" / "stacks"
#: folders (every module under them), files and globs; ``kernels/*.py`` is the top-level kernels package, without
#: ``kernels/madmax`` (the MAD-Max engine, Appendix A)
CONSTANT_DIRS = (
    "fastmodel/lm",
    "fastmodel/serve",
    "kernels/lm",
    "kernels/serve",
    "kernels/*.py",
    "fastmodel/spec/devices.py",
)
#: literals that are structure, not physics (skipped when they are a constant's only numbers)
STRUCTURAL = {0, 1, 2, -1}


def device_raw() -> dict[str, dict[str, str]]:
    """Device file stem -> key -> the value as the file writes it (``names`` left out)."""
    out = {}
    for path in sorted(DEVICE_DIR.glob("*.toml")):
        keys = tomllib.loads(path.read_text()).keys() - {"names"}
        raw = {}
        for line in path.read_text().splitlines():
            match = re.match(r"([a-z_0-9]+)\s*=\s*(\S+)", line)
            if match and match.group(1) in keys:
                raw[match.group(1)] = match.group(2)
        out[path.stem] = raw
    return out


def device_keys() -> list[str]:
    """Every key any device file sets, in first-seen order."""
    seen: dict[str, None] = {}
    for raw in device_raw().values():
        seen.update(dict.fromkeys(raw))
    return list(seen)


def number(value: float) -> str:
    """A registry default as the appendix writes it: whole numbers in full, others to 6 significant digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def values_cell(key: str) -> str:
    """The per-device values of ``key`` as Appendix B.1 writes them: ``value (device, ...)`` groups in file order,
    ``all: value`` when every file agrees, ``registry D (device, ...)`` for the files that leave the registry column's
    default D (``fastmodel/registry/lm.py``)."""
    from fastmodel.registry.lm import COLUMNS

    default = {column.name: column.default for column in COLUMNS}.get(key)
    unset = f"registry {number(default)}" if default is not None else "unset"
    groups: dict[str, list[str]] = {}
    for stem, raw in device_raw().items():
        groups.setdefault(raw.get(key, unset), []).append(stem)
    if len(groups) == 1 and unset not in groups:
        return f"all: {next(iter(groups))}"
    return "; ".join(f"{value} ({', '.join(stems)})" for value, stems in groups.items())


def _profile_name(stem: str) -> str:
    """The profile a stack module defines (``pytorch_fsdp`` -> ``pytorch-fsdp``); the package's ``resolve``, which
    applies to every profile, is ``every profile``."""
    import importlib

    if stem == "__init__":
        return "every profile"
    return importlib.import_module(f"fastmodel.lm.stacks.{stem}").PROFILE.name


def cluster_keys() -> list[str]:
    """The datasheet and topology keys of the ``kind = "cluster"`` system files (``specs/systems``), names and
    texts (``kind``, ``name``, ``source``, ``gpu``) and the node count, a default the user overrides, left out."""
    seen: dict[str, None] = {}
    for path in sorted((ROOT / "specs" / "systems").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        if data.get("kind") == "cluster":
            seen.update(dict.fromkeys(k for k in data if k not in ("kind", "name", "source", "gpu", "num_nodes")))
    return list(seen)


def stack_fields() -> dict[str, list[str]]:
    """ExecutionSpec field -> the profiles whose module sets it (dict keys, subscripts and ``pop`` of a string)."""
    from fastmodel.lm.execution import ExecutionSpec

    fields = set(ExecutionSpec.model_fields)
    found: dict[str, set[str]] = {}
    for path in sorted(STACK_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            keys: list = []
            if isinstance(node, ast.Dict):
                keys = list(node.keys)
            elif isinstance(node, ast.Subscript):
                keys = [node.slice]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "pop" and node.args:
                keys = [node.args[0]]
            for key in keys:
                if isinstance(key, ast.Constant) and key.value in fields:
                    found.setdefault(key.value, set()).add(_profile_name(path.stem))
    return {name: sorted(profiles) for name, profiles in sorted(found.items())}


def _constant_files() -> list[Path]:
    files: list[Path] = []
    for place in CONSTANT_DIRS:
        path = ROOT / place
        if "*" in place:
            files += sorted(ROOT.glob(place))
        else:
            files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def _value(node: ast.expr):
    """The value of a constant arithmetic expression (``2.0 + 2.0 + 2.0`` -> 6.0), else None."""
    try:
        return eval(compile(ast.Expression(node), "<constant>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:
        return None


def module_constants() -> list[tuple[str, str, str]]:
    """(file, NAME, expression) of every module-level UPPER_CASE assignment holding a number other than the
    structural 0, 1, 2 and -1."""
    out = []
    for path in _constant_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value  # ``A = B = 1`` names both
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            numbers = [
                c.value
                for c in ast.walk(value)
                if isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and not isinstance(c.value, bool)
            ]
            total = _value(value)
            physical = isinstance(total, (int, float)) and total not in STRUCTURAL
            if not numbers or (set(numbers) <= STRUCTURAL and not physical):
                continue
            for target in targets:
                if isinstance(target, ast.Name) and target.id.lstrip("_").isupper():
                    out.append((str(path.relative_to(ROOT)), target.id, ast.unparse(value)))
    return out


def doc_table(heading: str, text: str | None = None) -> dict[str, list[str]]:
    """The table under the docs/model.md heading that starts with ``heading`` (e.g. ``### B.1``): each name of a
    row's first cell (backticked, comma-separated) -> the row's cells."""
    text = MODEL_DOC.read_text() if text is None else text
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading + " ")), None)
    if start is None:
        return {}
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells
    return rows


if __name__ == "__main__":
    keys = device_keys()
    print(f"device keys ({len(keys)}):")
    for key in keys:
        print(f"  {key}: {values_cell(key)}")
    fields = stack_fields()
    print(f"stack-profile fields ({len(fields)}):")
    for name, profiles in fields.items():
        print(f"  {name}: {', '.join(profiles)}")
    constants = module_constants()
    print(f"module constants ({len(constants)}):")
    for where, name, value in constants:
        print(f"  {where} {name} = {value[:80]}")
