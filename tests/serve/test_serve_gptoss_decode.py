"""gpt-oss-120b decode (docs/model_serving.md S47): the InferenceX launchers' flags that the vLLM 0.15.1 B200, the
vLLM 0.18.0 H100/H200 and the TensorRT-LLM B200 rows state, the MoE input's own MXFP8 quantization kernel of vLLM's
W4A8 backend (``act_quant_inputs`` bit 16, kernels/serve/quant_kernels.py ``moe_input_quant_time``) and
TRTLLM-Gen's hidden MMA below one 8-token tile (``expert_hide_rows``), derived by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.roofline import expert_bounds, expert_gemm_roofline
from fastmodel.kernels.serve.quant_kernels import MOE_IN, Q_BYTES_MXFP8, linear_extra_time
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import evaluate
from fastmodel.serve.engine_kernels import TRTLLM_GEN_HIDE_ROWS, expert_hide_rows, linear_kernels, trtllm_gen_moe
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
LAYERS, H = 36, 2880                       # gpt-oss-120b
B200_KERNEL_S, B200_BW = 4e-6, 8e12 * 0.8  # specs/devices/b200.toml kernel_overhead_s, hbm_bw x hbm_eff


def _records():
    with open(DATA, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_the_versioned_gpt_oss_vllm_rows_state_their_launchers():
    """vLLM 0.15.1 B200 (InferenceX @d2c2acb19 ``gptoss_fp4_b200.sh``: kv-cache-dtype fp8, fuse_allreduce_rms true,
    VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1): 60 rows; vLLM 0.18.0 H100/H200 (@cec542a9a: no kv-cache-dtype, so
    'auto' = BF16; no compilation config, so 0.18.0's -O2 fusion; Marlin since S33): 45 + 54 rows. Each stated
    field carries its launcher line and commit."""
    counts: dict[tuple, int] = {}
    for record in _records():
        if record["model"]["name"] != "gpt-oss-120b" or record["framework"] not in ("vLLM 0.15.1", "vLLM 0.18.0"):
            continue
        serve = record["serve"]
        key = (record["framework"], record["system"]["gpu"], serve.get("kv_precision"),
               serve.get("allreduce_norm_fusion"), serve.get("moe_backend"))
        counts[key] = counts.get(key, 0) + 1
        commit = "@d2c2acb19" if record["framework"] == "vLLM 0.15.1" else "@cec542a9a"
        for field in ("kv_precision", "allreduce_norm_fusion"):
            stated = [a for a in record["assumptions"] if a.startswith(f"serve.{field}=")]
            assert len(stated) == 1 and commit in stated[0] and "S47" in stated[0]
    assert counts == {("vLLM 0.15.1", "B200", "fp8", True, "flashinfer_mxfp8"): 60,
                      ("vLLM 0.18.0", "H100-SXM-80GB", "bf16", True, "marlin"): 45,
                      ("vLLM 0.18.0", "H200-SXM-141GB", "bf16", True, "marlin"): 54}


def test_the_mxfp8_input_kernel_bit_is_vllms_w4a8_backend_on_fp4_cores_only():
    """Bit 16 for vLLM's ``flashinfer_mxfp8`` backend with an MXFP4 checkpoint on FP4 tensor cores; not on Hopper
    (Marlin / Triton take BF16 activations), not for vLLM's default W4A16 backend, not for NVFP4 (its MoE kernels
    quantize inside), not for TensorRT-LLM (its layer is not counted kernel by kernel, S22)."""
    assert linear_kernels("vllm", (0, 15, 1), "mxfp4", True, True, True, "flashinfer_mxfp8")["act_quant_inputs"] == 16.0
    assert linear_kernels("vllm", (0, 15, 1), "mxfp4", False, True, None, "flashinfer_mxfp8")["act_quant_inputs"] == 0.0
    assert linear_kernels("vllm", (0, 15, 1), "mxfp4", True, True)["act_quant_inputs"] == 0.0
    assert linear_kernels("vllm", (0, 15, 1), "fp4", True, True, None, "flashinfer_mxfp8")["act_quant_inputs"] == 7.0
    assert linear_kernels("trtllm", None, "mxfp4", True, True, None, "flashinfer_mxfp8")["act_quant_inputs"] == 0.0


def test_the_mxfp8_input_kernel_by_hand():
    """One launch per MoE layer over the m x h input: 2 bytes read, 1 + 1/32 written per value (E4M3 values, one
    E8M0 scale per 32). B200, m = 4 decoding requests: 4 us + 4 x 2880 x 3.03125 B / 6.4 TB/s = 4.005456 us per
    layer; over gpt-oss-120b's 36 layers and 127 decode steps it is the decode's memory-bound time difference.
    A dense layer never pays it."""
    assert Q_BYTES_MXFP8 == 1.03125 and MOE_IN == 16.0
    per_layer = B200_KERNEL_S + 4 * H * (2.0 + 1.03125) / B200_BW
    assert per_layer == pytest.approx(4.00545625e-6, rel=1e-12)
    kw = dict(precision="mxfp4", tp=1, input_len=128, output_len=128, batch_size=4)
    base = evaluate("gpt-oss-120b", "B200", **kw)["decode_memory_bound"]
    with_kernel = evaluate("gpt-oss-120b", "B200", act_quant_inputs=16.0, **kw)["decode_memory_bound"]
    assert with_kernel - base == pytest.approx(127 * LAYERS * per_layer, rel=1e-9)
    record = next(r for r in _records() if r["framework"] == "vLLM 0.15.1" and r["serve"]["tp"] == 1)
    row = lower_serve_record(record).columns
    assert row[COLUMN_INDEX["act_quant_inputs"]] == 16.0
    moe = linear_extra_time(row, 64.0, True, 0.0, 1.0)
    assert moe == pytest.approx(B200_KERNEL_S + 64 * H * 3.03125 / B200_BW, rel=1e-12)
    assert linear_extra_time(row, 64.0, False, 0.0, 1.0) == 0.0


def test_trtllm_gen_moe_hides_its_mma_below_one_smallest_tile():
    """TRTLLM-Gen's MXFP4 MoE on FP4 tensor cores (vLLM's SM100 backends; TensorRT-LLM with ``moe_config.backend:
    TRTLLM`` stated): ``expert_hide_rows`` 8, its smallest token tile. The 82 TensorRT-LLM gpt-oss B200 rows state
    ``trtllm_gen``; without it TensorRT-LLM keeps its default CUTLASS backend (0), and another engine refuses it.
    By hand, gpt-oss-120b B200 TP 8, 4 requests: 15.27 experts touched of 128 at 1.05 rows each (< 8), so each
    grouped GEMM costs max(c, w) plus its launch, not c + w."""
    assert trtllm_gen_moe("vllm", "default", "mxfp4", True) and trtllm_gen_moe("vllm", "flashinfer_mxfp8", "mxfp4", True)
    assert not trtllm_gen_moe("vllm", "marlin", "mxfp4", True) and not trtllm_gen_moe("vllm", "default", "mxfp4", False)
    assert trtllm_gen_moe("trtllm", "trtllm_gen", "mxfp4", True) and not trtllm_gen_moe("trtllm", "default", "mxfp4", True)
    assert not trtllm_gen_moe("trtllm", "trtllm_gen", "fp4", True)
    assert expert_hide_rows("trtllm", False, False, True) == TRTLLM_GEN_HIDE_ROWS == 8.0
    rows = [r for r in _records() if r["serve"].get("moe_backend") == "trtllm_gen"]
    assert len(rows) == 82 and all(r["system"]["gpu"] == "B200" and r["model"]["name"] == "gpt-oss-120b"
                                   and r["framework"].startswith("TensorRT-LLM") for r in rows)
    assert all(any(a.startswith("serve.moe_backend=trtllm_gen") and "SemiAnalysisAI/InferenceX@" in a
                   for a in r["assumptions"]) for r in rows)
    record = next(r for r in rows if r["serve"]["tp"] == 8 and r["serve"]["concurrency"] == 4)
    stated = lower_serve_record(record).columns
    plain = lower_serve_record(dict(record, serve={**record["serve"], "moe_backend": "default"})).columns
    at = COLUMN_INDEX["expert_hide_rows"]
    assert (stated[at], plain[at]) == (8.0, 0.0)
    groups = 128 * (1 - (1 - 4 / 128) ** 4)
    rows_per = 4 * 4 / groups
    assert groups == pytest.approx(15.2655, rel=1e-5)
    width = 2880 / 8
    for n, k in ((2 * width, H), (H, width)):
        compute, memory = expert_bounds(stated, groups, rows_per, n, k, 1.0, 0.53125)
        assert memory == pytest.approx(groups * (0.53125 * k * n + rows_per * k + 2 * rows_per * n) / B200_BW, rel=1e-12)
        hidden = expert_gemm_roofline(stated, groups, rows_per, n, k, 1.0, 0.53125, 1.0)
        added = expert_gemm_roofline(plain, groups, rows_per, n, k, 1.0, 0.53125, 1.0)
        assert hidden == pytest.approx(max(compute, memory) + B200_KERNEL_S, rel=1e-12)
        assert added == pytest.approx(compute + memory + B200_KERNEL_S, rel=1e-12)
    with pytest.raises(SpecError, match="serve.moe_backend"):
        lower_serve_record(dict(record, framework="vLLM 0.15.1"))
