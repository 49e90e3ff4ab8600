"""DeepEP's destinations per token (kernels/lm/moe_dispatch.py ``distinct_uniform``, ``distinct_round_robin``,
``distinct_destinations``, ``deepep_time``; docs/model.md §11.14.2), derived by hand, and the rule table's
``node_limit_below_topk`` (``node_limit_short``, docs/model.md §11.9)."""

import itertools
from math import comb

import numpy as np
import pytest

from fastmodel.errors import PlanError
from fastmodel.kernels.lm.moe_dispatch import (
    dispatch_time,
    distinct_destinations,
    distinct_round_robin,
    distinct_uniform,
    node_limit_short,
)
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import lower_record
from fastmodel.lm.rules import plan_status
from fastmodel.lm.table import row, table
from fastmodel.registry.lm import COLUMN_INDEX, STATUS_CODES, STATUSES
from tests.data_records import record_by_id


def test_uniform_destinations_by_enumeration():
    """4 experts on 2 holders (01 | 23), top-2: of the 6 pairs, 01 and 23 hit one holder, the other 4 both:
    (2 x 1 + 4 x 2) / 6 = 5/3 = 2 (1 - C(2, 2) / C(4, 2)). 12 experts on 4 holders, top-3: the mean over all
    C(12, 3) = 220 subsets equals 4 (1 - C(9, 3) / C(12, 3)) = 4 (1 - 84/220)."""
    assert distinct_uniform(4.0, 2.0, 2.0) == pytest.approx(5 / 3, rel=1e-12)
    subsets = list(itertools.combinations(range(12), 3))
    mean = sum(len({e // 3 for e in s}) for s in subsets) / len(subsets)
    assert mean == pytest.approx(4 * (1 - 84 / 220), rel=1e-12)
    assert distinct_uniform(12.0, 4.0, 3.0) == pytest.approx(mean, rel=1e-12)


def test_uniform_destinations_of_the_records_shapes():
    """Qwen3-30B-A3B at EP 8 (128 experts, 16 per rank, top-8): 8 (1 - C(112, 8) / C(128, 8)) = 5.339 ranks;
    with replacement 8 (1 - (7/8)^8) = 5.251, a draw of distinct experts spreads wider. One expert per holder
    (E = n): exactly k holders."""
    exact = 8 * (1 - comb(112, 8) / comb(128, 8))
    assert exact == pytest.approx(5.3394, abs=1e-4)
    assert distinct_uniform(128.0, 8.0, 8.0) == pytest.approx(exact, rel=1e-12)
    assert distinct_uniform(16.0, 16.0, 8.0) == pytest.approx(8.0, rel=1e-12)


def test_round_robin_destinations_by_hand():
    """TorchTitan's forced balance: token i takes experts 3i, 3i + 1, 3i + 2 mod 8. With 4 experts per holder
    (0-3 | 4-7) the 8 starts 0, 3, 6, 1, 4, 7, 2, 5 give windows spanning 1, 2, 2, 1, 1, 2, 2, 1 holders: 1.5.
    Qwen3-30B-A3B at EP 8: starts 8i mod 128 are multiples of 8, so the 8 experts lie in one rank's 16: 1 rank;
    over the 2 nodes of an EP 16 group (64 experts each): 1 node."""
    assert distinct_round_robin(8.0, 2.0, 3.0) == pytest.approx(1.5, rel=1e-12)
    assert distinct_round_robin(128.0, 8.0, 8.0) == 1.0
    assert distinct_round_robin(128.0, 2.0, 8.0) == 1.0


def test_node_limited_routing_draws_ranks_from_m_nodes():
    """DeepSeek-V3: 256 experts on EP 64 over 8 nodes, top-8, M = 4. Uniform over 8 nodes the spread would be
    8 (1 - C(224, 8) / C(256, 8)) = 5.29 > 4, so 4 nodes, and the 8 experts come from their 128 experts on 32
    ranks: 32 (1 - C(124, 8) / C(128, 8)) = 32 (1 - 120 119 118 117 / (128 127 126 125)) = 7.3594 ranks.
    Without the limit, 64 (1 - C(252, 8) / C(256, 8)) = 7.676 ranks over 5.29 nodes."""
    r = row(layers=61, hidden=7168, ffn=18432, heads=128, vocab=129280, seq_len=4096, moe_experts=256,
            moe_topk=8, moe_ffn=2048, moe_max_nodes=4, ep=64, dp=64)
    nodes, ranks = distinct_destinations(r, 64.0, 8.0)
    assert nodes == 4.0
    assert ranks == pytest.approx(32 * (1 - 120 * 119 * 118 * 117 / (128 * 127 * 126 * 125)), rel=1e-12)
    assert ranks == pytest.approx(7.3594, abs=1e-4)
    free = row(layers=61, hidden=7168, ffn=18432, heads=128, vocab=129280, seq_len=4096, moe_experts=256,
               moe_topk=8, moe_ffn=2048, ep=64, dp=64)
    nodes, ranks = distinct_destinations(free, 64.0, 8.0)
    assert nodes == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)), rel=1e-12)
    assert ranks == pytest.approx(64 * (1 - comb(252, 8) / comb(256, 8)), rel=1e-12)


def test_torchtitan_deepep_rows_send_each_token_to_one_rank():
    """The TorchTitan DeepEP rows state model.moe_routing = round_robin (their flavor 30B-A3B-deepep sets
    _debug_force_load_balance=True, models/qwen3/__init__.py at 022f885f34): round-robin routing. One EP 8 node
    (intranode kernels): each of the 8 x 4096 tokens goes to 1 rank, 2 048 x 2 bytes received per token, own
    share included, at B200's measured DeepEP rate 500.75 GB/s (docs/model.md §11.14.6; before it: the 7/8
    remote share at 900 GB/s x 0.72 plus the NVLink latency 8.6 us); dispatch and combine (BF16 both)."""
    record = record_by_id("torchtitan-deepep-qwen3-30b-a3b-b200-n8-lbs8")
    columns = lower_record(record).columns
    assert columns[COLUMN_INDEX["moe_round_robin"]] == 1.0
    one = 8 * 4096 * 1 * 2048 * 2 / 500.75e9
    assert dispatch_time(columns)[0] == pytest.approx(2 * one, rel=1e-9)
    nccl = columns.copy()
    nccl[COLUMN_INDEX["deepep_nvl_bw"]] = 0.0
    assert dispatch_time(nccl)[0] == pytest.approx(2 * (one * 500.75e9 * 7 / 8 / (900e9 * 0.72) + 8.6e-6), rel=1e-9)
    assert dispatch_time(columns)[1] == 0.0
    uniform = dict(record, model={k: v for k, v in record["model"].items() if k != "moe_routing"})
    assert lower_record(uniform).columns[COLUMN_INDEX["moe_round_robin"]] == 0.0


def test_fewer_experts_than_k_hit_every_holder_without_dividing_by_zero():
    """Once E - E/n - i <= 0 every holder is hit (C(E - E/n, k) = 0); the loop stops there, before the divisor
    E - i reaches 0 (E = 4 < k = 8 raised ZeroDivisionError in the kernel before the guard)."""
    assert distinct_uniform(4.0, 1.0, 8.0) == 1.0
    assert distinct_uniform(4.0, 2.0, 8.0) == 2.0
    assert distinct_uniform(8.0, 2.0, 8.0) == 2.0            # all 8 experts: both holders


def _deepseek_ep256(**values):
    """DeepSeek-V3's MoE (E 256, top-8) at tp 2, EP 256 with etp 2 on 512 GPUs of 8-GPU NVLink domains: an EP group
    (stride 2) has floor(8 / 2) = 4 members per domain, so 256 / 4 = 64 domains of 256 / 64 = 4 experts each."""
    base = dict(layers=61, hidden=7168, ffn=18432, heads=128, vocab=129280, seq_len=4096, moe_experts=256,
                moe_topk=8, moe_ffn=2048, tp=2, ep=256, etp=2, dp=256, n_gpus=512, global_batch=512,
                moe_dispatcher="deepep")
    return row(**{**base, **values})


def test_node_limit_rule_by_hand():
    """M domains hold M E / N experts: M = 1 gives 4 < k = 8 (illegal, ``node_limit_below_topk``), M = 2 gives
    exactly 8 (legal); no limit (M = 0), M >= N and forced round-robin routing (which ignores the limit) are legal."""
    short = STATUS_CODES["node_limit_below_topk"]
    assert node_limit_short(_deepseek_ep256(moe_max_nodes=1))
    assert plan_status(_deepseek_ep256(moe_max_nodes=1)[:, None])[0] == short
    for values in ({"moe_max_nodes": 2}, {"moe_max_nodes": 0}, {"moe_max_nodes": 64},
                   {"moe_max_nodes": 1, "moe_round_robin": 1}):
        assert not node_limit_short(_deepseek_ep256(**values))
        assert plan_status(_deepseek_ep256(**values)[:, None])[0] == 0


def test_a_sweep_and_a_table_mark_the_node_limited_point_instead_of_crashing():
    """The review's repro (whole grid failed with SystemError at M = 1): the M = 1 point gets the status and NaN,
    M = 2 and 4 their results. evaluate_table (rows taken as legal) no longer divides by 0 on E 64, k 16, EP 64 in
    8-GPU domains, M = 1 (8 domains of 8 experts < 16), which the rule table marks."""
    import fastmodel

    ds = fastmodel.sweep("deepseek-v3", "dgx-h100", "llm-pretrain", {
        "num_nodes": [64], "plan": ["tp2.ep256.etp2"], "moe_max_nodes": [1, 2, 4], "moe_dispatcher": ["deepep"]})
    status = ds.status.values.ravel()
    assert [STATUSES[s].name for s in status] == ["node_limit_below_topk", "ok", "ok"]
    step = ds.step_time.values.ravel()
    assert np.isnan(step[0]) and np.isfinite(step[1:]).all()
    params = table(1, layers=8, hidden=1024, ffn=4096, heads=16, vocab=32000, seq_len=2048, moe_experts=64,
                   moe_topk=16, moe_ffn=512, moe_max_nodes=1, ep=64, dp=64, n_gpus=64, global_batch=64,
                   moe_dispatcher="deepep")
    assert plan_status(params)[0] == STATUS_CODES["node_limit_below_topk"]
    assert np.isfinite(evaluate_table(params)["step_time"][0])


def test_a_single_evaluation_refuses_it_naming_moe_max_nodes():
    """A spec (fastmodel.evaluate) and a run record (evaluate_record, RUNS.md's
    moe_node_limited_routing_max_nodes) get a PlanError that names the field with its numbers. Record: EP 128 on
    H800 nodes of 8 is 16 domains of 16 experts; top-17 cannot be drawn from M = 1 of them."""
    import fastmodel
    from fastmodel.lm.loader import load_lm_model

    model = load_lm_model("deepseek-v3").model_copy(update={"moe_max_nodes": 1})
    with pytest.raises(PlanError, match=r"node_limit_below_topk\): model\.moe_max_nodes = 1: .* moe_topk = 8 "
                       r"experts from 1 of the EP group's 64 NVLink domains, which hold 4 of its 256 experts; "
                       r"raise moe_max_nodes to at least 2"):
        fastmodel.evaluate(model, "dgx-h100", "llm-pretrain", plan="tp2.ep256.etp2", num_nodes=64,
                           execution={"moe_dispatcher": "deepep"})
    record = record_by_id("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T")
    record["model"].update(moe_node_limited_routing_max_nodes=1, moe_topk=17)
    record["plan"]["ep"] = 128
    with pytest.raises(PlanError, match=r"r\.jsonl:1: plan: .*model\.moe_max_nodes = 1: .*16 NVLink domains, "
                       r"which hold 16 of its 256 experts; raise moe_max_nodes to at least 2"):
        fastmodel.evaluate_record(record, "r.jsonl:1")


def test_the_single_evaluation_builds_its_refusal_from_the_point_it_lowered(monkeypatch):
    """The node-limit message comes from the sweep plan's own base columns with the mesh applied (review 2,
    finding 8), not from a second lowering through point_columns."""
    import fastmodel
    import fastmodel.lm.sweep as lm_sweep_module
    from fastmodel.lm.loader import load_lm_model

    def second_lowering(*args, **kwargs):
        raise AssertionError("point_columns called")

    monkeypatch.setattr(lm_sweep_module, "point_columns", second_lowering)
    model = load_lm_model("deepseek-v3").model_copy(update={"moe_max_nodes": 1})
    with pytest.raises(PlanError, match=r"node_limit_below_topk\): model\.moe_max_nodes = 1: .*raise moe_max_nodes "
                       r"to at least 2"):
        fastmodel.evaluate(model, "dgx-h100", "llm-pretrain", plan="tp2.ep256.etp2", num_nodes=64,
                           execution={"moe_dispatcher": "deepep"})
