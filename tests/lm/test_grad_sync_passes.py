"""Megatron-Core's passes over the whole gradient buffer before the data-parallel reduction (docs/model.md §11.7
"Optimizer step"): the NaN check of each bucket's norm (``step_grad_check``) and the 1/(dp cp) pre-scale
(``step_grad_prescale``), and the word embedding's dense gradient added into the main gradient every micro-batch
(``embedding_dense_grad``, §11.43's DeepSeek-V2 note), each against a hand count, and the Megatron-LM launcher
that sets them."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_MEM, head_costs
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
    assert execution.embedding_dense_grad is (None if values.get("sharding") == "fsdp" else True)
    recipe = resolve(ExecutionSpec(framework="NeMo (MLPerf v4.0 NVIDIA submission, 24.04)"), 1, 12)
    assert recipe.step_grad_check is None and recipe.step_grad_prescale is None     # not its training loop


@pytest.mark.parametrize("pp, charged", [(1, True), (2, False)])
def test_the_embedding_dense_gradient_is_added_into_main_grad_on_the_heads_rank_at_pp1(pp, charged):
    # DeepSeek-V2: V h = 102,400 x 5,120 = 524,288,000 elements at tp 1; a 16-bit gradient zero-filled (2 B),
    # read by main_grad.add_ (2 B), the FP32 main gradient read and written (8 B): 12 B each, 6.29 GB a
    # micro-batch, half charged to each pass of the head's W_MEM (as the loss's passes); at pp 2 the embedding
    # is on the first rank, not the head's: nothing (as its TP collectives, §11.44)
    common = dict(micro_batch=1, seq_len=4096, vocab=102400, hidden=5120, tp=1, pp=pp, hbm_bw=8e12, hbm_eff=0.8,
                  grad_reduce_bytes=4, loss_traffic_bytes_per_logit=52)
    on, off = np.zeros(N_WORK), np.zeros(N_WORK)
    head_costs(row(**common, embedding_dense_grad=1), on)
    head_costs(row(**common), off)
    expected = 0.5 * 102400 * 5120 * 12 / (8e12 * 0.8) if charged else 0.0
    assert on[W_MEM] - off[W_MEM] == pytest.approx(expected, rel=1e-12, abs=1e-15)
