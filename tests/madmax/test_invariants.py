"""Table-driven invariants over family x plan shape x task kind x semantics (docs/model.md §7).

Each row sweeps one built-in model of a family under one task kind over every
plan shape (``plan = "all"``), three cluster sizes and two global batches, so
the grid holds legal points of every shape and illegal ones of several kinds
(2-D plans on one node, a batch that does not divide over the replicas). The
sweep must not raise; illegal points must keep a status code and NaN; every
legal point must satisfy the invariants of :mod:`fastmodel.testing`.
"""

import numpy as np
import pytest

import fastmodel
from fastmodel.io.batch import run_batch
from fastmodel.madmax.engine import evaluate_configs
from fastmodel.madmax.lowering.params import STATUS, STATUS_NAMES
from fastmodel.testing import assert_invariants, dev_cases, invariant_violations

#: family -> built-in model (small members, so a row stays fast)
MODELS = {
    "llm": "llama-7b",
    "llm-moe": "gpt4-1.8t-moe",
    "vit": "vit-l",
    "dlrm": "dlrm-a-small",
    "dlrm-moe": "dlrm-a-small-moe",
    "dlrm-transformer": "dlrm-a-small-transformer",
}
#: family -> extra axes (GPT-4 1.8T fits no 32-GPU cluster: keep 6 of its 120 layers)
EXTRA_AXES = {"llm-moe": {"num_layers": [6]}}

#: family -> finetune freezes (partial: something trains, something does not)
FINETUNE = {
    "llm": {"freeze_emb": True, "min_frozen_layer": 16},
    "llm-moe": {"freeze_emb": True, "min_frozen_layer": 3},
    "vit": {"freeze_dense": True},
    "dlrm": {"freeze_top_mlp": True},
    "dlrm-moe": {"freeze_bottom_mlp": True, "freeze_emb": True},
    "dlrm-transformer": {"freeze_dense": True, "freeze_bottom_mlp": True},
}

KINDS = ("pretrain", "finetune", "inference")
#: 8, 16 and 32 devices of dc-a: one node admits only 1-D plans
NODES = [1, 2, 4]
#: 40 does not divide over 16 or 32 replicas
BATCHES = [64, 40]

ROWS = [(family, kind, semantics) for family in MODELS for kind in KINDS for semantics in ("madmax", "default")]


def task(family: str, kind: str) -> dict:
    spec = {"name": f"{family}-{kind}", "kind": kind, "global_batch": 64}
    if kind == "finetune":
        spec.update(FINETUNE[family])
    return spec


@pytest.mark.parametrize("family, kind, semantics", ROWS, ids=["-".join(row) for row in ROWS])
def test_invariants_over_every_plan_shape(family, kind, semantics):
    ds = fastmodel.sweep(model=MODELS[family], system="dc-a", task=task(family, kind), semantics=semantics,
                         axes={"num_nodes": NODES, "global_batch": BATCHES, "plan": "all", **EXTRA_AXES.get(family, {})})
    status = ds.status.values
    assert set(np.unique(status)) <= set(range(len(STATUS_NAMES)))
    ok = status == STATUS["ok"]
    assert ok.sum() >= 8, f"too few legal points to test: {np.bincount(status.ravel())}"
    # illegal points stay in the grid with their reason, never a value
    assert (status == STATUS["first_degree"]).any() or (status == STATUS["degree_le_1"]).any()
    assert (status == STATUS["batch_not_divisible"]).any()
    assert np.isnan(ds.iteration_time.values[~ok]).all()
    # every plan shape of the grid is legal somewhere (plan = "all" keeps only such shapes); a degree the
    # model cannot use (default semantics: pp above its layers, tp above its heads) limits the model, not the shape
    legal = ok | np.isin(status, [STATUS["does_not_fit"], STATUS["pp_gt_layers"], STATUS["tp_gt_heads"]])
    others = tuple(i for i, dim in enumerate(ds.status.dims) if dim != "plan")
    assert legal.any(axis=others).all()
    assert_invariants(ds, f"{MODELS[family]} {kind} {semantics}")
    if kind == "inference":  # forward only: no barrier, the forward pass is the iteration
        np.testing.assert_array_equal(ds.forward_time.values[ok], ds.iteration_time.values[ok])
    else:
        assert (ds.forward_time.values[ok] < ds.iteration_time.values[ok]).all()


def test_invariants_hold_on_every_reference_case():
    configs = [fastmodel.make_config(c["model"], c["system"], c["task"], "madmax") for c in dev_cases()]
    assert_invariants(evaluate_configs(configs), "reference cases")


def test_invariants_hold_for_a_single_evaluation_and_batch_records():
    ds = fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain-fsdp", num_nodes=256)
    assert_invariants(ds, "evaluate")
    lines = ['{"model": "dlrm-a", "system": "dc-a", "task": "dlrm-pretrain", "num_nodes": 16}',
             '{"model": "dlrm-a", "system": "dc-a", "task": "dlrm-pretrain", "plan": "ddp,fsdp/mp"}']
    records = list(run_batch(lines))
    assert records[0]["status"] == "ok" and records[1]["status"].startswith("error")
    assert_invariants(records[0], "batch")


def test_invariant_checker_catches_broken_results():
    """The checker itself: each hand-broken record trips the invariant it breaks, and only reports broken ones. The
    record gives the step time under its older name (iteration_time, an alias): the checker reads it as step_time."""
    good = {"iteration_time": 10.0, "throughput": 6.4, "global_batch": 64.0, "forward_time": 4.0,
            "time_gemm": 6.0, "time_emb": 1.0, "time_all2all": 0.0, "time_allreduce": 2.0, "time_allgather": 3.0,
            "time_reducescatter": 1.0, "time_compute": 7.0, "time_comm": 6.0, "exposed_comm": 3.0,
            "overlapped_comm": 3.0, "weight_memory_dense": 2.0, "weight_memory_emb": 1.0, "weight_memory": 3.0,
            "memory_per_device": 9.0, "hbm_capacity": 40.0, "fits_memory": 1.0, "num_compute_ops": 5.0,
            "num_comm_ops": 4.0}
    assert invariant_violations(good) == []
    broken = {
        "throughput x step_time": {"throughput": 6.5},
        "exposed_comm = step_time - time_compute": {"exposed_comm": 2.5, "overlapped_comm": 3.5},
        "time_comm = sum": {"time_comm": 6.5, "overlapped_comm": 3.5},
        "step_time <= time_compute + time_comm": {"iteration_time": 14.0, "exposed_comm": 7.0,
                                                         "overlapped_comm": -1.0, "throughput": 64 / 14},
        "0 < forward_time": {"forward_time": 11.0},
        "fits_memory": {"fits_memory": 0.0},
    }
    for name, change in broken.items():
        violations = invariant_violations({**good, **change})
        assert any(v.startswith(name) for v in violations), (name, violations)
    with pytest.raises(AssertionError, match="throughput x step_time"):
        assert_invariants({**good, "throughput": 1.0})
