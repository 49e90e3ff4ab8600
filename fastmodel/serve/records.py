"""Serving records (``SERVE_RUNS.md`` schema) -> column vectors of the serving model.

A serving record has the ``model`` and ``system`` blocks of a run record
(``RUNS.md``) and a ``serve`` block (plan, precisions, lengths, one load mode).
Detected by content: a dict with ``model``, ``system`` and ``serve`` blocks. The
model and system blocks are lowered by the training engine's run-record lowering, reached through its door
(``fastmodel.engines.LM``: same checks, same device files); datasheet fields a record leaves out are taken
from the built-in device file of ``system.gpu``. ``measured`` is never read for prediction.

Fill-in rules: ``pp``/``ep`` absent: 1; ``kv_precision`` absent: the weights'
format (fp8 -> fp8, else 16-bit); ``kv_cache_mem_fraction`` absent: 0.9;
``precision`` may also be ``int8``/``int4`` (weight-only, 16-bit compute).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastmodel.errors import SpecError, UnsupportedError, nearest
from fastmodel.registry.lm import COLUMN_INDEX, LOAD_MODES
from fastmodel.serve.api import KV_PRECISIONS, PRECISIONS, precision_columns
from fastmodel.spec.devices import device_table
from fastmodel.spec.records import number as _number
from fastmodel.spec.records import read_jsonl

SERVE_BLOCKS = ("model", "system", "serve")
#: record system field <- device-file column
DATASHEET_FIELDS = {"peak_flops_bf16": "peak_flops_16", "peak_flops_fp8": "peak_flops_8", "hbm_bytes": "hbm_bytes",
                    "hbm_bw_bytes_s": "hbm_bw", "intra_node_bw_bytes_s_per_gpu": "intra_bw",
                    "inter_node_bw_bytes_s_per_gpu": "inter_bw"}
#: the scale-out NIC when neither the record nor the device file gives one: 400 Gb/s NDR InfiniBand
DEFAULT_INTER_BW = 50e9
LOAD_KEYS = ("batch_size", "concurrency", "max_throughput")
#: SERVE_RUNS.md model/system fields the training record schema (RUNS.md) does not have: not read here
SERVE_ONLY = {"model": ("attention_bias", "attention_sinks"), "system": ("peak_flops_fp4", "gpus_per_tray")}
MEASURED_KEYS = ("output_tokens_per_s", "ttft_s", "tpot_s")


@dataclass(frozen=True)
class ServeRecord:
    """One serving record, lowered: its id, column vector, measured values and notes."""
    id: str
    columns: np.ndarray
    measured: dict
    source: str
    gpu: str
    notes: tuple[str, ...]
    raw: dict


def is_serve_record(data: Any) -> bool:
    """True for a dict in the SERVE_RUNS.md schema (model, system and serve blocks)."""
    return isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in SERVE_BLOCKS)


def lower_serve_record(data: dict, source: str | None = None) -> ServeRecord:
    """Check one serving record and lower it to a column vector; SpecError names the field."""
    if not is_serve_record(data):
        raise SpecError(source, "record", "not a serving record (needs model, system and serve blocks, "
                                          "SERVE_RUNS.md)")
    serve = data["serve"]
    notes: list[str] = []

    def num(key, default=None, positive=True):
        return _number(serve, key, "serve", source, default=default, positive=positive)

    for key in serve:
        known = ("tp", "pp", "ep", "precision", "kv_precision", "input_len", "output_len", *LOAD_KEYS,
                 "num_requests", "kv_cache_mem_fraction")
        if key not in known:
            raise UnsupportedError(source, f"serve.{key}", f"unknown field{nearest(key, known)}")
    tp, pp, ep = num("tp"), num("pp", 1), num("ep", 1)
    input_len, output_len = num("input_len"), num("output_len")
    given = [k for k in LOAD_KEYS if serve.get(k) not in (None, False)]
    if len(given) != 1:
        raise SpecError(source, "serve", "give exactly one of batch_size, concurrency, max_throughput"
                        + (f" (got {', '.join(given)})" if given else ""))
    mode = given[0]
    precision = str(serve.get("precision", "bf16")).lower()
    if precision not in PRECISIONS:
        raise UnsupportedError(source, "serve.precision", f"unknown value {precision!r}; choose one of "
                        f"{', '.join(PRECISIONS)}{nearest(precision, PRECISIONS)}")
    kv_precision = serve.get("kv_precision")
    if kv_precision is not None and str(kv_precision).lower() not in KV_PRECISIONS:
        raise UnsupportedError(source, "serve.kv_precision", f"unknown value {kv_precision!r}; choose one of "
                        f"{', '.join(KV_PRECISIONS)}{nearest(str(kv_precision).lower(), KV_PRECISIONS)}")

    # the model and system blocks through the run-record lowering (datasheet gaps from the device file)
    system = dict(data["system"])
    gpu = str(system.get("gpu", ""))
    device = device_table().get(gpu.lower(), {})
    for field, column in DATASHEET_FIELDS.items():
        if system.get(field) is None and column in device:
            system[field] = device[column]
            notes.append(f"system.{field} from the device file of {gpu}")
    if system.get("inter_node_bw_bytes_s_per_gpu") is None:
        system["inter_node_bw_bytes_s_per_gpu"] = DEFAULT_INTER_BW
    system.setdefault("gpus_per_node", max(8, _count(tp * pp)))
    system["n_gpus"] = _count(tp * pp)
    model = dict(data["model"])
    model.setdefault("seq_len", _count(input_len + output_len))
    for block, keys in (("model", model), ("system", system)):
        for key in SERVE_ONLY[block]:
            keys.pop(key, None)
    run = {"model": model, "system": system, "framework": "serving", "stack": "default",
           "plan": {"tp": _count(tp), "pp": _count(pp), "ep": _count(ep), "global_batch": 1, "micro_batch": 1}}
    from fastmodel import engines

    lowered, lowered_notes = engines.LM.door().record_columns(run, source)
    columns = lowered.copy()
    notes.extend(lowered_notes)

    values: dict[str, float] = {"input_len": input_len, "output_len": output_len, "instances": 1}
    values.update(precision_columns(precision, None if kv_precision is None else str(kv_precision).lower()))
    if values["precision"] == 1 and columns[COLUMN_INDEX["peak_flops_8"]] <= 0:
        raise SpecError(source, "system.peak_flops_fp8", "serve.precision is fp8 but the device has no FP8 peak")
    if mode == "max_throughput":
        values["load_mode"] = LOAD_MODES["max_throughput"]
    else:
        values["load_mode"] = LOAD_MODES["batch" if mode == "batch_size" else "concurrency"]
        values["batch_size"] = num(mode)
    values["kv_cache_mem_fraction"] = num("kv_cache_mem_fraction", 0.9)
    if not 0 < values["kv_cache_mem_fraction"] <= 1:
        raise SpecError(source, "serve.kv_cache_mem_fraction", "must be in (0, 1]")
    for key, value in values.items():
        columns[COLUMN_INDEX[key]] = value
    measured = dict(data.get("measured") or {})
    return ServeRecord(id=str(data.get("id", "")), columns=columns, measured=measured,
                       source=str(data.get("source", "")), gpu=gpu, notes=tuple(notes), raw=data)


def _count(value: float) -> int | float:
    """A whole number as an int (the training record schema counts in integers); a fraction stays and is
    refused there."""
    return int(value) if float(value).is_integer() else value


def read_serve_records(path: str | Path, refused: list | None = None) -> list[ServeRecord]:
    """Every serving record of a JSONL file (or one JSON object); a bad line is a SpecError naming it (with a
    ``refused`` list, appended to it instead: see ``fastmodel.spec.records.read_jsonl``)."""
    return read_jsonl(path, lower_serve_record, "serving records", whole_object=True, refused=refused)


def file_has_serve_records(path: str | Path) -> bool:
    """True when the first record of a JSON/JSONL file is a serving record (content detection)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            for line in handle:
                if line.strip():
                    return is_serve_record(json.loads(line))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):   # the run-record reader says why
        return False
    return False
