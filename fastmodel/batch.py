"""Batch evaluation: JSONL cases in, JSONL results out, one line per line, in order.

Input line: ``{"case": id?, "model": name|path|dict, "system": ..., "task": ...,
"semantics"?: preset|dict, "plan"?: str, "num_nodes"?: int}``. Output line:
``case``, ``status`` (``"ok"`` or ``"error: <reason>"``), ``plan`` and every
result variable of the registry (SI units). A bad line never stops the batch.
Legal cases are grouped by Program structure and evaluated by the kernels in
chunks, so throughput is that of the kernels plus JSON parsing.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import IO, Iterable, Iterator

from fastmodel.config import Config, resolve
from fastmodel.engine import evaluate_configs
from fastmodel.errors import FastmodelError
from fastmodel.loader import load_cached
from fastmodel.results import NAMES
from fastmodel.semantics import get_semantics
from fastmodel.spec_system import SystemSpec

CASE_KEYS = ("case", "model", "system", "task", "semantics", "plan", "num_nodes")
CHUNK_LINES = 20_000


def _spec_text(value) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str) and value.startswith("{"):
        raise FastmodelError(f"spec name {value!r} looks like JSON text; give a JSON object instead")
    if not isinstance(value, str):
        raise FastmodelError(f"expected a spec name, path or object, got {type(value).__name__}")
    return value


@lru_cache(maxsize=1024)
def _system_with_nodes(text: str, num_nodes) -> SystemSpec:
    system = load_cached("system", text)
    return system if num_nodes is None else system.with_nodes(num_nodes)


def _load_json(line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise FastmodelError(f"invalid JSON: {error.msg} at column {error.colno}") from None


def parse_case(line: "str | dict", default_semantics) -> Config:
    """One JSONL line (or its parsed dict) -> a resolved Config; raises FastmodelError."""
    case = _load_json(line) if isinstance(line, str) else line
    if not isinstance(case, dict):
        raise FastmodelError("a case must be a JSON object")
    unknown = [k for k in case if k not in CASE_KEYS and k != "expected" and k != "rule"]
    if unknown:
        from fastmodel.errors import nearest
        raise FastmodelError(f"unknown key {unknown[0]!r}{nearest(unknown[0], CASE_KEYS)}")
    for key in ("model", "system", "task"):
        if key not in case:
            raise FastmodelError(f"missing key {key!r}")
    model = load_cached("model", _spec_text(case["model"]))
    num_nodes = case.get("num_nodes")
    if num_nodes is not None and (isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1):
        raise FastmodelError(f"num_nodes must be a positive integer (got {num_nodes!r})")
    system = _system_with_nodes(_spec_text(case["system"]), num_nodes)
    task = load_cached("task", _spec_text(case["task"]))
    semantics = get_semantics(case["semantics"]) if "semantics" in case else default_semantics
    return resolve(model, system, task, semantics, case.get("plan"))


def _one_line(reason: str) -> str:
    return " ".join(str(reason).split())


def decode_lines(binary: IO[bytes]) -> Iterator[str]:
    """Lines of a binary stream as text; a line that is not UTF-8 becomes an error marker."""
    for raw in binary:
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            yield NOT_UTF8


NOT_UTF8 = "\x00not-utf-8"


def run_batch(lines: Iterable[str], semantics="madmax") -> Iterator[dict]:
    """Yield one result record per input line, in order."""
    default_semantics = get_semantics(semantics)
    chunk: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        chunk.append((number, line))
        if len(chunk) >= CHUNK_LINES:
            yield from _run_chunk(chunk, default_semantics)
            chunk = []
    if chunk:
        yield from _run_chunk(chunk, default_semantics)


def _run_chunk(chunk: list[tuple[int, str]], default_semantics) -> Iterator[dict]:
    records: list[dict] = []
    configs: list[Config] = []
    positions: list[int] = []
    for number, line in chunk:
        record = {"case": number}
        records.append(record)
        if not line.strip():
            record["status"] = "error: empty line"
            continue
        if line == NOT_UTF8:
            record["status"] = "error: line is not UTF-8 text"
            continue
        try:
            case = _load_json(line.lstrip("\ufeff"))
            if isinstance(case, dict) and "case" in case:
                record["case"] = case["case"]
            config = parse_case(case, default_semantics)
        except FastmodelError as error:
            record["status"] = "error: " + _one_line(error)
            continue
        except Exception as error:  # noqa: BLE001 - a bad line must never stop the batch
            record["status"] = f"error: internal error ({type(error).__name__}: {_one_line(error)}); please report it"
            continue
        record["status"] = "ok"
        record["plan"] = config.plan.label
        configs.append(config)
        positions.append(len(records) - 1)
    if configs:
        results = evaluate_configs(configs)
        for j, position in enumerate(positions):
            record = records[position]
            for name in NAMES:
                value = float(results[name][j])
                record[name] = value if math.isfinite(value) else None
    yield from records


def write_records(records: Iterable[dict], out: IO[str]) -> tuple[int, int]:
    """Write records as JSONL; return (ok count, error count)."""
    ok = bad = 0
    for record in records:
        out.write(json.dumps(record) + "\n")
        if record["status"] == "ok":
            ok += 1
        else:
            bad += 1
    return ok, bad
