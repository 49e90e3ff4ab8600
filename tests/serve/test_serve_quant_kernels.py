"""Kernels around the quantized linears (kernels/serve/quant_kernels.py, fastmodel/serve/engine_kernels.py),
derived by hand: Llama-3.1-70B (80 layers, h 8192, 64 heads of 128, f 28672) decoding one request."""

from __future__ import annotations

import pytest

from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, device_columns, evaluate
from fastmodel.serve.engine_kernels import linear_kernels
from fastmodel.serve.records import lower_serve_record

MIB = 1024 * 1024
LAYERS, H, HEADS, D, F = 80, 8192, 64, 128, 28672
STEPS = 127                       # output_len 128: 127 decode steps after the prefill's token
KW = dict(input_len=128, output_len=128, batch_size=1)


def _decode_membound(device, precision, tp, **cols):
    return evaluate("llama3.1-70b", device, precision=precision, tp=tp, **KW, **cols)["decode_memory_bound"]


def _kernel(d, elements, qbytes):
    """One quantization kernel by hand: the per-kernel overhead, 2 bytes read and qbytes written per value."""
    return d["kernel_overhead_s"] + elements * (2.0 + qbytes) / (d["hbm_bw"] * d["hbm_eff"])


def test_fp8_output_projection_quant_is_one_kernel_per_layer():
    """vLLM FP8 (bit OUT = 2): the attention output (64 x 128 / tp values per token) is quantized by a kernel of
    its own; FP8 writes one byte per value."""
    d = device_columns("H200")
    base = _decode_membound("H200", "fp8", 1)
    extra = _decode_membound("H200", "fp8", 1, act_quant_inputs=2.0)
    assert extra - base == pytest.approx(STEPS * LAYERS * _kernel(d, HEADS * D, 1.0), rel=1e-9)


def test_nvfp4_quant_kernels_and_the_allreduce_fusion():
    """vLLM NVFP4 on B200 (bits QKV | OUT | GATE_UP = 7): at TP 1 three kernels per layer (h, a d, h values;
    NVFP4 writes 0.5 + 1/16 bytes per value). At TP 4 with the allreduce fusion the QKV and gate/up quantizations
    ride in the two allreduces, the output projection's stays (a d / 4 values), and the two add+RMSNorm kernels
    are not launched: one kernel overhead less per layer net, plus the output quantization's bytes."""
    d = device_columns("B200")
    q = 0.5 + 1.0 / 16.0
    base1 = _decode_membound("B200", "fp4", 1)
    three = _decode_membound("B200", "fp4", 1, act_quant_inputs=7.0)
    per_layer = _kernel(d, H, q) + _kernel(d, HEADS * D, q) + _kernel(d, H, q)
    assert three - base1 == pytest.approx(STEPS * LAYERS * per_layer, rel=1e-9)
    ar = dict(custom_allreduce_bytes=8 * MIB)
    base4 = _decode_membound("B200", "fp4", 4, **ar)
    fused = _decode_membound("B200", "fp4", 4, act_quant_inputs=7.0, allreduce_norm_fusion=1.0, **ar)
    per_layer = _kernel(d, HEADS * D / 4, q) - 2.0 * d["kernel_overhead_s"]
    assert fused - base4 == pytest.approx(STEPS * LAYERS * per_layer, rel=1e-9)
    # without the engine's own allreduce kernel (NCCL) nothing is fused: three quantization kernels again
    nccl = _decode_membound("B200", "fp4", 4, act_quant_inputs=7.0, allreduce_norm_fusion=1.0, custom_allreduce_bytes=0)
    assert nccl - _decode_membound("B200", "fp4", 4, custom_allreduce_bytes=0) == pytest.approx(
        STEPS * LAYERS * (_kernel(d, H, q) + _kernel(d, HEADS * D / 4, q) + _kernel(d, H, q)), rel=1e-9)


def test_sixteen_bit_activations_take_no_quant_kernel_and_defaults_change_nothing():
    """BF16 GEMMs (and FP4 weights without FP4 tensor cores: weight-only) quantize no activation; the columns'
    defaults (0, 0) leave every sweep as it was."""
    # tp 2: 70B BF16 weights leave no KV room on one H100 (no_kv_room, NaN)
    assert _decode_membound("H100", "bf16", 2, act_quant_inputs=15.0) == _decode_membound("H100", "bf16", 2)
    assert _decode_membound("H100", "fp4", 1, act_quant_inputs=7.0) == _decode_membound("H100", "fp4", 1)
    row = columns("llama3.1-70b", "H100", precision="fp8", batch_size=1)
    assert row[COLUMN_INDEX["act_quant_inputs"]] == 0.0 and row[COLUMN_INDEX["allreduce_norm_fusion"]] == 0.0


def test_vllm_profile_by_precision_and_version():
    """vLLM: FP8 quantizes the attention output alone (Inductor fuses the rest); NVFP4 the QKV, output and
    gate/up inputs (FP4 quant is a custom op, SiLU+Mul+NVFP4 is fused); MXFP4 experts run BF16 activations. The
    allreduce fusion is on from 0.16 (PR #34299) and for a record with no version; other engines: none counted."""
    assert linear_kernels("vllm", (0, 18, 0), "fp8", False, True) == {"act_quant_inputs": 2.0,
                                                                      "allreduce_norm_fusion": 1.0}
    assert linear_kernels("vllm", (0, 15, 1), "fp4", True, True) == {"act_quant_inputs": 7.0,
                                                                     "allreduce_norm_fusion": 0.0}
    assert linear_kernels("vllm", None, "mxfp4", True, True)["act_quant_inputs"] == 0.0
    assert linear_kernels("vllm", None, "fp4", False, True)["act_quant_inputs"] == 0.0   # Hopper: weight-only
    assert linear_kernels("vllm", None, "fp8", False, False)["allreduce_norm_fusion"] == 0.0
    assert linear_kernels("trtllm", None, "fp4", True, True) == {"act_quant_inputs": 0.0,
                                                                 "allreduce_norm_fusion": 0.0}


def test_a_vllm_record_is_lowered_with_its_kernels():
    record = {"id": "t", "framework": "vLLM 0.18.0",
              "model": {"name": "Llama-3.1-70B", "layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64,
                        "kv_heads": 8, "head_dim": 128, "vocab": 128256},
              "system": {"gpu": "B200", "n_gpus": 4},
              "serve": {"tp": 4, "precision": "fp4", "input_len": 128, "output_len": 128, "concurrency": 4}}
    lowered = lower_serve_record(record)
    assert lowered.columns[COLUMN_INDEX["act_quant_inputs"]] == 7.0
    assert lowered.columns[COLUMN_INDEX["allreduce_norm_fusion"]] == 1.0
    assert not any("fusion assumed" in note for note in lowered.notes)
    record["framework"] = "vLLM"                 # no version: the newest profile, and a note says so
    assert any("fusion assumed on" in note for note in lower_serve_record(record).notes)
    record["framework"] = "TensorRT-LLM 1.0.0rc3"
    assert lower_serve_record(record).columns[COLUMN_INDEX["act_quant_inputs"]] == 0.0
