"""Measured-run records (``RUNS.md`` schema) -> the specs of the real-world model -> a column vector.

A run record describes a model, a system and a plan in natural units. It is validated by its typed schema
(``fastmodel.lm.record_schema``: counts are integers, booleans are booleans, no unknown key, the registry's
bounds, RUNS.md's invariants), turned into the same objects a spec evaluation uses -- an ``LMSpec``, a
``ClusterSpec``, an ``ExecutionSpec`` (with the record's ``framework`` or ``stack``) and a ``Mesh`` -- and
lowered by ``fastmodel.lm.lowering.lower``, the function sweeps use. ``measured`` is never read for
prediction (``measured_step_time`` checks it for ``validate`` and ``calibrate``).

Fill-in rules (docs/model.md §11.8), each an execution fact, never a fit:

- ``micro_batch`` absent: ``global_batch / (dp x grad_accum)``, or 1 when ``grad_accum`` is absent too
  (Megatron's recommended size for large models); ``vp``/``cp``/``ep``/``etp`` absent: 1; ``dp`` absent:
  ``n_gpus / (tp pp cp)``; ``sequence_parallel`` absent: false; ``recompute`` absent: none.
- ``recompute = unknown``: selective (the middle mode); ``partial_layers`` without ``recompute_fraction`` or
  ``recompute_num_layers``: 0.5 (every other block, TorchTitan's default).
- layers not divisible by ``pp x vp``: the run balanced its stages unevenly (``uneven_stages``).
- ``activation_offload_layers``: that share of the layers' activations is held in host memory.
- ``fp8_recipe`` as text: the recipe it names (``fastmodel.lm.fp8_recipe``), else unstated with a note; ignored
  with a note when ``precision`` is not ``fp8``.
- the framework's execution defaults (fused kernels, flash attention, dropout, overlap, buckets, FSDP
  copy-out, ``vp = "unknown"``) come from its stack profile (``fastmodel.lm.stacks``).
- normalization: RMSNorm unless ``model.normalization`` says otherwise, for gated-MLP models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from fastmodel.errors import SpecError
from fastmodel.spec.detect import RUN_RECORD_BLOCKS as RECORD_BLOCKS
from fastmodel.spec.detect import (
    is_run_record,  # noqa: F401 - detection by content lives in spec/detect.py
    is_serve_record,
)
from fastmodel.spec.devices import device_hbm, device_table  # noqa: F401 - device_table: the serving wing's former import path
from fastmodel.spec.records import number as _number  # noqa: F401 - this module's former helper
from fastmodel.spec.records import read_jsonl, require_blocks


@dataclass(frozen=True)
class RunRecord:
    """One run record, lowered: its id, column vector, measured values, notes and where it was read."""
    id: str
    columns: np.ndarray
    measured: dict
    source: str
    gpu: str
    parallelism_kind: str
    notes: tuple[str, ...]
    raw: dict
    stack: str = ""
    where: str = ""


def is_batch_case(data) -> bool:
    """Whether a JSON object is a batch case (a spec line of ``fastmodel batch``), not a run record: a task and
    no plan (no record has a task)."""
    return isinstance(data, dict) and "plan" not in data and "task" in data


def parse_record(data: dict, source: str | None = None):
    """The record validated by its schema (``RecordSchema``); a one-line SpecError naming block and field."""
    from fastmodel.lm.record_schema import RecordSchema, record_error

    if not isinstance(data, dict):
        raise SpecError(source, "record", f"expected a JSON object (RUNS.md), got {type(data).__name__}")
    if "plan" not in data and is_serve_record(data):
        raise SpecError(source, "record", "a serving record (SERVE_RUNS.md) where training run records (RUNS.md) are "
                                          "read; serving records go to fastmodel serve, validate or batch, in a file "
                                          "of their own (validate scores the first record's kind)")
    if is_batch_case(data):
        raise SpecError(source, "record", "a batch case (model, system and task: a line of fastmodel batch), not a "
                                          "run record (RUNS.md: model, system, plan and measured blocks); batch "
                                          "cases go to fastmodel batch")
    require_blocks(data, RECORD_BLOCKS, source, "RUNS.md")
    try:
        return RecordSchema.model_validate(data)
    except ValidationError as error:
        raise record_error(error, source) from None


def record_specs(record, source: str | None = None, notes: list[str] | None = None):
    """(model, cluster, execution, mesh, global_batch) of a validated record, the fill-in rules applied."""
    from fastmodel.lm.execution import accumulated_twice, with_uneven_stages
    from fastmodel.lm.fp8_recipe import ignored_note, recipe_from_text
    from fastmodel.lm.lowering import Mesh
    from fastmodel.lm.record_schema import EXECUTION_FIELDS, UNMODELLED, record_error
    from fastmodel.lm.spec import ClusterSpec, ExecutionSpec
    from fastmodel.lm.stacks import profile_for, resolve

    notes = [] if notes is None else notes
    model, system, plan = record.model, record.system, record.plan
    dp = system.n_gpus // (plan.tp * plan.pp * plan.cp)
    mesh = Mesh(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep, etp=plan.etp or 0, dp=dp)   # etp absent: tp
    fields = {name: getattr(plan, name) for name in EXECUTION_FIELDS}
    if plan.micro_batch is None and plan.grad_accum is not None:
        fields["micro_batch"] = plan.global_batch // (dp * plan.grad_accum)
        notes.append(f"micro_batch = global_batch / (dp x grad_accum) = {fields['micro_batch']}")
    elif plan.micro_batch is None:
        fields["micro_batch"] = 1
        notes.append("micro_batch and grad_accum unknown: micro_batch 1 assumed")
    if plan.recompute == "unknown":
        fields["recompute"], rule = profile_for(record.framework, record.stack)[0].unknown_recompute(model.seq_len)
        notes.append(f"recompute unknown: {rule}")
    if plan.fp8_recipe is not None and plan.precision != "fp8":
        fields["fp8_recipe"], recipe_note = None, ignored_note(plan.fp8_recipe, plan.precision)
    else:
        fields["fp8_recipe"], recipe_note = recipe_from_text(plan.fp8_recipe)
    if recipe_note:
        notes.append(recipe_note)
    if plan.activation_offload_layers is not None:
        fields["activation_offload"] = plan.activation_offload_layers / model.layers
    try:
        execution = ExecutionSpec.model_validate({**fields, "framework": record.framework, "stack": record.stack})
        execution = resolve(execution, plan.pp, model.layers, notes, expert_parallel=plan.ep > 1)
    except ValidationError as error:
        raise record_error(error, source, ("plan",)) from None
    except ValueError as error:
        raise SpecError(source, "plan.vp", str(error)) from None
    if twice := accumulated_twice(execution):         # docs/model.md §11.46
        raise SpecError(source, "plan.grad_accum_bytes", twice)
    execution = with_uneven_stages(execution, model.layers, plan.pp)   # the run balanced its stages unevenly
    unmodelled = [f"plan.{k} = {getattr(plan, k)!r}" for k, assumed in UNMODELLED.items()
                  if getattr(plan, k) is not None and getattr(plan, k) != assumed]
    if plan.fsdp_param_dtype == "fp32":    # FSDP1 MixedPrecision(param_dtype=None/float32): 4-byte gathers
        unmodelled.append("plan.fsdp_param_dtype = 'fp32'")
    if model.parallel_residual:
        unmodelled.append("model.parallel_residual = True")
    if unmodelled:
        notes.append(f"{', '.join(unmodelled)}: recorded, not modelled")
    cluster = ClusterSpec.model_construct(
        name=str(record.id), gpu=system.gpu, num_nodes=max(1, math.ceil(system.n_gpus / system.gpus_per_node)),
        gpus_per_node=system.gpus_per_node, nvlink_domain_size=system.nvlink_domain_size,
        peak_flops_bf16=system.peak_flops_bf16, peak_flops_fp8=system.peak_flops_fp8 or None,
        hbm_bytes=device_hbm(system.gpu, system.hbm_bytes, notes), hbm_bw_bytes_s=system.hbm_bw_bytes_s,
        intra_node_bw_bytes_s_per_gpu=system.intra_node_bw_bytes_s_per_gpu,
        inter_node_bw_bytes_s_per_gpu=system.inter_node_bw_bytes_s_per_gpu, efficiency={})
    return model, cluster, execution, mesh, plan.global_batch


def lower_record(data: dict, source: str | None = None) -> RunRecord:
    """Check one run record and lower it to a column vector; raises SpecError naming the field."""
    from fastmodel.lm.lowering import lower

    record = parse_record(data, source)
    notes: list[str] = []
    model, cluster, execution, mesh, global_batch = record_specs(record, source, notes)
    if cluster.gpu.lower() not in device_table():
        from fastmodel.spec.devices import no_device_note

        notes.append(no_device_note(cluster.gpu))
    columns = lower(model, cluster, execution, mesh, global_batch, notes, source,
                    vp_from_stack=record.plan.vp == "unknown")
    measured = data.get("measured")
    return RunRecord(
        id=str(record.id), columns=columns, measured=dict(measured) if isinstance(measured, dict) else {},
        source=record.source, gpu=cluster.gpu, parallelism_kind=record.parallelism_kind or "",
        notes=tuple(notes), raw=data, stack=execution.stack, where=source or "",
    )


def measured_step_time(record: RunRecord) -> float:
    """The record's measured step time, checked (``measured`` an object, ``step_time_s`` positive and
    finite, ``memory_gib`` too when given); a SpecError naming the record otherwise."""
    from fastmodel.lm.record_schema import MeasuredBlock, record_error

    measured = record.raw.get("measured")
    where = record.where or None
    label = f"run {record.id!r}" if record.id else "run"
    if not isinstance(measured, dict):
        raise SpecError(where, "measured", f"{label}: expected an object with step_time_s, got "
                                           f"{type(measured).__name__}")
    try:
        return MeasuredBlock.model_validate(measured).step_time_s
    except ValidationError as error:
        problem = record_error(error, where, ("measured",))
        raise SpecError(where, problem.field, f"{label}: {problem.reason}") from None


def with_measurements(records: list[RunRecord], path: str | Path) -> tuple[list[RunRecord], list[str]]:
    """(records whose ``measured`` passes ``measured_step_time``, one line per record skipped); a SpecError
    naming ``path`` when none is left."""
    kept, skipped = [], []
    for record in records:
        try:
            measured_step_time(record)
        except SpecError as error:
            skipped.append(f"skipped: {error}")
            continue
        kept.append(record)
    if not kept:
        raise SpecError(str(path), "measured", "no run record has a positive, finite measured.step_time_s"
                        + (f" ({skipped[0]})" if skipped else "")
                        + "; plan-only records are predicted by `fastmodel batch` or `fastmodel run -m`")
    return kept, skipped


def read_records(path: str | Path, refused: list | None = None) -> list[RunRecord]:
    """Every record of a JSONL file; a bad line is a SpecError naming the file and line (with a ``refused``
    list, appended to it instead: see ``fastmodel.spec.records.read_jsonl``)."""
    return read_jsonl(path, lower_record, "run records", refused=refused)
