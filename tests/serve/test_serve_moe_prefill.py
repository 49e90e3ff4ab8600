"""The MoE prefill terms and the TPOT room of bench/serve_moe_prefill.py (docs/model_serving.md §S65), by hand."""

import math

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_moe_prefill = load_bench("serve_moe_prefill")

_COLS = ["id", "status", "framework", "gpu", "precision", "model", "measured_ttft_s", "predicted_ttft_s",
         "measured_tpot_s", "predicted_tpot_s"]


def _record(rid="r", tp=2, ep=1, n=4, isl=4000, out=100, budget=2003, experts=128, adp=None):
    """A Qwen3-235B-shaped record on an H200 (hidden 4096, 128 experts of 1536, top 8, 94 layers)."""
    return {"id": rid,
            "model": {"hidden": 4096, "moe_experts": experts, "moe_topk": 8, "moe_ffn": 1536, "layers": 94},
            "serve": {"tp": tp, "ep": ep, "concurrency": n, "input_len": isl, "output_len": out,
                      "max_num_tokens": budget, "precision": "fp8", "attention_dp": adp},
            "system": {"hbm_bw_bytes_s": 4.8e12, "peak_flops_bf16": 989e12, "peak_flops_fp8": 1979e12}}


def test_moe_terms_by_hand():
    """4,000 tokens at TP 2 (expert width 768), budget 2,003 with 3 decodes: two chunks, one re-read."""
    t = serve_moe_prefill.moe_terms(_record())
    expert_params = 128 * 3 * 768 * 4096                    # 1,207,959,552
    assert t["router"] == pytest.approx(2 * 4000 * 4096 * 128 / 989e12)                 # 4.24 us
    assert t["permute"] == pytest.approx(2 * (4000 * 4096 + 4000 * 8 * 4096) / 4.8e12)  # 61.4 us
    assert t["pad"] == pytest.approx(2 * 127 * expert_params / (0.179 * 1979e12))       # 0.866 ms
    assert t["reread"] == pytest.approx(expert_params * 1.0 / 4.8e12)                   # 0.252 ms
    assert t["pad"] == pytest.approx(8.6613e-4, rel=1e-4)


def test_no_reread_when_the_budget_takes_the_prompt_or_is_not_stated():
    """A budget of ISL + 1500 + B (aiconfigurator's rule) takes the lone prompt whole; no budget: 0."""
    assert serve_moe_prefill.moe_terms(_record(budget=4000 + 1500 + 4))["reread"] == 0.0
    assert serve_moe_prefill.moe_terms(_record(budget=None))["reread"] == 0.0


def test_ep_splits_experts_not_width():
    """EP 2 at TP 2: 64 local experts of the full 1,536 width, the same expert bytes as TP 2 without EP; the
    permute writes half the routed rows."""
    tp, ep = serve_moe_prefill.moe_terms(_record()), serve_moe_prefill.moe_terms(_record(ep=2))
    assert ep["pad"] == pytest.approx(tp["pad"])
    assert ep["permute"] == pytest.approx(2 * (4000 * 4096 + 4000 * 4 * 4096) / 4.8e12)


def test_iteration_room_by_hand():
    """TTFT 0.8 s, TPOT 56 ms measured against 52 ms, 4 in flight, 100 tokens: the decode phase is 99 x 0.056 =
    5.544 s of a 6.344 s cycle, so 3 x 0.8739 prompts pass per decode phase and 99 x 4 ms = 0.396 s of room
    spread over them is 151 ms each; none for one request or a TPOT already over-predicted."""
    share = 5.544 / 6.344
    assert serve_moe_prefill.iteration_room(0.8, 0.056, 0.052, 4, 100) == pytest.approx(0.396 / (3 * share))
    assert serve_moe_prefill.iteration_room(0.8, 0.056, 0.052, 4, 100) == pytest.approx(0.15105, rel=1e-4)
    assert serve_moe_prefill.iteration_room(0.8, 0.050, 0.052, 4, 100) == 0.0
    assert math.isinf(serve_moe_prefill.iteration_room(0.8, 0.056, 0.052, 1, 100))


def test_moe_layer_count_and_groups(tmp_path):
    """94 layers, all MoE; a dense record, an attention-DP record, N 8 and a refused row are left out; the group
    holds the two N <= 4 rows with the median shortfall of 100 and 300 ms."""
    assert serve_moe_prefill.moe_layer_count({"layers": 94}) == 94
    assert serve_moe_prefill.moe_layer_count({"layers": 61, "dense_layers": 3, "moe_layer_freq": 2}) == 29
    records = [_record("a"), _record("b", n=2), _record("c", n=8), _record("d", experts=0),
               _record("e", adp=2), _record("f")]
    rows = [[rid, "refused" if rid == "f" else "ok", "vLLM 0.12.0", "H200", "fp8", "Qwen3", meas, 0.5, 0.056, 0.052]
            for rid, meas in zip("abcdef", (0.6, 0.8, 0.9, 0.9, 0.9, 0.9))]
    table, recs = write_validated(tmp_path, records, _COLS, rows)
    groups = serve_moe_prefill.by_group(table, recs, 4)
    key = ("vLLM 0.12.0", "H200", "Qwen3", 2, 1, 4000)
    assert list(groups) == [key] and len(groups[key]) == 2
    gap, terms = serve_moe_prefill.summary(groups[key])
    assert gap == pytest.approx(0.2)
    assert terms["router"] == pytest.approx(94 * 2 * 4000 * 4096 * 128 / 989e12)


def test_a_static_batch_record_is_left_out_not_a_key_error(tmp_path):
    """review15 #8: a record without ``concurrency`` (static batch, max throughput) is no low-load row."""
    static = _record("s")
    del static["serve"]["concurrency"]
    static["serve"]["batch_size"] = 4
    records = [_record("a"), static]
    rows = [[rid, "ok", "vLLM 0.12.0", "H200", "fp8", "Qwen3", 0.6, 0.5, 0.056, 0.052] for rid in "as"]
    table, recs = write_validated(tmp_path, records, _COLS, rows)
    groups = serve_moe_prefill.by_group(table, recs, 4)
    assert [len(v) for v in groups.values()] == [1]


def test_token_split_by_hand(tmp_path):
    """10 ms + 4 ms per 1,000 tokens: 14.096 ms at 1,024 and 42.768 ms at 8,192 tokens -> A 10 ms, B 4 ms; the
    split pairs only EP-1 groups holding both ISLs."""
    a, b = serve_moe_prefill.token_split(0.014096, 0.042768)
    assert (a, b) == (pytest.approx(0.010), pytest.approx(0.004))
    records = [_record("a", isl=1024, budget=None), _record("b", isl=8192, budget=None),
               _record("c", isl=1024, budget=None, ep=2)]
    rows = [[rid, "ok", "vLLM 0.18.0", "H200", "fp4", "gpt-oss", meas, 0.1, 0.056, 0.052]
            for rid, meas in zip("abc", (0.114096, 0.142768, 0.2))]
    table, recs = write_validated(tmp_path, records, _COLS, rows)
    split = serve_moe_prefill.split_rows(serve_moe_prefill.by_group(table, recs, 4))
    assert list(split) == [("vLLM 0.18.0", "H200", "gpt-oss", 2)]
    assert split[("vLLM 0.18.0", "H200", "gpt-oss", 2)] == (pytest.approx(0.010), pytest.approx(0.004))
