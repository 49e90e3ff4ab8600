"""The InferenceX launchers' flags, stated by the "vLLM (version not recorded)" rows they cover
(``serve.allreduce_norm_fusion``, ``serve.moe_backend = "flashinfer_mxfp8"``; fastmodel/serve/record_schema.py,
fastmodel/serve/profiles.py ``_vllm_flags``, fastmodel/serve/engine_kernels.py ``linear_kernels``;
docs/model_serving.md S45 "Stated flags"). The fusion's price per layer is derived by hand on a Llama-3.1-70B H100
row at TP 2: the two add+RMSNorm kernels the allreduces absorb, 2 x kernel_overhead_s / stack_compute_eff."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.serve.quant_kernels import linear_extra_time
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.engine_kernels import linear_kernels
from fastmodel.serve.profiles import fp4_activation
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
UNVERSIONED = "vLLM (version not recorded)"


def _records():
    with open(DATA, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _group(record):
    measured = str(record.get("aic", {}).get("provenance", {}).get("measured", ""))[:10]
    return record["model"]["name"], record["system"]["gpu"], measured


def _without(record, *fields):
    plain = copy.deepcopy(record)
    for field in fields:
        plain["serve"].pop(field, None)
    return plain


def test_exactly_the_launchers_rows_state_the_flags():
    """vLLM 0.10.2 launchers (InferenceX @9596d23d7 Llama, @e06929c70 gpt-oss): H100/H200 set no compilation
    config (fusion off, 45 + 60 Llama, 2 + 9 gpt-oss), B200 sets enable_fi_allreduce_fusion (60 + 60 Llama, 10
    gpt-oss); the 10 gpt-oss B200 rows also ran W4A8 experts. The KV cache: Llama's launchers set FP8 (225
    rows), gpt-oss's set none, vLLM's ``auto``, BF16 (21 rows). The three c512 H100 rows of 2025-12-05 (vLLM 0.11.0
    or 0.11.2, not settled) state nothing; the versioned gpt-oss rows' flags are S47's
    (tests/serve/test_serve_gptoss_decode.py)."""
    records = _records()
    counts: dict[tuple, int] = {}
    for record in records:
        if "allreduce_norm_fusion" in record["serve"] and record["framework"] == UNVERSIONED:
            key = _group(record) + (record["serve"]["allreduce_norm_fusion"],)
            counts[key] = counts.get(key, 0) + 1
            stated = [a for a in record["assumptions"] if a.startswith("serve.allreduce_norm_fusion=")]
            assert len(stated) == 1 and "SemiAnalysisAI/InferenceX@" in stated[0]
            assert record["serve"]["allreduce_norm_fusion"] or "compilation.py:88 @v0.10.2" in stated[0]
    assert counts == {("Llama-3.1-70B", "H100-SXM-80GB", "2025-10-29", False): 45,
                      ("Llama-3.1-70B", "H200-SXM-141GB", "2025-10-29", False): 60,
                      ("Llama-3.1-70B", "B200", "2025-10-29", True): 120,
                      ("gpt-oss-120b", "H100-SXM-80GB", "2025-11-02", False): 2,
                      ("gpt-oss-120b", "H200-SXM-141GB", "2025-11-02", False): 9,
                      ("gpt-oss-120b", "B200", "2025-11-02", True): 10}
    mxfp8 = [r for r in records if r["serve"].get("moe_backend") == "flashinfer_mxfp8" and r["framework"] == UNVERSIONED]
    assert len(mxfp8) == 10
    assert all(_group(r) == ("gpt-oss-120b", "B200", "2025-11-02") and r["framework"] == UNVERSIONED and
               any("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1" in a for a in r["assumptions"]) for r in mxfp8)
    kv = {}
    for record in records:
        if "kv_precision" in record["serve"] and record["framework"] == UNVERSIONED:
            key = (record["model"]["name"], record["serve"]["kv_precision"])
            kv[key] = kv.get(key, 0) + 1
            assert "allreduce_norm_fusion" in record["serve"]
            assert any(a.startswith(f"serve.kv_precision={key[1]}: the launcher") for a in record["assumptions"])
    assert kv == {("Llama-3.1-70B", "fp8"): 225, ("gpt-oss-120b", "bf16"): 21}
    left = [r for r in records if r["framework"] == UNVERSIONED and "allreduce_norm_fusion" not in r["serve"]]
    assert len(left) == 3 and all("_c512_" in r["id"] for r in left)


def test_the_stated_fusion_replaces_the_versions_default():
    """A stated flag wins over the version's default on SM90/SM100, and cannot turn the fusion on where vLLM does
    not run it; absent, today's rule (no version: on)."""
    assert linear_kernels("vllm", None, "fp8", False, True, False)["allreduce_norm_fusion"] == 0.0
    assert linear_kernels("vllm", None, "fp8", False, True)["allreduce_norm_fusion"] == 1.0
    assert linear_kernels("vllm", (0, 10, 2), "fp8", False, True)["allreduce_norm_fusion"] == 0.0
    assert linear_kernels("vllm", (0, 10, 2), "fp8", False, True, True)["allreduce_norm_fusion"] == 1.0
    assert linear_kernels("vllm", None, "fp8", False, False, True)["allreduce_norm_fusion"] == 0.0


def _stated_and_plain(record, field, column, stated_value, plain_value, **also):
    """The record lowered as stated and without ``serve.<field>``; asserts the two differ in ``column`` alone
    (and the columns of ``also``: name -> (stated, plain)), ``stated_value`` against ``plain_value``."""
    stated, plain = lower_serve_record(record), lower_serve_record(_without(record, field))
    other = plain.columns.copy()
    for name, (s_value, p_value) in {column: (stated_value, plain_value), **also}.items():
        at = COLUMN_INDEX[name]
        assert (stated.columns[at], plain.columns[at]) == (s_value, p_value)
        other[at] = s_value
    assert (stated.columns == other).all()
    return stated, plain

def test_a_stated_fusion_off_row_lowers_with_the_norm_kernels_back():
    """Llama-3.1-70B H100 TP 2 (fusion off stated): the columns equal the unstated row's but for
    ``allreduce_norm_fusion`` 1 -> 0, and the "assumed on" note goes. By hand, per layer at 4 tokens (a 64 KiB
    allreduce, the engine's own kernel): the dense layer's two add+RMSNorm kernels are launched again, and the FP8
    layer's only quantization kernel (the output projection's) does not depend on the fusion, so the layer is
    2 x kernel_overhead_s / stack_compute_eff longer; 80 layers per decode step."""
    record = next(r for r in _records() if r["serve"].get("allreduce_norm_fusion") is False
                  and r["system"]["gpu"] == "H100-SXM-80GB" and r["model"]["name"] == "Llama-3.1-70B"
                  and r["serve"]["tp"] == 2)
    stated, plain = _stated_and_plain(record, "allreduce_norm_fusion", "allreduce_norm_fusion", 0.0, 1.0)
    assert not any("fusion assumed on" in n for n in stated.notes)
    assert any("fusion assumed on" in n for n in plain.notes)
    assert any("serve.allreduce_norm_fusion = false" in n for n in stated.notes)
    row_off, row_on = stated.columns, plain.columns
    launch = row_off[COLUMN_INDEX["kernel_overhead_s"]] / row_off[COLUMN_INDEX["stack_compute_eff"]]
    delta = linear_extra_time(row_off, 4.0, False, 1.0, 1.0) - linear_extra_time(row_on, 4.0, False, 1.0, 1.0)
    assert delta == pytest.approx(2.0 * launch, rel=1e-12)


def test_the_stated_mxfp8_backend_runs_w4a8_experts():
    """gpt-oss-120b B200 (``moe_backend = "flashinfer_mxfp8"``): ``fp4_act`` 1 (MXFP8 x MXFP4, the FP8 peak) in
    place of vLLM's default 0 (W4A16), and the MoE input's own ``mxfp8_quantize`` kernel (``act_quant_inputs``
    bit 16, S47); nothing else moves (the trtllm-gen kernel's 8..64 row tiles are the same
    clamp at 0.10.2, ``mxfp4.py`` ``_get_tile_tokens_dim``). Another engine refuses it, and the fusion flag."""
    assert fp4_activation("vllm", "mxfp4", "flashinfer_mxfp8") == (1.0, None)
    assert fp4_activation("vllm", "mxfp4") == (0.0, None)
    assert fp4_activation("vllm", "fp4", "flashinfer_mxfp8") == (2.0, None)
    record = next(r for r in _records() if r["serve"].get("moe_backend") == "flashinfer_mxfp8")
    stated, plain = _stated_and_plain(record, "moe_backend", "fp4_act", 1.0, 0.0, act_quant_inputs=(16.0, 0.0))
    assert any("flashinfer_mxfp8" in n for n in stated.notes)
    for field, other_flag in (("moe_backend", "allreduce_norm_fusion"), ("allreduce_norm_fusion", "moe_backend")):
        trt = dict(_without(record, other_flag), framework="TensorRT-LLM 1.2.0")
        with pytest.raises(SpecError, match=f"serve.{field}"):
            lower_serve_record(trt)
