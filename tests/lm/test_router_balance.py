"""The load-imbalance factor of a router's balancing method (docs/model.md §11.14.5), derived by hand:
``fastmodel/lm/router_balance.py`` (the per-expert figures, lowered to ``moe_expert_maxvio``) and the busiest
rank's factor ``kernels/lm/moe.py`` ``rank_imbalance``."""

import math

import numpy as np
import pytest

from fastmodel.kernels.lm.moe import load_factor, rank_imbalance
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.loader import load_cluster, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.lm.router_balance import BALANCE_METHODS, EXPERT_MAXVIO, expert_maxvio
from fastmodel.lm.sweep import base_columns, mesh_columns
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C


def _rank(maxvio, experts, ep, **kw):
    return rank_imbalance(row(moe_expert_maxvio=maxvio, moe_experts=experts, ep=ep, **kw))


def test_rank_imbalance_by_hand():
    """E and ep powers of two: ln ep / ln E = log2 ep / log2 E. E = 64, ep = 8: sqrt(8 * 3 / (64 * 6)) = 1/4;
    E = 256, ep = 64: sqrt(64 * 6 / (256 * 8)) = sqrt(3/16); E = 160, ep = 8 (DeepSeek-V2): ln 8 = 2.0794,
    ln 160 = 5.0752."""
    assert _rank(0.52, 64, 8) == pytest.approx(1.13)
    assert _rank(0.04, 256, 64) == pytest.approx(1.0 + 0.04 * math.sqrt(3.0) / 4.0)
    assert _rank(0.52, 160, 8) == pytest.approx(1.0 + 0.52 * math.sqrt(8 * 2.0794415 / (160 * 5.0751738)))


def test_rank_imbalance_ends_and_precedence():
    """One rank holds every expert: its load is the mean (1). One expert per rank: the expert's MaxVio. More
    ranks find a busier one, never above one expert. No figure (0): moe_imbalance as given, and a moe_imbalance
    above 1 wins over the figure; round-robin routing is forced balance, so the figure is not used."""
    assert _rank(0.52, 64, 1) == 1.0
    assert _rank(0.52, 64, 64) == pytest.approx(1.52)
    values = [_rank(0.52, 64, ep) for ep in (2, 4, 8, 16, 32, 64)]
    assert values == sorted(values) and values[-1] <= 1.52 + 1e-12
    assert _rank(0.0, 64, 8, moe_imbalance=1.3) == 1.3
    assert _rank(0.52, 64, 8, moe_imbalance=1.3) == 1.3          # a stated factor (or a sweep axis) above 1 wins
    assert _rank(0.52, 64, 8, moe_round_robin=1) == 1.0
    # dropless: the load factor is the imbalance; a capacity of 1 without padding cuts it; padded: cf
    assert load_factor(row(moe_expert_maxvio=0.52, moe_experts=64, ep=8)) == pytest.approx(1.13)
    assert load_factor(row(moe_expert_maxvio=0.52, moe_experts=64, ep=8, moe_capacity_factor=1.0)) == 1.0
    assert load_factor(row(moe_expert_maxvio=0.52, moe_experts=64, ep=8, moe_capacity_factor=1.25,
                           moe_pad_to_capacity=1)) == 1.25


def test_expert_maxvio_per_method():
    """aux_loss and aux_free carry Wang et al. 2024 Table 1's 3B figures (0.52, 0.04); forced is 0; the methods
    without a published figure give None with a note."""
    assert EXPERT_MAXVIO == {"aux_loss": 0.52, "aux_free": 0.04, "forced": 0.0}
    assert (expert_maxvio("aux_loss"), expert_maxvio("aux_free"), expert_maxvio("forced")) == (0.52, 0.04, 0.0)
    for method in sorted(set(BALANCE_METHODS) - set(EXPERT_MAXVIO)):
        notes: list[str] = []
        assert expert_maxvio(method, notes) is None
        assert notes and "no published per-expert load imbalance" in notes[0]


def test_lowering_and_sweeps_follow_each_mesh():
    """deepseek-v3 (256 experts) with aux_free: the column is the per-expert 0.04; at ep 64 the busiest rank
    carries 1 + 0.04 sqrt(3)/4, and a sweep lowered once (ep 1) gets each point's ep; a stated moe_imbalance
    wins (no figure lowered); a dense model gets none."""
    model, cluster = load_lm_model("deepseek-v3"), load_cluster("dgx-h100", 64)
    col = lower(model, cluster, ExecutionSpec(moe_balance="aux_free"), Mesh(pp=8, ep=64, dp=64), 1024)
    assert col[C["moe_expert_maxvio"]] == 0.04
    assert rank_imbalance(col) == pytest.approx(1.0 + 0.04 * math.sqrt(3.0) / 4.0)
    base = base_columns(model, cluster, ExecutionSpec(moe_balance="aux_free"), 1024)
    assert rank_imbalance(base) == 1.0
    swept = mesh_columns(base, "pp8.ep64", True)
    assert rank_imbalance(swept) == pytest.approx(rank_imbalance(col))
    stated = lower(model, cluster, ExecutionSpec(moe_balance="aux_free", moe_imbalance=1.5), Mesh(ep=64, dp=512),
                   1024)
    assert stated[C["moe_expert_maxvio"]] == 0.0 and rank_imbalance(stated) == 1.5
    dense, node = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    plain = lower(dense, node, ExecutionSpec(), Mesh(dp=8), 64)
    np.testing.assert_array_equal(lower(dense, node, ExecutionSpec(moe_balance="aux_loss"), Mesh(dp=8), 64), plain)
