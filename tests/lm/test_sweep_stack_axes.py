"""Sweep axes over fields the lowering reads: a sweep over a field from which the stack profile or the lowering
derives other columns gives, at each value, the plan that value in the execution spec gives
(fastmodel/lm/sweep_stack.py; docs/model.md §11.49, §11.14.1)."""

import numpy as np
import pytest

from fastmodel.errors import SpecError, SweepError
from fastmodel.lm.sweep import lm_sweep
from fastmodel.registry.lm import COLUMN_INDEX, STATUS_CODES
from tests.lm.sweep_points import same_points

OTHER = {"plan": ["tp1", "tp2"], "micro_batch": [1, 2]}


@pytest.mark.parametrize("execution, axis, values", [
    # megatron-2021's gradient path (docs/model.md §11.49): the cases its sweep refused before
    ({"stack": "megatron-2021", "precision": "fp16", "sharding": "ddp"}, "wgrad_fused_accumulation", [False, True]),
    ({"stack": "megatron-2021", "precision": "fp16", "sharding": "ddp"}, "wgrad_fused_accumulation", [0, 1]),
    ({"stack": "megatron-2021", "sharding": "ddp"}, "precision", ["fp16"]),
    ({"stack": "megatron-2021", "sharding": "ddp"}, "precision", ["fp16", "fp8"]),
    # review 5 F2: one code (0), two gradient paths: fp16 and bf16 are two points where the stack lowers them apart
    ({"stack": "megatron-2021", "sharding": "ddp"}, "precision", ["fp16", "bf16"]),
    ({"framework": "Megatron-DeepSpeed", "sharding": "zero1"}, "precision", ["fp16", "bf16"]),
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
        same_points(sweep.sel({axis: label}).drop_vars(axis), alone)


def test_the_review_4_point_now_gives_the_fp16_plan():
    """Review 4: ``precision = ["fp16"]`` on a bf16 megatron-2021 spec gave 592.60 s / 24.29 GB against 596.62 s /
    22.28 GB for ``precision = "fp16"`` in the spec; now the same."""
    spec = {"stack": "megatron-2021", "sharding": "ddp"}
    swept = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"], "precision": ["fp16"]},
                     execution=spec)
    alone = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"]},
                     execution={**spec, "precision": "fp16"})
    assert float(swept.step_time.squeeze()) == float(alone.step_time.squeeze())


@pytest.mark.parametrize("execution, axis, values", [
    # the lowering's own derived columns, no stack involved (h-stackaxes left these): grad_reduce_bytes follows
    # master_weights; the recompute_modules bits count only under selective recompute; a stated shard_degree is
    # set only under FSDP/HSDP
    ({"master_weights": True}, "master_weights", [False, True]),
    ({"recompute": "none", "recompute_modules": ["core_attn", "mlp"]}, "recompute", ["none", "selective", "full"]),
    ({"sharding": "ddp", "shard_degree": 4}, "sharding", ["ddp", "fsdp"]),
])
def test_a_sweep_over_a_field_the_lowering_derives_from_equals_the_value_in_the_spec(execution, axis, values):
    test_a_sweep_over_a_field_the_stack_reads_equals_the_value_in_the_spec(execution, axis, values)


def test_a_recompute_modules_axis_is_lowered_as_the_module_names():
    """The bits of a recompute_modules axis are lowered as the modules they name, so beside a recompute axis
    they count only under selective recompute, as in the spec."""
    axes = {"plan": ["tp2"], "recompute": ["none", "selective"], "recompute_modules": [1, 17]}
    sweep = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes=axes)
    for recompute in ("none", "selective"):
        for bits, modules in ((1, ["core_attn"]), (17, ["core_attn", "mlp"])):
            alone = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp2"]},
                             execution={"recompute": recompute, "recompute_modules": modules})
            point = sweep.sel(recompute=[recompute], recompute_modules=[bits])
            assert float(point.step_time.squeeze()) == float(alone.step_time.squeeze())


def test_a_derived_column_axis_costs_one_base_per_distinct_column_vector(monkeypatch):
    """megatron-2021, precision x sharding: one base per distinct lowered column vector; an execution-field axis
    that changes no other column (micro_batch) adds no structural axis and keeps the spec's one base; a sweep
    with no execution-field axis (num_nodes, global_batch, a plan without ep) lowers once."""
    import fastmodel.lm.sweep as sweep_module
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep_plan import LMSweepPlan

    calls = []
    lower = sweep_module.lower
    monkeypatch.setattr(sweep_module, "lower", lambda *a, **k: calls.append(a[2]) or lower(*a, **k))
    model, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100")
    plan = LMSweepPlan(model, cluster, load_execution({"stack": "megatron-2021"}), 64,
                       {"micro_batch": [1, 2], "precision": ["fp16", "fp8"], "sharding": ["ddp", "distopt", "fsdp"]})
    assert [a.name for a in plan.axes if a.structural] == ["precision", "sharding"]
    assert len({b.tobytes() for b in plan._combo_bases.values()}) == 6
    plan = LMSweepPlan(model, cluster, load_execution({"stack": "megatron-core"}), 64,
                       {"micro_batch": [1, 2, 4], "plan": ["tp1", "tp2"]})
    assert not plan.structural_axes and plan._combo_bases is None
    calls.clear()
    LMSweepPlan(model, cluster, load_execution({"stack": "megatron-2021"}), 64,
                {"num_nodes": [1, 2], "global_batch": [64, 128], "plan": ["tp1", "tp2.pp2"]})
    assert len(calls) == 1


def test_more_combinations_than_the_bound_are_refused_in_one_line(monkeypatch):
    import fastmodel.lm.sweep_stack as sweep_stack

    monkeypatch.setattr(sweep_stack, "MAX_LOWERED_COMBINATIONS", 3)
    with pytest.raises(SweepError, match=r"^axes precision, master_weights: 4 value combinations of fields the "
                                         r"lowering reads: 4 lowerings, over the 3 "):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain",
                 axes={"micro_batch": [1, 2, 4, 8], "precision": ["bf16", "fp8"], "master_weights": [False, True]})
    # one axis: named as every axis error is; the plan's ep = 1 and ep > 1 double the lowerings, and it says so
    # (review6 F6: "axes layers: 4098 value combinations" for a 2049-value axis)
    with pytest.raises(SweepError, match=r"^axes\.layers: 2 value combinations of fields the lowering reads x 2 "
                                         r"\(ep = 1 and ep > 1 of the plan axis\): 4 lowerings, over the 3 "):
        lm_sweep("qwen3-30b-a3b", "dgx-h100", "llm-pretrain", axes={"layers": [24, 48], "plan": ["tp1", "ep2"]})


#: framework texts that reach the profiles' branches (fork, era, ZeRO stage, launcher, version)
FRAMEWORKS = (None, "Megatron-LM", "Megatron-DeepSpeed", "stanford-futuredata Megatron-LM MegaBlocks",
              "DeepSpeed 0.6.2", "PyTorch 1.10 FSDP", "TorchTitan", "Accelerate", "fms-fsdp", "MaxText", "KempnerForge",
              "Meta internal", "Composer")


def test_a_plain_numeric_execution_field_sets_only_its_own_column_unless_listed():
    """An axis over a plain number (``sweep_stack.compared`` false: micro_batch, collective_bucket_bytes, ...) is
    not lowered value by value; that holds only while its lowering sets its own column alone, under every stack
    and with the field unset or stated: this finds the fields that set another and fails on one not listed in
    ``NUMERIC_READ_FIELDS``."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.loader import load_cluster, load_lm_model
    from fastmodel.lm.sweep import base_columns
    from fastmodel.lm.sweep_stack import NUMERIC_READ_FIELDS, compared
    from fastmodel.registry.lm import COLUMNS

    plain = [n for n in ExecutionSpec.model_fields
             if n in COLUMN_INDEX and (not compared(n) or n in NUMERIC_READ_FIELDS)]
    assert "micro_batch" in plain and len(plain) >= 15
    samples = [ExecutionSpec(framework=f, precision=p, sharding=s, recompute=r, moe_balance=b) for f in FRAMEWORKS
               for p in ("bf16", "fp16") for s in ("ddp", "zero1", "fsdp") for r in ("none", "full")
               for b in (None, "aux_loss")]
    cluster, reads = load_cluster("dgx-h100"), set()
    for model in (load_lm_model("llama3.1-8b"), load_lm_model("qwen3-30b-a3b")):
        for execution in samples:
            base = base_columns(model, cluster, execution, 64, 1, twice_as_status=True)
            for name in plain:
                low = COLUMNS[COLUMN_INDEX[name]].lo
                value = max(low, 1.0) if low is not None else 1.0
                for number in (value, value + 1):
                    update = {name: int(number) if float(number).is_integer() else number}
                    columns = base_columns(model, cluster, execution.model_copy(update=update), 64, 1,
                                           twice_as_status=True)
                    if set(np.flatnonzero(columns != base)) - {COLUMN_INDEX[name]}:
                        reads.add(name)
    assert reads == set(NUMERIC_READ_FIELDS)


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
        same_points(sweep.sel(plan=[p]), lm_sweep(model, cluster, global_batch=64, axes={"plan": [p], "micro_batch": [1]},
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
    same_points(stored.drop_vars("unit_done"), memory)


def test_bad_input_is_refused_or_marked_as_before():
    """An illegal axis value keeps its one-line refusal; a value combination whose stack fuses the
    weight-gradient accumulation beside its own pass gets the rule table's status at its points (the spec with
    that value is refused at the lowering, as megatron-core's fusion with ``-x grad_accum_bytes=6`` is)."""
    with pytest.raises(SpecError, match=r"^axes\.precision: unknown value 'fp9'"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"precision": ["fp16", "fp9"]},
                 execution={"stack": "megatron-2021"})
    one_point = r"^axes\.{}: '{}' and '{}' are one point to the model, code {}: an alias or modelled alike"
    for precisions in (["fp16", "bf16"], ["fp16", "bf16", "fp8"]):   # Megatron-Core lowers fp16 and bf16 alike
        with pytest.raises(SweepError, match=one_point.format("precision", "bf16", "fp16", 0)):
            lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp2"], "precision": precisions},
                     execution={"stack": "megatron-core"})
    for stack in ("megatron-core", "megatron-2021"):
        with pytest.raises(SweepError, match=one_point.format("sharding", "zero1", "distopt", 1)):
            lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain",
                     axes={"plan": ["tp2"], "sharding": ["distopt", "zero1"]}, execution={"stack": stack})
    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp1"], "sharding": ["ddp", "zero1"]},
                  execution={"framework": "Megatron-DeepSpeed", "wgrad_fused_accumulation": True})
    assert ds.status.sel(sharding="zero1").item() == STATUS_CODES["wgrad_accumulation_twice"]
    assert ds.status.sel(sharding="ddp").item() == 0
