"""Sweep axes over model fields: a sweep over a field from which the lowering derives other columns (head_dim =
hidden / heads where the spec leaves it unset, kv_heads = heads, sliding_window_layers = layers, ...) gives, at
each value, the model that value in the model spec gives (fastmodel/lm/sweep_stack.py ``MODEL_READ_FIELDS``;
docs/model.md §11.49 "Sweeps")."""

import numpy as np
import pytest

from fastmodel.errors import SpecError, SweepError
from fastmodel.lm.loader import load_lm_model
from fastmodel.lm.sweep import lm_sweep
from fastmodel.registry.lm import COLUMN_INDEX
from tests.lm.sweep_points import same_points

OTHER = {"plan": ["tp1", "tp2"], "micro_batch": [1, 2]}
LLAMA = load_lm_model("llama3.1-8b").model_dump()


@pytest.mark.parametrize("model, axis, values, execution", [
    (LLAMA, "hidden", [4096, 5120], None),                     # head_dim 128 -> 160 (the spec leaves it unset)
    ({**LLAMA, "head_dim": 128}, "hidden", [4096, 5120], None),  # a spec that states head_dim keeps it
    (LLAMA, "heads", [32, 64], None),                          # head_dim 128 -> 64
    ({**LLAMA, "kv_heads": None}, "heads", [16, 32], None),    # kv_heads follows heads (MHA)
    (LLAMA, "layers", [16, 32], {"recompute": "partial_layers", "recompute_num_layers": 8}),  # fraction 1/2 -> 1/4
    (LLAMA, "ffn", [8192, 14336], None),
    ("qwen3-30b-a3b", "moe_topk", [2, 8], None),
    ("qwen3-30b-a3b", "moe_experts", [64, 128], None),
])
def test_a_sweep_over_a_model_field_equals_the_value_in_the_model_spec(model, axis, values, execution):
    sweep = lm_sweep(model, "dgx-h100", "llm-pretrain", axes={**OTHER, axis: values}, execution=execution)
    assert sweep.status.dims == ("plan", "micro_batch", axis)                   # the axes' order
    spec = load_lm_model(model).model_dump()
    for value in values:
        alone = lm_sweep({**spec, axis: value}, "dgx-h100", "llm-pretrain", axes=OTHER, execution=execution)
        same_points(sweep.sel({axis: value}).drop_vars(axis), alone)


def test_the_reported_hidden_point_now_gives_the_spec_s_step_time():
    """h-sweepcols' finding: ``hidden = [4096, 5120]`` on llama3.1-8b gave 60.04 s at 5120 (head_dim kept at 128)
    against 64.96 s for a model spec with hidden 5120 (head_dim 160); now the same."""
    swept = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"hidden": [4096, 5120]})
    alone = lm_sweep({**LLAMA, "hidden": 5120}, "dgx-h100", "llm-pretrain", axes={})
    assert float(swept.step_time.sel(hidden=5120)) == float(alone.step_time) == pytest.approx(64.96, abs=0.01)


def test_model_axes_that_derive_nothing_lower_once_and_those_that_do_one_base_per_vector(monkeypatch):
    """ffn, vocab, moe_topk set only their own column: no structural axis, one lowering; hidden x heads on a spec
    without head_dim: one base per distinct column vector (4096/32 = 8192/64 = 128 share one)."""
    import fastmodel.lm.sweep as sweep_module
    from fastmodel.lm.loader import load_cluster, load_execution
    from fastmodel.lm.sweep_plan import LMSweepPlan

    calls = []
    lower = sweep_module.lower
    monkeypatch.setattr(sweep_module, "lower", lambda *a, **k: calls.append(a[0]) or lower(*a, **k))
    cluster, execution = load_cluster("dgx-h100"), load_execution(None)
    plan = LMSweepPlan(load_lm_model("llama3.1-8b"), cluster, execution, 64,
                       {"ffn": [8192, 14336], "vocab": [32000, 128256], "plan": ["tp1", "tp2"]})
    assert not plan.structural_axes and plan._combo_bases is None and len(calls) == 1
    plan = LMSweepPlan(load_lm_model("llama3.1-8b"), cluster, execution, 64,
                       {"micro_batch": [1, 2], "hidden": [4096, 8192], "heads": [32, 64]})
    assert [a.name for a in plan.axes if a.structural] == ["hidden", "heads"]
    head_dims = {k: b[COLUMN_INDEX["head_dim"]] for k, b in plan._combo_bases.items()}
    assert head_dims == {(0, 0): 128.0, (0, 1): 64.0, (1, 0): 256.0, (1, 1): 128.0}
    assert len({b.tobytes() for b in plan._combo_bases.values()}) == 4   # the axes' own columns set per combination


def test_model_values_that_together_make_no_valid_model_are_one_line():
    """Each value alone is checked against the spec (``_check_model_axis``); a combination of two model axes is
    checked as the loader checks a spec file: hidden 4128 is no multiple of heads 64 and the spec states no
    head_dim (4128 with 32 heads and 4096 with 64 are models)."""
    with pytest.raises(SweepError,
                       match=r"^axes\.hidden: 4100 does not make a valid Llama 3.1 8B: head_dim: required when hidden"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"hidden": [4100]})
    with pytest.raises(SweepError, match=r"^axes hidden, heads: hidden = 4128, heads = 64 do not make a valid "
                                         r"Llama 3.1 8B: head_dim: required when hidden"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"hidden": [4096, 4128], "heads": [32, 64]})


def test_two_model_axes_outside_the_read_fields_are_checked_together():
    """review6 F1: heads 16 with kv_heads 32 (each value alone a valid Llama 3.1 8B) was evaluated as a model
    (status 0, 60.21 s) that ``run`` refuses; every combination of model axes is now checked as a spec file is.
    moe_topk above moe_experts stays the kernel's ``topk_above_experts`` status (tests/lm/test_moe.py)."""
    with pytest.raises(SweepError, match=r"^axes heads, kv_heads: heads = 16, kv_heads = 32 do not make a valid "
                                         r"Llama 3.1 8B: kv_heads: 32 kv heads must divide the 16 query heads$"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"heads": [16, 32], "kv_heads": [8, 32]})
    sweep = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"heads": [32, 64], "kv_heads": [8, 16]})
    for heads in (32, 64):
        for kv_heads in (8, 16):
            alone = lm_sweep({**LLAMA, "heads": heads, "kv_heads": kv_heads}, "dgx-h100", "llm-pretrain", axes={})
            same_points(sweep.sel(heads=heads, kv_heads=kv_heads).drop_vars(["heads", "kv_heads"]), alone)


def test_a_model_field_sets_only_its_own_column_unless_listed():
    """An axis over a model field not in ``MODEL_READ_FIELDS`` is not lowered value by value; that holds only while
    its lowering sets its own column alone: this changes each model column of dense, MoE, MLA and
    sliding-window models (head_dim and kv_heads stated or not; partial-layer recompute; a stack with an unknown
    vp) and fails on a field that sets another not listed."""
    from pydantic import ValidationError

    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.loader import load_cluster
    from fastmodel.lm.spec import LMSpec
    from fastmodel.lm.sweep import base_columns
    from fastmodel.lm.sweep_stack import MODEL_READ_FIELDS

    fields = [n for n in LMSpec.model_fields if n in COLUMN_INDEX]
    assert {"hidden", "ffn", "moe_topk", "kv_lora_rank", "sliding_window_layers"} <= set(fields)
    models = [load_lm_model(name) for name in ("llama3.1-8b", "qwen3-30b-a3b", "deepseek-v2", "gpt-oss-120b")]
    models.append(LMSpec.model_validate({**LLAMA, "kv_heads": None, "head_dim": 128}))
    executions = [ExecutionSpec(), ExecutionSpec(recompute="partial_layers", recompute_num_layers=4),
                  ExecutionSpec(framework="Megatron-LM", vp="unknown"), ExecutionSpec(moe_balance="aux_loss")]
    cluster, reads = load_cluster("dgx-h100"), set()
    for model in models:
        for execution in executions:
            base = base_columns(model, cluster, execution, 64, 1, twice_as_status=True)
            for name in fields:
                now = getattr(model, name)
                for value in {1, 2, 8, (now or 1) * 2, (now or 1) + 1}:
                    try:
                        changed = LMSpec.model_validate({**model.model_dump(), name: type(now)(value)
                                                         if now is not None else value})
                        columns = base_columns(changed, cluster, execution, 64, 1, twice_as_status=True)
                    except (ValidationError, SpecError):
                        continue
                    if set(np.flatnonzero(columns != base)) - {COLUMN_INDEX[name]}:
                        reads.add(name)
    assert reads == set(MODEL_READ_FIELDS)
