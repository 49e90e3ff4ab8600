"""A plan is a device mesh (issue 9 item 5): axes, roles, factors, round trips, written out by hand."""

import numpy as np
import pytest

import fastmodel
from fastmodel.errors import PlanError
from fastmodel.kernels.madmax.layout import COLUMNS
from fastmodel.lm.sweep import parse_mesh
from fastmodel.madmax.lowering.config import param_row, resolve
from fastmodel.madmax.parallel.mesh import (
    DEVICE,
    NODE,
    REPLICATE,
    REPLICATE_SHARD,
    SHARD,
    Axis,
    Factors,
    Mesh,
    Use,
    implied_degrees,
    lm_mesh,
)
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.madmax.spec.loader import load_model, load_system, load_task
from fastmodel.semantics import get_semantics


def test_two_level_dense_one_level_emb_on_128_devices():
    mesh = Plan.parse("tp,ddp/mp").to_mesh(128, 8)
    assert mesh == Mesh(
        axes=(Axis(DEVICE, 8), Axis(NODE, 16)),
        components=(("dense", (Use("tp", (DEVICE,), 8), Use("ddp", (NODE,), 16))),
                    ("emb", (Use("mp", (DEVICE, NODE), 128),))),
    )
    assert mesh.num_devices == 128
    assert mesh.roles("dense") == {DEVICE: SHARD, NODE: REPLICATE}
    assert mesh.roles("emb") == {DEVICE: SHARD, NODE: SHARD}
    # ddp16 copies the tp8-sharded layers: 16 replicas of 8 shards
    assert mesh.factors("dense") == Factors(duplicate=16, shard=8, tp_degree=8)
    assert mesh.factors("emb") == Factors(duplicate=1, shard=128, tp_degree=1)
    assert mesh.label == "tp8,ddp16/mp128"


def test_fsdp_spans_all_devices_and_both_replicates_and_shards():
    mesh = Plan.parse("fsdp/ddp").to_mesh(2048, 8)
    assert mesh.axes == (Axis(DEVICE, 8), Axis(NODE, 256))
    assert mesh.uses("dense") == (Use("fsdp", (DEVICE, NODE), 2048),)
    assert mesh.roles("dense") == {DEVICE: REPLICATE_SHARD, NODE: REPLICATE_SHARD}
    assert mesh.roles("emb") == {DEVICE: REPLICATE, NODE: REPLICATE}
    assert mesh.factors("dense") == Factors(2048, 2048, 1)
    assert mesh.factors("emb") == Factors(2048, 1, 1)


def test_two_level_embeddings_and_pipeline():
    mesh = Plan.parse("pp4,ddp/mp4,ddp").to_mesh(16, 4)
    assert mesh.degrees("dense") == (4, 4) and mesh.strategies("dense") == ("pp", "ddp")
    assert mesh.roles("emb") == {DEVICE: SHARD, NODE: REPLICATE}
    assert mesh.factors("dense") == Factors(4, 4, 1)
    assert mesh.factors("emb") == Factors(4, 4, 1)


def test_three_components_of_dlrm_transformer():
    mesh = Plan.parse("ddp/mp/tp,ddp").to_mesh(32, 8)
    assert mesh.component_names == ("dense", "emb", "transformer")
    assert mesh.uses("transformer") == (Use("tp", (DEVICE,), 8), Use("ddp", (NODE,), 4))
    assert mesh.factors("transformer") == Factors(4, 8, 8)
    assert mesh.label == "ddp32/mp32/tp8,ddp4"


def test_single_node_has_a_node_axis_of_one():
    mesh = Plan.parse("tp/mp").to_mesh(8, 8)
    assert mesh.axes == (Axis(DEVICE, 8), Axis(NODE, 1))
    assert mesh.uses("dense") == (Use("tp", (DEVICE, NODE), 8),)


@pytest.mark.parametrize("text, n, per_node", [
    ("tp8,ddp16/mp128", 128, 8), ("fsdp/ddp", 2048, 8), ("tp,ddp/mp,ddp", 64, 4), ("ddp/mp/fsdp", 16, 8),
    ("pp,tp/ddp", 32, 8),
])
def test_round_trip_to_the_plan_label(text, n, per_node):
    resolved = Plan.parse(text).resolve(n, per_node)
    mesh = Plan.parse(text).to_mesh(n, per_node)
    assert Plan.from_mesh(mesh) == resolved
    assert Plan.parse(mesh.label) == resolved
    assert Plan.parse(mesh.label).to_mesh(n, per_node) == mesh


@pytest.mark.parametrize("text, rule", [("tp4,ddp32/mp128", "first_degree"), ("tp8,tp16/mp128", "repeat"),
                                        ("tp,ddp3/mp", "product_ne_devices")])
def test_an_illegal_plan_has_no_mesh(text, rule):
    with pytest.raises(PlanError) as info:
        Plan.parse(text).to_mesh(128, 8)
    assert info.value.rule == rule


def test_implied_degrees_scalar_and_vectorized():
    assert implied_degrees([None, None], 128, 8, 16) == [8, 16]
    assert implied_degrees([None], 128, 8, 16) == [128]
    assert implied_degrees([None, 4], 128, 8, 16) == [32, 4]
    assert implied_degrees([3, None], 128, 8, 16) == [3, 0]  # 3 does not divide 128: nothing to imply
    nodes = np.array([1, 2, 3])
    first, second = implied_degrees([None, 4], nodes * 8, 8, nodes)
    assert first.tolist() == [2, 4, 6] and second == 4
    first, second = implied_degrees([16, None], nodes * 8, 8, nodes)
    assert first == 16 and second.tolist() == [0, 1, 0]


def test_a_resolved_config_carries_its_mesh_and_the_table_reads_the_same_degrees():
    config = resolve(load_model("gpt3-175b"), load_system("dc-a", num_nodes=4), load_task("llm-pretrain"),
                     get_semantics("madmax"), "tp,ddp/ddp")
    assert config.mesh == Plan.parse("tp8,ddp4/ddp32").to_mesh(32, 8)
    assert config.local_dense_batch == 2048 // 4 and config.local_emb_batch == 2048 // 32
    row = param_row(config)
    column = {name: row[i] for i, name in enumerate(COLUMNS)}
    assert (column["dense_degree0"], column["dense_degree1"]) == config.mesh.degrees("dense")
    assert (column["emb_degree0"], column["emb_degree1"]) == (32, 1)


def test_evaluate_still_takes_plan_strings():
    ds = fastmodel.evaluate("gpt3-175b", "dc-a", "llm-pretrain", plan="tp,ddp/mp", num_nodes=2, semantics="madmax")
    assert ds.iteration_time.item() > 0


def test_real_world_plan_on_the_same_mesh_type():
    # tp8 x pp4 x cp2 x ep8 on 1024 GPUs: dp = 1024 / (8 * 4 * 2) = 16, of which ep8 carries experts
    mesh = lm_mesh(parse_mesh("tp8.pp4.cp2.ep8"), 1024)
    assert mesh.axes == (Axis("tp", 8), Axis("cp", 2), Axis("ep", 8), Axis("pp", 4), Axis("dp", 2))
    assert mesh.num_devices == 1024
    assert mesh.roles("layers") == {"tp": SHARD, "cp": SHARD, "ep": REPLICATE, "pp": SHARD, "dp": REPLICATE}
    assert mesh.roles("experts") == {"tp": SHARD, "cp": SHARD, "ep": SHARD, "pp": SHARD, "dp": REPLICATE}
    assert mesh.factors("layers").duplicate == 16   # the real-world model's dp
    assert mesh.factors("experts").duplicate == 2
    assert mesh.label == "tp8.pp4.cp2.ep8"
    dense = lm_mesh(parse_mesh("tp4"), 64, sharded_states=True)
    assert dense.component_names == ("layers",) and dense.label == "tp4"
    assert dense.roles("layers")["dp"] == REPLICATE_SHARD and dense.factors("layers") == Factors(16, 64, 4)
    with pytest.raises(ValueError):
        lm_mesh(parse_mesh("tp8.pp3"), 64)


@pytest.mark.parametrize("nodes, per_node", [(1, 8), (4, 8), (16, 8), (3, 4)])
def test_cost_kernel_factors_equal_the_mesh_on_every_plan(nodes, per_node):
    """kernels/costs.plan_factors (the numba twin the cost kernel reads) and Mesh.factors agree on every
    legal plan of the cluster, every component (duplicate, shard, tp degree)."""
    from fastmodel.kernels.madmax.costs import plan_factors as kernel_factors
    from fastmodel.madmax.engine import strategy_codes
    from fastmodel.madmax.parallel.plans import enumerate_plans

    interpreted = getattr(kernel_factors, "py_func", kernel_factors)   # a plain function under FASTMODEL_JIT=0
    plans = enumerate_plans(nodes, per_node, transformer=True)
    assert plans
    for plan in plans:
        mesh = plan.to_mesh(nodes * per_node, per_node)
        for name, levels in plan.components:
            degrees = mesh.degrees(name)
            dup, shard, tp, _, _ = interpreted(strategy_codes(tuple(lv.strategy for lv in levels)),
                                               len(levels), float(degrees[0]),
                                               float(degrees[1]) if len(degrees) > 1 else 1.0)
            expected = mesh.factors(name)
            assert (dup, shard, tp) == (expected.duplicate, expected.shard, expected.tp_degree), (plan.label, name)
