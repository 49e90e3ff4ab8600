"""The arithmetic of bench/serve_trt_triton_moe.py (docs/model_serving.md §S37), by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

trt_moe = load_bench("serve_trt_triton_moe")


def test_padding_of_gpt_oss_experts_by_moe_tp():
    """hidden = ffn = 2880. EP (moe_tp 1): w1/w3 padded to 2944 (23 x 128) each, gate-up N = 5888 (23 x 256),
    K = 2944; down K = 2944, N = 3072 (12 x 256). Work (2944 x 5888 + 2944 x 3072) / (3 x 2880 x 2880) = 1.0601.
    moe_tp 8: the shard axis is padded to 1024 x 3 = 3072 before the cut, so 384 per rank (not 360, not 512):
    gate-up 2944 x 768, down 384 x 3072; (2944 x 768 + 384 x 3072) / (3 x 2880 x 360) = 1.1062."""
    k1, n1, k2, n2, r = trt_moe.triton_mxfp4_padding(2880, 2880, 1)
    assert (k1, n1, k2, n2) == (2944, 5888, 2944, 3072)
    assert r == pytest.approx((2944 * 5888 + 2944 * 3072) / (3 * 2880 * 2880))
    assert r == pytest.approx(1.0601, abs=1e-4)
    k1, n1, k2, n2, r = trt_moe.triton_mxfp4_padding(2880, 2880, 8)
    assert (k1, n1, k2, n2) == (2944, 768, 384, 3072)
    assert r == pytest.approx((2944 * 768 + 384 * 3072) / (3 * 2880 * 360))
    assert trt_moe.triton_mxfp4_padding(2880, 2880, 2)[:4] == (2944, 3072, 1536, 3072)   # 3072 / 2 = 1536


def test_busiest_rank_by_hand():
    """E = 4, k = 1, one token, ep = 2: p = 1/4, each rank holds 2 experts, Binomial(2, 1/4): F(0) = 9/16,
    F(1) = 15/16. E[max of 2] = (1 - (9/16)^2) + (1 - (15/16)^2) = 175/256 + 31/256 = 206/256; mean 2 x 1/4."""
    hi, mean = trt_moe.ep_busiest_experts(4, 1, 1, 2)
    assert hi == pytest.approx(206 / 256)
    assert mean == pytest.approx(0.5)


def test_busiest_rank_is_the_mean_with_one_rank_and_grows_with_ep():
    """ep = 1: the maximum of one count is its mean E p (128 x (1 - (31/32)^4) = 15.26 at 4 tokens)."""
    hi, mean = trt_moe.ep_busiest_experts(128, 4, 4, 1)
    assert hi == pytest.approx(mean)
    assert mean == pytest.approx(128 * (1 - (31 / 32) ** 4))
    hi8, mean8 = trt_moe.ep_busiest_experts(128, 4, 4, 8)
    assert mean8 == pytest.approx(mean / 8)
    assert hi8 > 2 * mean8


def test_gaps_keep_one_engine_model_gpu_and_no_ep(tmp_path):
    """Row a: TTFT 0.100 against 0.020, TPOT 0.005 against 0.004 -> (0.080, 0.001). Left out: b is vLLM, c has
    EP 8, d is refused."""
    rows = [("a", "TensorRT-LLM x", 8, 1, "ok"), ("b", "vLLM 0.18.0", 8, 1, "ok"),
            ("c", "TensorRT-LLM x", 8, 8, "ok"), ("d", "TensorRT-LLM x", 8, 1, "refused")]
    table, recs = write_validated(
        tmp_path, [{"id": rid, "serve": {"tp": tp, "ep": ep, "input_len": 1024, "concurrency": 4}}
                   for rid, _fw, tp, ep, _st in rows],
        ["id", "status", "framework", "gpu", "model", "measured_ttft_s", "predicted_ttft_s", "measured_tpot_s",
         "predicted_tpot_s"],
        [[rid, st, fw, "H200-SXM-141GB", "gpt-oss-120b", 0.100, 0.020, 0.005, 0.004] for rid, fw, _tp, _ep, st in rows])
    out = trt_moe.gaps(table, recs)
    assert list(out) == [(8, 1024, 4)]
    (ttft, tpot), = out[(8, 1024, 4)]
    assert (ttft, tpot) == (pytest.approx(0.080), pytest.approx(0.001))
