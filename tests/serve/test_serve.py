"""Serving model (kernels/serve/evaluate.py, fastmodel.serve.api): hand-derived checks of every term."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.registry.serve import SERVE_RESULT_INDEX
from fastmodel.serve.api import columns, device_columns, evaluate, evaluate_table, sweep

L70 = dict(layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=128256)


def _params_70b():
    L, h, f, a, kv, dh, V = (L70[k] for k in ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab"))
    return L * (h * (a + 2 * kv) * dh + a * dh * h + 3 * h * f) + V * h     # layers + LM head (read every step)


def test_70b_decode_batch1_tp4_is_weights_over_bandwidth_plus_allreduce_and_kernel_latencies():
    d = device_columns("H100")
    weights = 2.0 * _params_70b()
    # two allreduces per layer of one token's activations (16 kB); 4 devices on NVLink: NCCL's LL ring, 3.6 us
    # base latency + 2 x 3 hops at .47/3.4 of the Simple hop, a quarter of the bus bandwidth (beats the tree's
    # 2 log2(4) Simple hops)
    volume = 2 * 3 / 4 * 2.0 * L70["hidden"]
    allreduce_latency = 3.6e-6 + 2 * 3 * d["intra_latency"] * 0.47 / 3.4 \
        + volume / (d["intra_bw"] * d["intra_eff"] / 4)
    assert allreduce_latency < 2 * math.log2(4) * d["intra_latency"]
    # every kernel of the step pays the device's per-kernel overhead (CUDA graphs remove the host's launch
    # calls, not a kernel's ramp and tail): per layer 4 GEMMs, the attention kernel and 4 memory-bound kernels
    # (2 fused add+RMSNorm, the SwiGLU activation, rotary), plus the LM head GEMM
    kernels = 80 * (4 + 1 + 4) + 1
    expected = weights / (4 * d["hbm_bw"] * d["hbm_eff"]) + 2 * 80 * allreduce_latency \
        + kernels * d["kernel_overhead_s"]
    r = evaluate("llama3.1-70b", "H100", tp=4, input_len=128, output_len=128, batch_size=1)
    assert r["status"] == "ok"
    assert r["tpot"] == pytest.approx(expected, rel=0.03)
    gemm_launches = (80 * 4 + 1) * d["kernel_overhead_s"]
    assert r["decode_gemm"] / 127 == pytest.approx(weights / (4 * d["hbm_bw"] * d["hbm_eff"]) + gemm_launches,
                                                   rel=0.03)


def test_long_prompt_prefill_is_compute_bound():
    d = device_columns("H100")
    r = evaluate("llama3.1-8b", "H100", input_len=16384, output_len=2, batch_size=1)
    h, f, a, kv, dh, L = 4096, 14336, 32, 8, 128, 32
    layer_params = h * (a + 2 * kv) * dh + a * dh * h + 3 * h * f
    tokens = 16384
    flops = 2.0 * tokens * L * layer_params
    compute = flops / (d["peak_flops_16"] * d["gemm_eff_16"])
    memory = L * layer_params * 2 / (d["hbm_bw"] * d["hbm_eff"]) * 2     # weights read by each of 2 chunks
    assert r["prefill_gemm"] > 5 * memory
    # compute-bound: the GEMM time is the FLOP time within the tile/depth losses (k_half 128 on k >= 4096: < 4%)
    assert compute <= r["prefill_gemm"] <= 1.10 * compute
    # causal attention over the prompt: 2 x 2 x s(s+1)/2 x heads x head_dim FLOPs per layer at attn_eff
    attention = L * 2 * 2 * tokens * (tokens + 1) / 2 * a * dh / (d["peak_flops_16"] * d["attn_eff"])
    assert r["prefill_attention"] == pytest.approx(attention, rel=0.01)
    assert r["ttft"] > r["prefill_gemm"] + r["prefill_attention"]


@pytest.mark.parametrize("tp, kv_precision, nbytes", [(1, "bf16", 2), (1, "fp8", 1), (8, "bf16", 2)])
def test_kv_bytes_per_token(tp, kv_precision, nbytes):
    r = evaluate("llama3.1-70b", "H200", tp=tp, kv_precision=kv_precision, input_len=100, output_len=10,
                 batch_size=3)
    assert r["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * nbytes / tp
    assert r["kv_cache_memory"] == r["kv_bytes_per_token"] * 3 * 110


def test_kv_heads_replicate_when_tp_exceeds_them():
    mqa = dict(L70, kv_heads=2)
    r = evaluate(mqa, "H100", tp=8, input_len=10, output_len=10, batch_size=1)
    assert r["kv_bytes_per_token"] == 2 * 80 * 1 * 128 * 2      # one head per device, not 2/8


@pytest.mark.parametrize("device, model, tp", [("H100", "llama3.1-70b", 4), ("L40S", "llama3.1-8b", 1),
                                               ("A100-80GB", "mixtral-8x7b", 2)])
def test_max_throughput_batch_is_the_largest_whose_kv_fits(device, model, tp):
    r = evaluate(model, device, tp=tp, input_len=2048, output_len=2048, max_throughput=True)
    assert r["status"] == "ok"
    d = device_columns(device)
    per_request = r["kv_bytes_per_token"] * 4096
    # the budget by hand: 0.9 x (HBM - weights - workspace of a max_batch_size step - framework constant)
    vector = columns(model, device, tp=tp, input_len=2048, output_len=2048, max_throughput=True)
    framework = vector[COLUMN_INDEX["framework_memory_bytes"]]
    from fastmodel.kernels.serve.evaluate import activation_memory

    workspace = activation_memory(vector, vector[COLUMN_INDEX["max_batch_size"]])
    budget = 0.9 * (d["hbm_bytes"] - r["weight_memory"] - workspace - framework)
    batch = r["batch_size"]
    assert batch * per_request <= budget < (batch + 1) * per_request
    assert r["fits_memory"] == 1.0


def test_max_throughput_without_room_is_flagged_not_crashed():
    r = evaluate("llama3.1-70b", "L40S", tp=1, input_len=128, output_len=128, max_throughput=True)
    assert r["status"] == "no_kv_room" and math.isnan(r["tpot"])


@pytest.mark.parametrize("load, named", [(["--concurrency", "8"], "no_kv_room: concurrency 8: "),
                                         (["--max-throughput"], "no_kv_room: max_throughput: "),
                                         (["--batch-size", "4"], "no_kv_room: batch 4: ")])
def test_no_kv_room_names_the_load_mode_given(load, named):
    """A8: 70B BF16 weights (~131 GiB) leave no KV room on one H100: the one-line error names the load the user
    gave (not always 'max_throughput'); a static batch too (mend18: it said ok with fits_memory 0 before)."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    result = CliRunner().invoke(main, ["serve", "-m", "llama3.1-70b", "-d", "H100", "--tp", "1", *load])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and named in result.output, result.output
    assert "max_throughput" not in result.output or "max_throughput" in named


def test_static_batch_without_room_for_one_request_is_no_kv_room():
    """A static batch refuses as the load modes do (S9): no_kv_room where the KV budget
    ``0.9 (HBM - weights - workspace - framework)`` holds less than one request's KV cache at full length, ok where
    it holds one. Llama 3.1 8B: 32 layers x 8 KV heads x 128 x (K, V) x 2 B = 131,072 B per token, x 4,096
    tokens; the HBM of the boundary by hand, 1 MB either side of it."""
    kw = dict(tp=1, input_len=2048, output_len=2048, batch_size=1)
    r = evaluate("llama3.1-8b", "H100", **kw)
    assert r["status"] == "ok" and r["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    framework = columns("llama3.1-8b", "H100", **kw)[COLUMN_INDEX["framework_memory_bytes"]]
    one_request = 131072.0 * 4096
    boundary = r["weight_memory"] + r["activation_memory"] + framework + one_request / 0.9
    below = evaluate("llama3.1-8b", "H100", hbm_bytes=boundary - 1e6, **kw)
    above = evaluate("llama3.1-8b", "H100", hbm_bytes=boundary + 1e6, **kw)
    assert below["status"] == "no_kv_room" and math.isnan(below["tpot"])
    assert above["status"] == "ok" and one_request <= above["kv_cache_capacity"] < 2 * one_request
    # room for one request but not for the batch: still ok, over memory (fits_memory 0), as before
    big = evaluate("llama3.1-8b", "H100", **{**kw, "batch_size": 1024})
    assert big["status"] == "ok" and big["fits_memory"] == 0.0


def test_static_decode_sum_is_exact_across_the_attention_crossover():
    """MLA decode attention is compute-bound at long context and memory-bound at short: the closed-form sum
    equals the per-token loop of the step time."""
    from fastmodel.kernels.serve.evaluate import attention_lines

    mla = dict(layers=4, hidden=7168, ffn=18432, heads=128, kv_heads=128, head_dim=128, vocab=1000, mla=1,
               q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    kw = dict(input_len=20, output_len=400, batch_size=64, kv_precision="fp8")
    vector = columns(mla, "H100", **kw)
    p1, q0, q1 = attention_lines(vector, 64.0)
    assert p1 > q1 and 21 < q0 / (p1 - q1) < 419            # the crossover lies inside the decode range
    launches = 399 * 4 * vector[COLUMN_INDEX["kernel_overhead_s"]]     # one attention kernel per layer and step
    loop = sum(4 * max(p1 * c, q0 + q1 * c) for c in range(21, 420)) + launches
    r = evaluate(mla, "H100", **kw)
    assert r["decode_attention"] == pytest.approx(loop, rel=1e-12)
    mean_context = 4 * 399 * max(p1 * 220.0, q0 + q1 * 220.0) + launches
    assert abs(r["decode_attention"] - mean_context) > 1e-6 * loop   # the mean context is not the same


def test_sum_max_lines_matches_brute_force():
    from fastmodel.kernels.serve.evaluate import sum_max_lines, sum_window

    rng = np.random.default_rng(0)
    for _ in range(200):
        p0, p1, q0, q1 = rng.normal(size=4)
        lo, hi = sorted(rng.integers(-50, 50, size=2))
        brute = sum(max(p0 + p1 * c, q0 + q1 * c) for c in range(lo, hi + 1))
        assert sum_max_lines(p0, p1, q0, q1, float(lo), float(hi)) == pytest.approx(brute, abs=1e-9)
        window = float(rng.integers(-10, 60))
        brute = sum(max(p0 + p1 * min(c, window), q0 + q1 * min(c, window)) for c in range(lo, hi + 1)) \
            if window > 0 else sum(max(p0 + p1 * c, q0 + q1 * c) for c in range(lo, hi + 1))
        assert sum_window(p0, p1, q0, q1, float(lo), float(hi), window) == pytest.approx(brute, abs=1e-9)


def test_moe_decode_reads_the_expected_experts():
    from fastmodel.kernels.serve.evaluate import experts_touched

    assert experts_touched(8.0, 2.0, 1.0) == 2.0
    assert experts_touched(8.0, 2.0, 4.0) == pytest.approx(8 * (1 - 0.75 ** 4))
    one = evaluate("mixtral-8x7b", "H100", tp=2, input_len=64, output_len=64, batch_size=1)
    big = evaluate("mixtral-8x7b", "H100", tp=2, input_len=64, output_len=64, batch_size=64)
    assert one["experts_touched"] == 2.0 and big["experts_touched"] == pytest.approx(8.0)
    # batch 1 reads 2 of 8 experts: its decode GEMMs read about a quarter of the expert weights of batch 64
    assert one["decode_gemm"] < 0.45 * big["decode_gemm"]


def test_closed_loop_obeys_littles_law():
    """Without the overlap step a request's cycle is ttft + (O - 1) tpot: N = lambda x cycle (Little), in the
    steady state (client_rounds 0: no start wave in the mean)."""
    r = evaluate("llama3.1-8b", "H100", input_len=512, output_len=256, concurrency=32, overlap_step=0,
                 client_rounds=0)
    assert r["batch_size"] == 32
    assert r["e2e_latency"] == pytest.approx(r["ttft"] + 255 * r["tpot"])
    assert r["output_tokens_per_s"] == pytest.approx(32 * 256 / r["e2e_latency"], rel=1e-9)


def test_closed_loop_of_one_request_is_a_lone_prefill_then_decode_only_steps():
    """N = 1: nobody else's prompt interrupts, so ttft = the static prefill of one prompt and tpot = the
    decode-only iteration (the static batch of one decodes at the same mean context)."""
    alone = evaluate("llama3.1-70b", "H100", tp=4, input_len=1024, output_len=2, concurrency=1, overlap_step=0)
    static = evaluate("llama3.1-70b", "H100", tp=4, input_len=1024, output_len=2, batch_size=1)
    assert alone["ttft"] == pytest.approx(static["ttft"], rel=1e-12)
    assert alone["tpot"] == pytest.approx(static["tpot"], rel=1e-9)
    overlap = evaluate("llama3.1-70b", "H100", tp=4, input_len=1024, output_len=2, concurrency=1, overlap_step=1)
    assert overlap["ttft"] == pytest.approx(alone["ttft"] + alone["tpot"], rel=1e-9)


def test_closed_loop_queues_prompts_as_load_grows():
    """More requests in flight: more prompts per second share the iterations, so ttft and tpot rise; prefill
    iterations that stall the decodes (SGLang's default) give a longer tpot than mixed ones."""
    kw = dict(tp=4, input_len=4096, output_len=256, precision="fp8")
    runs = [evaluate("llama3.1-70b", "H100", concurrency=n, **kw) for n in (1, 8, 32)]
    assert runs[0]["ttft"] < runs[1]["ttft"] < runs[2]["ttft"]
    assert runs[0]["tpot"] < runs[1]["tpot"] < runs[2]["tpot"]
    stalled = evaluate("llama3.1-70b", "H100", concurrency=32, mixed_prefill=0, **kw)
    assert stalled["tpot"] > runs[2]["tpot"]


def test_requests_beyond_the_kv_cache_wait_by_littles_law():
    """A request that finds no KV room waits for (N - running) / lambda (Little's law over the queue)."""
    kw = dict(tp=1, input_len=1024, output_len=8192, precision="fp8", overlap_step=0, client_rounds=0)
    fits = evaluate("llama3.1-70b", "H200", concurrency=1024, **kw)
    running = fits["batch_size"]
    assert running < 1024
    rate = fits["output_tokens_per_s"] / 8192                   # requests per second = tokens/s / O
    base = evaluate("llama3.1-70b", "H200", concurrency=int(running), **kw)
    assert base["batch_size"] == running
    assert fits["ttft"] == pytest.approx(base["ttft"] + (1024 - running) / rate, rel=1e-9)


def test_static_batch_throughput_and_latency_identities():
    r = evaluate("llama3.1-8b", "H100", input_len=512, output_len=256, batch_size=16)
    decode = r["decode_gemm"] + r["decode_attention"] + r["decode_memory_bound"] + r["decode_comm"]
    assert r["e2e_latency"] == pytest.approx(r["ttft"] + decode)
    assert r["tpot"] == pytest.approx(decode / 255)
    assert r["output_tokens_per_s"] == pytest.approx(16 * 256 / r["e2e_latency"])
    assert r["output_tokens_per_s_per_user"] == pytest.approx(1 / r["tpot"])


def test_int4_weights_speed_up_memory_bound_decode():
    bf16 = evaluate("llama3.1-70b", "H100", tp=4, input_len=64, output_len=64, batch_size=1)
    int4 = evaluate("llama3.1-70b", "H100", tp=4, input_len=64, output_len=64, batch_size=1, precision="int4")
    assert int4["decode_gemm"] < 0.35 * bf16["decode_gemm"]
    assert int4["weight_memory"] < 0.35 * bf16["weight_memory"]


def test_pipeline_parallel_keeps_weights_and_kv_per_device_split():
    one = evaluate("llama3.1-70b", "H100", tp=4, pp=1, input_len=64, output_len=64, batch_size=8)
    two = evaluate("llama3.1-70b", "H100", tp=4, pp=2, input_len=64, output_len=64, batch_size=8)
    assert two["kv_cache_memory"] == pytest.approx(one["kv_cache_memory"] / 2)
    assert two["weight_memory"] < 0.55 * one["weight_memory"]


def test_illegal_points_keep_a_status():
    out, status = evaluate_table(np.stack([
        columns("llama3.1-8b", "A100", precision="fp8", batch_size=1),
        columns("llama3.1-8b", "H100", tp=3, batch_size=1),
        columns("llama3.1-8b", "H100", pp=3, batch_size=1),
        columns("mixtral-8x7b", "H100", tp=2, ep=4, batch_size=1),
    ], axis=1))
    from fastmodel.registry.serve import SERVE_STATUS

    assert list(status) == [SERVE_STATUS[k] for k in ("no_fp8", "heads_not_divisible_by_tp",
                                                      "layers_not_divisible_by_pp", "ep_not_dividing")]
    assert np.isnan(out).all()


def test_sweep_is_labeled_with_units_and_matches_single_evaluations():
    ds = sweep("llama3.1-8b", device=["H100", "A100"], precision=["bf16", "fp8"], tp=[1, 2],
               batch_size=[1, 16], input_len=[128, 1024], output_len=64)
    assert ds.tpot.dims == ("device", "precision", "tp", "batch_size", "input_len")
    assert ds.tpot.attrs["units"] == "s" and ds.output_tokens_per_s.attrs["units"] == "tokens/s"
    assert (ds.status.sel(device="A100", precision="fp8") == 4).all()
    one = evaluate("llama3.1-8b", "H100", precision="fp8", tp=2, batch_size=16, input_len=1024, output_len=64)
    got = ds.sel(device="H100", precision="fp8", tp=2, batch_size=16, input_len=1024)
    for name in ("ttft", "tpot", "output_tokens_per_s", "memory_per_device"):
        assert float(got[name]) == pytest.approx(one[name], rel=1e-12)


def test_unknown_names_are_spec_errors_with_suggestions():
    with pytest.raises(SpecError, match="did you mean 'h100'"):
        evaluate("llama3.1-8b", "H10", batch_size=1)
    with pytest.raises(SpecError, match="exactly one"):
        evaluate("llama3.1-8b", "H100", batch_size=1, concurrency=2)
    with pytest.raises(SpecError, match="precision"):
        evaluate("llama3.1-8b", "H100", batch_size=1, precision="fp6")


def test_device_files_carry_datasheets():
    assert device_columns("H200")["hbm_bw"] == 4.8e12
    assert device_columns("H200")["hbm_bytes"] == round(139.81 * 2**30)   # CUDA-visible (docs/model_memory.md)
    assert device_columns("A100-SXM4-80GB")["hbm_bw"] == 2.039e12
    assert device_columns("A100-SXM4-40GB")["hbm_bw"] == 1.555e12
    assert device_columns("L40S")["peak_flops_8"] == 733e12
    assert device_columns("GH200")["hbm_bw"] == 4.0e12
    assert device_columns("A100")["peak_flops_8"] == 0


# --- serving records ----------------------------------------------------------------

RECORD = {
    "id": "t1", "source": "hand", "model": {"name": "llama-3.1-8b", "layers": 32, "hidden": 4096, "ffn": 14336,
                                           "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 128256,
                                           "ffn_kind": "swiglu3"},
    "system": {"gpu": "H100-SXM-80GB", "n_gpus": 1, "gpus_per_node": 8},
    "serve": {"tp": 1, "precision": "bf16", "input_len": 128, "output_len": 128, "batch_size": 4},
    "measured": {"output_tokens_per_s": 500.0},
}


def test_serve_record_lowers_like_the_api():
    from fastmodel.serve.records import is_serve_record, lower_serve_record

    assert is_serve_record(RECORD)
    record = lower_serve_record(RECORD)
    out, status = evaluate_table(record.columns[:, None])
    api = evaluate("llama3.1-8b", "H100", input_len=128, output_len=128, batch_size=4)
    assert status[0] == 0
    assert out[SERVE_RESULT_INDEX["tpot"], 0] == pytest.approx(api["tpot"], rel=1e-12)
    assert any("device file" in note for note in record.notes)


def test_serve_record_errors_name_the_field():
    from fastmodel.serve.records import lower_serve_record

    bad = json.loads(json.dumps(RECORD))
    bad["serve"]["input_lenn"] = 3
    with pytest.raises(SpecError, match=r"serve.input_lenn.*did you mean 'input_len'"):
        lower_serve_record(bad, "f.jsonl:1")
    bad = json.loads(json.dumps(RECORD))
    bad["serve"]["concurrency"] = 8
    with pytest.raises(SpecError, match="exactly one"):
        lower_serve_record(bad)


def test_cli_serve_and_validate_serving_records(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "serve.jsonl"
    path.write_text(json.dumps(RECORD) + "\n")
    runner = CliRunner()
    result = runner.invoke(main, ["serve", str(path)])
    assert result.exit_code == 0, result.output
    assert "t1: batch 4 requests" in result.output and "decode:" in result.output
    result = runner.invoke(main, ["validate", str(path), "-o", str(tmp_path / "rows.csv")])
    assert result.exit_code == 0, result.output
    predicted = evaluate("llama3.1-8b", "H100", input_len=128, output_len=128, batch_size=4)["output_tokens_per_s"]
    assert f"{100 * abs(predicted / 500 - 1):6.1f}%" in result.output
    assert (tmp_path / "rows.csv").read_text().startswith("id,")
    result = runner.invoke(main, ["serve", "-m", "llama3.1-8b", "-d", "H10"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    result = runner.invoke(main, ["serve", "-m", "llama3.1-8b", "--json", "--max-throughput"])
    assert result.exit_code == 0 and json.loads(result.stdout)["batch_size"] >= 1


def test_serving_pareto_frontier_figure(tmp_path):
    from fastmodel.plot.pareto import pareto_mask
    from fastmodel.plot.serving import serving_pareto
    from fastmodel.plot.style import save

    ds = sweep("llama3.1-70b", device=["H100", "H200", "A100"], precision="fp8", tp=[4, 8],
               batch_size=[1, 4, 16, 64, 256], input_len=1024, output_len=256, load_mode="concurrency")
    fig, ax = serving_pareto(ds, curve="device")
    assert set(ax.frontiers) == {"H100", "H200"}          # A100 has no FP8: every point illegal, no curve
    xs, ys, labels = ax.frontiers["H200"]
    # a frontier: per-user speed rises while per-GPU throughput falls, and no H200 point dominates it
    assert np.all(np.diff(xs) > 0) and np.all(np.diff(ys) < 0)
    part = ds.sel(device="H200")
    ok = (part.status == 0) & (part.fits_memory > 0)
    x_all = part.output_tokens_per_s_per_user.where(ok).values.ravel()
    y_all = part.output_tokens_per_s_per_gpu.where(ok).values.ravel()
    assert pareto_mask(x_all, y_all, "max", "max").sum() == len(xs)
    assert all("batch_size=" in label for label in labels)
    path = save(fig, tmp_path / "pareto.png")
    assert path.stat().st_size > 10_000
    _, ax = serving_pareto(ds, curve="device", sel={"tp": 8})
    assert ax.get_title() == "llama3.1-70b, serve: tp=8"      # what --sel fixed, as the other figures say


def test_validate_serving_records_without_measurements_is_a_one_line_error(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    record = json.loads(json.dumps(RECORD))
    del record["measured"]
    path = tmp_path / "serve.jsonl"
    path.write_text(json.dumps(record) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: no serving record carries measured output_tokens_per_s, "
                                                  "ttft_s or tpot_s"]


def test_validate_counts_a_refused_serving_record_as_a_miss(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    refused = json.loads(json.dumps(RECORD))
    refused["id"] = "t2"
    refused["serve"]["sparkle"] = 1                       # a field the serving engine does not take
    path = tmp_path / "serve.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(refused) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "refused (a miss):" in result.stderr and "serve.sparkle: unknown field" in result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("all "))
    assert line.split()[1:3] == ["1", "1"]               # one answered, one miss (n apart, as training's tables)
    assert float(line.split()[6].rstrip("%")) <= 50.0     # the miss counts against the hit rate


def test_static_prefill_attention_runs_one_prompt_per_attention_dp_group():
    """A static batch of 4 prompts over 4 attention-DP groups: each group attends its own prompt in parallel, so
    the prefill attention is one prompt's causal attention (flash: I (I + 1) / 2 pairs per head), not four."""
    # 160 GB of HBM: Mixtral's 93 GB of weights leave no KV room on one 80 GB H100 (no_kv_room, S9); the rates
    # stay the H100's
    kw = dict(input_len=2048, output_len=2, hbm_bytes=160e9)
    one = evaluate("mixtral-8x7b", "H100", tp=1, batch_size=1, **kw)
    four = evaluate("mixtral-8x7b", "H100", tp=1, attention_dp=4, ep=4, batch_size=4, **kw)
    d = device_columns("H100")
    layers, heads, dh = 32, 32, 128
    flops = 2.0 * heads * (dh + dh) * 2048 * 2049 / 2.0
    by_hand = layers * (flops / (d["peak_flops_16"] * d["attn_eff"]) + d["kernel_overhead_s"])
    assert one["prefill_attention"] == pytest.approx(by_hand, rel=1e-9)
    assert four["prefill_attention"] == pytest.approx(by_hand, rel=1e-9)


def test_a_python_sweep_too_large_for_memory_is_refused_before_its_axes_are_built():
    """sweep(..., batch_size=range(1, 10**10)) is one SweepError from the axes' lengths, not a list of 10^10
    values built before anything is checked."""
    from fastmodel.errors import SweepError
    from fastmodel.serve.api import sweep

    with pytest.raises(SweepError, match="10,000,000,000 configurations"):
        sweep("llama3.1-8b", "H100", batch_size=range(1, 10**10 + 1))


def test_a_cluster_given_as_the_device_names_its_gpu():
    """-d dgx-h100 said "unknown device 'dgx-h100' (did you mean 'dgx-b200'?)": a cluster spec names its GPU."""
    from fastmodel.errors import SpecError
    from fastmodel.serve.api import device_columns

    with pytest.raises(SpecError, match=r"'dgx-h100' is a cluster; give its GPU, 'H100-SXM-80GB'"):
        device_columns("dgx-h100")
