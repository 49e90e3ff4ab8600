"""Built-in specs: every one loads, and the MAD-Max ones give the paper's numbers.

The expected values are written here by hand from outside our code, so a wrong
field in a spec file (or a wrong formula) cannot agree with itself:

- models: docs/model.md §A.1, numbers computed with the reference
  implementation's own formulas, compared to the precision the table prints
  (half a unit in the last printed digit);
- systems: docs/model.md §A.2 (effective intra-node, inter-node and
  1-D allreduce bandwidth per GPU, GB/s), same precision rule; prices and node
  TDPs from the MAD-Max artifact's cloud instance table
  (shared/data/cloud_gpu_instances_madmax.csv), typed in, not parsed.
"""

from decimal import Decimal

import pytest

from fastmodel.engines import load_model, load_system, load_task
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.spec.loader import builtin_names

B, GF, TF, MB, GBps = 1e9, 1e9, 1e12, 1e6, 1e9


def near(text: str, scale: float):
    """pytest.approx for a printed table value: +- half a unit in its last digit."""
    value = Decimal(text.replace(",", ""))
    half_ulp = Decimal(5) * Decimal(10) ** (value.as_tuple().exponent - 1)
    return pytest.approx(float(value) * scale, abs=float(half_ulp) * scale * (1 + 1e-9))


# --- models (docs/model.md §A.1) -------------------------------------------
# name: (family, total params [B], dense params [B] or None where the table
#        gives none, forward FLOPs per sample, lookup bytes per sample [MB])
MODELS = {
    "dlrm-a": ("dlrm", "801.17", "0.319", ("0.638", GF), "11.55"),
    "dlrm-a-small": ("dlrm", "50.37", "0.319", ("0.638", GF), "11.55"),
    "dlrm-f": ("dlrm", "11,993", "0.003", ("0.005", GF), "0.655"),
    "dlrm-i": ("dlrm", "332.1", "0.030", ("0.060", GF), "6.595"),
    "dlrm-i-small": ("dlrm", "20.76", "0.030", ("0.060", GF), "6.595"),
    "dlrm-a-moe": ("dlrm-moe", "803.6", "2.712", ("0.957", GF), "11.55"),
    "dlrm-a-small-moe": ("dlrm-moe", "52.8", "2.712", ("0.957", GF), "11.55"),
    "dlrm-i-moe": ("dlrm-moe", "332.3", "0.255", ("0.090", GF), "6.595"),
    "dlrm-i-small-moe": ("dlrm-moe", "21.0", "0.255", ("0.090", GF), "6.595"),
    "dlrm-a-transformer": ("dlrm-transformer", "801.2", "0.332", ("2.651", GF), "11.55"),
    "dlrm-a-small-transformer": ("dlrm-transformer", "50.4", "0.332", ("2.651", GF), "11.55"),
    "dlrm-i-transformer": ("dlrm-transformer", "332.1", "0.043", ("2.073", GF), "6.595"),
    "dlrm-i-small-transformer": ("dlrm-transformer", "20.8", "0.043", ("2.073", GF), "6.595"),
    "gpt4-1.8t-moe": ("llm-moe", "1815.5", "1814.9", ("4505", TF), "350.7"),
    "vit-l": ("vit", "0.30", None, ("118.4", GF), "0.80"),
    "vit-h": ("vit", "0.08", None, ("30.8", GF), "1.00"),
    "vit-10b": ("vit", "10.07", None, ("5.15", TF), "5.2"),
    "vit-25b": ("vit", "25.49", None, ("13.05", TF), "7.9"),
    "vit-60b": ("vit", "60.41", None, ("30.92", TF), "10.5"),
    "vit-120b": ("vit", "120.8", None, ("61.85", TF), "10.5"),
    # the table gives DINOv2 lookups only as the range "0.3-1.2 MB" (S to g)
    "dinov2-s": ("vit", "0.02", None, ("8.3", GF), "0.3"),
    "dinov2-b": ("vit", "0.13", None, ("49.9", GF), None),
    "dinov2-l": ("vit", "0.30", None, ("118.4", GF), None),
    "dinov2-g": ("vit", "1.13", None, ("443.9", GF), "1.2"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_madmax_table(name):
    family, total, dense, (flops, flop_unit), lookup = MODELS[name]
    model = load_model(name)
    assert model.family == family
    assert model.total_params == near(total, B)
    if dense is not None:
        assert model.dense_params == near(dense, B)
    assert model.flops_per_sample == near(flops, flop_unit)
    if lookup is not None:
        assert model.lookup_bytes_per_sample == near(lookup, MB)
    else:
        assert 0.3 * MB <= model.lookup_bytes_per_sample <= 1.2 * MB


def test_model_shapes_kept_from_madmax():
    """Where MAD-Max's config differs from the public model, the spec keeps MAD-Max's value."""
    vit_h = load_model("vit-h")
    assert (vit_h.num_layers, vit_h.patch_size) == (4, 16)  # public ViT-H/14: 32 layers, patch 14
    assert load_model("dinov2-b").num_layers == 18  # public DINOv2 ViT-B/14: 12 layers
    assert {load_model(f"dinov2-{s}").patch_size for s in "sblg"} == {16}  # public: 14
    gpt4 = load_model("gpt4-1.8t-moe")
    assert (gpt4.num_layers, gpt4.num_experts, gpt4.num_active_experts, gpt4.seq_len) == (120, 16, 2, 8192)
    for name in ("dlrm-a-moe", "dlrm-a-small-moe", "dlrm-i-moe", "dlrm-i-small-moe"):
        moe = load_model(name)
        assert (moe.num_experts, moe.num_active_experts) == (16, 2)


# --- systems (docs/model.md §A.2 and the cloud instance table) -------------
# name: (GPUs per node, HBM GB, effective intra / inter / 1-D allreduce GB/s per GPU,
#        inter-node GB/s per GPU = bandwidth of one port, USD per GPU-hour, node TDP W)
SYSTEMS = {
    "cloud-a-v100-16gb": (8, 16, "67.5", "0.121", "9.99", 0.390625, 3.06, 5000),
    "cloud-a-v100-32gb": (8, 32, "67.5", "0.484", "10.30", 1.5625, 3.90125, 5000),
    "cloud-a-a100-40gb": (8, 40, "135.0", "1.94", "21.43", 6.25, 4.0975, 6500),
    "cloud-a-a100-80gb": (8, 80, "135.0", "1.94", "21.43", 6.25, 5.12125, 6500),
    "cloud-a-h100-80gb": (8, 80, "202.5", "15.5", "42.90", 50, 12.29, 10200),
    "cloud-b-v100-16gb": (4, 16, "0.23", "0.233", "0.23", 0.75, 3.365, 2500),
    "cloud-b-v100-32gb": (8, 32, "67.5", "0.484", "10.30", 1.5625, 2.75375, 5000),
    "cloud-b-a100-80gb-4": (4, 80, "0.56", "0.775", "0.74", 2.5, 3.6725, 3250),
    "cloud-b-a100-40gb": (8, 40, "135.0", "7.75", "26.39", 25, 3.4, 6500),
    # no reference config: derived from Cloud_B A100-40GB, so its table row applies
    "cloud-b-a100-80gb": (8, 80, "135.0", "7.75", "26.39", 25, 4.09625, 6500),
    "cloud-c-v100-16gb": (8, 16, "93.0", "0.484", "14.04", 1.5625, 2.48, 5000),
    "cloud-c-a100-40gb": (8, 40, "135.0", "0.484", "20.19", 1.5625, 3.67375, 6500),
    "cloud-c-a100-40gb-16": (16, 40, "135.0", "0.242", "19.98", 0.78125, 3.48375, 13000),
    # no reference config: derived from Cloud_C A100-40GB (8 per node), so its table row applies
    "cloud-c-a100-80gb": (8, 80, "135.0", "0.484", "20.19", 1.5625, 5.70875, 6500),
}


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_cloud_system_matches_madmax_table_and_instance_list(name):
    gpn, hbm_gb, intra, inter, allreduce, port_gbps, price, tdp = SYSTEMS[name]
    system = load_system(name)
    assert system.name == name
    assert system.devices_per_node == gpn
    assert system.device.hbm_capacity_bytes == hbm_gb * 1e9
    assert system.num_nodes > 1  # the allreduce value below is the multi-node blend
    assert system.intra_bandwidth == near(intra, GBps)
    assert system.inter_bandwidth == near(inter, GBps)
    assert system.allreduce_bandwidth == near(allreduce, GBps)
    # MAD-Max's cloud convention: one port per GPU, each at the instance's per-GPU network share
    assert system.network.num_ports == gpn
    assert system.network.port_bandwidth_bytes_per_s == pytest.approx(port_gbps * 1e9, rel=1e-12)
    assert system.price_usd_per_device_hour == price
    assert system.node_tdp_watts == tdp
    assert system.with_nodes(1).allreduce_bandwidth == system.intra_bandwidth


def test_cloud_systems_are_all_listed():
    assert {n for n in builtin_names("system") if n.startswith("cloud-")} == set(SYSTEMS)


# --- tasks -------------------------------------------------------------------
# name: (kind, plan or None if open, global batch)
TASKS = {
    "dlrm-pretrain": ("pretrain", "fsdp/mp", 65536),
    "dlrm-finetune": ("finetune", None, 65536),
    "dlrm-inference": ("inference", "ddp/mp", 65536),
    "dlrm-cloud-train": ("pretrain", None, 65536),
    "dlrm-moe-pretrain": ("pretrain", "tp,ddp/mp", 65536),
    "dlrm-transformer-pretrain": ("pretrain", "ddp/mp/ddp", 65536),
    "llm-moe-pretrain": ("pretrain", "tp,ddp/ddp", 2048),
    "vit-pretrain": ("pretrain", "fsdp/ddp", 2048),
    "vit-inference": ("inference", "fsdp/ddp", 2048),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task(name):
    kind, plan, global_batch = TASKS[name]
    task = load_task(name)
    assert (task.name, task.kind, task.plan, task.global_batch) == (name, kind, plan, global_batch)
    assert task.local_batch is None
    if plan is not None:
        assert task.parsed_plan == Plan.parse(plan)


def test_task_flags():
    finetune = load_task("dlrm-finetune")
    assert finetune.freeze_top_mlp and not (finetune.freeze_emb or finetune.freeze_bottom_mlp)
    assert load_task("dlrm-cloud-train").train_samples == 5e9


# --- everything ----------------------------------------------------------------

def test_every_builtin_loads_by_name():
    names = {kind: set(builtin_names(kind)) for kind in ("model", "system", "task")}
    assert set(MODELS) <= names["model"]
    assert set(SYSTEMS) <= names["system"]
    assert set(TASKS) <= names["task"]
    for name in names["model"]:
        load_model(name)
    for name in names["system"]:
        load_system(name)
    from fastmodel.errors import SpecError
    from fastmodel.madmax.spec.loader import load_task as load_madmax_task
    from fastmodel.serve.spec import ServeTaskSpec, load_serve_task

    for name in names["task"]:
        if name.startswith("serve-"):  # serving tasks (kind = "serve") belong to the serving engine
            assert load_serve_task(name).kind == "serve" and isinstance(load_task(name), ServeTaskSpec)
            with pytest.raises(SpecError, match="a serving task"):
                load_madmax_task(name)
        else:
            load_task(name)


#: a model of the right family for each built-in task, and a plan for tasks that leave it open
RUNS = {
    "dlrm-pretrain": ("dlrm-a", None), "dlrm-finetune": ("dlrm-i", "ddp/mp"), "dlrm-inference": ("dlrm-f", None),
    "dlrm-cloud-train": ("dlrm-a-small", "tp,ddp/mp"), "dlrm-moe-pretrain": ("dlrm-a-moe", None),
    "dlrm-transformer-pretrain": ("dlrm-a-transformer", None), "llm-moe-pretrain": ("gpt4-1.8t-moe", None),
    "vit-pretrain": ("vit-l", None), "vit-inference": ("dinov2-g", None),
}


@pytest.mark.parametrize("task", sorted(RUNS))
def test_every_new_task_runs_end_to_end(task):
    import math

    import fastmodel

    model, plan = RUNS[task]
    ds = fastmodel.evaluate(model, "dc-a", task, plan=plan, num_nodes=16)
    assert math.isfinite(ds.iteration_time.item()) and ds.iteration_time.item() > 0
    assert ds.global_batch.item() == load_task(task).global_batch
