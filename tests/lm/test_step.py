"""The step composition's optimizer step (kernels/lm/step.py) and the LM loss's passes over the logits
(kernels/lm/layer.py head_costs), each against a hand count (docs/model.md §11.3 "LM loss", §11.7 "Optimizer
step")."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_MEM, head_costs
from fastmodel.kernels.lm.step import optimizer_step_bytes
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import megatron_core, resolve
from fastmodel.lm.table import row, table

MEGATRON_LM_STEP = dict(step_grad_passes=1, step_master_copy=1, step_zero_grad=1)


def test_megatron_optimizer_step_reads_the_norm_and_the_master_copy_and_zeroes_the_whole_buffer_by_hand():
    # Adam with FP32 master weights and FP32 gradients: master read + write 8, 16-bit copy written 2, moments
    # read + written 16, gradient read 4 = 30 B per local parameter; Megatron-LM adds the gradient norm's read
    # (4) and the copy kernel's second read of the master (4) per local parameter, and 4 B of zeros per
    # parameter of the stage's whole gradient buffer
    r = row(optimizer="adam", grad_reduce_bytes=4, **MEGATRON_LM_STEP)
    assert optimizer_step_bytes(r, 1e9, 4e9) == pytest.approx(1e9 * (30 + 4 + 4) + 4e9 * 4, rel=1e-12)
    plain = row(optimizer="adam", grad_reduce_bytes=4)
    assert optimizer_step_bytes(plain, 1e9, 4e9) == pytest.approx(30e9, rel=1e-12)     # no pass counted
    # a 16-bit model (no master weights) has no master to copy; its gradients are 16-bit (2 B)
    pure = row(optimizer="adam", grad_reduce_bytes=4, master_weights=0, **MEGATRON_LM_STEP)
    assert optimizer_step_bytes(pure, 1e9, 4e9) == pytest.approx(1e9 * (2 + 2 + 8 + 2 + 2) + 4e9 * 2, rel=1e-12)


@pytest.mark.parametrize("sharding, held_per_local", [("distopt", 4), ("fsdp", 1)])
def test_the_zeroed_buffer_is_the_stage_under_the_distributed_optimizer_and_the_shard_under_fsdp(sharding,
                                                                                              held_per_local):
    # dp = 4: the distributed optimizer updates a quarter of the stage and zeroes its whole gradient buffer;
    # FSDP holds (and zeroes) only its shard. time_optimizer is bytes / effective bandwidth with no constant
    # term, so the ratio of the two is the ratio of the byte counts: (30 + 4 + 4 + 4 x held/local) / 30
    common = dict(layers=4, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=32000, seq_len=1024,
                  n_gpus=4, dp=4, micro_batch=1, global_batch=8, sharding=sharding, optimizer="adam",
                  grad_reduce_bytes=4, recompute="none")
    on = evaluate_table(table(1, **common, **MEGATRON_LM_STEP))["time_optimizer"][0]
    off = evaluate_table(table(1, **common))["time_optimizer"][0]
    assert on / off == pytest.approx((30 + 4 + 4 + 4 * held_per_local) / 30, rel=1e-9)


def test_the_loss_moves_its_counted_bytes_per_logit_half_in_each_pass():
    # tokens 4096, vocab 128256 over tp 8: 65,667,072 logits; Megatron-Core's unfused cross-entropy moves 52 B
    # per logit over forward and backward, 26 charged to the forward (the backward reads the same W_MEM)
    r = row(micro_batch=1, seq_len=4096, vocab=128256, hidden=8192, tp=8, hbm_bw=8e12, hbm_eff=0.8,
            loss_traffic_bytes_per_logit=52)
    work = np.zeros(N_WORK)
    head_costs(r, work)
    assert work[W_MEM] == pytest.approx(4096 * 128256 / 8 * 26 / (8e12 * 0.8), rel=1e-12)


def test_megatron_cross_entropy_count_is_the_sum_of_its_passes():
    """Megatron-LM 23e00ed megatron/core/tensor_parallel/cross_entropy.py, unfused vocab-parallel cross-entropy,
    bytes per logit element read + written by each full-size pass (row reductions write one value per token)."""
    forward = [2 + 4,      # calculate_logits_max: vocab_parallel_logits.float() (BF16 in, FP32 out)
               4,          # torch.max over the vocabulary
               4 + 4,      # vocab_parallel_logits -= logits_max (in place)
               4 + 4,      # torch.exp(..., out=exp_logits)
               4,          # exp_logits.sum(dim=-1)
               4 + 4]      # exp_logits.div_(sum_exp_logits): the softmax saved for backward
    backward = [4 + 4,     # grad_input.mul_(grad_output)
                4 + 2]     # autograd casts the FP32 gradient to the BF16 logits' dtype
    assert megatron_core.LOSS_BYTES_UNFUSED_CE == sum(forward) + sum(backward) == 52


@pytest.mark.parametrize("framework, counted", [
    ("Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0", True),   # its own train_step and arguments
    ("NeMo (MLPerf v4.0 NVIDIA submission, 24.04)", False),              # a recipe launcher: not counted
    ("Megatron-Core 0.9", False),
])
def test_the_megatron_lm_launcher_counts_its_loss_and_optimizer_passes(framework, counted):
    execution = resolve(ExecutionSpec(framework=framework), 1, 12)
    if counted:
        assert execution.loss_traffic_bytes_per_logit == 52 and execution.step_grad_passes == 1
        assert execution.step_master_copy is True and execution.step_zero_grad is True
    else:
        assert execution.loss_traffic_bytes_per_logit is None and execution.step_grad_passes is None
        assert execution.step_master_copy is None and execution.step_zero_grad is None


@pytest.mark.parametrize("framework", [
    "Megatron-LM (stanford-futuredata fork 0bdc8181, 2022), fp16, DDP local",   # MegaBlocks' dense rows
    "Megatron-DeepSpeed + DeepSpeed-MoE, ZeRO stage 0",
])
def test_megatron_2021_runs_the_same_unfused_cross_entropy(framework):
    """NVIDIA/Megatron-LM aed2f75 (2021-04-11) and 55ba1f7 (2022-05-26): megatron/model/gpt_model.py calls
    mpu.vocab_parallel_cross_entropy(output.float(), labels) unless --fp16-lm-cross-entropy, and
    megatron/mpu/cross_entropy.py makes Megatron-Core's passes (cast, max, sub_, exp, sum, div_; backward mul_
    and the cast back), so 2 + 4 + 4 + 8 + 8 + 4 + 8 = 38 B forward and 8 + 6 = 14 B backward per logit;
    microsoft/Megatron-DeepSpeed 070c64b gpt_model.py makes the same call."""
    execution = resolve(ExecutionSpec(framework=framework, stack="megatron-2021"), 1, 12)
    assert execution.loss_traffic_bytes_per_logit == 2 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 6 == 52


# a small MoE model with wide experts, so that an MoE layer is slower than a dense one
MOE = dict(layers=4, hidden=2048, ffn=4096, heads=16, kv_heads=16, head_dim=128, vocab=32000, seq_len=2048,
           moe_experts=16, moe_topk=4, moe_ffn=2048, n_gpus=8, ep=4, dp=4, pp=2, micro_batch=1, recompute="none")


def _slope(**values):
    """Seconds one more micro-batch adds to the step: the busiest stage's micro-batch time (bubble, data-parallel
    and optimizer terms are per step)."""
    small = evaluate_table(table(1, **{**MOE, **values}, global_batch=32))["step_time"][0]
    large = evaluate_table(table(1, **{**MOE, **values}, global_batch=64))["step_time"][0]
    return (large - small) / 8


def test_the_last_stage_runs_moe_layers_when_the_dense_layers_lead():
    # 4 layers on 2 stages, layer 0 dense: Megatron-Core builds layers 0-1 on stage 0 and 2-3 on stage 1, so the
    # busiest (last) stage runs two MoE layers and the head -- as a model whose every layer is MoE does
    leading = _slope(dense_layers=1)
    assert leading == pytest.approx(_slope(dense_layers=0), rel=1e-9)
    # three leading dense layers reach the last stage (3 > (p - 1) L / p = 2): the layer mix again
    mixed = _slope(dense_layers=3)
    assert _slope(dense_layers=0) > mixed > _slope(dense_layers=4, moe_experts=0, moe_topk=0, ep=1)


@pytest.mark.parametrize("values, expected", [
    (dict(dense_layers=1), True), (dict(dense_layers=2), True), (dict(dense_layers=3), False),
    (dict(dense_layers=1, pp=1), False),                    # no pipeline: one stage holds every layer
    (dict(dense_layers=0), False),                          # no dense layer: the mix is all MoE already
    (dict(dense_layers=1, vp=2, layers=8), True),           # 1 <= (p - 1) L / (p v) = 2
    (dict(dense_layers=3, vp=2, layers=8), False),          # layer 2 is on rank 1's first chunk
    (dict(dense_layers=1, moe_layer_freq=2), False),        # interleaved MoE: the last stage is mixed
    (dict(dense_layers=1, uneven_stages=1), False),
])
def test_last_rank_all_moe_follows_megatrons_layer_order(values, expected):
    from fastmodel.kernels.lm.step import last_rank_all_moe
    assert bool(last_rank_all_moe(row(**{**MOE, **values}))) is expected


# a small dense model on 4 pipeline ranks; the loss (and the embedding) take a layer's slot with
# embedding_loss_in_split: 6 layers + 2 slots = 2 per rank, the first and the last rank hold 1 layer each
SPLIT = dict(layers=6, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=4096, seq_len=2048,
             n_gpus=16, pp=4, dp=4, micro_batch=1, recompute="none", embedding_loss_in_split=1)


def _per_microbatch(**values):
    """Seconds one more micro-batch adds to the step and to its GEMM time (m 8 -> 16): the busiest rank's
    micro-batch and its 1F1B pair of blocking sends (the bubble, data-parallel and optimizer terms are per step)."""
    small = evaluate_table(table(1, **{**SPLIT, **values}, global_batch=32))
    large = evaluate_table(table(1, **{**SPLIT, **values}, global_batch=64))
    return {name: (large[name][0] - small[name][0]) / 8 for name in ("step_time", "time_gemm")}


def _head(**values):
    from fastmodel.kernels.lm.passes import head_passes
    work = np.zeros(N_WORK)
    return sum(head_passes(row(**{**SPLIT, **values}), work)), work


def test_the_lm_head_is_charged_once_when_the_loss_takes_a_layer_s_slot():
    # Hand derivation. The head's GEMM: T x (V / t) x h = 2048 x 4096 x 1024, 2 T V h = 1.718e10 FLOPs forward,
    # run three times (forward, input and weight gradients). Without the split, 8 layers on 4 ranks: the last
    # rank runs 2 layers + the head, t_mb = 2 t_layer + t_head. With it, 6 layers: the last rank runs 1 layer +
    # the head (Megatron-Core get_num_layers_to_build, account_for_loss_in_pipeline_split), a middle rank 2
    # layers; this head is lighter than a layer, so t_mb = 2 t_layer: the slot the head holds is not a layer too.
    from fastmodel.kernels.lm.layer import W_FLOPS, W_GEMM
    t_head, work = _head()
    assert work[W_FLOPS] == pytest.approx(2 * 2048 * 4096 * 1024, rel=1e-12)
    plain = _per_microbatch(layers=8, embedding_loss_in_split=0)
    t_layer = plain["step_time"] - _per_microbatch(layers=4, embedding_loss_in_split=0)["step_time"]
    assert 0.0 < t_head < t_layer
    split = _per_microbatch()
    assert plain["step_time"] - split["step_time"] == pytest.approx(t_head, rel=1e-9)
    # the breakdown is the busiest (middle) rank's: the head's three GEMMs are not in it
    assert plain["time_gemm"] - split["time_gemm"] == pytest.approx(3 * work[W_GEMM], rel=1e-9)


def test_a_head_heavier_than_a_layer_makes_the_last_rank_the_busiest():
    # a 256,000-token vocabulary: t_head > t_layer, so the last rank (1 layer + the head) is the busiest, a
    # layer lighter than the last rank without the split (2 layers + the head)
    t_head, _ = _head(vocab=256000)
    plain = _per_microbatch(layers=8, embedding_loss_in_split=0, vocab=256000)
    t_layer = plain["step_time"] - _per_microbatch(layers=4, embedding_loss_in_split=0, vocab=256000)["step_time"]
    assert t_head > t_layer
    assert plain["step_time"] - _per_microbatch(vocab=256000)["step_time"] == pytest.approx(t_layer, rel=1e-9)


def test_the_mtp_module_s_layer_is_a_moe_layer_not_the_average_layer():
    """Review: the MTP layer was costed as the average layer (here 1 dense + 3 MoE layers); DeepSeek-V3's is a full
    MoE layer (report sec. 2.2; Megatron-Core builds it from the decoder's last layer spec). One more micro-batch
    with the module costs what a fifth (MoE) layer adds, plus the head and projection terms of the test below."""
    from fastmodel.kernels.lm.layer import mtp_costs
    from fastmodel.kernels.roofline import gemm_time

    one = dict(pp=1, n_gpus=4, dp=4, ep=4, dense_layers=1)
    moe_layer = _slope(**one, layers=5) - _slope(**one, layers=4)
    head = gemm_time(row(**{**MOE, **one}), 2048.0, 32000.0, 2048.0, False)
    projection, passes, _, _ = mtp_costs(row(**{**MOE, **one, "mtp_layers": 1}), 2048.0, 2048.0)
    added = _slope(**one, mtp_layers=1) - _slope(**one)
    assert added == pytest.approx(moe_layer + 3 * head + 3 * projection + 2 * passes, rel=1e-9)


def test_an_mtp_module_adds_one_layer_and_one_lm_head_to_the_last_stage_by_hand():
    """DeepSeek-V3 report sec. 2.2: an MTP module is one transformer block beside the main model's, with its own
    pass through the shared output head (docs/model.md §11.4, §11.14). On one stage (pp 1, every layer MoE) one more
    micro-batch costs, with the module, what a fifth layer adds plus one more LM-head GEMM forward and backward,
    (1 + 2) x gemm_time(b s, V, h), plus its projection GEMM forward and backward (1 + 2) and its loss, norm and
    concatenation passes (``mtp_costs``' memory time, charged once in the forward and once in the backward), which
    tests/lm/test_mtp.py derives piece by piece."""
    from fastmodel.kernels.lm.layer import mtp_costs
    from fastmodel.kernels.lm.passes import BACKWARD_GEMM
    from fastmodel.kernels.roofline import gemm_time

    one = dict(pp=1, n_gpus=4, dp=4, ep=4)
    layer = _slope(**one, layers=5) - _slope(**one, layers=4)
    head = gemm_time(row(**{**MOE, **one}), 2048.0, 32000.0, 2048.0, False)
    assert BACKWARD_GEMM == 2.0
    projection, passes, _, _ = mtp_costs(row(**{**MOE, **one, "mtp_layers": 1}), 2048.0, 2048.0)
    assert projection > 0.0 and passes > 0.0
    assert _slope(**one, mtp_layers=1) - _slope(**one) == pytest.approx(
        layer + 3 * head + 3 * projection + 2 * passes, rel=1e-9)


def test_a_tied_embedding_across_stages_keeps_a_copy_on_the_last_stage_and_all_reduces_its_gradient():
    """Megatron-Core keeps a second copy of a tied word embedding on the last stage (language_module.py
    ``setup_embeddings_and_output_layer``) and all-reduces the two copies' gradients over the two-rank embedding
    group after the backward (finalize_model_grads.py ``_allreduce_word_embedding_grads``, core_v0.19.0). By hand:
    the last stage holds V h / t parameters either way (the untied head or the tied copy: the same gradient
    reduction and optimizer step), so tied minus untied is that all-reduce, exposed: 4096 x 1024 FP32 gradients
    (grad_reduce_bytes 4) between ranks (p - 1) t cp dp = 3 x 1 x 1 x 4 = 12 apart. One stage: no copy, no
    all-reduce."""
    from fastmodel.kernels.lm.dp_step import tied_head_copy
    from fastmodel.kernels.nccl import allreduce_time

    values = {**SPLIT, "embedding_loss_in_split": 0, "global_batch": 32, "grad_reduce_bytes": 4}
    tied, untied = (evaluate_table(table(1, **values, tied_embeddings=k)) for k in (1, 0))
    reduce = allreduce_time(row(**values, tied_embeddings=1), 4096 * 1024 * 4.0, 2.0, 12.0)
    assert reduce > 0.0 and tied_head_copy(row(**values, tied_embeddings=1)) == 4096 * 1024
    assert tied["step_time"][0] - untied["step_time"][0] == pytest.approx(reduce, rel=1e-9)
    assert tied["comm_dp"][0] - untied["comm_dp"][0] == pytest.approx(reduce, rel=1e-9)
    one = {**values, "pp": 1, "n_gpus": 4}
    assert tied_head_copy(row(**one, tied_embeddings=1)) == 0.0
