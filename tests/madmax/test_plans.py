"""Plan parsing, legality rules and the enumerator."""

import itertools

import pytest

from fastmodel.errors import PlanError
from fastmodel.madmax.parallel.plans import Level, Plan, enumerate_plan_shapes, enumerate_plans, plan_factors
from fastmodel.madmax.parallel.rules import check_plan


def test_parse_and_label_round_trip():
    plan = Plan.parse("tp8,ddp16/mp128")
    assert plan.dense == (Level("tp", 8), Level("ddp", 16))
    assert plan.emb == (Level("mp", 128),)
    assert plan.label == "tp8,ddp16/mp128"
    assert plan.shape == "tp,ddp/mp"
    assert Plan.parse(plan.label) == plan


def test_omitted_degrees_resolve_to_node_and_rest():
    plan = Plan.parse("tp,ddp/mp").resolve(num_devices=128, devices_per_node=8)
    assert plan.label == "tp8,ddp16/mp128"
    assert Plan.parse("fsdp/ddp").resolve(2048, 8).label == "fsdp2048/ddp2048"
    assert Plan.parse("tp,ddp16/mp").resolve(128, 8).label == "tp8,ddp16/mp128"


@pytest.mark.parametrize("text", ["", "tp8", "tp8/", "/mp8", "tp-8/mp8", "tp8;ddp2/mp16", 42])
def test_unparseable_plans(text):
    with pytest.raises(PlanError) as info:
        Plan.parse(text)
    assert info.value.rule == "syntax"


@pytest.mark.parametrize(
    "text, rule",
    [
        ("tp8,tp16/mp128", "repeat"),
        ("ddp8,fsdp16/mp128", "fsdp_not_first"),
        ("tp128,ddp1/mp128", "degree_le_1"),
        ("tp64/mp128", "product_ne_devices"),
        ("tp2,pp4,ddp16/mp128", "more_than_2_levels"),
        ("tp4,ddp32/mp128", "first_degree"),
        ("zp128/mp128", "unknown_strategy_dense"),
        ("tp128/tp128", "unknown_strategy_emb"),
        ("tp128/mp64", "product_ne_devices"),
    ],
)
def test_each_rule(text, rule):
    with pytest.raises(PlanError) as info:
        check_plan(Plan.parse(text), num_devices=128, devices_per_node=8)
    assert info.value.rule == rule
    assert rule in str(info.value)


def test_unknown_strategy_suggests_nearest():
    with pytest.raises(PlanError, match="did you mean 'fsdp'"):
        check_plan(Plan.parse("fsdq128/mp128"), 128, 8)


def test_factors():
    f = plan_factors(Plan.parse("fsdp8,ddp16/mp128").dense)
    assert (f.duplicate, f.shard, f.tp_degree) == (128, 8, 1)
    f = plan_factors(Plan.parse("tp8,pp16/mp128").dense)
    assert (f.duplicate, f.shard, f.tp_degree) == (1, 128, 8)


def _all_candidate_plans(num_devices, per_node):
    """Brute force: every plan of <= 2 levels over all strategies and divisors."""
    divisors = [d for d in range(1, num_devices + 1) if num_devices % d == 0]
    dense_strats, emb_strats = ["ddp", "fsdp", "tp", "pp"], ["ddp", "mp"]

    def sides(strats):
        for n in (1, 2):
            for names in itertools.product(strats, repeat=n):
                for degrees in itertools.product(divisors, repeat=n):
                    yield tuple(Level(s, d) for s, d in zip(names, degrees))

    emb_sides = list(sides(emb_strats))
    for dense in sides(dense_strats):
        for emb in emb_sides:
            yield Plan(dense, emb)


@pytest.mark.parametrize("nodes, per_node", [(1, 8), (2, 8), (4, 4), (16, 1), (3, 4), (1, 1)])
def test_enumerator_produces_every_legal_plan_once(nodes, per_node):
    n = nodes * per_node
    produced = enumerate_plans(nodes, per_node)
    labels = [p.label for p in produced]
    assert len(labels) == len(set(labels))
    for plan in produced:
        check_plan(plan, n, per_node)
    legal = set()
    for plan in _all_candidate_plans(n, per_node):
        try:
            check_plan(plan, n, per_node)
        except PlanError:
            continue
        legal.add(plan.label)
    assert set(labels) == legal


def test_counts_on_a_multi_node_cluster():
    shapes = enumerate_plan_shapes(16, 8)
    dense = {s.shape.split("/")[0] for s in shapes}
    emb = {s.shape.split("/")[1] for s in shapes}
    assert len(dense) == 13 and len(emb) == 4 and len(shapes) == 52
