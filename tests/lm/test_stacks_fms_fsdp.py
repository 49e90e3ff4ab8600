"""The ``fms-fsdp`` stack profile's optimizer-step passes (``fastmodel/lm/stacks/fms_fsdp.py`` ``STEP_GRAD_PASSES``,
docs/model.md §11.63), derived by hand."""

import json
from pathlib import Path

import pytest

from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import resolve

DATA = Path(__file__).resolve().parents[1] / "data"


def resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, **fields), pp=1, layers=32)


def test_fms_fsdp_step_passes_clip_and_foreach_adamw_by_hand():
    """fms-fsdp's optimizer step beyond the fused AdamW kernel the model counts (docs/model.md §11.63 and its second
    note): FSDP1 stores the gradient shard in the FP32 parameter's dtype (4 B, ``_cast_grad_to_param_dtype``);
    its ``clip_grad_norm_`` reads it for its norm (4 B) and scales it in place (8 B); torch's default foreach
    AdamW moves 80 B an element against the kernel's 10 + 16 + 4 = 30 B. In passes of the 4-B gradient:
    (4 + 8 + 80 - 30) / 4 = 15.5. The 7B H100 record (HSDP over 8 GPUs): each GPU steps P/8 parameters at
    30 + 15.5 x 4 = 92 B, as §11.63's 28 + 32 x 2 with a 2-B gradient."""
    from fastmodel.kernels.lm.optimizer_step import optimizer_bytes_per_param, optimizer_step_bytes
    from fastmodel.kernels.lm.shape import stored_grad_bytes

    fms = resolved("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", sharding="fsdp")
    assert fms.step_grad_passes == 15.5
    assert resolved("PyTorch FSDP (post-2.2 nightly)", sharding="fsdp").step_grad_passes in (None, 0, 0.0)
    line = next(s for s in (DATA / "runs_dev.jsonl").read_text().splitlines() if "llama2-7b-arch-h100" in s)
    row = lower_record(json.loads(line)).columns
    assert stored_grad_bytes(row) == 4.0                 # reduced in BF16, stored FP32
    assert optimizer_bytes_per_param(row) == 8.0 + 2.0 + 16.0 + 4.0
    local = 6_738_149_376 / 8                       # 32 x 202,375,168 + 2 x 32,000 x 4,096, over the 8-GPU shard
    assert optimizer_step_bytes(row, local, local) == pytest.approx(92.0 * local, rel=1e-12)
