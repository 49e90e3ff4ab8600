"""Loading specs: built-ins, TOML/JSON files, MAD-Max dicts, and every kind of bad input."""

import json

import pytest

import fastmodel
from fastmodel.engines import load_model, load_system, load_task
from fastmodel.errors import PlanError, SpecError
from fastmodel.madmax.spec.schema import json_schema
from fastmodel.spec.loader import _builtin_data, builtin_names
from fastmodel.spec.quantity import parse_quantity
from fastmodel.testing import EXPECTED_TO_VARIABLE, read_cases

GOOD_MODEL = """
family = "llm"
name = "tiny"
num_layers = 2
hidden = 64
ffn_hidden = 256
num_heads = 4
seq_len = 128
vocab_size = 1000
bytes_per_dense_param = 2
bytes_per_emb_param = 2
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_every_builtin_loads():
    for name in builtin_names("model"):
        load_model(name)
    for name in builtin_names("system"):
        load_system(name)
    from fastmodel.serve.spec import is_serve_task, load_serve_task

    for name in builtin_names("task"):
        if is_serve_task(_builtin_data("task", name)):
            assert load_serve_task(name).kind == "serve"
        else:
            load_task(name)
    assert {"llama-7b", "llama-13b", "llama-30b", "llama-65b", "llama2-70b", "gpt3-175b"} <= set(builtin_names("model"))
    assert {"llm-pretrain", "llm-pretrain-fsdp", "llm-inference"} <= set(builtin_names("task"))


def test_builtin_specs_reproduce_reference_anchor():
    """Our own spec files for LLaMA2-70B / DC-A / FSDP give the reference's anchor numbers."""
    anchor = next(c for c in read_cases("madmax_cases_dev.jsonl") if c["case"] == "anchor-llama2_70b-dc_A_2048-llm_train")
    ds = fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain-fsdp", semantics="madmax", num_nodes=256)
    for key, name in EXPECTED_TO_VARIABLE.items():
        if key not in anchor["expected"]:
            continue
        assert float(ds[name]) == pytest.approx(anchor["expected"][key], rel=1e-9), name


def test_toml_model_and_units(tmp_path):
    model = load_model(write(tmp_path, "m.toml", GOOD_MODEL))
    assert model.dense_params == 2 * (4 * 64 * 64 + 2 * 64 * 256)
    assert parse_quantity("1555 GB/s", "bytes_per_s") == 1555e9
    assert parse_quantity("40 GiB", "bytes") == 40 * 2**30
    assert parse_quantity("312 TFLOP/s", "flop_per_s") == 312e12


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ("hiden = 64", "model.hiden", "did you mean 'hidden'"),
        ('hidden = "big"', "model.hidden", "integer"),
        ("hidden = -1", "model.hidden", "greater than 0"),
        ("num_layers = 0", "model.num_layers", "greater than 0"),
        ("bytes_per_dense_param = 3", "model.bytes_per_dense_param", "1, 2, 4 or 8"),
    ],
)
def test_bad_model_fields(tmp_path, change, field, reason):
    key = change.split(" = ")[0]
    text = "\n".join(line for line in GOOD_MODEL.splitlines() if not line.startswith(key + " ")) + "\n" + change
    if key == "hiden":
        text = GOOD_MODEL.replace("hidden = 64", change)
    path = write(tmp_path, "m.toml", text)
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {field}: ")
    assert reason in message
    assert "\n" not in message


def _system_dict(**device):
    base = json.loads(json.dumps(load_system("dc-a").model_dump()))
    base["device"].update(device)
    return base


@pytest.mark.parametrize(
    "device, field, reason",
    [
        ({"hbm_bandwidth_bytes_per_s": 1555}, "system.device.hbm_bandwidth_bytes_per_s", "implausibly small"),
        ({"flops_util": 70}, "system.device.flops_util", "percentage"),
        ({"hbm_capacity_bytes": "40 GX"}, "system.device.hbm_capacity_bytes", "unknown unit"),
        ({"hbm_capacty_bytes": 1e9}, "system.device.hbm_capacty_bytes", "did you mean 'hbm_capacity_bytes'"),
        ({"hbm_bandwidth_bytes_per_s": 0}, "system.device.hbm_bandwidth_bytes_per_s", "greater than 0"),
    ],
)
def test_bad_system_fields(device, field, reason):
    with pytest.raises(SpecError) as info:
        load_system(_system_dict(**device))
    assert f"{field}: " in str(info.value) and reason in str(info.value)


def test_madmax_system_errors():
    case = next(c for c in read_cases("madmax_cases_dev.jsonl") if c["model"]["type"] == "LLM")
    system = dict(case["system"], num_devices=64, num_nodes=17)
    with pytest.raises(SpecError, match="system.num_devices: 64 devices do not divide evenly over 17 nodes"):
        load_system(system)
    with pytest.raises(SpecError, match="system.ibroce_bw"):
        load_system(dict(case["system"], ibroce_bw=0))
    with pytest.raises(SpecError, match="system.flops_util"):
        load_system(dict(case["system"], flops_util=0.0))
    with pytest.raises(SpecError, match="did you mean 'mem_bw'"):
        load_system(dict(case["system"], mem_bww=1e12))


def test_nodes_override_and_bad_override():
    assert load_system("dc-a", num_nodes=256).num_devices == 2048
    with pytest.raises(SpecError, match="system.num_nodes"):
        load_system("dc-a", num_nodes=0)


def test_files_and_names(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_model(str(tmp_path / "nope.toml"))
    with pytest.raises(SpecError, match="invalid TOML"):
        load_model(write(tmp_path, "bad.toml", "family = \n"))
    with pytest.raises(SpecError, match="invalid JSON at line 1"):
        load_model(write(tmp_path, "bad.json", "{nope"))
    with pytest.raises(SpecError, match="top level"):
        load_model(write(tmp_path, "list.json", "[1, 2]"))
    with pytest.raises(SpecError, match="did you mean 'llama-65b'"):
        load_model("llama-66b")
    with pytest.raises(SpecError, match="model.family"):
        load_model({"family": "lstm", "name": "x"})


def test_task_rules():
    with pytest.raises(SpecError, match="exactly one of global_batch or local_batch"):
        load_task({"name": "t", "kind": "pretrain"})
    with pytest.raises(SpecError, match="finetune only"):
        load_task({"name": "t", "kind": "pretrain", "global_batch": 8, "freeze_emb": True})
    frozen = {"name": "t", "kind": "finetune", "global_batch": 2048, "freeze_emb": True, "freeze_dense": True}
    with pytest.raises(SpecError, match="all_frozen"):  # what "every component" means depends on the family
        fastmodel.evaluate("llama-7b", "dc-a", frozen, plan="fsdp/ddp", num_nodes=2)
    trains_top = fastmodel.evaluate("dlrm-a-small-transformer", "dc-a", frozen, plan="ddp/mp/ddp", num_nodes=2)
    assert trains_top.time_allreduce.item() > 0      # the top MLP's gradients
    with pytest.raises(SpecError, match="all_frozen"):
        fastmodel.evaluate("dlrm-a-small", "dc-a", {**frozen, "freeze_dense": False, "freeze_top_mlp": True,
                                                    "freeze_bottom_mlp": True}, plan="ddp/mp", num_nodes=2)
    with pytest.raises(SpecError, match="task.freeze_top_mlp: does not apply to llm model .*freezes freeze_dense"):
        fastmodel.evaluate("llama-7b", "dc-a", {**frozen, "freeze_emb": False, "freeze_top_mlp": True},
                           plan="fsdp/ddp", num_nodes=2)
    with pytest.raises(SpecError, match="task.freeze_dense: does not apply to dlrm model .*freeze_top_mlp / freeze_bottom"):
        fastmodel.evaluate("dlrm-a-small", "dc-a", {**frozen, "freeze_emb": False}, plan="ddp/mp", num_nodes=2)
    with pytest.raises(SpecError, match="task.plan: cannot parse plan"):
        load_task({"name": "t", "kind": "pretrain", "global_batch": 8, "plan": "fsdp"})
    with pytest.raises(SpecError, match="task.kind"):
        load_task({"name": "t", "kind": "pretrian", "global_batch": 8})


def test_batch_not_divisible_and_open_plan():
    with pytest.raises(PlanError, match="batch_not_divisible"):
        fastmodel.evaluate("llama2-70b", "dc-a", {"name": "t", "kind": "pretrain", "global_batch": 100},
                           plan="fsdp/ddp", num_nodes=16)
    with pytest.raises(SpecError, match="leaves the plan open"):
        fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain")


@pytest.mark.parametrize("kind", ["model", "system", "task"])
def test_json_schema(kind):
    schema = json_schema(kind)
    assert schema["$schema"].startswith("https://json-schema.org/")
    if kind == "model":  # one schema per family, chosen by "family"
        assert set(schema["discriminator"]["mapping"]) == {"llm", "llm-moe", "vit", "dlrm", "dlrm-moe", "dlrm-transformer"}
        schema = schema["$defs"]["DLRMSpec"]
    assert "properties" in schema
    json.dumps(schema)


def test_min_frozen_layer_zero_is_refused_for_families_without_layers():
    """0 is a value (it freezes every layer), not an absent field: a dlrm task that gives it is an error."""
    task = {"name": "t", "kind": "finetune", "global_batch": 2048, "freeze_emb": False, "min_frozen_layer": 0}
    with pytest.raises(SpecError, match="task.min_frozen_layer: does not apply to dlrm model"):
        fastmodel.evaluate("dlrm-a-small", "dc-a", task, plan="ddp/mp", num_nodes=2)


@pytest.mark.parametrize("kind, example", [("model", "llama3.1-70b"), ("system", "dgx-h100"), ("task", "llm-pretrain")])
def test_an_empty_spec_file_is_named_as_empty(tmp_path, kind, example):
    """An empty or comments-only file given as a model, system or task is one line naming the file (spec/loader.py
    _not_empty), not a pairing complaint about the other specs."""
    from fastmodel.spec.loader import resolve_source

    for name, text in (("empty.toml", ""), ("comments.toml", "# nothing yet\n"), ("empty.json", "{}")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(SpecError) as caught:
            resolve_source(str(path), kind)
        assert str(caught.value) == f"{path}: the file is empty: a {kind} spec needs its fields ('fastmodel specs " \
                                    f"show {example}' prints one)"


def test_a_yaml_spec_file_is_refused_by_its_format(tmp_path):
    """`-m model.yaml`: one line saying YAML is not read (it was 'invalid TOML' at the first colon)."""
    from fastmodel.spec.loader import read_file

    path = tmp_path / "model.yaml"
    path.write_text("name: x\nlayers: 80\n")
    with pytest.raises(SpecError, match=r"model.yaml: YAML is not read: write the spec as TOML \(.toml\) or JSON"):
        read_file(path)
