"""The NVFP4 (W4A4) prefill GEMM rate of the serving engines (kernels/roofline.py ``fp4_gemm_rate``, device column
``w4a4_gemm_rate``; docs/model_serving.md S59): the rate from the cited microbenchmarks by hand, and a Llama-3.1-70B
prefill priced at it by hand. Built, not applied: no device file states the column, so B200 keeps rate 1."""

from __future__ import annotations

import math

import pytest

from fastmodel.kernels.roofline import NVFP4_GEMM_RATE
from fastmodel.serve.api import device_columns, evaluate

#: vLLM's CUTLASS kernels on B200, Llama-3.1-8B N = 6,144, K = 4,096, M = 16,384, pre-quantized inputs (TFLOP/s):
#: NVFP4 ``nvfp4-noquant`` (vllm-project/vllm PR #20578 / #20646 "Before" table) and per-tensor FP8
#: ``fp8-tensor-w-tensor-a-noquant`` (PR #19566)
NVFP4_TFLOPS, FP8_TFLOPS = 3904.329097, 2544.683145
B200_RATE = (NVFP4_TFLOPS / FP8_TFLOPS) / (9e15 / 4.5e15)
#: Llama-3.1-70B's four linears per layer at TP 1 (N, K): QKV, output, gate/up, down
LINEARS = ((10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))
PROMPT = dict(tp=1, input_len=4096, output_len=2, batch_size=1, precision="fp4")


def test_the_b200_rate_is_the_measured_speedup_over_the_datasheet_ratio():
    """NVFP4 runs 3,904.3 / 2,544.7 = 1.534x FP8 where the datasheet allows 9 / 4.5 = 2x: 0.767 of the FP4 peak's
    share. Transformer Engine's B300 ratio (docs/model.md §11.38) is lower still: 1.81 / 3 = 0.603."""
    assert NVFP4_TFLOPS / FP8_TFLOPS == pytest.approx(1.534, abs=0.0005)
    assert B200_RATE == pytest.approx(0.767, abs=0.0005)
    assert NVFP4_GEMM_RATE == pytest.approx(0.603, abs=0.0005)


def _w4a4_compute_s(m: int) -> float:
    """The 80 layers' W4A4 GEMMs on one m-token prompt at rate 1, by hand: 2 m N (K + 128) FLOPs each at
    9 PF x 0.48, over the tile/wave quantization of 128 x 256 tiles on 148 SMs (one wave per 148 tiles)."""
    total = 0.0
    for n, k in LINEARS:
        tiles = math.ceil(m / 128) * math.ceil(n / 256)
        quant = (m * n / (tiles * 128 * 256)) * tiles / (math.ceil(tiles / 148) * 148)
        total += 2.0 * m * n * (k + 128) / (9e15 * 0.48 * quant)
    return 80 * total


def test_a_prefill_at_the_b200_rate_by_hand():
    """Llama-3.1-70B NVFP4 on one B200, a 4,096-token prompt: every linear is compute-bound, so the rate divides
    their compute time: 133.35 ms at rate 1 becomes 133.35 / 0.767 = 173.86 ms, 40.51 ms more; the 16-bit LM head
    and the kernels' launches do not move."""
    d = device_columns("B200")
    assert (d["peak_flops_4"], d["gemm_eff_8"], d["sm_count"], d["gemm_k_half"]) == (9e15, 0.48, 148, 128)
    assert "w4a4_gemm_rate" not in d                     # built, not applied (S59)
    base = evaluate("llama3.1-70b", "B200", **PROMPT)
    rated = evaluate("llama3.1-70b", "B200", w4a4_gemm_rate=B200_RATE, **PROMPT)
    compute = _w4a4_compute_s(4096)
    assert compute == pytest.approx(0.13335, abs=5e-5)
    assert rated["prefill_gemm"] - base["prefill_gemm"] == pytest.approx(compute * (1 / B200_RATE - 1), rel=1e-9)
    assert evaluate("llama3.1-70b", "B200", w4a4_gemm_rate=1.0, **PROMPT)["prefill_gemm"] == base["prefill_gemm"]


def test_the_rate_leaves_fp8_and_the_memory_bound_decode_alone():
    """The rate reads W4A4 GEMMs only: an FP8 prompt keeps its time, and a one-request decode step, which streams
    the weights (memory-bound), keeps its TPOT."""
    kw = dict(tp=1, input_len=1024, output_len=128, batch_size=1)
    fp8 = evaluate("llama3.1-70b", "B200", precision="fp8", **kw)
    assert evaluate("llama3.1-70b", "B200", precision="fp8", w4a4_gemm_rate=0.5, **kw)["ttft"] == fp8["ttft"]
    fp4 = evaluate("llama3.1-70b", "B200", precision="fp4", **kw)
    rated = evaluate("llama3.1-70b", "B200", precision="fp4", w4a4_gemm_rate=B200_RATE, **kw)
    assert rated["tpot"] == pytest.approx(fp4["tpot"], rel=1e-12)
    assert rated["ttft"] > fp4["ttft"]
