"""The routing diagnostic of bench/serve_ep_routing.py (docs/model_serving.md S54), by hand: uniform touched experts,
the power law's inverse CDF, aiconfigurator's generator's invariants, the weight stream of one expert, and one
priced row."""

import numpy as np
import pytest

from tests.bench_scripts import load_bench, write_validated

serve_ep_routing = load_bench("serve_ep_routing")

QWEN3 = {
    "name": "Qwen3-235B-A22B-FP8",
    "layers": 94,
    "hidden": 4096,
    "moe_ffn": 1536,
    "moe_experts": 128,
    "moe_topk": 8,
}


def test_uniform_touched_by_hand():
    # 4 tokens, top-8 of 128: 128 (1 - (15/16)^4) = 128 (1 - 50625/65536)
    assert serve_ep_routing.uniform_touched(128, 8, 4) == pytest.approx(128 * (1 - 50625 / 65536), rel=1e-12)
    assert serve_ep_routing.uniform_touched(128, 8, 4) == pytest.approx(29.1230, abs=1e-4)
    assert serve_ep_routing.uniform_touched(128, 8, 0) == 0.0


def test_power_law_quantile_by_hand():
    # x^-1.2 on [1, 25.6]: u = 0 -> 1, u = 1 -> 25.6; u = 0.5 -> ((25.6^-0.2 - 1) / 2 + 1)^-5 = 0.76141^-5 = 3.907
    q = serve_ep_routing.power_law_quantile
    assert q(0.0, 1.2, 1.0, 25.6) == pytest.approx(1.0, rel=1e-12)
    assert q(1.0, 1.2, 1.0, 25.6) == pytest.approx(25.6, rel=1e-12)
    assert q(0.5, 1.2, 1.0, 25.6) == pytest.approx(3.907, rel=1e-3)


@pytest.mark.parametrize("tokens", [1, 4, 16, 17, 64, 128])
def test_generator_hands_out_every_assignment(tokens):
    rng = np.random.default_rng(1)
    for _ in range(20):
        loads = serve_ep_routing.power_law_loads(rng, tokens, 128, 8, 1.2)
        assert loads.sum() == tokens * 8 and loads.min() >= 0 and len(loads) == 128


def test_busiest_group_of_one_is_all():
    busy, total = serve_ep_routing.power_law_busiest(16, 128, 8, 1, 1.2, draws=50)
    assert busy == total
    busy4, total4 = serve_ep_routing.power_law_busiest(16, 128, 8, 4, 1.2, draws=50)
    assert total4 == total and busy4 <= 32


def test_expert_stream_of_one_expert_by_hand():
    # one expert more per MoE layer on one TP 4 / EP 4 H100 rank: 94 x 3 x 4096 x 1536 x 1 B / (3.35e12 x 0.80)
    serve = {"tp": 4, "ep": 4, "precision": "fp8"}
    t = serve_ep_routing.expert_stream_s(QWEN3, serve, 3.35e12 * 0.80, 1.0)
    assert t == pytest.approx(94 * 3 * 4096 * 1536 / 2.68e12, rel=1e-12)
    assert t == pytest.approx(0.662e-3, rel=1e-3)


def test_price_adds_the_busiest_rank_to_one_row(tmp_path):
    rec = {
        "id": "q",
        "model": QWEN3,
        "system": {"hbm_bw_bytes_s": 3.35e12},
        "serve": {"tp": 8, "ep": 8, "precision": "fp8", "concurrency": 4},
    }
    other = {"id": "l", "model": {"name": "Llama-3.1-70B"}, "system": {}, "serve": {"tp": 1}}
    cols = ["id", "status", "split", "engine", "measured_tpot_s", "predicted_tpot_s", "implied_running"]
    rows = [["q", "ok", "dev", "TensorRT-LLM", 0.0115, 0.0093, 4.0], ["l", "ok", "dev", "vLLM", 0.010, 0.011, 4.0]]
    table, recs = write_validated(tmp_path, [rec, other], cols, rows)
    before, after, groups = serve_ep_routing.price(table, recs, "busy")
    hi, mean = serve_ep_routing.ep_busiest_experts(128, 8, 4, 8)
    added = 94 * (hi - mean) * 3 * 4096 * 1536 / 8 * 8 / 2.68e12  # etp = tp / ep = 1
    assert groups[("TensorRT-LLM", 8, 8, 4)][0][2] == pytest.approx(added, rel=1e-9)
    assert before == pytest.approx(100 * (abs(0.0093 / 0.0115 - 1) + 0.1) / 2, rel=1e-9)
    assert after == pytest.approx(100 * (abs((0.0093 + added) / 0.0115 - 1) + 0.1) / 2, rel=1e-9)
