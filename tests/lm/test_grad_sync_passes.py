"""Megatron-Core's passes over the whole gradient buffer before the data-parallel reduction (docs/model.md §11.7
"Optimizer step"): the NaN check of each bucket's norm (``step_grad_check``) and the 1/(dp cp) pre-scale
(``step_grad_prescale``), each against a hand count, and the Megatron-LM launcher that sets them."""

import pytest

from fastmodel.kernels.lm.step import optimizer_step_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve
from fastmodel.lm.table import row

MEGATRON_LM_STEP = dict(step_grad_passes=1, step_master_copy=1, step_zero_grad=1, step_grad_check=1,
                        step_grad_prescale=1)
FRAMEWORK = "Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0"


@pytest.mark.parametrize("dp, cp, held_passes", [
    (4, 1, 1 + 1 + 2),      # zeroed (write 4 B), its norm read (4 B), scaled by 1/4 in place (read + write 8 B)
    (1, 2, 1 + 1 + 2),      # the scaling factor is 1/(dp cp): context parallelism alone scales
    (1, 1, 1 + 1),          # dp cp = 1: factor 1, no scaling pass (param_and_grad_buffer.py line 345)
])
def test_the_held_buffer_is_zeroed_checked_and_prescaled_by_hand(dp, cp, held_passes):
    # Adam with FP32 master weights and FP32 gradients: 30 B per local parameter, + the norm's read (4) and
    # the master copy's read (4) = 38; the held buffer: 4 B per parameter and pass
    r = row(optimizer="adam", grad_reduce_bytes=4, dp=dp, cp=cp, **MEGATRON_LM_STEP)
    assert optimizer_step_bytes(r, 1e9, 4e9) == pytest.approx(1e9 * 38 + 4e9 * 4 * held_passes, rel=1e-12)
    # the DeepSeek-V2 EP 8 rank of runs_dev_b200 (dp 8): 1,976 M dense + 1,416 M expert parameters held, both
    # scaled by 1/8 (distributed_data_parallel.py lines 364-371): 3.392e9 x 4 B x 3 = 40.7 GB beyond the zeroing
    ds = row(optimizer="adam", grad_reduce_bytes=4, dp=8, **MEGATRON_LM_STEP)
    plain = row(optimizer="adam", grad_reduce_bytes=4, dp=8, step_grad_passes=1, step_master_copy=1,
                step_zero_grad=1)
    extra = optimizer_step_bytes(ds, 0.0, 3.392e9) - optimizer_step_bytes(plain, 0.0, 3.392e9)
    assert extra == pytest.approx(40.704e9, rel=1e-12)


@pytest.mark.parametrize("values, check, prescale", [
    ({}, True, True),                               # Megatron-LM's defaults at bf16
    ({"precision": "fp16"}, None, True),            # dynamic loss scaling turns the check off (arguments.py 649)
    ({"sharding": "fsdp"}, None, None),             # FSDP: no DDP bucket to check or scale
])
def test_the_megatron_lm_launcher_checks_and_prescales_its_buckets(values, check, prescale):
    execution = resolve(ExecutionSpec(framework=FRAMEWORK, **values), 1, 12)
    assert execution.step_grad_check is check and execution.step_grad_prescale is prescale
    recipe = resolve(ExecutionSpec(framework="NeMo (MLPerf v4.0 NVIDIA submission, 24.04)"), 1, 12)
    assert recipe.step_grad_check is None and recipe.step_grad_prescale is None     # not its training loop
