"""``--execution FILE`` and ``-x/--set KEY=VALUE``: how one configuration given as specs executes (pipeline
schedule, MoE dispatcher and overlap, recompute, offload, CUDA graphs, ...), for ``fastmodel run``, ``plot
timeline`` and ``plot memory-timeline``.

The file holds one ``[execution]`` table, the schema and loader of a sweep file's ``[execution]`` table
(``fastmodel.lm.loader.load_execution``); each ``--set`` is one of its fields, the value read as TOML (``8``,
``true``, ``0.5``, ``"dualpipe"``, ``["moe", "mlp"]``; a bare word such as ``dualpipe`` is that string), and wins
over the file. Errors are one line naming the file (or ``--set``), the field path and the reason; a record (its
plan block states its execution), MAD-Max specs and serving configurations refuse both options.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from fastmodel.errors import FastmodelError, SpecError, nearest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: a --set value that is not TOML but one word: that word as a string (``pipeline_schedule=dualpipe``)
BARE_WORD = re.compile(r"[A-Za-z0-9_.+/-]+")     # "/": a rate with its unit, param_fetch_bw=10GB/s
#: a --set list of bare words (``[core_attn, mlp]``): each a string, as a bare word is
BARE_LIST = re.compile(r"\[\s*[A-Za-z0-9_.+/-]+(?:\s*,\s*[A-Za-z0-9_.+/-]+)*\s*,?\s*\]")
#: a --set value that is a number, a space and a unit (``-x 'collective_bucket_bytes=25 MB'``): that text, read by
#: the field as a bytes field reads ``"25 MB"`` in a file (fastmodel/spec/quantity.py); it needed TOML's quotes
QUANTITY_WORDS = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s+[A-Za-z/]+")
#: a percentage where a fraction is meant (-x activation_offload=50%): its fraction is said
PERCENT = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))\s*%")


def execution_options(func):
    """The ``--execution FILE`` and repeatable ``-x/--set KEY=VALUE`` options (parameters ``execution_file``
    and ``execution_sets``)."""
    func = click.option(
        "--set", "-x", "execution_sets", multiple=True, metavar="KEY=VALUE",
        help="One execution field (repeatable; wins over --execution), the value as TOML, e.g. -x "
        "pipeline_schedule=dualpipe -x micro_batch=2 -x uneven_stages=true; real-world training specs only.")(func)
    return click.option(
        "--execution", "execution_file", type=click.Path(dir_okay=False), metavar="FILE",
        help="A TOML file with an [execution] table (a sweep file's schema: pipeline_schedule, moe_dispatcher, "
        "recompute_modules, ...); real-world training specs only (a record's plan block states its own).")(func)


def given_flag(path: str | None, sets: tuple[str, ...]) -> str | None:
    """The flag named in a refusal: ``--execution`` or ``--set`` (None when neither is given)."""
    return "--execution" if path is not None else "--set" if sets else None


def refuse_with_record(model: str, path: str | None, sets: tuple[str, ...]) -> None:
    """A run record executes as its plan block says: --execution and --set are refused beside it."""
    flag = given_flag(path, sets)
    if flag:
        raise FastmodelError(f"{flag}: {model} is a measured-run record and its plan block states the execution; "
                             "edit the record (or give specs with --model) instead")


def refuse_for_engine(engine_name: str, path: str | None, sets: tuple[str, ...]) -> None:
    """--execution and --set apply to the real-world training model only (engine ``lm``)."""
    flag = given_flag(path, sets)
    if flag and engine_name != "lm":
        what = "a serving configuration" if engine_name == "serve" else "MAD-Max specs (the MAD-Max model has no " \
            "execution spec)"
        raise FastmodelError(f"{flag}: applies to real-world training models (family = \"lm\"), not to {what}")


def read_execution(path: str | None, sets: tuple[str, ...], engine_name: str) -> dict | None:
    """The execution fields of ``--execution`` and ``--set`` (None when neither is given) for specs the engine
    ``engine_name`` evaluates (refused unless it is the real-world training model, :func:`refuse_for_engine`),
    checked by the sweep file's loader; an error names the file when the file alone is wrong, else ``--set`` (the
    field blamed can be the file's when a ``--set`` value conflicts with it: dualpipe overlap in the file,
    ``-x pipeline_schedule=1f1b``)."""
    refuse_for_engine(engine_name, path, sets)
    if path is None and not sets:
        return None
    from fastmodel.lm.loader import load_execution

    fields = _file_fields(path) if path is not None else {}
    overrides: dict = {}
    for key, value in map(parse_set, sets):   # the last of two was taken, silently (-x micro_batch=1 -x ...=2)
        if key in overrides and overrides[key] != value:
            raise SpecError("--set", f"execution.{key}", f"given twice ({overrides[key]!r}, then {value!r}); give "
                            "it once")
        overrides[key] = value
    merged = {**fields, **overrides}
    try:
        load_execution(merged)
    except SpecError as error:
        source = "--set" if path is None or (overrides and _valid(load_execution, fields)) else path
        elsewhere = _elsewhere(str(error.field).removeprefix("execution."))
        reason = f"not an execution field: {elsewhere}" if elsewhere and error.reason.startswith("unknown field") \
            else error.reason
        raise SpecError(source, error.field, reason) from None
    return merged


def _elsewhere(key: str) -> str | None:
    """Where a field given as an execution field is set instead: the cluster size and mesh by the command's
    options, the global batch by the task, a model column by the model (``-x num_nodes=8`` was "unknown field",
    ``-x global_batch=1024`` "did you mean 'micro_batch'?")."""
    from fastmodel.lm.sweep import DEGREES
    from fastmodel.registry.lm import COLUMNS

    if key in ("num_nodes", "nodes"):
        return "the cluster size is --nodes N"
    if key in (*DEGREES, "plan", "mesh"):
        return "the mesh is --plan, e.g. --plan tp8.pp4 (dp fills the cluster)"
    if key == "dp":
        return "dp fills the cluster: set --nodes and the --plan degrees"
    if key == "global_batch":
        return "the global batch is the task's (a task file: 'fastmodel specs show llm-pretrain' prints one)"
    if any(c.name == key and c.group == "model" for c in COLUMNS):
        return f"{key} is the model's (a model file: 'fastmodel specs show llama3-8b' prints one)"
    return None


def _valid(load, fields: dict) -> bool:
    """Whether the file's fields alone pass: then what ``--set`` laid over them made the merged set wrong."""
    try:
        load(fields)
    except SpecError:
        return False
    return True


def parse_set(item: str) -> tuple[str, object]:
    """``KEY=VALUE`` of one ``--set`` as (field, value): the value read as a TOML value (a bare word: a string)."""
    key, sep, text = item.partition("=")
    key = key.strip().removeprefix("execution.")
    if not sep or not key:
        raise SpecError("--set", None, f"{item!r}: expected KEY=VALUE (e.g. pipeline_schedule=dualpipe)")
    text = text.strip()
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        if BARE_LIST.fullmatch(text):   # [core_attn, mlp], as docs/usage.md writes it: each bare word a string
            return key, [_scalar(item.strip()) for item in text.strip()[1:-1].split(",") if item.strip()]
        if percent := PERCENT.fullmatch(text):     # activation_offload=50% was told to quote it, then "not a number"
            raise SpecError("--set", f"execution.{key}", f"{text!r}: give a fraction, not a percentage "
                            f"({float(percent[1]) / 100:g})") from None
        if not (BARE_WORD.fullmatch(text) or QUANTITY_WORDS.fullmatch(text)):
            raise SpecError("--set", f"execution.{key}", f"{text!r} is not a TOML value (a number, true/false, "
                            f"a word, a \"string\" or an [array]); {_quoting(key, text)}") from None
        value = text
    if isinstance(value, dict):
        raise SpecError("--set", f"execution.{key}", f"{text!r}: a table; give each field as its own --set")
    return key, value


def _scalar(text: str):
    """One item of a bracketed list: a TOML value, else the bare word itself."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def _quoting(key: str, text: str) -> str:
    """How to write ``text`` so --set reads it: a list in brackets, other text in TOML's quotes inside the
    shell's (the shell takes the outer ones)."""
    if "," in text:
        items = ", ".join(f'"{item.strip()}"' for item in text.strip("[]").split(",") if item.strip())
        return f"write a list in brackets, in the shell's quotes: -x '{key}=[{items}]'"
    inner = text.replace("\\", "\\\\").replace('"', '\\"')
    return f"quote a text with spaces for TOML inside the shell's quotes: -x '{key}=\"{inner}\"'"


def _file_fields(path: str) -> dict:
    """The ``[execution]`` table of an execution file; anything else in it is refused, naming the key."""
    from fastmodel.lm.record_schema import EXECUTION_FIELDS
    from fastmodel.spec.detect import not_execution

    try:
        text = Path(path).read_text(encoding="utf-8-sig")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise SpecError(path, None, "no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        json_file = _json_instead(text) if isinstance(error, tomllib.TOMLDecodeError) else None
        raise SpecError(path, None, json_file or f"not valid TOML: {error}") from None
    if problem := not_execution(data):     # a sweep file said "description: unknown table or key"
        raise SpecError(path, None, problem)
    for key in data:
        if key in EXECUTION_FIELDS:
            raise SpecError(path, key, "an execution field outside the [execution] table; write [execution] above "
                            "the fields")
        if key != "execution":
            raise SpecError(path, key, "unknown table or key: an execution file holds one [execution] table"
                            f"{nearest(key, ['execution'])}")
    if "execution" not in data:
        raise SpecError(path, "execution", "required: an [execution] table of execution fields (pipeline_schedule, "
                        "moe_dispatcher, ...)")
    if not isinstance(data["execution"], dict):
        raise SpecError(path, "execution", "expected a table of execution fields (pipeline_schedule, ...)")
    return data["execution"]



def _json_instead(text: str) -> str | None:
    """What a JSON file given as the execution file is (``not_execution``: a run record, ...), or JSON lines; None
    for text that is not JSON (broken TOML)."""
    import json

    lines = [line for line in text.splitlines() if line.strip()]
    try:
        data = [json.loads(line) for line in lines] if len(lines) > 1 and lines[0].lstrip().startswith("{") \
            and lines[0].rstrip().endswith("}") else [json.loads(text)]
    except ValueError:
        return None
    if len(data) > 1:
        return ("JSON lines, not an execution file (one [execution] table): training runs go to 'fastmodel "
                "validate FILE' or 'batch', serving records to 'fastmodel serve FILE'")
    from fastmodel.spec.detect import not_execution

    return not_execution(data[0]) or "JSON, not an execution file: an execution file is TOML holding one [execution] table"
