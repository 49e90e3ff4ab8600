"""vp "unknown" resolved at each point's own pp (issue 26; docs/model.md §11.8 "vp = unknown").

A run record resolves ``vp = "unknown"`` by its stack's rule at its own pp (``records.record_specs``). A single run
(``point_columns``: ``fastmodel run``, ``fastmodel.evaluate``) and a sweep resolved it on the trivial mesh (pp = 1)
before the plan was applied, so Meta's rule, (layers + 2) / pp where pp divides layers + 2 (Llama 3 paper sec.
3.3.2), never applied there and TorchTitan's fallback gave vp 2 at every pp. Llama 3.1 405B (126 layers) on 48
nodes of 8 H100s, tp 8: pp 4, 8, 16 give (126 + 2) / pp = 32, 16, 8 by hand; pp 3 and 6 do not divide 128 and take
the fallback, 2. Interpreted kernels (FASTMODEL_JIT=0) or the existing compiled entry points, no new signature.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastmodel.errors import PlanError
from fastmodel.lm.api import column_values
from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
from fastmodel.lm.records import lower_record
from fastmodel.lm.sweep import lm_sweep, parse_mesh, point_columns
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import STATUSES

MODEL, SYSTEM, NODES, BATCH = "llama3.1-405b", "dgx-h100", 48, 768
META = {"framework": "Meta internal", "vp": "unknown"}
#: pp -> the vp the rule gives by hand: (126 + 2) / pp, or TorchTitan's 2 where pp does not divide 128
BY_HAND = {3: 2, 4: 32, 6: 2, 8: 16, 16: 8}
PLANS = [f"tp8.pp{pp}" for pp in BY_HAND]


def _single(plan: str, execution: dict = META, model=MODEL) -> np.ndarray:
    return point_columns(model, SYSTEM, plan=plan, execution=execution, num_nodes=NODES, global_batch=BATCH)


def _single_result(plan: str, execution: dict = META, model=MODEL) -> tuple[str, float]:
    """(status name, step time) of one configuration as ``fastmodel run`` evaluates it."""
    try:
        columns = _single(plan, execution, model)
    except PlanError as error:
        return error.rule, float("nan")
    return "ok", float(column_values(columns, plan)["step_time"])


@pytest.mark.parametrize("pp", sorted(BY_HAND))
def test_a_single_run_takes_the_rule_at_its_own_pp(pp):
    """The vp column is the rule's at the plan's pp; the stages of the stack's own split are uneven where pp x vp
    does not divide the layers (126 at pp x vp = 128: the embedding and the loss take the two other slots) or the
    126 + 2 slots Megatron-Core divides with the embedding and the loss in the split (pp 3 x vp 2 = 6: 126 / 6 is
    whole, 128 / 6 is not; ``execution.with_uneven_stages``), as the record path reads them."""
    columns = _single(f"tp8.pp{pp}")
    assert columns[C["vp"]] == BY_HAND[pp]
    assert columns[C["uneven_stages"]] == (1.0 if 126 % (pp * BY_HAND[pp]) or 128 % (pp * BY_HAND[pp]) else 0.0)
    assert columns[C["schedule_stated"]] == 0.0


def _record(plan: str) -> dict:
    """The run record of the same point: Llama 3 405B's shape, Meta internal, vp "unknown"."""
    mesh = parse_mesh(plan)
    lm, cluster = load_lm_model(MODEL), load_cluster(SYSTEM, NODES)
    dp = NODES * 8 // (mesh["tp"] * mesh["pp"])
    block = load_execution({}).plan_block(tp=mesh["tp"], pp=mesh["pp"], cp=1, ep=1, dp=dp, global_batch=BATCH)
    block.update(vp="unknown", micro_batch=1)
    return {"id": "point", "framework": "Meta internal", "model": lm.record_block(),
            "system": cluster.record_block(), "plan": block}


@pytest.mark.parametrize("plan", PLANS)
def test_a_single_run_lowers_the_pipeline_columns_the_record_path_lowers(plan):
    record = lower_record(_record(plan)).columns
    single = _single(plan)
    for name in ("vp", "uneven_stages", "pipeline_schedule", "schedule_stated", "embedding_loss_in_split"):
        assert single[C[name]] == record[C[name]], (plan, name)


def test_the_rule_s_vp_is_the_stated_vp_with_uneven_stages():
    """At pp 4 the run is the one that states vp 32 and uneven stages: the same step time."""
    stated = {**META, "vp": 32, "uneven_stages": True}
    assert _single_result("tp8.pp4") == _single_result("tp8.pp4", stated)
    assert _single_result("tp8.pp4")[0] == "ok"


def _statuses(ds, **at) -> tuple[str, float]:
    point = ds.sel(**at)
    return STATUSES[int(point.status)].name, float(point.step_time)


def _same(got: tuple[str, float], want: tuple[str, float], where) -> None:
    assert got[0] == want[0], (where, got, want)
    assert (np.isnan(got[1]) and np.isnan(want[1])) or got[1] == pytest.approx(want[1], rel=1e-12), (where, got, want)


def test_a_sweep_over_plans_agrees_with_single_runs_at_each_pp():
    ds = lm_sweep(MODEL, SYSTEM, axes={"plan": PLANS}, execution=META, num_nodes=NODES, global_batch=BATCH)
    for plan in PLANS:
        _same(_statuses(ds, plan=plan), _single_result(plan), plan)
    assert _statuses(ds, plan="tp8.pp4")[0] == "ok"


def test_a_sweep_over_a_pp_axis_agrees_with_single_runs_at_each_pp():
    """A degree axis (no plan axis): ``pp`` beside ``tp``, the same points."""
    ds = lm_sweep(MODEL, SYSTEM, axes={"tp": [8], "pp": sorted(BY_HAND)}, execution=META, num_nodes=NODES,
                  global_batch=BATCH)
    for pp in BY_HAND:
        _same(_statuses(ds, tp=8, pp=pp), _single_result(f"tp8.pp{pp}"), pp)


def test_a_layers_axis_crossed_with_pp_takes_the_rule_at_each_pair():
    """layers 62: (62 + 2) / pp = 16, 8, 4 at pp 4, 8, 16; 2 at pp 3 and 6."""
    model = {**load_lm_model(MODEL).model_dump(), "layers": 62}
    ds = lm_sweep(MODEL, SYSTEM, axes={"plan": PLANS, "layers": [126, 62]}, execution=META, num_nodes=NODES,
                  global_batch=BATCH)
    for plan in PLANS:
        _same(_statuses(ds, plan=plan, layers=126), _single_result(plan), (plan, 126))
        _same(_statuses(ds, plan=plan, layers=62), _single_result(plan, model=model), (plan, 62))
    assert _single(PLANS[1], model=model)[C["vp"]] == 16


def test_the_pp_values_count_toward_the_lowering_limit(monkeypatch):
    """Each pp value the rule reads is one lowering, counted against MAX_LOWERED_COMBINATIONS in the refusal."""
    import fastmodel.lm.sweep_stack as sweep_stack
    from fastmodel.errors import SweepError

    monkeypatch.setattr(sweep_stack, "MAX_LOWERED_COMBINATIONS", 3)
    with pytest.raises(SweepError, match=r"^axes\.pp: 4 pp values the stack's vp rule reads of the pp axis: 4 "
                                         r"lowerings, over the 3 "):
        lm_sweep(MODEL, SYSTEM, axes={"tp": [8], "pp": [3, 4, 8, 16]}, execution=META, num_nodes=NODES,
                 global_batch=BATCH)
