"""The arithmetic of bench/serve_qwen3_trt_floor.py (docs/model_serving.md §S41), by hand."""

import json
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench, write_validated

_ROOT = Path(__file__).resolve().parents[2]
floor = load_bench("serve_qwen3_trt_floor")
_RECORDS = _ROOT / "tests" / "data" / "serve_dev_load.jsonl"


def _qwen3_trt_records() -> list[dict]:
    with open(_RECORDS) as fh:
        recs = [json.loads(line) for line in fh]
    return [r for r in recs if r["model"]["name"] == "Qwen3-235B-A22B-FP8" and r["framework"] == "TensorRT-LLM 1.0.0rc3"]


def test_layer_count_by_hand():
    """Fused all-reduce + norm 1 + 1, QKV 2, q/k norm + RoPE 2, attention 2, output 2, the MoE wrapper's two views
    2, router 2, routing 1, experts 3 (two weight views and fused_moe): 18. 94 x 18 x 20 us = 33.84 ms."""
    assert [n for _, n in floor.QWEN3_MOE_LAYER_OPS] == [1, 1, 2, 2, 2, 2, 2, 2, 1, 3]
    assert floor.layer_ops() == 18
    assert floor.eager_host_s(94, 18, 20e-6) == pytest.approx(0.03384)


def test_applied_count_is_one_op_above_the_source_count():
    """The 126 rows state gemm/moe_quant_mode fp8_block; the lowering still counts §S21's per-tensor FP8 layer:
    norms 2 + 2 x 3 + attention 2 + MoE 6 + 1 + all-reduces 2 = 19 at TP 4 and 8, i.e. 94 x 1 x 20 us = 1.88 ms
    per eager iteration above §S41's 18."""
    from fastmodel.kernels.serve.host import eager_host_s, eager_layer_ops
    from fastmodel.serve.records import lower_serve_record

    recs = _qwen3_trt_records()
    assert len(recs) == 126
    assert {(r["aic"]["gemm_quant_mode"], r["aic"]["moe_quant_mode"]) for r in recs} == {("fp8_block", "fp8_block")}
    for tp in (4, 8):
        cols = lower_serve_record(next(r for r in recs if r["serve"]["tp"] == tp)).columns
        assert eager_layer_ops(cols) == 19.0
        assert eager_host_s(cols) - floor.eager_host_s(94, floor.layer_ops(), 20e-6) == pytest.approx(0.00188)


def test_ops_needed_by_hand():
    """TP 4, 512 / 128, N 4: (0.173548 - 2 x 0.0133407) / 94 / 20 us = 0.1468666 / 0.00188 = 78.12 ops per layer,
    4.3 times §S41's 18."""
    need = floor.ops_per_layer_needed(0.173548, 0.0133407, 94, 20e-6)
    assert need == pytest.approx(0.1468666 / 0.00188)
    assert need == pytest.approx(78.12, abs=0.01)
    assert need / floor.layer_ops() == pytest.approx(4.34, abs=0.01)


def test_budget_and_prompts_per_iteration_by_hand():
    """tau = B + ISL + 1500 up to a multiple of 32 (§S34: 2016, 2656); k = (tau - B) // (ISL - 1), at most B.
    N 16: tau 1664, 1792, 2048, 2560 at ISL 128, 256, 512, 1024 -> 1648 // 127 = 12, 1776 // 255 = 6,
    2032 // 511 = 3, 2544 // 1023 = 2; k ISL = 1536, 1536, 1536, 2048 prompt tokens. N 4, ISL 512: 2012 // 511 = 3;
    N 128, ISL 1024: 2528 // 1023 = 2 (§S34). N 4, ISL 128: 1632 // 127 = 12, capped at 4."""
    assert [floor.token_budget(16, i) for i in (128, 256, 512, 1024)] == [1664, 1792, 2048, 2560]
    assert [floor.prompts_per_iteration(i, 16) for i in (128, 256, 512, 1024)] == [12, 6, 3, 2]
    assert floor.token_budget(4, 512) == 2016 and floor.prompts_per_iteration(512, 4) == 3
    assert floor.token_budget(128, 1024) == 2656 and floor.prompts_per_iteration(1024, 128) == 2
    assert floor.prompts_per_iteration(128, 4) == 4


def test_isl_table_keeps_one_engine_model_gpu(tmp_path):
    """Row a: measured 0.170, predicted 0.070, TPOT 0.013 at TP 4, N 4, 512 / 128. Left out: b is vLLM, c is H200,
    d is refused, e has no concurrency."""
    rows = [("a", "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", "ok", 4), ("b", "vLLM 0.12.0", "H100-SXM-80GB", "ok", 4),
            ("c", "TensorRT-LLM 1.0.0rc3", "H200-SXM-141GB", "ok", 4),
            ("d", "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", "refused", 4),
            ("e", "TensorRT-LLM 1.0.0rc3", "H100-SXM-80GB", "ok", None)]
    table, recs = write_validated(
        tmp_path, [{"id": rid, "serve": {"tp": 4, "concurrency": n, "input_len": 512, "output_len": 128}}
                   for rid, *_, n in rows],
        ["id", "status", "framework", "gpu", "model", "measured_ttft_s", "predicted_ttft_s", "measured_tpot_s"],
        [[rid, st, fw, gpu, "Qwen3-235B-A22B-FP8", 0.170, 0.070, 0.013] for rid, fw, gpu, st, _ in rows])
    out = floor.isl_table(table, recs)
    assert dict(out) == {(4, 4, 128): {512: (0.170, 0.070, 0.013)}}


def test_the_documented_table_is_the_bench_table():
    """docs/model_serving.md §S41's op table: the rows' ops column, in order, is ``QWEN3_MOE_LAYER_OPS``, and its
    bold layer row is their sum."""
    import re

    text = (_ROOT / "docs" / "model_serving.md").read_text()
    block = text[text.index("<!-- host-ops-qwen3-moe -->"):text.index("<!-- /host-ops-qwen3-moe -->")]
    ops = [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|[^\n]*\|\s*$", block, flags=re.M)]
    assert ops == [n for _, n in floor.QWEN3_MOE_LAYER_OPS]
    assert re.search(r"\*\*layer\*\* \| \| \*\*(\d+)\*\*", block).group(1) == str(floor.layer_ops())
