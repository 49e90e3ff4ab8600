"""The multi-token-prediction (MTP) module's costs beyond its transformer layer and LM-head GEMM, by hand
(docs/model.md §11.4 "MTP module", docs/model_memory.md "MTP module"): the loss passes over its logits, its
projection and norms (kernels/lm/layer.py ``mtp_costs``), the data-parallel reduction of its parameters and of
the MTP stage's embedding copy (kernels/lm/dp_step.py ``mtp_module_params``), its parameters, saved inputs and
loss workspace in memory (kernels/lm/memory_states.py, memory_activations.py, memory.py).

Megatron-Core: megatron/core/transformer/multi_token_prediction.py, megatron/core/models/gpt/gpt_model.py,
megatron/core/distributed/finalize_model_grads.py at NVIDIA/Megatron-LM@d98e8a6."""

import numpy as np
import pytest

from fastmodel.kernels.lm.dp_step import mtp_module_params
from fastmodel.kernels.lm.layer import N_WORK, W_FLOPS, W_GEMM, W_MEM, W_TP, W_TP_BACKWARD, head_costs, mtp_costs
from fastmodel.kernels.lm.memory import logits_workspace_bytes
from fastmodel.kernels.lm.memory_activations import mtp_activation_bytes, stage_microbatch_bytes
from fastmodel.kernels.lm.memory_states import model_stage_params
from fastmodel.kernels.lm.sp_regather import embedding_tp, head_tp_backward
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import gemm_time
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.lm.table import row, table
from fastmodel.registry.lm import COLUMN_INDEX

#: one micro-batch of 4,096 tokens, h 1024, a 2-matrix MLP of 4h, vocabulary 32,000, untied
MODEL = dict(layers=4, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=32000, seq_len=4096,
             gated_mlp=0, tied_embeddings=0, micro_batch=1, hbm_bw=8e12, hbm_eff=0.8, kernel_overhead_s=0.0,
             loss_traffic_bytes_per_logit=52, fused_kernels=1)
T, H, V, F = 4096, 1024, 32000, 4096
BW = 8e12 * 0.8


def _head(**values):
    work = np.zeros(N_WORK)
    r = row(**{**MODEL, **values})
    head_costs(r, work)
    return work, r


def test_an_mtp_module_adds_its_loss_passes_projection_and_norms_to_the_head_by_hand():
    # one module, tp 1: the loss's 52 B per logit over T V logits, half per pass (as the main head's); three
    # fused norms at 4 B per element forward and 8 backward, the concatenation 8 B per token-element of h
    # forward: (3 x 12 + 8) / 2 = 22 B per token-element, half per pass
    base, _ = _head(mtp_layers=0)
    one, r = _head(mtp_layers=1)
    loss = T * V * 52 / 2
    norms_concat = T * H * (3 * (4 + 8) + 8) / 2
    assert one[W_MEM] - base[W_MEM] == pytest.approx((loss + norms_concat) / BW, rel=1e-12)
    # FLOPs: the shared head again, 2 T V h, and eh_proj 2h -> h, 2 T 2h h
    assert one[W_FLOPS] - base[W_FLOPS] == pytest.approx(2 * T * V * H + 2 * T * 2 * H * H, rel=1e-12)
    assert one[W_GEMM] - base[W_GEMM] == pytest.approx(gemm_time(r, T, V, H, False) + gemm_time(r, T, H, 2 * H, False),
                                                       rel=1e-12)
    assert one[W_TP] == base[W_TP] == 0.0
    two, _ = _head(mtp_layers=2)
    assert two[W_MEM] - base[W_MEM] == pytest.approx(2 * (one[W_MEM] - base[W_MEM]), rel=1e-12)


@pytest.mark.parametrize("pp", [1, 4])
def test_under_tp_and_sp_each_module_adds_the_loss_all_reduce_and_the_projection_gathers(pp):
    # tp 8 with SP: the vocab-parallel loss's all-reduces (3 x 4 B per token, as the main head's), eh_proj's input
    # all-gathered over the sequence (2 B x T x 2h) and its output over the hidden dimension (2 B x T x h), the
    # shared output layer's own input gather (2 B x T x h, + o) and the word embedding's reduce-scatter of the
    # shifted tokens' embedding (priced as AG(2 B x T x h) + o), at any pp (docs/model.md §11.44)
    base, _ = _head(mtp_layers=0, tp=8, sequence_parallel=1, pp=pp)
    one, r = _head(mtp_layers=1, tp=8, sequence_parallel=1, pp=pp)
    o = r[COLUMN_INDEX["collective_overhead_s"]]
    expected = allreduce_time(r, 12.0 * T, 8.0, 1.0) + allgather_time(r, 2.0 * T * H, 8.0, 1.0) \
        + allgather_time(r, 2.0 * T * 2 * H, 8.0, 1.0) \
        + allgather_time(r, 2.0 * T * H, 8.0, 1.0) + o + allgather_time(r, 2.0 * T * H, 8.0, 1.0) + o
    assert one[W_TP] - base[W_TP] == pytest.approx(expected, rel=1e-12)
    # the norms and the concatenation see T / t tokens under SP, the loss V / t of the vocabulary
    assert one[W_MEM] - base[W_MEM] == pytest.approx((T * V / 8 * 26 + T / 8 * H * 22) / BW, rel=1e-12)



def test_each_mtp_depth_embeds_again_on_the_last_rank_deepseek_v3_plan():
    """Megatron-Core's MultiTokenPredictionLayer._get_embeddings calls the shared word embedding once per depth on
    the last rank, whatever pp: its TP collectives (§11.44 embedding_tp) run mtp_layers more times a micro-batch.
    The DeepSeek-V3 H100 BF16 V1 plan (TP 2, SP, PP > 1, one depth, T 4,096): RS forward, AG backward, each
    AG(2 T h) + o = 0.0934 ms, exposed: +0.0934 ms forward and +0.0934 ms backward a micro-batch."""
    record = next(r for r in read_records("tests/data/recipe_plans.jsonl") if r.id == "mbridge-deepseek-v3-h100-bf16-v1")
    r = np.asarray(record.columns, dtype=np.float64).ravel()
    c = {k: r[COLUMN_INDEX[k]] for k in ("tp", "pp", "mtp_layers", "sequence_parallel", "micro_batch", "seq_len")}
    assert (c["tp"], c["mtp_layers"], c["sequence_parallel"]) == (2.0, 1.0, 1.0) and c["pp"] > 1.0
    tokens = c["micro_batch"] * c["seq_len"]
    embedding = allgather_time(r, 2.0 * tokens * 7168.0, 2.0, 1.0) + r[COLUMN_INDEX["collective_overhead_s"]]
    assert embedding == pytest.approx(0.0934e-3, abs=0.00005e-3)
    assert embedding_tp(r, tokens) == pytest.approx((embedding, embedding), rel=1e-12)
    r0 = r.copy()
    r0[COLUMN_INDEX["mtp_layers"]] = 0.0
    one, base = np.zeros(N_WORK), np.zeros(N_WORK)
    head_costs(r, one)
    head_costs(r0, base)
    # the depth's loss all-reduce and eh_proj gathers (mtp_costs), its head pass's input gather (o = 0 here)
    _, _, module, _ = mtp_costs(r, tokens, tokens / 2.0)
    assert module == pytest.approx(allreduce_time(r, 12.0 * tokens, 2.0, 1.0)
                                   + allgather_time(r, 2.0 * tokens * 2.0 * 7168.0, 2.0, 1.0)
                                   + allgather_time(r, 2.0 * tokens * 7168.0, 2.0, 1.0), rel=1e-12)
    head_input = embedding
    assert one[W_TP] - base[W_TP] == pytest.approx(module + head_input + embedding, rel=1e-12)
    regathers = head_tp_backward(r, tokens)[0] - head_tp_backward(r0, tokens)[0]
    assert one[W_TP_BACKWARD] - base[W_TP_BACKWARD] == pytest.approx(module + head_input + regathers + embedding,
                                                                     rel=1e-12)
    # without the fix the depth's embedding was uncharged: the difference is that 0.0934 ms each way
    assert one[W_TP] - base[W_TP] - (module + head_input) == pytest.approx(0.0934e-3, abs=0.00005e-3)

def test_mtp_module_parameters_and_the_embedding_copy_by_hand():
    # layer 10 M non-expert and 2 M expert parameters; tp 2: eh_proj 2h x h / 2, three norms 3h; pp 4 with 1F1B:
    # the MTP stage's copy of the word embedding V h / 2; DualPipe shares rank 0's embedding: no copy
    layer, experts = 10e6, 2e6
    plain = row(**MODEL, tp=2, pp=4, mtp_layers=1)
    assert mtp_module_params(plain, layer, experts) == pytest.approx(
        (layer + 2 * H * H / 2 + 3 * H + V * H / 2, experts, V * H / 2), rel=1e-12)
    dual = row(**MODEL, tp=2, pp=4, mtp_layers=1, pipeline_schedule="dualpipe")
    assert mtp_module_params(dual, layer, experts) == pytest.approx((layer + H * H + 3 * H, experts, 0.0), rel=1e-12)
    assert mtp_module_params(row(**MODEL, tp=2, pp=1, mtp_layers=2), layer, experts)[2] == 0.0   # one stage
    assert mtp_module_params(row(**MODEL, tp=2, pp=4, mtp_layers=0), layer, experts) == (0.0, 0.0, 0.0)


STEP = dict(MODEL, n_gpus=4, dp=4, global_batch=8, sharding="ddp", optimizer="adam", grad_reduce_bytes=4,
            recompute="none")


def test_the_optimizer_steps_the_mtp_module_s_parameters_by_hand():
    # pp 1, DDP: time_optimizer is bytes / bandwidth, proportional to the stage's parameters: 4 layers of
    # 4h^2 + 2hf (attention and a 2-matrix MLP; the kernel's layer counts no norms) + the embedding and the untied
    # head 2 V h; the MTP module adds a layer + eh_proj 2h^2 + 3 norms 3h
    layer = 4 * H * H + 2 * H * F
    stage = 4 * layer + 2 * V * H
    base = evaluate_table(table(1, **STEP))
    one = evaluate_table(table(1, **STEP, mtp_layers=1))
    assert one["time_optimizer"][0] / base["time_optimizer"][0] == pytest.approx(
        (stage + layer + 2 * H * H + 3 * H) / stage, rel=1e-9)
    assert one["comm_dp"][0] > base["comm_dp"][0]


def test_the_mtp_stage_all_reduces_its_embedding_copy_with_the_first_stage():
    # pp 2, dp 1: no data-parallel reduction, but finalize_model_grads all-reduces the word embedding's gradient
    # (V h x 4 B) over the embedding group, the first and the last stage, (p - 1) t cp dp = 1 rank apart
    values = dict(STEP, n_gpus=2, dp=1, pp=2, global_batch=2)
    base = evaluate_table(table(1, **values))
    one = evaluate_table(table(1, **values, mtp_layers=1))
    assert base["comm_dp"][0] == 0.0
    expected = allreduce_time(row(**values, mtp_layers=1), V * H * 4.0, 2.0, 1.0)
    assert one["comm_dp"][0] == pytest.approx(expected, rel=1e-12)
    assert one["exposed_dp"][0] == pytest.approx(expected, rel=1e-12)


def test_memory_counts_the_module_s_norms_and_the_embedding_copy_on_the_last_stage():
    # dense layer with its two norms 4h^2 + 2hf + 2h; MTP: the layer + eh_proj 2h^2 + 3h + the embedding copy V h
    # (untied, pp 2, 1F1B); a tied model's last stage already holds that copy as its head
    layer = 4 * H * H + 2 * H * F + 2 * H
    for tied, copy in ((0, V * H), (1, 0)):
        base = model_stage_params(row(**{**MODEL, "tied_embeddings": tied}, pp=2), 1.0)[0]
        one = model_stage_params(row(**{**MODEL, "tied_embeddings": tied}, pp=2, mtp_layers=1), 1.0)[0]
        assert one - base == pytest.approx(layer + 2 * H * H + 3 * H + copy, rel=1e-12)
    dual = dict(MODEL, pp=2, pipeline_schedule="dualpipe")
    assert model_stage_params(row(**dual, mtp_layers=1), 1.0)[0] - model_stage_params(row(**dual), 1.0)[0] == \
        pytest.approx(layer + 2 * H * H + 3 * H, rel=1e-12)


def test_memory_counts_the_module_s_saved_inputs_and_its_loss_workspace_by_hand():
    # BF16, no SP: enorm and hnorm inputs 2 T h each, eh_proj's input 2 T 2h, the final norm's and the output
    # layer's inputs 2 T h each: 12 T h per module; the stage adds them on the last rank only
    r = row(**MODEL, pp=2, mtp_layers=2)
    assert mtp_activation_bytes(r) == 2 * 12 * T * H
    assert stage_microbatch_bytes(r, 1.0, 1.0, 0.0) - stage_microbatch_bytes(row(**MODEL, pp=2), 1.0, 1.0, 0.0) \
        == pytest.approx(2 * 1.0 + 2 * 12 * T * H, rel=1e-12)                 # two layers of 1 B + the module
    assert stage_microbatch_bytes(r, 0.0, 1.0, 0.0) == stage_microbatch_bytes(row(**MODEL, pp=2), 0.0, 1.0, 0.0)
    # the loss: each depth keeps its FP32 softmax (Megatron vocab-parallel) or log-softmax (eager), 4 B per
    # logit, or its BF16 logits under torch.compile, 2 B, beside the main head's workspace
    for impl, saved in (("vocab_parallel", 4), ("eager", 4), ("compiled", 2)):
        one = logits_workspace_bytes(row(**MODEL, tp=2, mtp_layers=1, loss_impl=impl))
        assert one - logits_workspace_bytes(row(**MODEL, tp=2, loss_impl=impl)) == saved * T * V / 2


def test_under_dualpipe_rank_0_steps_the_mtp_module_s_routed_experts():
    """DualPipe puts the last stage (head and MTP module) on rank 0 beside the embedding: the module's routed
    experts are that rank's to reduce and step, as its weights are in memory. Under DDP the optimizer time is
    proportional to the held parameters, so with the module it grows by the ratio the weights memory grows by
    (before the fix the optimizer left the module's experts out: 1.064 against 1.106)."""
    moe = dict(STEP, moe_experts=8, moe_topk=2, moe_ffn=1024, n_gpus=8, ep=4, pp=2, global_batch=16,
               pipeline_schedule="dualpipe")
    base = evaluate_table(table(1, **moe))
    one = evaluate_table(table(1, **moe, mtp_layers=1))
    weights = one["memory_weights"][0] / base["memory_weights"][0]
    assert weights > 1.1
    assert one["time_optimizer"][0] / base["time_optimizer"][0] == pytest.approx(weights, rel=1e-4)
