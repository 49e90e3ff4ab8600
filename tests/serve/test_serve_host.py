"""Host issue time of the serving iterations an engine runs eagerly (kernels/serve/host.py), derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fastmodel.kernels.serve.costs import K_ATTN, K_COMM, K_GEMM, K_MEM
from fastmodel.kernels.serve.host import eager_host_s, eager_layer_ops
from fastmodel.kernels.serve.load import prefill_iteration
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.profiles import HOST_OP_S_EAGER, profile_columns

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
    graphed = evaluate("llama3.1-70b", "B200", precision="fp8", **kw)
    eager = evaluate("llama3.1-70b", "B200", precision="fp8", host_op_s=HOST_OP_S_EAGER, **kw)
    layers = 80
    assert eager["ttft"] == pytest.approx(layers * 19 * 20e-6, rel=1e-9)
    assert graphed["ttft"] < eager["ttft"]
