"""MAD-Max plan legality is one rule table (issue 9 item 5): every rule fires as a status code in
``param_table`` and as a PlanError of the same name from the single-config check, and on random grids
the vectorized statuses equal the single-config outcome row by row."""

import itertools

import numpy as np
import pytest

from fastmodel.errors import PlanError
from fastmodel.madmax.lowering.config import resolve
from fastmodel.madmax.lowering.params import param_table, rule_inputs
from fastmodel.madmax.parallel.plans import Level, Plan, enumerate_plan_shapes
from fastmodel.madmax.parallel.rules import ROW_RULES, SHAPE_RULES, check_plan_shape, check_rows, shape_failure
from fastmodel.madmax.spec.loader import load_model, load_system, load_task
from fastmodel.registry.madmax import STATUS
from fastmodel.semantics import get_semantics

MADMAX, DEFAULT = get_semantics("madmax"), get_semantics("default")


def llm(layers=8, heads=8):
    return load_model({"family": "llm", "name": "tiny", "num_layers": layers, "hidden": 1024, "ffn_hidden": 4096,
                       "num_heads": heads, "seq_len": 1024, "vocab_size": 1000, "bytes_per_dense_param": 2,
                       "bytes_per_emb_param": 2})


def dlrm(bottom=4, top=4):
    return load_model({"family": "dlrm", "name": "tiny-dlrm", "num_bottom_layers": bottom, "num_top_layers": top,
                       "mlp_dim": 256, "num_tables": 8, "rows_per_table": 1000, "emb_dim": 64, "pooling": 4.0,
                       "bytes_per_dense_param": 4, "bytes_per_emb_param": 2})


def task(global_batch=None, dense=None, emb=None):
    spec = {"name": "t", "kind": "pretrain"}
    if global_batch is not None:
        spec["global_batch"] = global_batch
    else:
        spec["local_batch"] = {"dense": dense, "emb": emb}
    return load_task(spec)


#: rule -> (model, nodes of dc-a (8 devices each), task, plan, semantics); each breaks that rule first
ROW_CASES = {
    "tp_odd_layers": (dlrm(bottom=3), 2, task(64), "tp/mp", MADMAX),
    "product_ne_devices": (llm(), 2, task(64), "tp,ddp3/mp", MADMAX),   # 3 does not divide 16: no level 0
    "degree_le_1": (llm(), 2, task(64), "tp16,ddp1/mp", MADMAX),
    "first_degree": (llm(), 2, task(64), "tp4,ddp4/mp", MADMAX),
    "pp_gt_layers": (llm(layers=4), 2, task(64), "pp,ddp/mp", DEFAULT),   # pp8 over 4 layers
    "tp_gt_heads": (llm(heads=4), 2, task(64), "tp,ddp/mp", DEFAULT),     # tp8 over 4 heads
    "batch_not_divisible": (llm(), 2, task(12), "fsdp/mp", MADMAX),       # 12 samples over 16 replicas
    "global_batch_mismatch": (llm(), 2, task(dense=4, emb=2), "tp,ddp/ddp", MADMAX),  # 4 x 2 vs 2 x 16
}


def _single_rule(model, nodes, task_spec, plan, semantics):
    try:
        resolve(model, load_system("dc-a", num_nodes=nodes), task_spec, semantics, plan)
    except PlanError as error:
        return error.rule
    return "ok"


@pytest.mark.parametrize("rule", sorted(ROW_CASES))
def test_each_row_rule_fires_as_status_and_as_plan_error(rule):
    model, nodes, task_spec, plan, semantics = ROW_CASES[rule]
    system = load_system("dc-a", num_nodes=nodes)
    _, status = param_table(model, system, task_spec, Plan.parse(plan), semantics=semantics)
    assert status.tolist() == [STATUS[rule]]
    assert _single_rule(model, nodes, task_spec, plan, semantics) == rule


def test_a_product_rule_also_fires_on_explicit_degrees():
    assert _single_rule(llm(), 2, task(64), "tp8/mp16", MADMAX) == "product_ne_devices"


def test_devices_not_divisible_fires_where_a_device_count_is_swept():
    """The only row rule a spec alone cannot break: a num_devices axis that is no multiple of the node."""
    model, system, spec, plan = llm(), load_system("dc-a"), task(64), Plan.parse("tp/mp")
    values = {"system.num_devices": np.array([12, 16])}
    _, status = param_table(model, system, spec, plan, values, shape=(2,), semantics=MADMAX)
    assert status.tolist() == [STATUS["devices_not_divisible"], 0]
    with pytest.raises(PlanError) as info:
        check_rows(rule_inputs(model, system, spec, plan, MADMAX, {"system.num_devices": 12}))
    assert info.value.rule == "devices_not_divisible" and "12 devices" in info.value.reason


def test_every_row_rule_has_a_case():
    assert {rule.name for rule in ROW_RULES} == {*ROW_CASES, "devices_not_divisible"}


#: shape rule -> (plan, family); each breaks that rule first
SHAPE_CASES = {
    "components": ("ddp/mp/fsdp", "llm"),
    "empty": (Plan((Level("ddp"),), ()), "llm"),
    "unknown_strategy_dense": ("zp/mp", "llm"),
    "unknown_strategy_emb": ("tp/tp", "llm"),
    "repeat": ("tp,tp/mp", "llm"),
    "fsdp_not_first": ("ddp,fsdp/mp", "llm"),
    "more_than_2_levels": ("tp2,pp2,ddp4/mp", "llm"),
}


@pytest.mark.parametrize("rule", sorted(SHAPE_CASES))
def test_each_shape_rule_fires_per_plan_and_from_resolve(rule):
    plan, family = SHAPE_CASES[rule]
    plan = Plan.parse(plan) if isinstance(plan, str) else plan
    with pytest.raises(PlanError) as info:
        check_plan_shape(plan, family)
    assert info.value.rule == rule
    assert _single_rule(llm(), 2, task(64), plan, MADMAX) == rule


def test_every_shape_rule_has_a_case():
    names = {rule.name for rule in SHAPE_RULES}
    assert {"unknown_strategy_dense" if n == "unknown_strategy" else n for n in names} | {"unknown_strategy_emb"} \
        == set(SHAPE_CASES)


def test_the_first_broken_rule_wins_in_table_order():
    # odd DLRM layers and a bad level 0: the family rule comes first, in a sweep row as in one config
    model, spec = dlrm(bottom=3), task(64)
    _, status = param_table(model, load_system("dc-a", num_nodes=2), spec, Plan.parse("tp4,ddp4/mp"), semantics=MADMAX)
    assert status.tolist() == [STATUS["tp_odd_layers"]]
    assert _single_rule(model, 2, spec, "tp4,ddp4/mp", MADMAX) == "tp_odd_layers"
    # dense breaks first_degree, emb degree_le_1: components in plan order
    assert _single_rule(llm(), 2, task(64), "tp4,ddp4/mp16,ddp1", MADMAX) == "first_degree"


def _random_plans(rng, count, transformer=False):
    shapes = enumerate_plan_shapes(2, 2, transformer)
    plans = []
    while len(plans) < count:
        shape = shapes[rng.integers(len(shapes))]
        parts = []
        for _, levels in shape.components:
            parts.append(tuple(Level(lv.strategy, None if rng.random() < 0.5 else int(rng.choice([1, 2, 3, 4, 8, 16, 32])))
                               for lv in levels))
        plan = Plan(*parts)
        if shape_failure(plan) is None:
            plans.append(plan)
    return plans


NODES = np.array([1, 2, 3, 4])


@pytest.mark.parametrize("seed", [0, 1])
def test_vectorized_statuses_equal_single_configs_on_a_random_llm_grid(seed):
    rng = np.random.default_rng(seed)
    batches, layers, heads = np.array([6, 8, 64, 96]), np.array([2, 8, 96]), np.array([4, 64])
    plans = [*_random_plans(rng, 6), Plan.parse("tp,ddp/mp"), Plan.parse("pp,tp/ddp,mp"), Plan.parse("tp/mp")]
    for plan, semantics in itertools.product(plans, (MADMAX, DEFAULT)):
        values = {"system.num_nodes": NODES[:, None, None, None], "task.global_batch": batches[None, :, None, None],
                  "model.num_layers": layers[None, None, :, None], "model.num_heads": heads[None, None, None, :]}
        shape = (len(NODES), len(batches), len(layers), len(heads))
        _, status = param_table(llm(), load_system("dc-a"), task(64), plan, values, shape, semantics)
        grid = status.reshape(shape)
        for index in itertools.product(*(range(k) for k in shape)):
            i, j, k, m = index
            single = _single_rule(llm(layers=int(layers[k]), heads=int(heads[m])), int(NODES[i]), task(int(batches[j])),
                                  plan, semantics)
            assert single == ("ok" if grid[index] == 0 else _name(grid[index])), (plan.label, semantics.name, index)


def test_vectorized_statuses_equal_single_configs_on_a_dlrm_grid_with_local_batches():
    rng = np.random.default_rng(7)
    bottoms, dense, emb = np.array([3, 4]), np.array([2, 4, 8]), np.array([1, 2, 16])
    for plan in _random_plans(rng, 8):
        values = {"system.num_nodes": NODES[:, None, None, None], "model.num_bottom_layers": bottoms[None, :, None, None],
                  "task.local_batch.dense": dense[None, None, :, None], "task.local_batch.emb": emb[None, None, None, :]}
        shape = (len(NODES), len(bottoms), len(dense), len(emb))
        _, status = param_table(dlrm(), load_system("dc-a"), task(dense=2, emb=1), plan, values, shape, DEFAULT)
        grid = status.reshape(shape)
        for index in itertools.product(*(range(k) for k in shape)):
            i, j, k, m = index
            single = _single_rule(dlrm(bottom=int(bottoms[j])), int(NODES[i]), task(dense=int(dense[k]), emb=int(emb[m])),
                                  plan, DEFAULT)
            assert single == ("ok" if grid[index] == 0 else _name(grid[index])), (plan.label, index)


def _name(code):
    return next(name for name, value in STATUS.items() if value == code)
