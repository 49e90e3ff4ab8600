"""MegaBlocks' Megatron-LM fork (stanford-futuredata/Megatron-LM 0bdc8181) under fp16 and local DDP: the gradient
path of ``stacks.megatron_2021.fork_fp16_defaults`` (docs/model.md §11.14.9), derived by hand -- 6 B per parameter
and micro-batch of fp16 gradient accumulation, an fp16 all-reduce, and 52 B per parameter of optimizer step
(plus 2 B of zeros); and the memory of its FP32 gradient copy, an optimizer transient."""

from types import SimpleNamespace

import pytest

from fastmodel.kernels.lm.memory_peak import optimizer_transient_bytes
from fastmodel.kernels.lm.step import optimizer_step_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.lowering import Mesh, execution_values
from fastmodel.lm.stacks import megatron_2021, resolve
from fastmodel.lm.table import row

FORK = "Megatron-LM (stanford-futuredata fork 0bdc8181, 2022), fp16, DDP local"
DMOE = "MegaBlocks dMoE (block-sparse, dropless) on Megatron-LM (stanford-futuredata fork 0bdc8181), fp16"


def _resolved(framework, **fields):
    spec = ExecutionSpec(framework=framework, stack="megatron-2021", **fields)
    return resolve(spec, pp=1, layers=24, expert_parallel=True)


def test_the_fork_under_fp16_and_local_ddp_accumulates_and_reduces_16_bit_gradients():
    """fp16 without --accumulate-allreduce-grads-in-fp32: the hook's ``main_grad.add_`` into the fp16 buffer (and
    autograd's in-place add of an expert weight's fp16 ``.grad``) reads 2 + 2 and writes 2 = 6 B; the buffer is
    all-reduced in fp16. bf16 (which forces FP32 accumulation and fusion), another sharding or a text that does
    not name the fork keep the stack's defaults."""
    for text in (FORK, DMOE):
        spec = _resolved(text, precision="fp16", sharding="ddp")
        assert (spec.grad_reduce_dtype, spec.grad_accum_bytes) == ("fp16", 2.0 + 2.0 + 2.0), text
        assert (spec.step_grad_passes, spec.step_master_copy, spec.step_zero_grad) == (10.0, True, True), text
        assert spec.step_grad_copy_bytes == 4.0, text
    assert _resolved(FORK, precision="bf16", sharding="ddp").grad_accum_bytes is None
    assert _resolved(FORK, precision="bf16", sharding="ddp").step_grad_copy_bytes is None
    assert _resolved(FORK, precision="fp16", sharding="zero1").grad_accum_bytes is None
    # another Megatron text: Megatron-LM's own fp16 path (the same 6 B; its contiguous buffer by default, as the
    # fork's, with the buffer's /= dp; without a buffer only for a plan stating step_zero_grad = false, §11.49)
    other = _resolved("Megatron-LM 2021, fp16", precision="fp16", sharding="ddp")
    assert (other.grad_accum_bytes, other.step_grad_passes, other.step_zero_grad) == (6.0, 10.0, True)
    assert other.step_grad_prescale is True
    bare = _resolved("Megatron-LM 2021, fp16", precision="fp16", sharding="ddp", step_zero_grad=False)
    assert (bare.grad_accum_bytes, bare.step_grad_passes, bare.step_zero_grad) == (6.0, 16.0, False)
    assert _resolved(FORK, precision="fp16", sharding="ddp", grad_accum_bytes=0).grad_accum_bytes == 0


def test_the_forks_fp16_optimizer_step_moves_52_bytes_per_parameter_by_hand():
    """Float16OptimizerWithFloat16Params.step: ``main_grad.float()`` 2 + 4, unscale 4 + 4, the clip's norm 4,
    Adam (FP32 master 4 + 4, moments 8 + 8, FP32 gradient 4), the copy to the fp16 weights 4 + 2: 52 B per local
    parameter, and 2 B of zeros per parameter of the fp16 buffer. With the 2-B stored gradient the model's Adam
    kernel counts 10 + 16 + 2 = 28 B (the fp16 write of the copy among them); 10 passes of 2 B and the master's
    reread (4) bring it to 52."""
    passes = megatron_2021.FORK_FP16_STEP_PASSES
    r = row(optimizer="adam", grad_reduce_bytes=2, **passes)
    real = (2 + 4) + (4 + 4) + 4 + (4 + 4 + 8 + 8 + 4) + (4 + 2)
    assert real == 52
    assert optimizer_step_bytes(r, 1e9, 3e9) == pytest.approx(1e9 * real + 3e9 * 2, rel=1e-12)


def test_the_forks_fp32_gradient_copy_is_an_optimizer_transient_by_hand():
    """``main_param.grad = model_param.main_grad.float()``: 4 B per local parameter, held until the next step's
    ``zero_grad``; a routed expert's fp16 ``.grad`` (2 B, outside the buffer) is set to None as it is copied, so
    the loop ends at its peak. 100M non-expert and 300M expert parameters: 4 x 400M - 2 x 300M = 1.0 GB on top of
    the stored gradients. Without the column (every other stack): 0."""
    copy = _resolved(DMOE, precision="fp16", sharding="ddp").step_grad_copy_bytes
    r = row(optimizer="adam", grad_reduce_bytes=2, step_grad_copy_bytes=copy)
    assert optimizer_transient_bytes(r, 100e6, 300e6) == pytest.approx(4 * 400e6 - 2 * 300e6, rel=1e-12)
    assert optimizer_transient_bytes(row(optimizer="adam", grad_reduce_bytes=2), 100e6, 300e6) == 0.0


DMOE_MEDIUM = dict(layers=24, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=51200, seq_len=1024,
                   moe_experts=64, moe_topk=1, moe_ffn=4096, global_batch=512,
                   recompute=0, hbm_bw=2.039e12, hbm_eff=0.85, gated_mlp=0)


def _dmoe_medium_step(**fields):
    """dMoE-Medium's step time with the plan columns of the fork's resolved stack (fp16, local DDP, ep = dp = 8)."""
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    spec = _resolved(DMOE, precision="fp16", sharding="ddp", moe_dispatcher="alltoall", micro_batch=8, **fields)
    values = execution_values(spec, SimpleNamespace(moe_experts=64, layers=24), Mesh(ep=8, etp=1, dp=8))
    return evaluate_table(table(1, **{**DMOE_MEDIUM, **values}))["step_time"][0]


def test_dmoe_medium_pays_6_bytes_per_local_parameter_every_micro_batch_by_hand():
    """dMoE-Medium per GPU: 24 layers x (8 local experts x 2 x 1024 x 4096 + 4 x 1024^2 attention + 1024 x 64
    router) parameters, 8 micro-batches: 6 B x 8 x that over A100's 2.039 TB/s x 0.85 beyond the same plan with the
    term set to 0 -- both resolved through the stack, so the 6 B is the fork's wiring, not a column set here."""
    layer_params = 8 * 2 * 1024 * 4096 + 4 * 1024 * 1024 + 1024 * 64
    extra = _dmoe_medium_step() - _dmoe_medium_step(grad_accum_bytes=0)
    assert extra == pytest.approx(24 * layer_params * 6 * 8 / (2.039e12 * 0.85), rel=1e-6)
