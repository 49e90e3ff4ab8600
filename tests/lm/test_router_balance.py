"""The load-imbalance factor of a router's balancing method (docs/model.md §11.14.5), derived by hand."""

import math

import pytest

from fastmodel.kernels.lm.moe import load_factor
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.loader import load_cluster, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.lm.router_balance import BALANCE_METHODS, EXPERT_MAXVIO, balance_imbalance, rank_maxvio
from fastmodel.registry.lm import COLUMN_INDEX as C


def test_rank_maxvio_by_hand():
    """E and ep powers of two: ln ep / ln E = log2 ep / log2 E. E = 64, ep = 8: sqrt(8 * 3 / (64 * 6)) = 1/4;
    E = 256, ep = 64: sqrt(64 * 6 / (256 * 8)) = sqrt(3/16)."""
    assert rank_maxvio(0.52, 64, 8) == pytest.approx(0.52 / 4)
    assert rank_maxvio(0.04, 256, 64) == pytest.approx(0.04 * math.sqrt(3.0) / 4.0)
    # E = 160, ep = 8 (DeepSeek-V2's experts): sqrt(8 ln 8 / (160 ln 160))
    assert rank_maxvio(0.52, 160, 8) == pytest.approx(0.52 * math.sqrt(8 * 2.0794415 / (160 * 5.0751738)))


def test_rank_maxvio_ends():
    """One rank holds every expert: its load is the mean (0). One expert per rank: the expert's MaxVio. Forced
    balance (0) stays 0. Between, a rank varies less than one expert and more ranks find a busier one."""
    assert rank_maxvio(0.52, 64, 1) == 0.0
    assert rank_maxvio(0.52, 64, 64) == pytest.approx(0.52)
    assert rank_maxvio(0.0, 64, 8) == 0.0
    values = [rank_maxvio(0.52, 64, ep) for ep in (2, 4, 8, 16, 32, 64)]
    assert values == sorted(values) and values[-1] <= 0.52


def test_balance_imbalance_per_method():
    """aux_loss and aux_free carry Wang et al. 2024 Table 1's 3B figures (0.52, 0.04); forced is 1; the methods
    without a published figure leave the column alone (None) with a note."""
    assert EXPERT_MAXVIO == {"aux_loss": 0.52, "aux_free": 0.04, "forced": 0.0}
    assert balance_imbalance("aux_loss", 64, 8) == pytest.approx(1.13)
    assert balance_imbalance("forced", 64, 8) == 1.0
    for method in sorted(set(BALANCE_METHODS) - set(EXPERT_MAXVIO)):
        notes: list[str] = []
        assert balance_imbalance(method, 64, 8, notes) is None
        assert notes and "no published per-expert load imbalance" in notes[0]


def test_lowering_sets_moe_imbalance_from_moe_balance():
    """deepseek-v3 (256 experts) at ep 64 with aux_free: 1 + 0.04 sqrt(3)/4; a stated moe_imbalance wins;
    round-robin routing is forced balance (1); a dropless row's load factor is that imbalance; a dense model's
    column stays 1."""
    model, cluster = load_lm_model("deepseek-v3"), load_cluster("dgx-h100", 64)
    mesh = Mesh(pp=8, ep=64, dp=64)
    col = lower(model, cluster, ExecutionSpec(moe_balance="aux_free"), mesh, 1024)
    assert col[C["moe_imbalance"]] == pytest.approx(1.0 + 0.04 * math.sqrt(3.0) / 4.0)
    if model.moe_capacity_factor == 0:
        assert load_factor(col) == pytest.approx(col[C["moe_imbalance"]])
    stated = lower(model, cluster, ExecutionSpec(moe_balance="aux_free", moe_imbalance=1.5), mesh, 1024)
    assert stated[C["moe_imbalance"]] == 1.5
    assert lower(model, cluster, ExecutionSpec(), mesh, 1024)[C["moe_imbalance"]] == 1.0
    forced = model.model_copy(update={"moe_routing": "round_robin"})
    assert lower(forced, cluster, ExecutionSpec(moe_balance="aux_loss"), mesh, 1024)[C["moe_imbalance"]] == 1.0
    dense, dense_cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    assert lower(dense, dense_cluster, ExecutionSpec(moe_balance="aux_loss"), Mesh(dp=8), 64)[
        C["moe_imbalance"]] == 1.0
