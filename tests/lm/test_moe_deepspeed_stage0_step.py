"""DeepSpeed's engine at ZeRO stage 0 under fp16, the DeepSpeed-MoE rows' path (fastmodel/lm/stacks/deepspeed.py
``stage0_path``, ``STAGE0_FP16_STEP_PASSES``; docs/model.md §11.32): the reduction's buffer passes and
``FP16_Optimizer.step``'s passes per local parameter, derived by hand from DeepSpeed v0.5.8, and their time on a
small plan; and the DeepSpeed-MoE dense record's micro-batch, which the script's batch ramp-up fixes."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fastmodel.kernels.lm.step import optimizer_step_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.lowering import Mesh, execution_values
from fastmodel.lm.stacks import deepspeed, resolve
from fastmodel.lm.table import row

DATA = Path(__file__).resolve().parents[1] / "data"
STAGE0 = "Megatron-DeepSpeed + DeepSpeed-MoE (DeepSpeed >= 0.5.8), ZeRO stage 0 (FP16_Optimizer), fp16"


def _resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, stack="megatron-2021", **fields), pp=1, layers=24)


def test_stage_0_fp16_step_moves_82_bytes_per_local_parameter_by_hand():
    """Per local parameter, v0.5.8: the reduction (engine.py ``allreduce_bucket``/``allreduce_and_copy``) flattens the
    fp16 gradients (2 + 2), pre-divides them (``prescale_gradients``, 2 + 2) and copies them back (2 + 2);
    ``FP16_Optimizer.step`` checks overflow per tensor with ``x.float().sum()`` (2 + 4 + 4), casts (2 + 4) and
    flattens (4 + 4) the gradients in FP32, takes their norm (4), unscales them (4 + 4), runs Adam (FP32 master
    4 + 4, moments 8 + 8, FP32 gradient 4) and copies the master into the fp16 weights (4 + 2): 82 B, no zeroing.
    The model's Adam kernel counts 10 + 16 + 2 = 28 B with the 2-B gradient; 25 passes of 2 B and the master's
    reread (4) bring it to 82."""
    reduction = (2 + 2) + (2 + 2) + (2 + 2)
    step = (2 + 4 + 4) + (2 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 4 + 8 + 8 + 4) + (4 + 2)
    assert reduction + step == 82
    r = row(optimizer="adam", grad_reduce_bytes=2, **deepspeed.STAGE0_FP16_STEP_PASSES)
    assert optimizer_step_bytes(r, 1e9, 3e9) == pytest.approx(1e9 * 82, rel=1e-12)
    assert optimizer_step_bytes(row(optimizer="adam", grad_reduce_bytes=2), 1e9, 3e9) == pytest.approx(1e9 * 28)


def test_only_a_text_naming_stage_0_under_fp16_takes_the_passes():
    spec = _resolved(STAGE0, precision="fp16", sharding="ddp")
    assert (spec.step_grad_passes, spec.step_master_copy) == (25.0, True)
    assert (spec.grad_reduce_dtype, spec.grad_accum_bytes) == ("fp16", 6.0)
    for other in (_resolved(STAGE0, precision="bf16", sharding="ddp"),
                  _resolved("Megatron-DeepSpeed, fp16", precision="fp16", sharding="ddp")):
        assert other.step_grad_passes != 25.0


SMALL = dict(layers=2, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=32768, seq_len=1024,
             global_batch=8, recompute=0, hbm_bw=1.555e12, hbm_eff=0.85, gated_mlp=0, tied_embeddings=1)


def _step(**fields):
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    spec = _resolved(STAGE0, precision="fp16", sharding="ddp", micro_batch=8, **fields)
    values = execution_values(spec, SimpleNamespace(moe_experts=0, layers=2), Mesh(dp=1))
    return evaluate_table(table(1, **{**SMALL, **values}))["step_time"][0]


def test_the_passes_cost_54_bytes_per_parameter_at_the_hbm_rate_by_hand():
    """Two layers of 12 h^2 weights (QKV, projection, MLP; the model counts no biases, LayerNorms or learned
    positions) and the tied embedding V h: (25 x 2 + 4) B each over A100-40GB's 1.555 TB/s x 0.85 beyond the same plan
    with neither column -- both resolved through the stack."""
    h = 1024
    params = 2 * 12 * h * h + 32768 * h
    extra = _step() - _step(step_grad_passes=0, step_master_copy=False)
    assert extra == pytest.approx(params * 54 / (1.555e12 * 0.85), rel=1e-6)


def test_the_dense_record_takes_the_largest_micro_batch_its_batch_ramp_allows():
    """``--rampup-batch-size 32 32 4882812``: every ramp value 32, 64, ... must divide by micro_batch x dp (Megatron-
    DeepSpeed 3c666e85 microbatches.py, DeepSpeed v0.5.8 ``set_train_batch_size``). On 128 GPUs at TP 8, dp = 16,
    so micro_batch x 16 | 32: 2 at most; 1024 / (2 x 16) = 32 micro-batches. The MoE script has no ramp."""
    lines = (DATA / "runs_moe_public.jsonl").read_text().splitlines()
    rec = {r["id"]: r for r in map(json.loads, lines) if r.get("source") == "deepspeed_moe_2022"}
    dense = rec["deepspeed-moe-paper-6.7b-dense-a100-n128"]["plan"]
    dp = 128 // (dense["tp"] * dense["pp"])
    allowed = [mb for mb in (1, 2, 4, 8) if 32 % (mb * dp) == 0]
    assert dense["micro_batch"] == max(allowed) == 2
    assert dense["grad_accum"] == dense["global_batch"] // (dense["micro_batch"] * dp) == 32
    moe = rec["deepspeed-moe-1.3b-moe128-a100-n128"]
    assert not any("ramp the batch from 32" in a for a in moe["assumptions"])
