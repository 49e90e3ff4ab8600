"""Host issue time of the serving iterations an engine runs eagerly (kernels/serve/host.py), derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fastmodel.kernels.serve.costs import K_ATTN, K_COMM, K_GEMM, K_MEM
from fastmodel.kernels.serve.host import eager_host_s, eager_layer_ops, iteration_s, rank_requests, scheduler_host_s
from fastmodel.kernels.serve.load import prefill_iteration
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.profiles import HOST_OP_S_EAGER, SCHED_HOST, profile_columns

GIB = 2**30
TRT = profile_columns("trtllm", None, 180 * GIB)


def _row(model="llama3.1-70b", device="B200", precision="fp8", tp=2, **kw):
    values = dict(TRT, tp=tp, input_len=1024, output_len=128, **kw)
    return columns(model, device, precision=precision, concurrency=4, **values)


def test_tensorrt_llm_dense_layer_count_by_hand():
    # norms 2, QKV and output projection and the MLP's two linears at 3 calls each in FP8 per-tensor
    # (static_quantize_e4m3_per_tensor, weight.t(), cublas_scaled_mm), attention 2 (new_empty, attention_inplace),
    # swiglu 1, two all-reduces at tp 2
    assert eager_layer_ops(_row()) == 2 + 4 * 3 + 2 + 1 + 2
    # NVFP4 linears: fp4_quantize + nvfp4_gemm, and the attention's NVFP4-output query; tp 1 has no all-reduce
    assert eager_layer_ops(_row(precision="fp4", tp=1)) == 2 + 4 * 2 + 2 + 1 + 1
    # BF16 F.linear (t + mm)
    assert eager_layer_ops(_row(precision="bf16", tp=1)) == 2 + 4 * 2 + 2 + 1


def test_tensorrt_llm_moe_layer_count_by_hand():
    # MXFP4 experts, BF16 attention (as gpt-oss ships): QKV and output projection 2 each, norms 2, attention 2;
    # the MoE block 6 (router weight.t() + cublas_mm, renorm_moe_routing_op, two weight views, fused_moe) + the
    # input quantize of TensorRT-LLM's W4A8 experts on B200; two all-reduces at tp 4
    row = _row("mixtral-8x7b", precision="mxfp4", tp=4, quant_experts_only=1, fp4_act=1)
    assert eager_layer_ops(row) == 2 + 2 * 2 + 2 + 6 + 1 + 2
    # W4A16 experts take no activation quantize
    row[COLUMN_INDEX["fp4_act"]] = 0.0
    assert eager_layer_ops(row) == 2 + 2 * 2 + 2 + 6 + 2


def test_host_seconds_are_layers_times_ops_times_op_cost_and_off_by_default():
    row = _row()
    layers = row[COLUMN_INDEX["layers"]]
    assert TRT["host_op_s"] == HOST_OP_S_EAGER == 20e-6
    assert eager_host_s(row) == pytest.approx(layers * 19 * 20e-6, rel=1e-12)
    row[COLUMN_INDEX["pp"]] = 2.0                           # a pipeline stage issues its own layers
    assert eager_host_s(row) == pytest.approx(layers / 2 * 19 * 20e-6, rel=1e-12)
    row[COLUMN_INDEX["host_ops_layer"]] = 50.0              # a set count overrides the table
    assert eager_host_s(row) == pytest.approx(layers / 2 * 50 * 20e-6, rel=1e-12)
    for engine in ("vllm", "sglang"):                       # not counted: the term is off
        other = profile_columns(engine, (0, 18, 0), 180 * GIB)
        assert other["host_op_s"] == 0.0
        assert eager_host_s(columns("llama3.1-70b", "B200", precision="fp8", tp=2, batch_size=1, **other)) == 0.0
    assert eager_host_s(columns("llama3.1-70b", "B200", precision="fp8", tp=2, batch_size=1)) == 0.0   # the column default


def test_eager_iteration_lasts_the_longer_of_gpu_and_host():
    row = _row(tp=8)
    costs = np.zeros(4)
    host = eager_host_s(row)
    small = prefill_iteration(row, 0.0, 16.0, 0.0, costs)       # 16 prompt tokens: the GPU is done first
    gpu = costs[K_GEMM] + costs[K_ATTN] + costs[K_MEM] + costs[K_COMM]
    assert gpu < host
    assert small == host
    large = prefill_iteration(row, 0.0, 8192.0, 0.0, costs)     # 8192 tokens: the host waits for the GPU
    gpu = costs[K_GEMM] + costs[K_ATTN] + costs[K_MEM] + costs[K_COMM]
    assert gpu > host
    assert large == gpu


def test_a_lone_short_prompt_on_tensorrt_llm_is_host_bound():
    kw = dict(tp=8, input_len=64, output_len=2, batch_size=1)
    graphed = evaluate("llama3.1-70b", "B200", precision="fp8", host_op_s=0.0, **kw)   # the default engine's is 20 us
    eager = evaluate("llama3.1-70b", "B200", precision="fp8", host_op_s=HOST_OP_S_EAGER, **kw)
    layers = 80
    assert eager["ttft"] == pytest.approx(layers * 19 * 20e-6, rel=1e-9)
    assert graphed["ttft"] < eager["ttft"]


# --- the scheduler loop's host time per iteration (docs/model_serving.md S36) ---------------------------------


def test_scheduler_host_time_is_fixed_plus_per_request_by_hand():
    row = _row(serve_step_overhead_s=1e-3, host_req_s=50e-6)
    # 1 ms + 40 requests x 50 us = 3 ms
    assert scheduler_host_s(row, 40.0) == pytest.approx(3e-3, rel=1e-12)
    # attention DP 4: each rank's loop walks a quarter of the requests
    row[COLUMN_INDEX["attention_dp"]] = 4.0
    assert rank_requests(row, 40.0) == 10.0
    assert scheduler_host_s(row, rank_requests(row, 40.0)) == pytest.approx(1.5e-3, rel=1e-12)


def test_iteration_overlaps_the_loop_with_the_gpu_only_under_the_overlap_scheduler():
    row = _row(serve_step_overhead_s=1e-3, host_req_s=50e-6)          # 3 ms of loop at 40 requests
    assert row[COLUMN_INDEX["overlap_step"]] == 1.0           # TensorRT-LLM's profile: overlap scheduler on
    assert iteration_s(row, 5e-3, 0.0, 40.0) == pytest.approx(5e-3, rel=1e-12)      # GPU-bound: hidden
    assert iteration_s(row, 2e-3, 0.0, 40.0) == pytest.approx(3e-3, rel=1e-12)      # host-bound: the loop
    # an eager iteration: the host issues 1.5 ms of operators and runs its loop, 4.5 ms against 4 ms of GPU
    assert iteration_s(row, 4e-3, 1.5e-3, 40.0) == pytest.approx(4.5e-3, rel=1e-12)
    row[COLUMN_INDEX["overlap_step"]] = 0.0                   # no overlap: the loop runs between iterations
    assert iteration_s(row, 5e-3, 0.0, 40.0) == pytest.approx(8e-3, rel=1e-12)
    assert iteration_s(row, 4e-3, 1.5e-3, 40.0) == pytest.approx(7e-3, rel=1e-12)


def test_scheduler_loop_is_off_by_default_and_in_every_profile():
    row = _row()
    assert scheduler_host_s(row, 100.0) == 0.0
    assert iteration_s(row, 2e-3, 0.0, 100.0) == 2e-3
    assert iteration_s(row, 2e-3, 5e-3, 100.0) == 5e-3     # the eager issue time alone (S21)
    for engine in ("trtllm", "vllm", "sglang"):
        profile = profile_columns(engine, None, 180 * GIB)
        assert (profile["serve_step_overhead_s"], profile["host_req_s"]) == SCHED_HOST[engine] == (0.0, 0.0)


def test_a_host_bound_decode_sets_tpot_of_one_request():
    # one request alone decodes at the decode-only iteration T_d (S7); a loop of 0.1 s per iteration is longer than
    # any GPU step here, so TPOT is the loop's time with the overlap scheduler and GPU + loop without it
    kw = dict(tp=8, input_len=1024, output_len=128, concurrency=1)
    free = evaluate("llama3.1-70b", "H200", precision="fp8", **kw)
    bound = evaluate("llama3.1-70b", "H200", precision="fp8", serve_step_overhead_s=0.1, **kw)
    assert free["tpot"] < 0.1
    assert bound["tpot"] == pytest.approx(0.1, rel=1e-9)
    serial = evaluate("llama3.1-70b", "H200", precision="fp8", overlap_step=0, **kw)
    both = evaluate("llama3.1-70b", "H200", precision="fp8", overlap_step=0, serve_step_overhead_s=0.1, **kw)
    assert both["tpot"] == pytest.approx(serial["tpot"] + 0.1, rel=1e-9)


def test_the_step_overhead_is_the_loop_constant_once_and_added_per_step_in_a_static_batch():
    """One column (S36): under continuous batching serve_step_overhead_s is h(r)'s constant, counted once per
    iteration inside iteration_s (0.1 s of loop, hidden GPU: TPOT 0.1 s, not GPU + 0.1); a static batch adds it to
    the prefill and to each of its O - 1 decode steps (decode_overhead = (O - 1) x 0.1 s)."""
    kw = dict(tp=8, input_len=1024, output_len=128, host_op_s=0.0)     # graphed: no eager issue time (S21)
    loop = evaluate("llama3.1-70b", "H200", precision="fp8", serve_step_overhead_s=0.1, concurrency=4, **kw)
    assert loop["tpot"] == pytest.approx(0.1, rel=1e-9)
    free = evaluate("llama3.1-70b", "H200", precision="fp8", batch_size=4, **kw)
    fixed = evaluate("llama3.1-70b", "H200", precision="fp8", batch_size=4, serve_step_overhead_s=0.1, **kw)
    assert fixed["ttft"] == pytest.approx(free["ttft"] + 0.1, rel=1e-9)
    assert fixed["tpot"] == pytest.approx(free["tpot"] + 0.1, rel=1e-9)
    assert fixed["decode_overhead"] == pytest.approx(127 * 0.1, rel=1e-12)


def test_host_step_s_is_an_older_name_of_the_step_overhead():
    from fastmodel.errors import SpecError
    from fastmodel.registry.lm_engine import COLUMN_ALIASES
    from fastmodel.serve.api import sweep

    assert "host_step_s" not in COLUMN_INDEX and COLUMN_ALIASES == {"host_step_s": "serve_step_overhead_s"}
    kw = dict(tp=8, input_len=1024, output_len=128, concurrency=4)
    old = evaluate("llama3.1-70b", "H200", precision="fp8", host_step_s=0.1, **kw)
    assert old == evaluate("llama3.1-70b", "H200", precision="fp8", serve_step_overhead_s=0.1, **kw)
    with pytest.raises(SpecError, match="older name of serve_step_overhead_s"):
        columns("llama3.1-70b", "H200", batch_size=1, host_step_s=0.1, serve_step_overhead_s=0.1)
    ds = sweep("llama3.1-70b", device="H200", precision="fp8", load_mode="concurrency", batch_size=4, tp=8,
               host_step_s=[0.0, 0.1])
    assert list(ds["serve_step_overhead_s"].values) == [0.0, 0.1]
    assert float(ds["tpot"].sel(serve_step_overhead_s=0.1).squeeze()) == pytest.approx(old["tpot"], rel=1e-9)
    # a serving sweep file's [axes] (fastmodel/serve/sweep_file.py): the axis is stored under the column's name
    from pathlib import Path

    from fastmodel.serve.sweep_file import serve_plan
    specs = Path(__file__).resolve().parents[2] / "specs"
    plan = serve_plan("f.toml", "llama3.1-8b", "dgx-h100", "serve-chat", {"host_step_s": [0.0, 0.1]}, specs)
    assert list(plan.axis_lists) == ["serve_step_overhead_s"]
    with pytest.raises(SpecError, match="axes.host_step_s"):
        serve_plan("f.toml", "llama3.1-8b", "dgx-h100", "serve-chat",
                   {"host_step_s": [0.1], "serve_step_overhead_s": [0.1]}, specs)


def test_tensorrt_llm_triton_moe_layer_count_by_hand():
    """TritonFusedMoE (docs/model_serving.md S37): router 2 + topk 7 + routing_from_bitmatrix 28 (Bitmatrix.sum 5,
    the histogram slice 1, 5 torch.empty, 7 slices, 2 launches, 8 slices of the two _unpack_into_dict) + F.pad 1 +
    2 matmul_ogs x 9 + the un-pad slice 1 = 57 in place of CUTLASS's 6. gpt-oss on H200: norms 2, BF16 QKV and
    output projections 2 x 2, attention 2, two all-reduces at tp 8; ep 8 adds the 3 calls of prune_routing_ep."""
    from fastmodel.kernels.serve.host import TRITON_EP_OPS, TRITON_MOE_OPS, triton_moe_layer_ops
    assert TRITON_MOE_OPS == 2 + 7 + (5 + 1 + 5 + 7 + 2 + 8) + 1 + 2 * 9 + 1 == 57
    row = _row("mixtral-8x7b", device="H200", precision="mxfp4", tp=8, quant_experts_only=1)
    assert triton_moe_layer_ops(row) == 2 + 2 * 2 + 2 + 57 + 2
    row[COLUMN_INDEX["ep"]] = 8.0
    assert triton_moe_layer_ops(row) == 2 + 2 * 2 + 2 + 57 + TRITON_EP_OPS + 2 == 70
    row[COLUMN_INDEX["tp"]], row[COLUMN_INDEX["ep"]] = 1.0, 1.0
    assert triton_moe_layer_ops(row) == 65
    # 36 layers x 67 ops x 20 us: the host time of one eager gpt-oss iteration at tp > 1, 48.2 ms
    assert 36 * (2 + 2 * 2 + 2 + 57 + 2) * HOST_OP_S_EAGER == pytest.approx(0.04824)


def test_triton_moe_rule_needs_the_stated_backend_hopper_and_four_bit_experts():
    from fastmodel.serve.engine_kernels import trtllm_triton_moe
    assert trtllm_triton_moe("trtllm", True, True, False, True)             # serve.moe_backend = "triton"
    assert not trtllm_triton_moe("trtllm", False, True, False, True)        # not stated: CUTLASS count
    assert not trtllm_triton_moe("trtllm", True, True, True, False)         # Blackwell: FP4 tensor cores
    assert not trtllm_triton_moe("trtllm", True, False, False, True)        # 16-bit / FP8 experts
    assert not trtllm_triton_moe("vllm", True, True, False, True)


def _records():
    import json
    from pathlib import Path
    with open(Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _trt_gpt_oss_h200(record):
    return (record["model"]["name"] == "gpt-oss-120b" and record["system"]["gpu"].startswith("H200")
            and record["framework"].startswith("TensorRT"))


def test_gpt_oss_h200_records_lower_to_the_triton_count():
    """serve_dev_load.jsonl: every TensorRT-LLM gpt-oss H200 row states serve.moe_backend = "triton" (docs S37) and
    takes 65 ops at tp 1, 67 at tp 2-8 with ep 1 (the version-unknown rows of 2025-11-02) and 70 at tp 8 ep 8."""
    from fastmodel.serve.records import lower_serve_record
    got = {}
    for data in filter(_trt_gpt_oss_h200, _records()):
        s = data["serve"]
        got.setdefault((s.get("moe_backend"), s["tp"], s.get("ep", 1)), set()).add(
            float(lower_serve_record(data).columns[COLUMN_INDEX["host_ops_layer"]]))
    assert got == {("triton", 1, 1): {65.0}, ("triton", 2, 1): {67.0}, ("triton", 4, 1): {67.0},
                   ("triton", 8, 1): {67.0}, ("triton", 8, 8): {70.0}}


def test_the_framework_string_is_not_read_without_the_field():
    """The image in ``framework`` alone moves nothing: every gpt-oss H200 TensorRT-LLM row with the field removed,
    the 17 gpt-oss-dev ones included, keeps the CUTLASS count (0) and no Triton note."""
    import copy

    from fastmodel.serve.records import lower_serve_record
    rows = [copy.deepcopy(r) for r in _records() if _trt_gpt_oss_h200(r)]
    assert sum("gpt-oss-dev" in r["framework"] for r in rows) == 17
    for r in rows:
        del r["serve"]["moe_backend"]
        lowered = lower_serve_record(r)
        assert float(lowered.columns[COLUMN_INDEX["host_ops_layer"]]) == 0.0
        assert not any("OpenAI-Triton" in note for note in lowered.notes)


def test_exactly_the_trt_gpt_oss_h200_rows_state_triton_with_the_recipe():
    """62 rows: the 45 version-unknown ones (2025-11-02) cite the recipe commit of that date, the gpt-oss-dev image
    and why their ep = 1 is kept; the 17 gpt-oss-dev ones cite the recipe at their own dates. No other row states it."""
    records = _records()
    triton = [r for r in records if r["serve"].get("moe_backend") == "triton"]
    assert len(triton) == 62 and all(_trt_gpt_oss_h200(r) for r in triton)
    assert not [r for r in records if _trt_gpt_oss_h200(r) and r not in triton]
    unknown = [r for r in triton if "not recorded" in r["framework"]]
    assert len(unknown) == 45
    for r in unknown:
        assert r["aic"]["provenance"]["measured"].startswith("2025-11-02")
        assert any("e06929c70" in a and "release:gpt-oss-dev" in a and "TRITON" in a for a in r["assumptions"])
        assert any(a.startswith("serve.ep=1 kept") and "process_result.py" in a for a in r["assumptions"])
    for r in triton:
        if r not in unknown:
            assert "gpt-oss-dev" in r["framework"]
            assert any(a.startswith("serve.moe_backend=triton") and "TRITON" in a for a in r["assumptions"])


def test_triton_backend_is_refused_outside_tensorrt_llm():
    import copy

    from fastmodel.errors import SpecError
    from fastmodel.serve.records import lower_serve_record
    record = copy.deepcopy(next(r for r in _records() if r["framework"].startswith("vLLM")))
    record["serve"]["moe_backend"] = "triton"
    with pytest.raises(SpecError):
        lower_serve_record(record)
