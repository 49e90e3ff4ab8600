"""Serving records (``SERVE_RUNS.md`` schema) -> column vectors of the serving model.

A serving record has the ``model`` and ``system`` blocks of a run record
(``RUNS.md``) and a ``serve`` block (plan, precisions, lengths, one load mode).
Detected by content: a dict with ``model``, ``system`` and ``serve`` blocks. The
model and system blocks are lowered by the training engine's run-record lowering, reached through its door
(``fastmodel.engines.LM``: same checks, same device files); datasheet fields a record leaves out are taken
from the built-in device file of ``system.gpu``. ``measured`` is never read for prediction.

Fill-in rules: ``pp``/``ep`` absent: 1; ``kv_precision`` absent: the weights'
format (fp8 -> fp8, else 16-bit); ``kv_cache_mem_fraction`` absent: 0.9; ``batch_wait_iters`` / ``batch_wait_tokens_ratio``
(TensorRT-LLM batch waiting, docs/model_serving.md S31) absent: 0, off;
``fixed_lengths`` (a client that gives every request exactly its lengths, S32) absent: false; ``moe_backend`` (the
MoE kernel a deployment flag picked: ``"marlin"`` on the vLLM 0.18 gpt-oss Hopper rows, S33/S38; ``"triton"`` on the
TensorRT-LLM gpt-oss H200 rows, whose eager MoE block then issues S37's host ops; ``"flashinfer_mxfp8"``, W4A8
experts, on the vLLM gpt-oss B200 rows, S45) absent: ``"default"``; ``allreduce_norm_fusion`` (vLLM's
``pass_config.enable_fi_allreduce_fusion`` as the launcher set it, S45) absent: the engine profile's;
``moe_a2a`` absent: the engine's EP dispatch (``"deepep_ll"``: DeepEP's low-latency kernels, S39);
``max_num_tokens`` / ``max_batch_size`` absent: the engine profile's (S13; stated: the deployment's, S34);
``precision`` may also be ``int8``/``int4`` (weight-only, 16-bit compute).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastmodel.errors import SpecError, UnsupportedError
from fastmodel.kernels.serve.host import triton_moe_layer_ops
from fastmodel.registry.lm import COLUMN_INDEX, LOAD_MODES
from fastmodel.serve.api import precision_columns
from fastmodel.serve.engine_kernels import (
    SM90_DEVICES,
    SM90_SM100_DEVICES,
    SM100_DEVICES,
    assumed_note,
    deepgemm_moe_columns,
    device_is_one_of,
    expert_kernel_columns,
    expert_padding,
    linear_kernels,
    query_quant_kernel,
    trtllm_gen_moe,
    trtllm_triton_moe,
)
from fastmodel.serve.precisions import (
    FP4_PRECISIONS,
    block_fp8_checkpoint,
    fp4_refusal,
    published_fp4_checkpoint,
    quant_experts_only,
    weight_only_note,
)
from fastmodel.serve.profiles import (
    ENGINE_LABELS,
    expert_row_tiles,
    fp4_activation,
    moe_dispatcher,
    profile_columns,
    record_engine,
    stated_flags,
)
from fastmodel.serve.profiles_device import reported_name
from fastmodel.spec.devices import device_table, same_part_hbm, vendor_name
from fastmodel.spec.records import read_jsonl, require_blocks

SERVE_BLOCKS = ("model", "system", "serve")
#: record system field <- device-file column
DATASHEET_FIELDS = {"peak_flops_bf16": "peak_flops_16", "peak_flops_fp8": "peak_flops_8", "hbm_bytes": "hbm_bytes",
                    "hbm_bw_bytes_s": "hbm_bw", "intra_node_bw_bytes_s_per_gpu": "intra_bw",
                    "inter_node_bw_bytes_s_per_gpu": "inter_bw"}
#: below this a record's HBM capacity (bytes) or bandwidth (bytes/s) is a unit slip (80 for 80 GB, 3.35 for
#: 3.35 TB/s): the smallest accelerator HBM in specs/devices is 40 GiB and its slowest bandwidth above 800 GB/s
HBM_UNIT_FLOOR = 1e9
#: the scale-out NIC when neither the record nor the device file gives one: 400 Gb/s NDR InfiniBand
DEFAULT_INTER_BW = 50e9
LOAD_KEYS = ("batch_size", "concurrency", "max_throughput")
#: SERVE_RUNS.md model/system fields the training record schema (RUNS.md) does not have: not read here
SERVE_ONLY = {"model": ("attention_bias", "attention_sinks"), "system": ("peak_flops_fp4", "gpus_per_tray")}
MEASURED_KEYS = ("output_tokens_per_s", "ttft_s", "tpot_s")


def driver_hbm(system: dict, device: dict, gpu: str, notes: list[str]) -> None:
    """The HBM an engine sizes its KV cache from is what the CUDA driver reports (vLLM: ``total_gpu_memory x
    gpu_memory_utilization`` from ``torch.cuda.mem_get_info``; TensorRT-LLM: ``free_gpu_memory_fraction`` of
    ``cudaMemGetInfo``'s free bytes; SGLang: ``mem_fraction_static`` of the same total), i.e. the device's
    CUDA-visible total, which its built-in device file holds (docs/model_serving.md S20). A record's ``hbm_bytes``
    that reads the same part (within ``SAME_PART_SLACK``: a datasheet "141 GB" read as 141e9 bytes, or as 141 GiB)
    gives way to it, the same rule as training's (``fastmodel.spec.devices.same_part_hbm``, docs/model_memory.md
    "One capacity per GPU"), with a note above ``HBM_NOTE_SLACK``."""
    stated = system.get("hbm_bytes")
    if isinstance(stated, (int, float)) and not isinstance(stated, bool):
        system["hbm_bytes"] = same_part_hbm(device.get("hbm_bytes"), stated, gpu, notes)


def _hbm_units(system: dict, source: str) -> None:
    """A record's HBM field below ``HBM_UNIT_FLOOR`` is one line naming the field and its unit (bytes, not GB)."""
    for field, unit, example in (("hbm_bytes", "bytes", "80 GB = 8e10"), ("hbm_bw_bytes_s", "bytes/s", "3.35 TB/s = 3.35e12")):
        value = system.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < HBM_UNIT_FLOOR:
            raise SpecError(source, f"system.{field}", f"{value!r} is below 1e9: the unit is {unit} "
                            f"(e.g. {example}), not GB")


def multi_node_nvlink(data: dict, device: dict) -> bool:
    """True when the system's NVLink domain spans more GPUs than one node (GB200 / GB300 NVL72: 72 against 4 per
    tray): the record's ``nvlink_domain_size`` (else the device file's ``domain_size``) above its
    ``gpus_per_node`` (else the device file's, else 8), read before the instance trims either."""
    system = data.get("system", {})
    domain = system.get("nvlink_domain_size") or device.get("domain_size") or 0
    per_node = system.get("gpus_per_node") or device.get("gpus_per_node") or 8
    return float(domain) > float(per_node)


class NotModelled(UnsupportedError):
    """A valid serving record that is not one kernel configuration (a disaggregated deployment): ``lower_any``
    (serve, batch, validate) lowers it to its worker pools (``fastmodel.serve.disagg``); ``run`` refuses it."""


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


def _load_columns(serve) -> dict[str, float]:
    """``load_mode`` (and ``batch_size``: the batch or the concurrency) of a record's load."""
    if serve.load == "max_throughput":
        return {"load_mode": LOAD_MODES["max_throughput"]}
    return {"load_mode": LOAD_MODES["batch" if serve.load == "batch_size" else "concurrency"],
            "batch_size": getattr(serve, serve.load)}


def _triton_moe_host_ops(columns: np.ndarray, engine: str | None, stated: bool, four_bit: bool, sm90: bool,
                         notes: list[str]) -> None:
    """TensorRT-LLM's OpenAI-Triton MoE (``engine_kernels.trtllm_triton_moe``): the eager layer's host ops
    with its MoE block (``host.triton_moe_layer_ops``) into ``host_ops_layer``, and a note (docs/model_serving.md S37)."""
    if columns[COLUMN_INDEX["moe_experts"]] > 0 and trtllm_triton_moe(
            engine, stated, four_bit, columns[COLUMN_INDEX["peak_flops_4"]] > 0, sm90):
        columns[COLUMN_INDEX["host_ops_layer"]] = triton_moe_layer_ops(columns)
        notes.append("TensorRT-LLM on Hopper (serve.moe_backend = triton): MXFP4 experts "
                     "through the OpenAI-Triton MoE, "
                     f"{columns[COLUMN_INDEX['host_ops_layer']]:.0f} eager host ops per layer; docs/model_serving.md S37")


def _expert_kernel(engine: str | None, version: tuple[int, ...] | None, sm90: bool, name: str | None,
                   precision: str, data: dict, serve, layers: str, device) -> dict[str, float]:
    """The routed-expert kernel's columns: its efficiency and hidden-math regime (``expert_kernel_columns``, S29,
    S38, S47: TRTLLM-Gen's MXFP4 MoE on FP4 tensor cores), vLLM 0.12's DeepGEMM block and buffer on Hopper
    (``deepgemm_moe_columns``, S42), the latter at vLLM's expert-TP size (``moe_tp``, else tp x attention_dp / ep),
    and vLLM's MXFP4 weight padding (``expert_padding``, S46; ``layers``: the checkpoint's quantized layers)."""
    block_fp8 = block_fp8_checkpoint(name, precision, data.get("aic"))
    sm100 = device_is_one_of(device, device_table(), SM100_DEVICES)
    values = expert_kernel_columns(engine, block_fp8, sm90, serve.moe_backend == "marlin",
                                   trtllm_gen_moe(engine, serve.moe_backend, precision, sm100))
    expert_tp = serve.moe_tp or serve.tp * serve.attention_dp / serve.ep
    values.update(deepgemm_moe_columns(engine, version, sm90, block_fp8, expert_tp,
                                       serve.ep, serve.attention_dp))
    values.update(expert_padding(engine, layers == "experts" and precision in FP4_PRECISIONS, sm90, sm100,
                                 serve.moe_backend == "marlin"))
    return values


def _require_serve_record(data, source: str | None) -> None:
    """A SpecError for anything but a serving record: the block it lacks (a dict with one of them and no ``plan``),
    else "not a serving record"."""
    if not is_serve_record(data):
        from fastmodel.spec.detect import is_case_line

        if is_case_line(data):     # the file's kind, as validate names it (was "serve: required block missing")
            raise SpecError(source, "record", "a batch case (model, system and task: a line of fastmodel batch), "
                                              "not a serving record (SERVE_RUNS.md: model, system, serve and measured "
                                              "blocks); batch cases go to fastmodel batch")
        if isinstance(data, dict) and "plan" not in data and any(block in data for block in SERVE_BLOCKS):
            require_blocks(data, SERVE_BLOCKS, source, "SERVE_RUNS.md")     # the block it lacks
        from fastmodel.spec.detect import is_run_record

        if is_run_record(data):     # among serving records: validate's misses said only "not a serving record"
            raise SpecError(source, "record", "not a serving record but a training run record (RUNS.md); run "
                            "records go to fastmodel run, validate, calibrate or batch, in a file of their own "
                            "(validate scores the first record's kind)")
        raise SpecError(source, "record", "not a serving record (needs model, system and serve blocks, "
                                          "SERVE_RUNS.md)")


def _engine_named(framework: str | None, engine: str) -> str:
    """The record's ``framework``, or the label of the engine ``record_engine`` picked without one (review11 #10:
    "TensorRT-LLM (the default engine)", as the CLI's ``--precision`` refusal says)."""
    return framework or f"{ENGINE_LABELS.get(engine, engine)} (the default engine)"


def _fp8_weight_only(profile: dict, framework: str, gpu: str, source: str | None) -> str:
    """The note of fp8 on a GPU without an FP8 peak where the engine runs it weight-only (``fp8_weight_only``,
    docs/model_serving.md S55); else a SpecError naming the field and the rule."""
    if not profile.get("fp8_weight_only"):
        raise SpecError(source, "system.peak_flops_fp8", f"serve.precision is fp8 but the device has no FP8 peak and "
                        f"{framework} runs no weight-only FP8 (vLLM's FP8 Marlin does; "
                        "docs/model_serving.md S55)")
    return weight_only_note("fp8", gpu)


def _fp4_weight_only(precision: str, columns, profile: dict, framework: str, gpu: str,
                     source: str | None) -> str:
    """The note of FP4 weights on a GPU without FP4 tensor cores where the engine runs them weight-only; else a
    SpecError naming serve.precision and the rule (``precisions.fp4_refusal``, docs/model_serving.md S63)."""
    device = {key: float(columns[COLUMN_INDEX[key]]) for key in ("compute_capability", "vendor")}
    refusal = fp4_refusal(precision, {**device, "peak_flops_4": 0.0}, profile["fp4_weight_only_cc"],
                          framework, gpu)
    if refusal:
        raise SpecError(source, "serve.precision", refusal)
    return weight_only_note(precision, gpu)


def lower_serve_record(data: dict, source: str | None = None) -> ServeRecord:
    """Check one serving record (``fastmodel.serve.record_schema``) and lower it to a column vector; a
    SpecError names the file, line, block and field."""
    from fastmodel.serve.record_schema import parse_serve_record

    _require_serve_record(data, source)
    record = parse_serve_record(data, source)
    serve = record.serve
    if serve.mode == "disagg":
        raise NotModelled(source, "serve.mode", "a disaggregated deployment is two worker pools, evaluated by "
                          "serve, batch and validate (fastmodel.serve.disagg), not one kernel configuration")
    notes: list[str] = []
    tp, pp, ep, adp = serve.tp, serve.pp, serve.ep, serve.attention_dp
    gpus = tp * adp * pp

    # the model and system blocks through the run-record lowering (datasheet gaps from the device file)
    system = dict(data["system"])
    gpu = str(system.get("gpu", ""))
    device = device_table().get(gpu.lower(), {})
    for field, column in DATASHEET_FIELDS.items():
        if system.get(field) is None and column in device:
            system[field] = device[column]
            notes.append(f"system.{field} from the device file of {gpu}")
    _hbm_units(system, source)
    driver_hbm(system, device, gpu, notes)
    if system.get("inter_node_bw_bytes_s_per_gpu") is None:
        system["inter_node_bw_bytes_s_per_gpu"] = DEFAULT_INTER_BW
    # the instance is the job: an NVL72 rack's 72 GPUs per domain hold an instance of fewer
    per_node = system.get("gpus_per_node")
    if per_node is None or type(per_node) is int:
        system["gpus_per_node"] = min(per_node or max(8, gpus), gpus)
    system["n_gpus"] = gpus
    if isinstance(system.get("nvlink_domain_size"), int):
        system["nvlink_domain_size"] = min(system["nvlink_domain_size"], gpus)
    model = dict(data["model"])
    model.setdefault("seq_len", serve.input_len + serve.output_len)
    for block, keys in (("model", model), ("system", system)):
        for key in SERVE_ONLY[block]:
            keys.pop(key, None)
    run = {"model": model, "system": system, "framework": "serving", "stack": "default",
           "plan": {"tp": tp, "pp": pp, "ep": ep, "global_batch": adp, "micro_batch": 1}}
    from fastmodel import engines

    lowered, lowered_notes = engines.LM.door().record_columns(run, source)
    columns = lowered.copy()
    notes.extend(lowered_notes)

    values: dict[str, float] = {"input_len": serve.input_len, "output_len": serve.output_len, "instances": 1,
                                "attention_dp": adp, "moe_tp": serve.moe_tp or 0, "batch_wait_iters": serve.batch_wait_iters,
                                "batch_wait_tokens_ratio": serve.batch_wait_tokens_ratio, "spec_tokens": serve.spec_tokens,
                                "spec_acceptance": serve.spec_acceptance, "kv_cache_mem_fraction": serve.kv_cache_mem_fraction,
                                "peak_flops_4": float(data["system"].get("peak_flops_fp4") or
                                                      device.get("peak_flops_4", 0.0))}
    layers = serve.quantized_layers if "quantized_layers" in serve.model_fields_set else None
    precision, layers, checkpoint_note = published_fp4_checkpoint(model.get("name"), serve.precision, layers)
    if checkpoint_note:
        notes.append(checkpoint_note)
    values.update(precision_columns(precision, serve.kv_precision))
    vendor = vendor_name(columns[COLUMN_INDEX["vendor"]])
    engine, version, profile_notes = record_engine(record.framework, vendor)   # one engine for every column below
    profile = profile_columns(engine, version, float(columns[COLUMN_INDEX["hbm_bytes"]]), vendor, reported_name(gpu))
    if precision in FP4_PRECISIONS and values["peak_flops_4"] <= 0:
        notes.append(_fp4_weight_only(precision, columns, profile, _engine_named(record.framework, engine), gpu,
                                      source))
    if values["precision"] == 1 and columns[COLUMN_INDEX["peak_flops_8"]] <= 0:
        notes.append(_fp8_weight_only(profile, _engine_named(record.framework, engine), gpu, source))
    values.update(profile, **stated_flags(serve, engine, profile["mixed_prefill"], notes, source))
    notes.extend(profile_notes)
    values["quant_experts_only"] = quant_experts_only(layers)
    values["fp4_act"], act_note = fp4_activation(engine, precision, serve.moe_backend)
    if act_note and values["peak_flops_4"] > 0:
        notes.append(act_note)
    values["moe_dispatcher"] = moe_dispatcher(engine, columns[COLUMN_INDEX["ep"]], columns[COLUMN_INDEX["moe_topk"]],
                                              multi_node_nvlink(data, device), serve.moe_a2a)
    values.update(linear_kernels(engine, version, precision, values["peak_flops_4"] > 0,
                                 device_is_one_of(device, device_table(), SM90_SM100_DEVICES), serve.allreduce_norm_fusion,
                                 serve.moe_backend))
    fusion_note = assumed_note(engine, version, values["allreduce_norm_fusion"], serve.allreduce_norm_fusion)
    if fusion_note:
        notes.append(fusion_note)
    sm90 = device_is_one_of(device, device_table(), SM90_DEVICES)
    values["q_quant_kernel"] = query_quant_kernel(engine, version, sm90, values["kv_bytes"] == 1.0, serve.query_quant_kernel,
                                                  device_is_one_of(device, device_table(), SM100_DEVICES))
    values.update(_expert_kernel(engine, version, sm90, model.get("name"), precision, data, serve, layers, device))
    if values["peak_flops_4"] > 0:     # the engine's FP4 MoE kernel; without FP4 tensor cores, another backend
        values["expert_tile_min"], values["expert_tile_max"] = expert_row_tiles(engine, precision)
    values.update(_load_columns(serve))
    # an instance cut from a larger node keeps that node's NVSwitch: no direct-mesh share; one cut from a
    # direct-mesh board keeps the board's links: the share is over the board's n - 1 peers (docs/model.md §11.5)
    board = data["system"].get("gpus_per_node") or max(8, gpus)
    if board > columns[COLUMN_INDEX["nvlink_mesh_max"]]:
        values["nvlink_mesh_max"] = 0.0
    elif isinstance(board, int) and board > gpus:
        values["domain_size"] = float(board)
    for key, value in values.items():
        columns[COLUMN_INDEX[key]] = value
    _triton_moe_host_ops(columns, engine, serve.moe_backend == "triton", precision in FP4_PRECISIONS, sm90, notes)
    measured = dict(data.get("measured") or {}) if isinstance(data.get("measured"), dict) else {}
    return ServeRecord(id=str(data.get("id", "")), columns=columns, measured=measured,
                       source=str(data.get("source", "")), gpu=gpu, notes=tuple(notes), raw=data)


def _count(value: float) -> int | float:
    """A whole number as an int (the training record schema counts in integers); a fraction stays and is
    refused there."""
    return int(value) if float(value).is_integer() else value


def lower_any(data: dict, source: str | None = None):
    """One serving record lowered: a ``ServeRecord`` (one kernel configuration) or, for ``serve.mode = "disagg"``,
    its two worker pools (``fastmodel.serve.disagg.DisaggRecord``); the one lowering serve, batch and validate
    share."""
    from fastmodel.serve.disagg import lower_disagg
    from fastmodel.serve.record_schema import parse_serve_record

    try:
        return lower_serve_record(data, source)
    except NotModelled:
        return lower_disagg(data, parse_serve_record(data, source), source)


def read_serve_records(path: str | Path, refused: list | None = None) -> list:
    """Every serving record of a JSONL file (or one JSON object), each lowered by :func:`lower_any` (a
    disaggregated record to its two worker pools); a bad line is a SpecError naming it. With a ``refused`` list
    (validate), a record with a field or value the engine does not take is appended to it
    (``fastmodel.spec.records.read_jsonl``: a miss)."""
    return read_jsonl(path, lower_any, "serving records", whole_object=True, refused=refused)
