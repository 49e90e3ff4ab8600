"""vLLM's MXFP4 MoE weight padding (``engine_kernels.expert_padding``, ``VLLM_MXFP4_PAD``; kernels/lm/shape.py
``padded``, ``expert_dims``, ``expert_weight_params``, ``mlp_gemm_time``; docs/model_serving.md S46), derived by hand
for gpt-oss-120b (hidden 2880, 128 experts of width 2880): the padded dims per backend and TP, the work and weight
ratio they imply, the rule by engine, checkpoint, device and backend, and the records that lower it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from fastmodel.kernels.lm.shape import expert_dims, expert_weight_params, padded
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns
from fastmodel.serve.engine_kernels import VLLM_MXFP4_PAD, expert_padding
from fastmodel.serve.records import lower_serve_record
from tests.interpreted import run_interpreted
from tests.suite_fixtures import GPT_OSS

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
WB = 4.25 / 8.0


def _row(device, tp, align=(0.0, 0.0), tokens=8192):
    row = columns(GPT_OSS, device, precision="mxfp4", input_len=tokens, output_len=2, batch_size=1, tp=tp,
                  quant_experts_only=1.0)
    row[COLUMN_INDEX["expert_ffn_align"]], row[COLUMN_INDEX["expert_hidden_align"]] = align
    return row


def test_padded_by_hand():
    assert padded(360.0, 128.0) == 384.0 and padded(360.0, 256.0) == 512.0 and padded(360.0, 64.0) == 384.0
    assert padded(1440.0, 64.0) == 1472.0 and padded(2880.0, 128.0) == 2944.0 and padded(2880.0, 256.0) == 3072.0
    assert padded(2880.0, 0.0) == 2880.0 and padded(720.0, 256.0) == 768.0


@pytest.mark.parametrize("backend, tp, width, hidden", [
    ("marlin", 1, 2944.0, 3072.0), ("marlin", 2, 1536.0, 3072.0), ("marlin", 8, 384.0, 3072.0),
    ("flashinfer_sm100", 1, 3072.0, 3072.0), ("flashinfer_sm100", 4, 768.0, 3072.0),
    ("flashinfer_sm100", 8, 512.0, 3072.0),
    ("triton", 1, 2880.0, 2880.0), ("triton", 2, 1472.0, 2880.0), ("triton", 8, 384.0, 2880.0),
])
def test_expert_dims_per_backend_and_tp(backend, tp, width, hidden):
    """Per rank, 2880 / tp rounded up to the backend's intermediate multiple; hidden 2880 to its hidden multiple."""
    row = _row("H200", tp, VLLM_MXFP4_PAD[backend])
    assert expert_dims(row, float(tp)) == (width, hidden)


def test_weight_ratio_by_hand():
    """Expert weights per device scale by (padded width x padded hidden) / (2880 / tp x 2880): Marlin TP 8
    384 x 3072 / (360 x 2880) = 1.1378; FlashInfer SM100 TP 8 512 x 3072 / (360 x 2880) = 1.5170, TP 1
    3072² / 2880² = 1.1378; nothing without padding (the unpadded formula, exactly)."""
    base = _row("H200", 8)
    assert expert_weight_params(base, 8.0) == 128.0 * 3.0 * 2880.0 * 2880.0 / 8.0
    marlin = _row("H200", 8, VLLM_MXFP4_PAD["marlin"])
    assert expert_weight_params(marlin, 8.0) / expert_weight_params(base, 8.0) == pytest.approx(
        384.0 * 3072.0 / (360.0 * 2880.0), rel=1e-12)
    fi8 = _row("B200", 8, VLLM_MXFP4_PAD["flashinfer_sm100"])
    assert expert_weight_params(fi8, 8.0) / expert_weight_params(_row("B200", 8), 8.0) == pytest.approx(1.5170, abs=1e-4)
    fi1 = _row("B200", 1, VLLM_MXFP4_PAD["flashinfer_sm100"])
    assert expert_weight_params(fi1, 1.0) / expert_weight_params(_row("B200", 1), 1.0) == pytest.approx(1.1378, abs=1e-4)


def test_prefill_experts_take_longer_by_the_padded_work():
    """An 8,192-token prefill at TP 1 on an H200 is compute-bound in the experts (256 rows per expert): the MLP GEMMs
    with Marlin's padding (2944 x 3072 against 2880 x 2880, x 1.090 in work) take longer, by at most that ratio (the
    router GEMM is not padded)."""
    t0, t1 = run_interpreted("""
from fastmodel.kernels.lm.shape import mlp_gemm_time
from fastmodel.serve.engine_kernels import VLLM_MXFP4_PAD
from tests.serve.test_serve_expert_padding import WB, _row
args = (8192.0, 1.0, 128.0, 256.0, 1.0, 0.0, WB, 1.0)
result = [mlp_gemm_time(_row("H200", 1), *args), mlp_gemm_time(_row("H200", 1, VLLM_MXFP4_PAD["marlin"]), *args)]
""")     # interpreted: compiled on its own, mlp_gemm_time took a minute of a cold CI (tests/interpreted.py)
    assert 1.0 < t1 / t0 <= 2944.0 * 3072.0 / 2880.0 ** 2 + 1e-9
    assert t1 / t0 > 1.05


def test_the_rule_by_engine_checkpoint_device_and_backend():
    zero = {"expert_ffn_align": 0.0, "expert_hidden_align": 0.0}
    assert expert_padding("vllm", True, True, False, True) == {"expert_ffn_align": 128.0, "expert_hidden_align": 256.0}
    assert expert_padding("vllm", True, True, False, False) == {"expert_ffn_align": 64.0, "expert_hidden_align": 0.0}
    assert expert_padding("vllm", True, False, True, False) == {"expert_ffn_align": 256.0, "expert_hidden_align": 256.0}
    assert expert_padding("vllm", False, True, False, True) == zero          # not an MXFP4-expert checkpoint
    assert expert_padding("vllm", True, False, False, False) == zero         # neither SM90 nor SM100
    assert expert_padding("trtllm", True, True, False, False) == zero
    assert expert_padding("sglang", True, False, True, False) == zero
    assert expert_padding(None, True, True, False, False) == zero


def test_the_records_that_lower_it():
    """gpt-oss-120b vLLM rows: the 99 Marlin (H100/H200 0.18.0) take (128, 256), the 70 B200 (0.15.1 and the 10 W4A8
    ones) (256, 256), the 20 other Hopper ones (Triton default) (64, 0); every other row (0, 0)."""
    seen = Counter()
    with open(DATA, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            cols = lower_serve_record(rec).columns
            align = (cols[COLUMN_INDEX["expert_ffn_align"]], cols[COLUMN_INDEX["expert_hidden_align"]])
            vllm_oss = rec["model"]["name"] == "gpt-oss-120b" and rec["framework"].startswith("vLLM")
            seen[(vllm_oss, align)] += 1
    assert seen[(True, (128.0, 256.0))] == 99
    assert seen[(True, (256.0, 256.0))] == 70
    assert seen[(True, (64.0, 0.0))] == 20
    assert sum(v for (oss, align), v in seen.items() if not oss and align != (0.0, 0.0)) == 0
    assert sum(v for (oss, _), v in seen.items() if oss) == 189
