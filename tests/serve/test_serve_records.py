"""Serving records (SERVE_RUNS.md) validated like specs, engine profiles, FP4, attention DP and the devices
(fastmodel.serve.record_schema, .profiles, .records; kernels/serve)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.serve.api import device_columns, evaluate, evaluate_table
from fastmodel.serve.profiles import parse_framework, profile_columns
from fastmodel.serve.records import lower_serve_record, read_serve_records

DATA = Path(__file__).resolve().parents[1] / "data"
MOE = {"name": "moe", "layers": 8, "hidden": 2048, "ffn": 1024, "heads": 32, "kv_heads": 8, "head_dim": 64,
       "vocab": 32000, "ffn_kind": "swiglu3", "moe_experts": 16, "moe_topk": 2, "moe_ffn": 1024}
RECORD = {
    "id": "r1", "source": "hand", "framework": "vLLM 0.11.2",
    "model": {"name": "llama-3.1-8b", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
              "head_dim": 128, "vocab": 128256, "ffn_kind": "swiglu3"},
    "system": {"gpu": "H100-SXM-80GB", "n_gpus": 2, "gpus_per_node": 8},
    "serve": {"tp": 2, "precision": "fp8", "input_len": 1024, "output_len": 256, "concurrency": 16},
    "measured": {"ttft_s": 0.1, "tpot_s": 0.01},
}


def _with(path: str, value, record=RECORD):
    data = json.loads(json.dumps(record))
    *blocks, key = path.split(".")
    target = data
    for block in blocks:
        target = target[block]
    if value is KeyError:
        del target[key]
    else:
        target[key] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    ("serve.tp", 1.5, r"f\.jsonl:3: serve\.tp: .*integer"),
    ("serve.concurrency", "16", r"serve\.concurrency: .*integer"),
    ("serve.concurrency", 16.0, r"serve\.concurrency: .*integer"),
    ("serve.max_throughput", "true", r"serve\.max_throughput: .*boolean"),
    ("serve.moe_tpp", 1, r"serve\.moe_tpp: unknown field \(did you mean 'moe_tp'\?\)"),
    ("serve.moe_tp", 0, r"serve\.moe_tp: 0 is the registry's code for 'not set'; leave the field out \(or null\)"),
    ("serve.moe_tp", 1 << 17, r"serve\.moe_tp: 131072 is outside \[0, 65536\]$"),
    ("serve.precision", "fp6", r"serve\.precision: .*\(got 'fp6'\)"),
    ("serve.kv_precision", "fp4", r"serve\.kv_precision: "),
    ("serve.input_len", 0, r"serve\.input_len: 0 is outside \[1, 16777216\] tokens"),
    ("serve.input_len", 1e300, r"serve\.input_len: "),
    ("serve.kv_cache_mem_fraction", 1.5, r"serve\.kv_cache_mem_fraction: 1\.5 is outside \[0\.01, 1\]"),
    ("serve.attention_dp", 3, r"serve\.attention_dp: 3 does not divide the 16 requests"),
    ("serve.pp", 2, r"serve\.tp: tp\*attention_dp\*pp = 4 but system\.n_gpus = 2"),
    ("serve.ep", 2, r"serve\.ep: ep = 2 needs a model with routed experts"),
    ("serve.tp", KeyError, r"serve\.tp: required field missing"),
    ("serve.batch_size", 4, r"serve: give exactly one of batch_size, concurrency, max_throughput"),
    ("frameworks", "x", r"frameworks: unknown field \(did you mean 'framework'\?\)"),
    ("serve.mode", "disaggregated", r"serve\.mode: .*\(did you mean 'disagg'\?\)"),   # A7: not 'aggregated'
    ("serve.mode", "aggregate", r"serve\.mode: .*\(did you mean 'aggregated'\?\)"),
    ("system.peak_flops_fp4", -1.0, r"system\.peak_flops_fp4: "),
    ("model.attention_sinks", "no", r"model\.attention_sinks: .*boolean"),
    ("model.kv_heads", 64, r"model\.kv_heads"),
])
def test_bad_serving_records_name_the_file_line_block_and_field(path, value, message):
    with pytest.raises(SpecError, match=message):
        lower_serve_record(_with(path, value), "f.jsonl:3")


@pytest.mark.parametrize("experts", [16.5, "16", True])
def test_an_ill_typed_expert_count_is_named_not_read_as_a_dense_model(experts):
    """moe_experts 16.5 with ep 2 used to say 'ep = 2 needs a model with routed experts': the count is refused."""
    record = _with("serve.ep", 2, _with("model", {**MOE, "moe_experts": experts}))
    with pytest.raises(SpecError, match=r"model\.moe_experts: "):
        lower_serve_record(record, "f.jsonl:3")


@pytest.mark.parametrize("path, value, message", [
    ("serve.mode", "disagg", r"f\.jsonl:3: disagg: required block missing"),    # crashed: AttributeError
    ("serve.pp", 2, r"serve\.tp: tp\*attention_dp\*pp = 4 but system\.n_gpus = 2"),
    ("serve.ep", 2, r"model\.moe_experts: "),
])
def test_an_ill_typed_expert_count_skips_only_the_expert_checks(path, value, message):
    """Review LOW 10: an ill-typed moe_experts used to return before every later invariant (a disagg record with
    no disagg block then crashed); now only the checks that read the count are skipped."""
    record = _with(path, value, _with("model", {**MOE, "moe_experts": "16"}))
    if value == "disagg":
        del record["serve"]["tp"]
    from fastmodel.serve.records import lower_any
    with pytest.raises(SpecError, match=message):
        lower_any(record, "f.jsonl:3")


def test_expert_layout_invariants():
    moe = _with("model", MOE)
    with pytest.raises(SpecError, match=r"serve\.ep: 3 does not divide the 16 routed experts"):
        lower_serve_record(_with("serve.ep", 3, moe))
    bad = _with("serve.moe_tp", 2, _with("serve.ep", 2, moe))
    with pytest.raises(SpecError, match=r"serve\.moe_tp: moe_tp\*ep = 4 but tp\*attention_dp = 2"):
        lower_serve_record(bad)
    lower_serve_record(_with("serve.moe_tp", 1, _with("serve.ep", 2, moe)))


def test_disaggregated_blocks_must_add_up():
    pool = {"workers": 1, "tp": 2, "pp": 1, "attention_dp": 1, "ep": 1}
    record = _with("serve.mode", "disagg", _with("serve.tp", KeyError))
    record["disagg"] = {"prefill": pool, "decode": {**pool, "workers": 2}, "total_gpus": 5}
    record["system"]["n_gpus"] = 6
    with pytest.raises(SpecError, match=r"disagg\.total_gpus: 5 but the pools use 6 GPUs"):
        lower_serve_record(record)
    record["disagg"]["total_gpus"] = 6
    record["disagg"]["decode"]["gpus_per_worker"] = 4
    with pytest.raises(SpecError, match=r"disagg\.decode\.gpus_per_worker: 4 but tp\*attention_dp\*pp = 2"):
        lower_serve_record(record)


def test_cli_serve_refuses_a_bad_record_in_one_line_and_validate_counts_it_a_miss(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(_with("serve.tp", 2.5)) + "\n")
    result = CliRunner().invoke(main, ["serve", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{path}:2: serve.tp: " in lines[0] and "integer" in lines[0]
    scored = CliRunner().invoke(main, ["validate", str(path)])     # never stops a file for one record
    assert scored.exit_code == 0 and f"refused (a miss): {path}:2: serve.tp: " in scored.stderr


def test_cli_serve_prints_each_note_of_the_records_once(tmp_path):
    """A record's notes (here: an engine fastmodel does not know, mapped to a documented default) reach the
    user of ``serve RECORDS`` on stderr, once per distinct note, with the records it applies to."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({**RECORD, "id": f"r{i}", "framework": "MyEngine 1.0"}) + "\n"
                            for i in range(5)))
    result = CliRunner().invoke(main, ["serve", str(path)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "MyEngine 1.0" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "(r0, r1, r2 and 2 more)" in notes[0]


def test_every_dev_serving_point_is_answered():
    """serve_dev_load.jsonl: every record lowers and evaluates (FP4, attention DP, moe_tp included)."""
    records = read_serve_records(DATA / "serve_dev_load.jsonl")
    assert len(records) == 961
    out, status = evaluate_table(np.stack([r.columns for r in records], axis=1))
    assert (status == 0).all()
    assert np.isfinite(out).all()


def test_validate_answers_every_disaggregated_record_and_splits_heldout():
    from fastmodel.analysis.splits import heldout_ids, mark_split
    from fastmodel.serve.validate import format_report, rows

    path = DATA / "serve_dev_disagg.jsonl"
    refused: list = []
    table = mark_split(rows(read_serve_records(path, refused)), heldout_ids(DATA / "heldout.json", path))
    assert not refused
    assert len(table) == 39 and all(np.isfinite(r["error_ttft_s"]) and np.isfinite(r["error_tpot_s"]) for r in table)
    assert sum(r["split"] == "held-out" for r in table) == 7
    report = format_report(table, by_split=True)
    assert "mode=disagg" in report and "held-out" in report
    first = json.loads(path.read_text().splitlines()[0])
    with pytest.raises(SpecError, match="two worker pools"):          # one kernel configuration cannot hold it
        lower_serve_record(first)
    from fastmodel.serve.disagg import DisaggRecord

    # serve and batch read its two pools (audit A4)
    assert all(isinstance(r, DisaggRecord) for r in read_serve_records(path))


def test_validate_splits_serving_errors_by_model_and_load_band():
    from fastmodel.serve.validate import format_report, load_band, rows

    # the bands by hand: 1-4 in flight (prefill speed), 5-32, 33+ (queueing); other load modes by name
    assert [load_band({"concurrency": c}) for c in (1, 4, 5, 8, 32, 33, 64, 256)] == \
        ["c1-4", "c1-4", "c5-32", "c5-32", "c5-32", "c33+", "c33+", "c33+"]
    assert load_band({"batch_size": 4}) == "batch" and load_band({"max_throughput": True}) == "max_throughput"
    assert load_band({}) == "-" and load_band({"concurrency": True}) == "-"
    table = rows(read_serve_records(DATA / "serve_dev_disagg.jsonl", []))
    assert {r["model"] for r in table} >= {"Qwen3-32B"}
    by_id = {r["id"]: r for r in table}
    assert by_id["aic-disagg-qwen3_32b_qwen3_32b_h100_sxm_sglang_disagg_4000x1000_c_tpnone_epnone_1"]["load"] == "c33+"
    report = format_report(table)
    assert "model=Qwen3-32B" in report and "load=c33+" in report


@pytest.mark.parametrize("framework, engine, version", [
    ("TensorRT-LLM 1.0.0rc3", "trtllm", (1, 0, 0)), ("vLLM 0.15.1", "vllm", (0, 15, 1)),
    ("SGLang 0.5.6.post2", "sglang", (0, 5, 6)), ("vLLM (version not recorded)", "vllm", None),
    ("TensorRT-LLM gpt-oss-dev (image)", "trtllm", None), ("MyEngine 2.0", None, (2, 0)), (None, None, None),
])
def test_framework_names_parse(framework, engine, version):
    assert parse_framework(framework) == (engine, version)


def test_engine_profiles_follow_their_documented_defaults():
    gib = 2**30
    assert profile_columns("vllm", (0, 11, 2), 80 * gib)["overlap_step"] == 0      # async scheduling off
    assert profile_columns("vllm", (0, 15, 1), 80 * gib)["overlap_step"] == 1      # auto-on from 0.15.1
    assert profile_columns("vllm", (0, 18, 0), 40 * gib)["max_num_tokens"] == 2048  # < 70 GiB
    assert profile_columns("sglang", (0, 5, 6), 180 * gib)["max_num_tokens"] == 16384
    assert profile_columns("sglang", (0, 5, 6), 141 * gib)["mixed_prefill"] == 0
    trt = profile_columns("trtllm", None, 80 * gib)
    assert trt["chunked_prefill"] == 0 and trt["kv_on_demand"] == 0
    record = lower_serve_record(_with("framework", "NoSuchEngine 1.0"))
    assert any("TensorRT-LLM profile" in note for note in record.notes)


def test_fp4_weights_are_weight_only_on_hopper_and_w4a4_on_blackwell():
    kw = dict(tp=4, input_len=4096, output_len=128, batch_size=1)
    bf16 = evaluate("llama3.1-70b", "H100", **kw)
    fp4 = evaluate("llama3.1-70b", "H100", precision="fp4", **kw)
    # decode reads 4.5-bit instead of 16-bit weights; prefill computes at the same 16-bit peak
    edges = 2 * 128256 * 8192 / 4 * 2.0          # embedding and LM head stay 16-bit (one device holds both)
    assert fp4["weight_memory"] - edges == pytest.approx((bf16["weight_memory"] - edges) * 4.5 / 16, rel=1e-12)
    assert fp4["prefill_gemm"] == pytest.approx(bf16["prefill_gemm"], rel=0.02)
    b300_fp8 = evaluate("llama3.1-70b", "B300", precision="fp8", **kw)
    b300_fp4 = evaluate("llama3.1-70b", "B300", precision="fp4", **kw)
    # compute-bound prefill GEMMs run at the FP4 peak: 13.5 / 4.5 = 3x the FP8 one (weights reads aside)
    assert 2.0 < b300_fp8["prefill_gemm"] / b300_fp4["prefill_gemm"] <= 3.0
    assert evaluate("llama3.1-70b", "H100", precision="fp4", **kw)["status"] == "ok"


def test_blackwell_ultra_device_files_carry_their_datasheets():
    b300, gb300 = device_columns("B300"), device_columns("GB300")
    assert b300["peak_flops_4"] == 13.5e15 and gb300["peak_flops_4"] == 15e15
    assert b300["peak_flops_8"] == 4.5e15 and gb300["peak_flops_8"] == 5e15
    # 288 GB on the datasheets; the CUDA-visible totals (docs/model_memory.md "One capacity per GPU (issue 23)")
    assert b300["hbm_bytes"] == round(267.69 * 2**30) and gb300["hbm_bytes"] == 276.5 * 2**30 and b300["hbm_bw"] == 8e12
    assert gb300["domain_size"] == 72 and b300["inter_bw"] == 100e9


def test_attention_dp_splits_requests_and_kv_but_not_attention_weights():
    kw = dict(input_len=1024, output_len=256, concurrency=64, precision="fp8")
    model = {k: v for k, v in MOE.items() if k not in ("name", "ffn_kind")} | {"gated_mlp": 1}
    tp4 = evaluate(model, "H100", tp=4, ep=4, **kw)
    adp4 = evaluate(model, "H100", tp=1, attention_dp=4, ep=4, **kw)
    assert tp4["status"] == adp4["status"] == "ok"
    # the same 4 GPUs hold the same KV cache per request group: a GPU holds a quarter of the requests' KV at
    # all kv heads (adp) or all requests at a quarter of the kv heads (tp)
    assert adp4["kv_cache_memory"] == pytest.approx(tp4["kv_cache_memory"], rel=1e-9)
    # attention weights are replicated over the attention-DP groups: more weight memory per GPU
    assert adp4["weight_memory"] > tp4["weight_memory"]
    bad = evaluate(model, "H100", tp=1, attention_dp=4, ep=4, moe_tp=2, **kw)
    assert bad["status"] == "ep_not_dividing"


def _disagg_record(concurrency=1, input_len=8192):
    record = json.loads(json.dumps(RECORD))
    record["model"] = {"name": "llama-3.1-70b", "layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64,
                       "kv_heads": 8, "head_dim": 128, "vocab": 128256, "ffn_kind": "swiglu3"}
    record["framework"] = "TensorRT-LLM 1.0.0"
    record["system"] = {"gpu": "H100-SXM-80GB", "n_gpus": 16, "gpus_per_node": 8}
    record["serve"] = {"mode": "disagg", "precision": "fp8", "input_len": input_len, "output_len": 128,
                       "concurrency": concurrency}
    record["disagg"] = {"prefill": {"workers": 2, "tp": 4}, "decode": {"workers": 1, "tp": 8}, "total_gpus": 16}
    return record


def test_disaggregated_request_alone_is_prefill_plus_kv_transfer_plus_first_decode_step():
    """One request: no queue, so ttft = the prefill worker's prefill + the KV transfer + two decode steps (the one
    that emits the token, and TensorRT-LLM's overlap step, §S30). 16 GPUs exceed one 8-GPU node: the KV moves over
    the NICs, each of the prefill worker's 4 GPUs sending its share: 2 x 80 x 8 x 128 x 1 B (FP8 KV) = 163,840 B per
    token (serving_facts §4.2)."""
    from fastmodel.serve.disagg import evaluate_disagg, kv_bytes_per_prompt_token, kv_transfer_time, lower_disagg
    from fastmodel.serve.record_schema import parse_serve_record

    data = _disagg_record()
    rec = lower_disagg(data, parse_serve_record(data), None)
    assert kv_bytes_per_prompt_token(rec.prefill) == 163_840
    d = device_columns("H100")
    nic = 50e9 * d.get("inter_eff", 0.85)
    assert kv_transfer_time(rec) == pytest.approx(163_840 * 8192 / (4 * nic), rel=1e-12)
    [result] = evaluate_disagg([rec])
    prefill = evaluate("llama3.1-70b", "H100", tp=4, precision="fp8", input_len=8192, output_len=2, batch_size=1,
                       chunked_prefill=0, mixed_prefill=1, overlap_step=1, kv_on_demand=0)
    assert result["prefill_s"] == pytest.approx(prefill["ttft"], rel=1e-9)
    assert result["ttft"] == pytest.approx(result["prefill_s"] + result["kv_transfer_s"] + 2 * result["tpot"], rel=1e-12)
    busy = evaluate_disagg([lower_disagg(d2 := _disagg_record(64), parse_serve_record(d2), None)])[0]
    assert busy["ttft"] > result["ttft"] and busy["tpot"] > result["tpot"]


def test_slo_search_returns_the_frontier_and_the_best_feasible_point():
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.serve.search import X, Y, slo_search

    result = slo_search("llama3.1-8b", "H100", input_len=1024, output_len=256, ttft=0.5, tpot=0.03, gpus=4)
    ds = result.dataset
    within = (ds.tp * ds.pp * ds.attention_dp <= 4).broadcast_like(ds.status).transpose(*ds.status.dims).values
    ok = (ds.status.values == 0) & ds.fits_memory.values & within
    feasible = ok & (ds.ttft.values <= 0.5) & (ds.tpot.values <= 0.03)
    assert result.feasible == int(feasible.sum()) > 0
    assert result.best[Y] == pytest.approx(float(ds[Y].values[feasible].max()))
    assert result.best["ttft"] <= 0.5 and result.best["tpot"] <= 0.03 and result.best["tp"] * result.best["pp"] <= 4
    xs = [r[X] for r in result.frontier]
    ys = [r[Y] for r in result.frontier]
    assert xs == sorted(xs) and all(a > b for a, b in zip(ys, ys[1:]))   # faster users, fewer tokens per GPU
    for r in result.frontier:                                             # nothing that fits dominates a point
        assert not np.any(ok & (ds[X].values > r[X]) & (ds[Y].values > r[Y]))
    strict = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "1us",
                                       "--tpot", "50ms", "--gpus", "2"])
    assert strict.exit_code == 1 and strict.stdout.startswith("no configuration meets TTFT <= 0.001 ms and TPOT <= "
                                                              "50 ms (of ")     # grep's no match (was exit 0)
    bad = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "--ttft", "2 parsecs", "--tpot", "1s"])
    assert bad.exit_code == 2 and "--ttft" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_speculative_decoding_divides_the_step_by_the_expected_accepted_tokens():
    """Verify + draft costs do not depend on the acceptance a; the tokens a step emits are (1 - a^(k+1))/(1 - a)
    (Leviathan et al. 2023, Eq. 1): one request alone (no prefill interference) shows the ratio exactly."""
    kw = dict(tp=8, precision="fp8", input_len=1024, output_len=512, concurrency=1, overlap_step=0, spec_tokens=3)
    none = evaluate("llama3.1-70b", "H200", spec_acceptance=0.0, **kw)
    half = evaluate("llama3.1-70b", "H200", spec_acceptance=0.5, **kw)
    full = evaluate("llama3.1-70b", "H200", spec_acceptance=1.0, **kw)
    assert none["tpot"] / half["tpot"] == pytest.approx((1 - 0.5**4) / (1 - 0.5), rel=1e-12)
    assert none["tpot"] / full["tpot"] == pytest.approx(4.0, rel=1e-12)
    plain = evaluate("llama3.1-70b", "H200", **{**kw, "spec_tokens": 0})
    assert none["tpot"] > plain["tpot"] > half["tpot"]        # drafts that are never accepted only cost


def test_cli_serve_takes_attention_dp_moe_tp_and_an_engine_profile():
    from click.testing import CliRunner

    from fastmodel.cli import main

    runner = CliRunner()
    base = ["serve", "-m", "mixtral-8x7b", "-d", "H200", "--tp", "1", "--attention-dp", "2", "--ep", "2",
            "--concurrency", "64", "--json"]
    trt = runner.invoke(main, base)
    sglang = runner.invoke(main, [*base, "--engine", "sglang"])
    assert trt.exit_code == 0 and sglang.exit_code == 0, trt.output + sglang.output
    # SGLang's prefill batches stall the decodes; TensorRT-LLM's ride in them
    assert json.loads(sglang.stdout)["tpot"] > json.loads(trt.stdout)["tpot"]
    bad = runner.invoke(main, [*base[:-3], "--ep", "4", "--concurrency", "64"])
    assert bad.exit_code == 2 and "ep_not_dividing" in bad.output


def test_disaggregated_start_wave_queues_at_the_prefill_pool():
    """8 requests arrive together at 2 prefill workers (TensorRT-LLM: whole prompts, budget 8192 = one prompt of
    8192 per iteration): 4 prompts per worker, done after 1, 2, 3, 4 lone prefills (mean 2.5), then the KV
    transfer and the first token's decode step + overlap step; 10 requests per client: ttft = 0.9 steady + 0.1 wave."""
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.disagg import evaluate_disagg, lower_disagg
    from fastmodel.serve.record_schema import parse_serve_record

    data = _disagg_record(8)
    steady_rec = lower_disagg(data, parse_serve_record(data), None)
    steady_rec.decode[C["client_rounds"]] = 0.0
    [steady] = evaluate_disagg([steady_rec])
    [mean] = evaluate_disagg([lower_disagg(data, parse_serve_record(data), None)])
    wave = 2.5 * steady["prefill_s"] + steady["kv_transfer_s"] + 2 * steady["tpot"]
    assert mean["ttft"] == pytest.approx(0.9 * steady["ttft"] + 0.1 * wave, rel=1e-9)
    assert mean["tpot"] == steady["tpot"] and mean["output_tokens_per_s"] == steady["output_tokens_per_s"]


def test_the_engine_sees_the_drivers_hbm_not_a_decimal_datasheet_reading():
    """docs/model_serving.md S20: an H200 record stating 141e9 bytes (141 GB read as decimal, 131.3 GiB) is lowered
    at the device file's CUDA-visible total, 139.81 GiB (6.1% apart: a note); 140.5 GiB (0.5% above) is rounding
    of the same part and also gives way, silently; 80 GiB (43% below: another part) keeps the record's value."""
    from fastmodel.serve.records import driver_hbm

    device = {"hbm_bytes": 139.81 * 2**30}
    system, notes = {"hbm_bytes": 141e9}, []
    driver_hbm(system, device, "H200-SXM-141GB", notes)
    assert system["hbm_bytes"] == 139.81 * 2**30 and len(notes) == 1 and "131.3 GiB -> 139.81 GiB" in notes[0]
    system, notes = {"hbm_bytes": 140.5 * 2**30}, []
    driver_hbm(system, device, "H200-SXM-141GB", notes)
    assert system["hbm_bytes"] == 139.81 * 2**30 and notes == []
    system, notes = {"hbm_bytes": 80 * 2**30}, []
    driver_hbm(system, device, "H200-SXM-141GB", notes)
    assert system["hbm_bytes"] == 80 * 2**30 and len(notes) == 1 and "kept" in notes[0]
    system, notes = {"hbm_bytes": 141e9}, []
    driver_hbm(system, {}, "MI355X", notes)                       # no device file: the record's value
    assert system["hbm_bytes"] == 141e9 and notes == []


def test_an_instance_cut_from_an_8_gpu_node_keeps_its_nvswitch():
    from fastmodel.registry.lm import COLUMN_INDEX

    # 4 of an HGX 8-GPU node's H100s (tp 2 x pp 2): the instance trims the domain to 4, but the node is switched
    four = _with("serve.pp", 2, _with("system.n_gpus", 4))
    assert lower_serve_record(four).columns[COLUMN_INDEX["nvlink_mesh_max"]] == 0.0
    # a 4-GPU Hopper node is the direct mesh of the device file (h100-sxm.toml nvlink_mesh_max = 4)
    mesh = _with("system.gpus_per_node", 4, four)
    assert lower_serve_record(mesh).columns[COLUMN_INDEX["nvlink_mesh_max"]] == 4.0
    # 2 of that board's 4 (tp 2): the pair keeps the board's 6 links per peer of 18, a third of the bandwidth
    pair = lower_serve_record(_with("system.gpus_per_node", 4, _with("system.n_gpus", 2))).columns
    from fastmodel.kernels.nccl import mesh_link_share

    assert pair[COLUMN_INDEX["domain_size"]] == 4.0 and mesh_link_share(pair, 2.0) == 1.0 / 3.0


def test_aic_quant_modes_are_typed_and_other_aic_keys_kept(tmp_path):
    """The ``aic`` block's moe_quant_mode / gemm_quant_mode pick the expert kernel's FP8 flavour
    (precisions.block_fp8_checkpoint), so a typo is refused with the field path and the nearest of
    aiconfigurator's mode names; the block's other keys stay informational."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    aic = {"moe_quant_mode": "fp8_block", "gemm_quant_mode": "nvfp4", "source_row_id": "x", "provenance": {"a": 1}}
    lower_serve_record(dict(RECORD, aic=aic))
    with pytest.raises(SpecError, match=r"aic\.gemm_quant_mode: .*\(got 'nvfp04'\) \(did you mean 'nvfp4'\?\)"):
        lower_serve_record(dict(RECORD, aic={**aic, "gemm_quant_mode": "nvfp04"}), "f.jsonl:1")
    path = tmp_path / "typo.jsonl"
    path.write_text(json.dumps(dict(RECORD, aic={**aic, "moe_quant_mode": "fp8_blok"})) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert f"{path}:1: aic.moe_quant_mode: " in result.output
    assert "(got 'fp8_blok') (did you mean 'fp8_block'?)" in result.output


def test_run_and_evaluate_record_give_one_evaluation():
    """``fastmodel run`` (serve.report.run_record) and serve.api.evaluate_record of a serving record both go
    through serve.api_records.evaluate_any_record: the kernel's status and results of the lowered record, bit for bit, and
    a calibration refused by each with the same line."""
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_any_record, evaluate_record, evaluate_table
    from fastmodel.serve.records import lower_serve_record
    from fastmodel.serve.report import run_record

    out, status = evaluate_table(lower_serve_record(RECORD, "f.jsonl:3").columns[:, None])
    _, state, result, pool = evaluate_any_record(RECORD, "f.jsonl:3")
    ds, report = evaluate_record(RECORD, "f.jsonl:3"), run_record(RECORD, "f.jsonl:3")
    assert pool is None and state == SERVE_STATUS_NAMES[int(status[0])] == "ok"
    assert ds.attrs["status"] == report.record["status"] == state and report.ok
    names = [r.name for r in SERVE_RESULTS]
    assert [float(ds[n]) for n in names] == [report.record[n] for n in names] == [float(result[n]) for n in names] \
        == [float(v) for v in out[:, 0]]
    for call in (evaluate_any_record, evaluate_record, run_record):
        with pytest.raises(SpecError, match=r"^f\.jsonl:3: calibration: applies to training runs \(the real-world "
                                            r"training model\), not to serving records$"):
            call(RECORD, "f.jsonl:3", calibration={"x": 1})

