"""DeepEP's destinations per token (kernels/lm/moe.py ``distinct_uniform``, ``distinct_round_robin``,
``distinct_destinations``, ``deepep_time``; docs/model.md §11.14.2), derived by hand."""

import itertools
import json
from math import comb
from pathlib import Path

import pytest

from fastmodel.kernels.lm.moe import dispatch_time, distinct_destinations, distinct_round_robin, distinct_uniform
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX

DATA = Path(__file__).resolve().parents[1] / "data"


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


def _record(run_id):
    for line in (DATA / "runs_moe_public.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["id"] == run_id:
            return record
    raise AssertionError(f"{run_id} missing")


def test_torchtitan_deepep_rows_send_each_token_to_one_rank():
    """The TorchTitan DeepEP rows state model.moe_routing = round_robin (their flavor 30B-A3B-deepep sets
    _debug_force_load_balance=True, models/qwen3/__init__.py at 022f885f34): round-robin routing. One EP 8 node
    (intranode kernels): each of the 8 x 4096 tokens goes to 1 rank, 7/8 of them another one, 2 048 x 2 bytes
    over NVLink at 900 GB/s x 0.72 plus the NVLink latency 8.6 us; dispatch and combine (BF16 both)."""
    record = _record("torchtitan-deepep-qwen3-30b-a3b-b200-n8-lbs8")
    columns = lower_record(record).columns
    assert columns[COLUMN_INDEX["moe_round_robin"]] == 1.0
    one = 8 * 4096 * 1 * 2048 * 2 * 7 / 8 / (900e9 * 0.72) + 8.6e-6
    assert dispatch_time(columns)[0] == pytest.approx(2 * one, rel=1e-9)
    assert dispatch_time(columns)[1] == 0.0
    uniform = dict(record, model={k: v for k, v in record["model"].items() if k != "moe_routing"})
    assert lower_record(uniform).columns[COLUMN_INDEX["moe_round_robin"]] == 0.0
