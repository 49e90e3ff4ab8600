"""Review fixes on the layers a low-precision run keeps in BF16 (docs/model.md §11.39): the head's costs survive a
leading first rank, the counts Megatron-LM refuses are refused, the BF16 layers split by virtual chunk, and the
timeline's TP ops follow the kernel's forward / backward split."""

import numpy as np

from fastmodel.kernels.lm.layer import N_WORK as N_LAYER_WORK
from fastmodel.kernels.lm.passes import N_WORK, head_passes
from fastmodel.kernels.lm.step import busiest_stage, last_rank_all_moe


def _columns(model, system, plan, num_nodes=None, **execution):
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    train = load_train_task("llm-pretrain")
    return point_columns(model, system, train, plan=plan, execution=execution, num_nodes=num_nodes)


def test_a_leading_first_rank_keeps_the_heads_costs_for_the_step():
    """DeepSeek-V2 (60 layers, the first dense, every other MoE), tp1.pp4.ep8 on 16 DGX H100, FP8 blockwise, the
    first 15 layers in BF16: rank 0's 15 BF16 layers outrun the last rank's 15 MoE layers and the head, so rank 0
    leads (head share 0, 15 BF16 layers). Its layers are the average's, re-run after the last rank's MoE passes;
    that re-run must leave the head's parameters (V h / t = 102,400 x 5,120 = 524,288,000) and FLOPs in work[W_*],
    which step_row reads as the head's, not the layer's (669,089,792 parameters before the fix)."""
    columns = _columns("deepseek-v2", "dgx-h100", "tp1.pp4.ep8", 16, precision="fp8", fp8_recipe="blockwise",
                       bf16_layers_start=15)
    assert last_rank_all_moe(columns)
    work = np.zeros(N_WORK)
    *_, layers, share, n16, _ = busiest_stage(columns, work)
    assert (layers, share, n16) == (15.0, 0.0, 15.0)
    head = np.zeros(N_WORK)
    head_passes(columns, head)
    assert head[7] == 102_400 * 5_120 == 524_288_000  # W_PARAMS
    np.testing.assert_array_equal(work[:N_LAYER_WORK], head[:N_LAYER_WORK])
