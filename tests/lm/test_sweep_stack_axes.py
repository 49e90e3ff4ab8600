"""Sweep axes the stack reads: a sweep over a field a stack profile's defaults read gives, at each value, the
plan that value in the execution spec gives (fastmodel/lm/sweep_stack.py; docs/model.md §11.49, §11.14.1)."""

import ast
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError, SweepError
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.sweep import lm_sweep
from fastmodel.lm.sweep_stack import STACK_READ_AXES
from fastmodel.registry.lm import COLUMN_INDEX, STATUS_CODES

STACKS = Path(__file__).resolve().parents[2] / "fastmodel" / "lm" / "stacks"
#: framework texts that reach every branch of the profiles' defaults (fork, era, ZeRO stage, launcher, version)
FRAMEWORKS = (None, "Megatron-LM", "NeMo", "Megatron-Bridge", "Megatron-DeepSpeed", "Megatron-DeepSpeed ZeRO stage 0",
              "stanford-futuredata Megatron-LM MegaBlocks", "DeepSpeed 0.3.15", "DeepSpeed 0.6.2", "PyTorch 1.10 FSDP",
              "PyTorch FSDP", "TorchTitan", "FSDP2", "Composer", "Accelerate", "fms-fsdp", "MaxText", "KempnerForge",
              "Meta internal")


def _fields_named_in_source() -> set[str]:
    """Execution fields the stack modules read: ``execution.X`` and ``getattr(execution, "X", ...)``."""
    found = set()
    for path in STACKS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "execution":
                found.add(node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and node.args and \
                    getattr(node.args[0], "id", None) == "execution" and isinstance(node.args[1], ast.Constant):
                found.add(node.args[1].value)
    return found


class _Reads:
    """An execution that records which fields are read."""

    def __init__(self, execution, seen: set):
        object.__setattr__(self, "_execution", execution)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name):
        self._seen.add(name)
        return getattr(self._execution, name)


def test_every_axis_a_stack_profile_reads_is_a_stack_read_axis():
    """The profiles and the axes they read, enumerated: a new stack (or branch) that reads another swept field
    fails here until STACK_READ_AXES lists it (a sweep would otherwise keep the spec's defaults at its values)."""
    from fastmodel.lm.stacks import PROFILES

    axes = set(COLUMN_INDEX) & set(ExecutionSpec.model_fields)     # execution fields a sweep takes as axes
    named = _fields_named_in_source() & set(ExecutionSpec.model_fields)
    # vp: stacks.resolve replaces only vp = "unknown", which an axis cannot take (sweep._axis_number refuses it)
    assert named & axes - {"vp"} == set(STACK_READ_AXES)
    assert named - axes <= {"stack", "framework", "torch_compile", "vp", "moe_balance", "grad_reduce_dtype"}
    read = set()
    samples = [ExecutionSpec(precision=p, sharding=s, torch_compile=c, recompute=r, moe_dispatcher=d, step_zero_grad=z)
               for p in ("bf16", "fp16", "fp8") for s in ("ddp", "distopt", "zero1", "fsdp")
               for c in (False, True) for r in ("none", "full") for d in ("alltoall", "deepep", "einsum")
               for z in (None, False)]
    for profile in PROFILES:
        for framework in FRAMEWORKS:
            for execution in samples:
                profile.defaults(_Reads(execution, read), framework)
                profile.eager_blocks(_Reads(execution, read), True)
    assert read & axes <= set(STACK_READ_AXES)
    assert read & axes == set(STACK_READ_AXES) - {"fused_kernels"}     # fused_kernels: stacks.resolve reads it


def _same(sweep, alone) -> None:
    """Every variable and status of ``alone`` equals ``sweep``'s, point for point (NaN = NaN)."""
    assert set(alone.data_vars) == set(sweep.data_vars)
    for name in alone.data_vars:
        got, want = sweep[name].transpose(*alone[name].dims).values, alone[name].values
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name


OTHER = {"plan": ["tp1", "tp2"], "micro_batch": [1, 2]}


@pytest.mark.parametrize("execution, axis, values", [
    # megatron-2021's gradient path (docs/model.md §11.49): the cases its sweep refused before
    ({"stack": "megatron-2021", "precision": "fp16", "sharding": "ddp"}, "wgrad_fused_accumulation", [False, True]),
    ({"stack": "megatron-2021", "precision": "fp16", "sharding": "ddp"}, "wgrad_fused_accumulation", [0, 1]),
    ({"stack": "megatron-2021", "sharding": "ddp"}, "precision", ["fp16"]),
    ({"stack": "megatron-2021", "sharding": "ddp"}, "precision", ["fp16", "fp8"]),
    ({"stack": "megatron-2021", "precision": "fp16", "sharding": "ddp"}, "step_zero_grad", [False, True]),
    ({"stack": "megatron-2021"}, "sharding", ["ddp", "fsdp"]),
    ({"framework": "Megatron-DeepSpeed", "precision": "fp16"}, "sharding", ["ddp", "zero1", "fsdp"]),
    # Megatron-Core's launcher: fp16 drops the NaN check, FSDP the overlap switch and bucket passes
    ({"framework": "Megatron-LM"}, "precision", ["fp16", "fp8"]),
    ({"framework": "Megatron-LM"}, "sharding", ["distopt", "fsdp"]),
    # DeepSpeed: ZeRO-3 overlaps, ZeRO-1 in the BF16_Optimizer era accumulates in FP32
    ({"framework": "DeepSpeed 0.6.2"}, "sharding", ["ddp", "zero1", "fsdp"]),
    ({"framework": "DeepSpeed 0.6.2", "sharding": "zero1"}, "precision", ["fp16", "fp8"]),
    # Accelerate reduces in the training dtype; PyTorch 1.x FSDP overlaps its reduce-scatter
    ({"framework": "Accelerate"}, "precision", ["fp16", "fp8"]),
    ({"framework": "PyTorch 1.10 FSDP"}, "sharding", ["ddp", "fsdp"]),
])
def test_a_sweep_over_a_field_the_stack_reads_equals_the_value_in_the_spec(execution, axis, values):
    sweep = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={**OTHER, axis: values}, execution=execution)
    assert sweep.status.dims == ("plan", "micro_batch", axis)                   # the axes' order
    for label, value in zip(sweep[axis].values, values):
        value = bool(value) if isinstance(value, int) else value
        alone = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes=OTHER, execution={**execution, axis: value})
        _same(sweep.sel({axis: label}).drop_vars(axis), alone)


def test_the_review_4_point_now_gives_the_fp16_plan():
    """Review 4: ``precision = ["fp16"]`` on a bf16 megatron-2021 spec gave 592.60 s / 24.29 GB against 596.62 s /
    22.28 GB for ``precision = "fp16"`` in the spec; now the same."""
    spec = {"stack": "megatron-2021", "sharding": "ddp"}
    swept = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"], "precision": ["fp16"]},
                     execution=spec)
    alone = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"]},
                     execution={**spec, "precision": "fp16"})
    assert float(swept.step_time.squeeze()) == float(alone.step_time.squeeze())


def test_a_stack_read_axis_costs_one_lowering_per_distinct_defaults(monkeypatch):
    """megatron-2021, precision x sharding (6 combinations): fp16 under ddp/distopt (Megatron's own fp16 path),
    fp8 under ddp/distopt (none), fsdp (DeepSpeed's): 3 lowerings; an axis no stack reads: 1, and no structural
    axis (the grid is evaluated as before)."""
    import fastmodel.lm.sweep as sweep_module
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep_plan import LMSweepPlan

    calls = []
    lower = sweep_module.lower
    monkeypatch.setattr(sweep_module, "lower", lambda *a, **k: calls.append(a[2]) or lower(*a, **k))
    model, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100")
    plan = LMSweepPlan(model, cluster, load_execution({"stack": "megatron-2021"}), 64,
                       {"micro_batch": [1, 2], "precision": ["fp16", "fp8"], "sharding": ["ddp", "distopt", "fsdp"]})
    assert len(calls) == 3
    assert [a.name for a in plan.axes if a.structural] == ["precision", "sharding"]
    calls.clear()
    plan = LMSweepPlan(model, cluster, load_execution({"stack": "megatron-core"}), 64,
                       {"micro_batch": [1, 2], "precision": ["bf16", "fp8"], "sharding": ["ddp", "distopt"]})
    assert len(calls) == 1 and not plan.structural_axes
    calls.clear()
    LMSweepPlan(model, cluster, load_execution({"stack": "megatron-2021"}), 64, {"sharding": ["ddp", "distopt"]})
    assert len(calls) == 1      # bf16: ddp and distopt give the stack the same defaults


def test_the_ep_of_a_plan_resolves_a_compiled_moe_stacks_fusion_point_by_point():
    """TorchTitan compiles a MoE model's blocks but runs them eager under EP and activation checkpointing
    (docs/model.md §11.14.1): a plan axis with ep 1 and ep > 1 gets each mesh's fusion, as a run of that plan
    (``point_columns``) does; before, the sweep refused unless the spec stated fused_kernels."""
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.sweep_plan import LMSweepPlan

    titan = {"framework": "TorchTitan", "torch_compile": True, "recompute": "full"}
    model, cluster = load_lm_model("qwen3-30b-a3b"), load_cluster("dgx-b200", 1)
    plans = ["dp", "ep8", "ep4"]
    plan = LMSweepPlan(model, cluster, load_execution(titan), 64, {"plan": plans, "micro_batch": [1]})
    fused = {p: plan._combo_bases[(i,)][COLUMN_INDEX["fused_kernels"]] for i, p in enumerate(plans)}
    assert fused == {"dp": 1.0, "ep8": 0.0, "ep4": 0.0}
    for p in plans:
        assert point_columns(model, cluster, task=None, plan=p, execution=titan, global_batch=64)[
            COLUMN_INDEX["fused_kernels"]] == fused[p]
    sweep = lm_sweep(model, cluster, global_batch=64, axes={"plan": plans, "micro_batch": [1]}, execution=titan)
    for p in plans:
        _same(sweep.sel(plan=[p]), lm_sweep(model, cluster, global_batch=64, axes={"plan": [p], "micro_batch": [1]},
                                            execution=titan))


def test_a_stack_read_axis_runs_into_a_zarr_store_and_from_its_definition_as_in_memory(tmp_path):
    """The store path (one chunk per unit, 1 along a structural axis) and a plan rebuilt from its definition (a
    Dask worker's, ``store.plan_from_json``) give the in-memory grid."""
    from fastmodel.lm.sweep import sweep_plan
    from fastmodel.lm.sweep_plan import LMSweepPlan
    from fastmodel.sweeps.run import run_in_memory, run_to_store

    plan = sweep_plan("llama3.1-8b", "dgx-h100", "llm-pretrain", execution={"stack": "megatron-2021"},
                      axes={"precision": ["fp16", "fp8"], "plan": ["tp1", "tp2"], "sharding": ["ddp", "fsdp"]},
                      unit_configs=2)
    memory = run_in_memory(plan, require_ok=False)
    rebuilt = LMSweepPlan.from_definition(plan.definition())
    assert rebuilt.structural_axes == plan.structural_axes == [0, 2]
    stored = run_to_store(rebuilt, str(tmp_path / "s.zarr"), require_ok=False).load()
    assert stored.unit_done.all()
    _same(stored.drop_vars("unit_done"), memory)


def test_bad_input_is_refused_or_marked_as_before():
    """An illegal axis value keeps its one-line refusal; a value combination whose stack fuses the
    weight-gradient accumulation beside its own pass gets the rule table's status at its points (the spec with
    that value is refused at the lowering, as megatron-core's fusion with ``-x grad_accum_bytes=6`` is)."""
    with pytest.raises(SpecError, match=r"^axes\.precision: unknown value 'fp9'"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"precision": ["fp16", "fp9"]},
                 execution={"stack": "megatron-2021"})
    with pytest.raises(SweepError, match=r"^axes\.precision: 'bf16' and 'fp16' are one point"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"precision": ["fp16", "bf16"]},
                 execution={"stack": "megatron-2021"})
    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"], "sharding": ["ddp", "zero1"]},
                  execution={"framework": "Megatron-DeepSpeed", "wgrad_fused_accumulation": True})
    assert ds.status.sel(sharding="zero1").item() == STATUS_CODES["wgrad_accumulation_twice"]
    assert ds.status.sel(sharding="ddp").item() == 0
