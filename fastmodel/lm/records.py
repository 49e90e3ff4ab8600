"""Measured-run records (``RUNS.md`` schema) -> parameter tables of the real-world LM model.

A run record describes a model, a system and a plan in natural units; this
module checks it, fills the optional fields the schema's invariants imply, and
lowers it to one column vector (``fastmodel.registry.lm``). Device efficiencies
come from the built-in device files (``specs/devices/*.toml``) matched on
``system.gpu``; the record's own datasheet numbers (peaks, HBM, link rates)
win over them. ``measured`` is never read for prediction.

Fill-in rules (docs/model.md §11.8), each an execution fact, never a fit:

- ``micro_batch`` absent: ``global_batch / (dp x grad_accum)``, or 1 when
  ``grad_accum`` is absent too (Megatron's recommended size for large models);
  ``grad_accum`` absent: ``global_batch / (micro_batch x dp)``; ``vp``/``cp``/``ep``/``etp`` absent: 1.
- ``sequence_parallel`` absent: false.
- ``recompute = unknown``: selective (the middle mode); ``partial_layers``
  without ``recompute_fraction``: 0.5 (every other block, TorchTitan's default).
- frameworks that predate FlashAttention (2022) and Megatron's overlapped
  gradient reduction (2023) -- records without ``framework`` (the Megatron
  papers), Megatron-DeepSpeed and PyTorch 1.x -- run unfused attention and
  reduce gradients after the backward pass; their ZeRO-3 (DeepSpeed) moves
  parameters and gradients in buckets of 5e7 elements, unoverlapped. PyTorch
  1.x FSDP gathers each layer when it runs (no prefetch by default) and
  overlaps its reduce-scatter.
- PyTorch-native frameworks (TorchTitan, PyTorch FSDP) run the model's element-wise
  ops eagerly, one kernel per op, and their selective recompute is op-level
  (matmul outputs kept); Megatron, NeMo and Meta's stack fuse them. FSDP2
  (TorchTitan) copies each gathered layer out of the all-gather buffer.
- frameworks that predate FlashAttention also train with dropout (GPT-3 recipe);
  RMSNorm unless ``model.normalization`` says otherwise, for gated-MLP models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.lm.table import CODE_TABLES, encode
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib

RECORD_BLOCKS = ("model", "system", "plan")
LEGACY_FRAMEWORK_MARKERS = ("megatron-deepspeed", "pytorch 1.")
EAGER_FRAMEWORK_MARKERS = ("pytorch", "torchtitan")
FSDP2_FRAMEWORK_MARKERS = ("fsdp2", "torchtitan")


@dataclass(frozen=True)
class RunRecord:
    """One run record, lowered: its id, column vector, measured values and notes."""
    id: str
    columns: np.ndarray
    measured: dict
    source: str
    gpu: str
    parallelism_kind: str
    notes: tuple[str, ...]
    raw: dict


def is_run_record(data: Any) -> bool:
    """True for a dict in the RUNS.md schema (detected by content: model, system and plan blocks with tp)."""
    return (isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in RECORD_BLOCKS)
            and "tp" in data["plan"] and "layers" in data["model"])


@lru_cache(maxsize=None)
def device_table() -> dict[str, dict[str, float]]:
    """Built-in device efficiency files, keyed by every name they list."""
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


def _need(block: dict, key: str, where: str, source: str | None):
    if key not in block or block[key] is None:
        raise SpecError(source, f"{where}.{key}", "required field missing")
    return block[key]


def _number(block: dict, key: str, where: str, source: str | None, default=None, positive=True):
    value = block.get(key, default)
    if value is None:
        value = default
    if value is None:
        raise SpecError(source, f"{where}.{key}", "required field missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise SpecError(source, f"{where}.{key}", f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise SpecError(source, f"{where}.{key}", f"must be > 0, got {value!r}")
    if value < 0:
        raise SpecError(source, f"{where}.{key}", f"must be >= 0, got {value!r}")
    return float(value)


def _legacy(framework: str | None) -> bool:
    return framework is None or any(m in framework.lower() for m in LEGACY_FRAMEWORK_MARKERS)


def lower_record(data: dict, source: str | None = None) -> RunRecord:
    """Check one run record and lower it to a column vector; raises SpecError naming the field."""
    if not is_run_record(data):
        raise SpecError(source, "record", "not a run record (needs model, system and plan blocks, RUNS.md)")
    model, system, plan = data["model"], data["system"], data["plan"]
    notes: list[str] = []
    values: dict[str, float] = {}

    def num(block, key, where, **kw):
        return _number(block, key, where, source, **kw)

    for key in ("layers", "hidden", "ffn", "heads", "vocab", "seq_len"):
        values[key] = num(model, key, "model")
    values["kv_heads"] = num(model, "kv_heads", "model", default=values["heads"])
    values["head_dim"] = num(model, "head_dim", "model", default=values["hidden"] / values["heads"])
    ffn_kind = model.get("ffn_kind", "gelu2")
    if ffn_kind not in ("gelu2", "swiglu3"):
        raise SpecError(source, "model.ffn_kind", f"unknown value {ffn_kind!r}; choose gelu2 or swiglu3"
                        f"{nearest(str(ffn_kind), ('gelu2', 'swiglu3'))}")
    values["gated_mlp"] = 1.0 if ffn_kind == "swiglu3" else 0.0
    values["tied_embeddings"] = 1.0 if model.get("tied_embeddings") else 0.0
    values["moe_experts"] = num(model, "moe_experts", "model", default=0, positive=False)
    values["moe_topk"] = num(model, "moe_topk", "model", default=0, positive=False)
    if values["moe_experts"] > 0:
        if values["moe_topk"] <= 0:
            raise SpecError(source, "model.moe_topk", "must be > 0 when moe_experts > 0")
        values["moe_ffn"] = num(model, "moe_ffn", "model")
        values["moe_shared_experts"] = num(model, "moe_shared_experts", "model", default=0, positive=False)
        values["dense_layers"] = num(model, "dense_layers", "model", default=0, positive=False)
        values["moe_capacity_factor"] = num(model, "moe_capacity_factor", "model", default=0, positive=False)
    if model.get("attention") == "mla":
        values["mla"] = 1.0
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            values[key] = num(model, key, "model")
        values["q_lora_rank"] = num(model, "q_lora_rank", "model", default=0, positive=False)
    if model.get("sliding_window"):
        values["sliding_window"] = num(model, "sliding_window", "model")
        values["sliding_window_layers"] = num(model, "sliding_window_layers", "model", default=values["layers"])
    values["mtp_layers"] = num(model, "mtp_layers", "model", default=0, positive=False)

    gpu = str(_need(system, "gpu", "system", source))
    device = device_table().get(gpu.lower())
    if device is None:
        notes.append(f"no built-in device file for {gpu!r}: generic efficiencies")
    else:
        values.update(device)
    values["peak_flops_16"] = num(system, "peak_flops_bf16", "system")
    values["peak_flops_8"] = num(system, "peak_flops_fp8", "system", default=0, positive=False)
    values["hbm_bytes"] = num(system, "hbm_bytes", "system")
    values["hbm_bw"] = num(system, "hbm_bw_bytes_s", "system")
    values["intra_bw"] = num(system, "intra_node_bw_bytes_s_per_gpu", "system")
    values["inter_bw"] = num(system, "inter_node_bw_bytes_s_per_gpu", "system")
    values["n_gpus"] = num(system, "n_gpus", "system")
    values["gpus_per_node"] = num(system, "gpus_per_node", "system")
    values["domain_size"] = num(system, "nvlink_domain_size", "system", default=values["gpus_per_node"])

    for key in ("tp", "pp"):
        values[key] = num(plan, key, "plan")
    for key in ("vp", "cp", "ep", "etp"):
        values[key] = num(plan, key, "plan", default=1)
    gpus_per_replica = values["tp"] * values["pp"] * values["cp"]
    values["dp"] = num(plan, "dp", "plan", default=values["n_gpus"] / gpus_per_replica)
    if abs(values["tp"] * values["pp"] * values["cp"] * values["dp"] - values["n_gpus"]) > 0.5:
        raise SpecError(source, "plan.dp", f"tp*pp*cp*dp = {gpus_per_replica * values['dp']:g} but n_gpus = "
                        f"{values['n_gpus']:g} (RUNS.md invariant)")
    values["global_batch"] = num(plan, "global_batch", "plan")
    micro = plan.get("micro_batch")
    accum = plan.get("grad_accum")
    if micro is None and accum is not None:
        micro = values["global_batch"] / (values["dp"] * num(plan, "grad_accum", "plan"))
        notes.append(f"micro_batch = global_batch / (dp x grad_accum) = {micro:g}")
    elif micro is None:
        micro = 1
        notes.append("micro_batch and grad_accum unknown: micro_batch 1 assumed")
    values["micro_batch"] = num({"micro_batch": micro}, "micro_batch", "plan")
    # global_batch < micro_batch x dp is the rule table's batch_not_divisible (kernels/lm/rules.py), as in sweeps

    sharding = str(plan.get("sharding", "distopt"))
    values["sharding"] = encode("sharding", sharding)
    if sharding in ("fsdp", "hsdp"):
        values["shard_degree"] = num(plan, "shard_degree", "plan", default=values["dp"])
    recompute = str(plan.get("recompute", "none"))
    if recompute == "unknown":
        recompute = "selective"
        notes.append("recompute unknown: selective assumed")
    values["recompute"] = encode("recompute", recompute)
    if recompute == "partial_layers":
        fraction = plan.get("recompute_fraction")
        if fraction is None and plan.get("recompute_num_layers") is not None:
            fraction = num(plan, "recompute_num_layers", "plan") / values["layers"]
        if fraction is None:
            fraction = 0.5
            notes.append("recompute_fraction unknown: 0.5 assumed")
        values["recompute_fraction"] = float(fraction)
    values["sequence_parallel"] = 1.0 if plan.get("sequence_parallel") else 0.0
    values["tp_comm_overlap"] = 1.0 if plan.get("tp_comm_overlap") else 0.0
    values["fp8_params"] = 1.0 if plan.get("fp8_params") else 0.0
    values["precision"] = encode("precision", str(plan.get("precision", "bf16")))
    if plan.get("grad_reduce_dtype") in ("bf16", "fp16"):
        values["grad_reduce_bytes"] = 2.0
    if plan.get("optimizer"):
        name = str(plan["optimizer"]).lower()
        values["optimizer"] = encode("optimizer", name if name in CODE_TABLES["optimizer"] else "adam")
    if values["vp"] > 1:
        values["pipeline_schedule"] = encode("pipeline_schedule", "interleaved")
    if values["layers"] % (values["pp"] * values["vp"]) or plan.get("uneven_stages") is True:
        values["uneven_stages"] = 1.0             # the run balanced its layers unevenly over the stages
    framework = data.get("framework")
    normalization = str(model.get("normalization", "")).lower()
    if normalization:
        values["rms_norm"] = 1.0 if "rms" in normalization else 0.0
    else:
        values["rms_norm"] = values["gated_mlp"]       # Llama-style gated models use RMSNorm, GPT-style LayerNorm
    if _legacy(framework):
        values["dropout"] = 1.0
        values["flash_attention"] = 0.0
        values["overlap_grad_reduce"] = 0.0
        values["overlap_param_gather"] = 0.0
        if sharding == "fsdp" and framework is not None and "pytorch 1." in framework.lower():
            # PyTorch 1.x FSDP gathers each wrapped layer when it runs (backward_prefetch defaulted to None,
            # forward_prefetch came in 1.13) and reduce-scatters on its own post-backward stream
            values["overlap_grad_reduce"] = 1.0
        elif sharding == "fsdp":
            # ZeRO-3 of that era is DeepSpeed's: parameters are fetched in prefetch buckets of
            # stage3_prefetch_bucket_size = 5e7 elements (DeepSpeed configuration docs), 16-bit
            values["collective_bucket_bytes"] = 5e7 * 2.0
    if framework is not None and any(m in framework.lower() for m in FSDP2_FRAMEWORK_MARKERS):
        values["fsdp_copy_out"] = 1.0             # per-parameter sharding: gathered layers are copied out
    if framework is not None and any(m in framework.lower() for m in EAGER_FRAMEWORK_MARKERS):
        values["fused_kernels"] = 0.0
        values["selective_policy"] = 1.0          # op-level checkpointing (TorchTitan) rather than Megatron's
    # fp8 on a device without an FP8 peak is the rule table's no_fp8 (kernels/lm/rules.py), for sweeps and runs alike

    columns = np.array([c.default for c in COLUMNS], dtype=np.float64)
    for key, value in values.items():
        columns[COLUMN_INDEX[key]] = value
    return RunRecord(
        id=str(data.get("id", "")), columns=columns, measured=dict(data.get("measured") or {}),
        source=str(data.get("source", "")), gpu=gpu, parallelism_kind=str(data.get("parallelism_kind", "")),
        notes=tuple(notes), raw=data,
    )


def read_jsonl(path: str | Path, lower, what: str, whole_object: bool = False) -> list:
    """``lower(data, "file:line")`` of every line of a JSONL file (with ``whole_object``, also of a file holding
    one JSON object over several lines); a bad line is a SpecError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise SpecError(str(path), "", f"cannot read: {error.strerror or error}") from None
    stripped = text.strip()
    if whole_object and stripped.startswith("{") and "\n{" not in stripped:
        lines = [(1, stripped)]
    else:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    records = []
    for number, line in lines:
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise SpecError(where, "", f"invalid JSON: {error.msg}") from None
        records.append(lower(data, where))
    if not records:
        raise SpecError(str(path), "", f"no {what} in the file")
    return records


def read_records(path: str | Path) -> list[RunRecord]:
    """Every record of a JSONL file; a bad line is a SpecError naming the file and line."""
    return read_jsonl(path, lower_record, "run records")
