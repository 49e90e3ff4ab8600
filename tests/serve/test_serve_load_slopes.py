"""The load-doubling ratios and the TPOT error slices of bench/serve_load_slopes.py (docs/model_serving.md §S64),
by hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_load_slopes = load_bench("serve_load_slopes")

_COLS = ["id", "status", "split", "engine", "framework", "gpu", "precision", "model", "measured_tpot_s",
         "predicted_tpot_s", "error_tpot_s", "baseline_error_tpot_s", "batch_size"]
_MOE = {"name": "M", "moe_experts": 128, "moe_topk": 4}


def _write(tmp_path, rows):
    """rows: (id, split, tp, N, measured TPOT s, predicted TPOT s, naive TPOT s, model block); vLLM on B200,
    ISL/OSL 1024, status ok, batch_size N."""
    records = [{"id": rid, "model": model, "serve": {"tp": tp, "concurrency": n, "input_len": 1024,
                                                      "output_len": 1024},
                "framework": "vLLM 0.15.1", "system": {"gpu": "B200"}}
               for rid, _, tp, n, _, _, _, model in rows]
    for rec in records:
        if rec["id"].startswith("x_"):      # the client semaphore's row (§S44): found by these fields, not its id
            rec.update(framework="vLLM 0.11.2", system={"gpu": "H100-SXM-80GB"}, model={**_MOE, "name": "gpt-oss-120b"})
            rec["serve"]["concurrency"] = 512
    table = [[rid, "ok", split, "vLLM", "vLLM 0.15.1", "B200", "fp4", model.get("name", "D"), meas, pred,
              (pred - meas) / meas, naive / meas - 1.0, n]
             for rid, split, tp, n, meas, pred, naive, model in rows]
    return write_validated(tmp_path, records, _COLS, table)


_ROWS = [
    # one MoE series at TP 1: N 4, 8, 16 measured 5, 6, 8 ms against 5, 7, 11 ms predicted
    ("a4", "dev", 1, 4, 0.005, 0.005, 0.005, _MOE),
    ("a8", "dev", 1, 8, 0.006, 0.007, 0.0065, _MOE),
    ("a16", "dev", 1, 16, 0.008, 0.011, 0.0095, _MOE),
    # a repeat of N 8 (the first one counts) and a TP 2 series at N 4 and 16 only (no doubling)
    ("a8b", "dev", 1, 8, 0.009, 0.007, 0.0065, _MOE),
    ("b4", "dev", 2, 4, 0.004, 0.004, 0.004, _MOE),
    ("b16", "dev", 2, 16, 0.006, 0.006, 0.006, _MOE),
    # left out: a client semaphore's row (§S44) and a held-out row
    ("x_c512_", "dev", 1, 32, 0.004, 0.020, 0.020, _MOE),
    ("h32", "held-out", 1, 32, 0.010, 0.015, 0.015, _MOE),
]


def test_rows_of_the_split_without_the_semaphore_rows(tmp_path):
    rows = serve_load_slopes.split_records(*_write(tmp_path, _ROWS))
    assert sorted(r["id"] for r, _ in rows) == ["a16", "a4", "a8", "a8b", "b16", "b4"]
    held = serve_load_slopes.split_records(*_write(tmp_path, _ROWS), split="held-out")
    assert [r["id"] for r, _ in held] == ["h32"]


def test_doubling_ratios_by_hand(tmp_path):
    """(6 - 5) / (7 - 5) = 0.5 from 4 to 8 and (8 - 6) / (11 - 7) = 0.5 from 8 to 16; the repeated N 8 (9 ms) is
    not read; TP 2 has no N and 2 N pair."""
    rows = serve_load_slopes.split_records(*_write(tmp_path, _ROWS))
    entries = sorted(serve_load_slopes.doublings(rows), key=lambda e: e["n2"])
    assert [(e["tp"], e["n2"]) for e in entries] == [(1, 8), (1, 16)]
    assert [e["ratio"] for e in entries] == [pytest.approx(0.5), pytest.approx(0.5)]
    assert serve_load_slopes.doubling_table(entries) == {("M", 1, 8): (pytest.approx(0.5), 1),
                                                         ("M", 1, 16): (pytest.approx(0.5), 1)}


def test_a_flat_prediction_has_no_ratio_and_leaves_the_table():
    entries = [{"model": "M", "tp": 1, "n2": 8, "ratio": None}, {"model": "M", "tp": 1, "n2": 8, "ratio": 0.8},
               {"model": "M", "tp": 1, "n2": 8, "ratio": 1.2}, {"model": "M", "tp": 1, "n2": 8, "ratio": 2.0}]
    assert serve_load_slopes.doubling_table(entries) == {("M", 1, 8): (pytest.approx(1.2), 3)}


def test_expert_share_is_uniform_routing():
    """128 experts, top-4: a step of 16 tokens misses an expert with probability (124/128)^16 = 0.6017, so it
    touches 0.3983 of them; a dense model and a model given by name have none."""
    assert serve_load_slopes.expert_share({"model": _MOE}, 16) == pytest.approx(0.39829, abs=1e-5)
    assert serve_load_slopes.expert_share({"model": _MOE}, 1) == pytest.approx(4 / 128)
    assert serve_load_slopes.expert_share({"model": {"name": "D", "layers": 80}}, 16) is None
    assert serve_load_slopes.expert_share({"model": "Llama-3.1-70B"}, 16) is None


def test_prefill_share_reads_the_naive_baseline():
    """Measured 10 ms, the naive decode-only TPOT 20 % under it (8 ms), predicted 10 ms: 1 - 8/10 = 0.2."""
    row = {"measured_tpot_s": "0.010", "baseline_error_tpot_s": "-0.2", "predicted_tpot_s": "0.010"}
    assert serve_load_slopes.prefill_share(row) == pytest.approx(0.2)


def test_buckets_and_the_error_slices(tmp_path):
    """Prefill shares 0, 1 - 6.5/7 = 0.071, 1 - 9.5/11 = 0.136, 0.071 (a8b), 0, 0 fall in buckets 0.01, 0.1, 0.2,
    0.1, 0.01, 0.01; mean errors: 0.01 -> (0 + 0 + 0) / 3, 0.1 -> (1/6 - 2/9) / 2 = -2.78 %, 0.2 -> 3/8 = +37.5 %."""
    assert serve_load_slopes.bucket(0.0, serve_load_slopes.MIX_EDGES) == 0.01
    assert serve_load_slopes.bucket(0.15, serve_load_slopes.MIX_EDGES) == 0.2
    assert serve_load_slopes.bucket(1.5, serve_load_slopes.MIX_EDGES) == 1.0
    rows = serve_load_slopes.split_records(*_write(tmp_path, _ROWS))
    mixing = serve_load_slopes.mean_error_by(rows, serve_load_slopes.mixing_key)
    assert mixing[("vLLM", 0.01)] == (pytest.approx(0.0), 3)
    assert mixing[("vLLM", 0.1)] == (pytest.approx(100 * (1 / 6 - 2 / 9) / 2), 2)
    assert mixing[("vLLM", 0.2)] == (pytest.approx(37.5), 1)
    # routing: f(4) = 0.119 and f(8) = 0.224 in the 0.3 bucket, f(16) = 0.398 in 0.5; TP 2 apart
    routing = serve_load_slopes.mean_error_by(rows, serve_load_slopes.routing_key)
    assert set(routing) == {("M", 1, 0.3), ("M", 1, 0.5), ("M", 2, 0.3), ("M", 2, 0.5)}
    assert routing[("M", 1, 0.5)] == (pytest.approx(37.5), 1)
    assert routing[("M", 1, 0.3)][1] == 3


def test_mape_by_split_without_refused_or_missing_errors():
    """dev: |0.1| and |-0.2| -> 15 %; with the semaphore row (|0.6|) 30 %; the refused row and the empty error are
    not read; held-out alone 40 %."""
    rows = [{"id": "a", "status": "ok", "split": "dev", "error_tpot_s": "0.1"},
            {"id": "b", "status": "ok", "split": "dev", "error_tpot_s": -0.2},
            {"id": "x_c512_", "status": "ok", "split": "dev", "error_tpot_s": "0.6"},
            {"id": "r", "status": "refused", "split": "dev", "error_tpot_s": "5"},
            {"id": "e", "status": "ok", "split": "dev", "error_tpot_s": ""},
            {"id": "n", "status": "ok", "split": "dev", "error_tpot_s": float("nan")},
            {"id": "h", "status": "ok", "split": "held-out", "error_tpot_s": "0.4"}]
    assert serve_load_slopes.mape(rows, "tpot_s", "dev") == pytest.approx(30.0)
    assert serve_load_slopes.mape(rows, "tpot_s", "dev", {"x_c512_"}) == pytest.approx(15.0)
    assert serve_load_slopes.mape(rows, "tpot_s", "held-out") == pytest.approx(40.0)


def test_the_sensitivity_hides_the_mma_of_w4a16_experts_at_one_row_tile():
    """FP4 weights without an FP4 peak: 8 rows under a 16-row tile hide, 32 rows do not (the engine's own rule
    answers, here False); with an FP4 peak the engine's rule answers at any rows."""
    import numpy as np

    from fastmodel.kernels.columns import C_FP4_GEMM, C_PEAK_FLOPS_4

    row = np.zeros(max(C_FP4_GEMM, C_PEAK_FLOPS_4) + 1)
    row[C_FP4_GEMM] = 1.0
    hides = serve_load_slopes.hides_at_one_tile(lambda r, g, m: False, lambda r, m: 16.0)
    assert hides(row, 15.0, 8.0) is True
    assert hides(row, 15.0, 32.0) is False
    row[C_PEAK_FLOPS_4] = 9e15
    assert hides(row, 15.0, 8.0) is False


def test_the_combine_sensitivity_adds_one_kernel_per_layer_on_hopper_vllm():
    """80 layers at 4 us: +320 us on a vLLM row (kv_write_kernel 1) of compute capability 9.0, +160 us per stage at
    pp 2; nothing for compute capability 10.0 or for an engine without vLLM's KV-write kernel."""
    import numpy as np

    from fastmodel.kernels.columns import C_COMPUTE_CAPABILITY, C_KERNEL_OVERHEAD_S, C_KV_WRITE_KERNEL, C_LAYERS, C_PP

    row = np.zeros(max(C_COMPUTE_CAPABILITY, C_KERNEL_OVERHEAD_S, C_KV_WRITE_KERNEL, C_LAYERS, C_PP) + 1)
    row[[C_LAYERS, C_PP, C_KERNEL_OVERHEAD_S, C_KV_WRITE_KERNEL, C_COMPUTE_CAPABILITY]] = 80.0, 1.0, 4e-6, 1.0, 9.0
    launches = serve_load_slopes.with_combine_kernel(lambda r: 1e-3)
    assert launches(row) == pytest.approx(1e-3 + 320e-6)
    row[C_PP] = 2.0
    assert launches(row) == pytest.approx(1e-3 + 160e-6)
    row[C_COMPUTE_CAPABILITY] = 10.0
    assert launches(row) == pytest.approx(1e-3)
    row[C_COMPUTE_CAPABILITY], row[C_KV_WRITE_KERNEL] = 9.0, 0.0
    assert launches(row) == pytest.approx(1e-3)


@pytest.mark.parametrize("name, module_name, attr", [("hidden-w4a16", "roofline", "hides_math"),
                                                      ("combine", "attention", "attention_launches")])
def test_each_sensitivity_patches_its_kernel_for_its_run_only(monkeypatch, name, module_name, attr):
    """The change is in place while validate runs and restored after; compiled kernels and unknown names are
    refused."""
    import types

    import fastmodel.api
    from fastmodel.kernels import jit, roofline
    from fastmodel.kernels.serve import attention

    module = {"roofline": roofline, "attention": attention}[module_name]
    original = getattr(module, attr)
    seen = []

    def fake_validate(path, heldout):
        seen.append((path, heldout, getattr(module, attr) is not original))
        return types.SimpleNamespace(rows=[{"id": "a"}])

    monkeypatch.setattr(fastmodel.api, "validate", fake_validate)
    monkeypatch.setattr(jit, "INTERPRETED", True)
    assert serve_load_slopes.sensitivity_rows("r.jsonl", name) == [{"id": "a"}]
    assert seen == [("r.jsonl", True, True)] and getattr(module, attr) is original
    if name == "combine":
        # evaluate's static-batch and max-throughput paths import it by name too (review15 #8)
        from fastmodel.kernels.serve import evaluate, load

        both = []
        monkeypatch.setattr(fastmodel.api, "validate", lambda path, heldout: both.append(
            (load.attention_launches is not original, evaluate.attention_launches is not original))
            or types.SimpleNamespace(rows=[]))
        serve_load_slopes.sensitivity_rows("r.jsonl", name)
        assert both == [(True, True)] and evaluate.attention_launches is original
    with pytest.raises(SystemExit, match="unknown"):
        serve_load_slopes.sensitivity_rows("r.jsonl", "other")
    monkeypatch.setattr(jit, "INTERPRETED", False)
    with pytest.raises(SystemExit, match="FASTMODEL_JIT=0"):
        serve_load_slopes.sensitivity_rows("r.jsonl", name)


def test_ttft_by_load_band(tmp_path):
    """TTFT errors +10 % and -20 % at 4 and 8 in flight, +30 % at 100: bands 4, 8 and above 64; a row without an
    error is not read; a static-batch record has no band."""
    records = [{"id": i, "model": _MOE, "serve": {"tp": 1, "concurrency": n, "input_len": 1024, "output_len": 1024}}
               for i, n in (("a", 4), ("b", 8), ("c", 100), ("e", 16))]
    records.append({"id": "s", "model": _MOE, "serve": {"tp": 1, "batch_size": 8, "input_len": 1024,
                                                          "output_len": 1024}})
    cols = ["id", "status", "split", "engine", "model", "error_tpot_s", "error_ttft_s"]
    table = [[i, "ok", "dev", "vLLM", "M", "0", e] for i, e in (("a", 0.1), ("b", -0.2), ("c", 0.3), ("e", ""),
                                                               ("s", 0.5))]
    rows = serve_load_slopes.split_records(*write_validated(tmp_path, records, cols, table))
    by_load = serve_load_slopes.mean_error_by(rows, serve_load_slopes.load_key, "ttft_s")
    assert by_load == {("M", "vLLM", 4): (pytest.approx(10.0), 1), ("M", "vLLM", 8): (pytest.approx(-20.0), 1),
                       ("M", "vLLM", float("inf")): (pytest.approx(30.0), 1)}
