"""fastmodel/madmax/families/: one module and one Family object per MAD-Max family, and the column registry
(registry.madmax.COLUMNS) the families fill by trait."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import fastmodel
from fastmodel.kernels.madmax import layout
from fastmodel.madmax.families import FAMILIES, MODEL_FAMILIES, REFERENCE_NAMES, family_of
from fastmodel.madmax.lowering.graph import lower
from fastmodel.madmax.lowering.params import param_table
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.madmax.spec.loader import load_model, load_system, load_task
from fastmodel.registry import madmax as results

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: one built-in model per family
EXAMPLES = {"llm": "llama-7b", "llm-moe": "gpt4-1.8t-moe", "vit": "dinov2-s", "dlrm": "dlrm-a-small",
            "dlrm-moe": "dlrm-a-small-moe", "dlrm-transformer": "dlrm-a-small-transformer"}


def test_six_families_one_module_each():
    assert set(FAMILIES) == set(EXAMPLES)
    for name, family in FAMILIES.items():
        module = family.spec.__module__
        assert module == f"fastmodel.madmax.families.{name.replace('-', '_')}", (name, module)
        assert family.spec.model_fields["family"].default == name
        assert MODEL_FAMILIES[name] is family.spec
        assert REFERENCE_NAMES[family.reference_name] == name
        assert family.components[:2] == ("dense", "emb")


def test_family_names_appear_as_literals_only_in_their_modules():
    """No ``if family == "dlrm-transformer"`` outside its module: code reads the Family object."""
    names = set(FAMILIES)
    offenders = []
    for path in [*(ROOT / "fastmodel").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]:
        if path.parent.name == "families":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


def test_traits_name_existing_columns_and_spec_fields():
    needs = {column.needs for column in results.COLUMNS}
    for name, family in FAMILIES.items():
        assert set(family.traits) <= needs, (name, family.traits)
        model = load_model(EXAMPLES[name])
        for column in results.COLUMNS:
            if column.needs in family.traits:
                assert hasattr(model, column.path.split(".", 1)[1]), (name, column.name)
    assert layout.COLUMNS == tuple(c.name for c in results.COLUMNS)
    assert layout.P_LAYERS == layout.COLUMNS.index("num_layers")
    assert layout.P_TRAIN_SAMPLES == layout.COLUMNS.index("train_samples")
    for column in results.COLUMNS:
        root = column.path.split(".")[0]
        assert column.path == "" or root in ("model", "system", "task"), column


def test_param_table_fills_a_family_by_its_traits():
    """dlrm-moe: its own columns from the spec, experts from the spec; llm: experts filled with 1; vit derives
    seq_len = ceil(224 / 14)^2 = 256 and vocab = 3 * 14^2 = 588 by hand."""
    system, task = load_system("dc-a", num_nodes=2), load_task("llm-pretrain")
    col = {name: i for i, name in enumerate(layout.COLUMNS)}
    moe = load_model("dlrm-a-small-moe")
    table, status = param_table(moe, system, load_task("dlrm-pretrain"), Plan.parse("ddp/mp"))
    assert status[0] == 0
    assert table[col["num_experts"], 0] == moe.num_experts
    assert table[col["pooling"], 0] == moe.pooling
    llm = load_model("llama-7b")
    table, _ = param_table(llm, system, task, Plan.parse("fsdp/ddp"))
    assert table[col["num_experts"], 0] == 1 and table[col["num_active_experts"], 0] == 1
    assert table[col["vocab_size"], 0] == llm.vocab_size
    vit = load_model({"family": "vit", "name": "v", "num_layers": 2, "hidden": 64, "ffn_hidden": 256, "num_heads": 4,
                      "image_size": 224, "patch_size": 14, "bytes_per_dense_param": 2, "bytes_per_emb_param": 2})
    table, _ = param_table(vit, system, task, Plan.parse("fsdp/ddp"))
    assert table[col["seq_len"], 0] == 256 == vit.seq_len
    assert table[col["vocab_size"], 0] == 588 == vit.vocab_size


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_family_lowers_and_evaluates(name):
    family = FAMILIES[name]
    plan = "ddp/mp/ddp" if family.has_transformer_component else "ddp/mp"
    task = "dlrm-pretrain" if "recommendation" in family.traits else "llm-pretrain"
    ds = fastmodel.evaluate(EXAMPLES[name], "dc-a", task, plan=plan, num_nodes=2)
    assert np.isfinite(ds.iteration_time.item()) and ds.iteration_time.item() > 0
    assert family_of(name) is family is family_of(load_model(EXAMPLES[name]))


def test_moe_flag_comes_from_the_family():
    """llm-moe under tp lowers expert all-to-alls, llm with the same key fields none: per layer, tokens to
    their experts and back in the forward FC block and again in its backward (4 x 2 layers = 8)."""
    from fastmodel.madmax.lowering.graph import StructureKey

    moe = lower(StructureKey("llm-moe", "pretrain", ("tp",), ("ddp",), 2))
    dense = lower(StructureKey("llm", "pretrain", ("tp",), ("ddp",), 2))
    assert int(np.sum(moe.op_category == layout.CAT_ALL2ALL)) == 8
    assert int(np.sum(dense.op_category == layout.CAT_ALL2ALL)) == 0
    assert moe.num_ops == dense.num_ops + 8


def test_every_registry_column_has_a_kernel_short_name():
    """kernels/madmax/layout.py maps each registry column to a ``P_*`` name by column name: a new column without a
    short name would be invisible to the cost kernels."""
    assert set(layout._COLUMN_SHORT_NAMES.values()) == set(layout.COLUMNS)
    assert len(set(layout._COLUMN_SHORT_NAMES.values())) == len(layout._COLUMN_SHORT_NAMES)
