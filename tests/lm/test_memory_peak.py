"""The peak over the step per pipeline rank (kernels/lm/memory_peak.py) and context parallelism's memory.

Expectations are derived by hand from the equations in docs/model_memory.md ("Peak over the step", "Context
parallelism"); the dev check compares with the peak allocated bytes Megatron-LM measured (runs_dev_b200.jsonl,
in-sample rows only; the held-out rows are reported by ``fastmodel validate``, never asserted on here).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import (
    M_ACTIVATIONS,
    M_BUFFERS,
    M_GRADIENTS,
    M_OPTIMIZER,
    M_OVERHEAD,
    M_WEIGHTS,
    N_MEMORY_KINDS,
)
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.lm.table import row
from fastmodel.registry.lm import RECOMPUTE_MODULES

DATA = Path(__file__).resolve().parents[1] / "data"
ALLOCATED = (M_WEIGHTS, M_GRADIENTS, M_OPTIMIZER, M_ACTIVATIONS, M_BUFFERS)
#: the overhead's terms set to zero (kernels/lm/memory.py overhead_bytes), so a peak is the tensors alone
NO_OVERHEAD = dict(cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0)


def peak(**values) -> tuple[np.ndarray, float]:
    """(bytes by kind at the worst rank's peak, that rank)."""
    out = np.full(N_MEMORY_KINDS, np.nan)
    stage = memory_row(row(**{**NO_OVERHEAD, "allocator_cache_fraction": 0, **values}), out)
    return out, stage


#: Megatron 2022 GPT layer (2-matrix GeLU MLP, dropout, unfused attention): s b h (34 + 5 a s / h) per layer
GPT = dict(hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512, gated_mlp=0,
           tied_embeddings=0, dropout=1, flash_attention=0, dp=1, sharding="ddp", grad_reduce_bytes=4)


def test_1f1b_first_stage_peak_holds_p_micro_batches():
    """pp = 4, 1F1B, m = 8 micro-batches of b = 2, 8 layers (2 per rank). Rank 0 warms up with 3 forwards
    and runs its 4th before the first backward: its peak is at that backward's start, with 4 micro-batches of
    2 layers (s b h (34 + 5 a s / h) each) and the embedding's dropout mask s b h, plus the buffers of that
    moment: one activation sent and one received 2 x 2 s b h, and the activation gradients of the layer,
    the incoming 2 s b h and the MLP's fc1 and GeLU-output gradients 2 x 2 s b f, less the GeLU output 2 s b f
    (fc2's saved input), which autograd releases after fc2's backward, before fc1's output gradient exists."""
    s, b, h, a, f = 512, 2, 1024, 16, 4096
    out, stage = peak(**GPT, layers=8, pp=4, micro_batch=b, global_batch=16)
    layer = s * b * h * (34 + 5 * a * s / h)
    assert stage == 0
    assert out[M_ACTIVATIONS] == pytest.approx(4 * (2 * layer + s * b * h), rel=1e-12)
    assert out[M_BUFFERS] == pytest.approx(4 * s * b * h + 2 * s * b * h + 2 * s * b * f, rel=1e-12)
    # fewer micro-batches than stages: the first rank holds all m = 2
    out, _ = peak(**GPT, layers=8, pp=4, micro_batch=b, global_batch=4)
    assert out[M_ACTIVATIONS] == pytest.approx(2 * (2 * layer + s * b * h), rel=1e-12)


def test_full_recompute_backward_holds_one_layer_again():
    """4 layers, full recompute, one micro-batch (T = s b = 1024): the layers keep their inputs 2 T h; in the
    backward of a layer its full activations T h (34 + 5 a s / h) are live again (Chen et al. 2016), less the
    input 2 T h, which is its checkpoint, beside the embedding's dropout mask T h and the activation gradients
    2 T h + 2 x 2 T f less fc2's released input 2 T f (the final norm and LM-head inputs 4 T h were released by
    the head's backward, before this layer's). The logits 6 T V (V = 1000) are smaller than that working set, so the peak is there."""
    s, b, h, a, f = 512, 2, 1024, 16, 4096
    t_tok = s * b
    out, _ = peak(**GPT, layers=4, micro_batch=b, global_batch=b, recompute="full")
    full_layer = t_tok * h * (34 + 5 * a * s / h)
    assert out[M_ACTIVATIONS] == pytest.approx(3 * 2 * t_tok * h + full_layer + t_tok * h,
                                               rel=1e-12)
    assert out[M_BUFFERS] == pytest.approx(2 * t_tok * h + 2 * t_tok * f, rel=1e-12)


def test_fsdp_layer_with_prefetch():
    """FSDP (FSDP1: flat parameters are views of the all-gather output) on dp = 8, one micro-batch (T = 1024):
    in a layer's backward the layer being computed and the
    prefetched one are gathered in BF16, 2 x 2 P, with the layer's FP32 unsharded gradient 4 P
    (P = 4 h^2 + 2 h f + 2 h), beside the activation gradients 2 T h + 2 x 2 T f less fc2's released input
    2 T f. With a vocabulary of
    256,000 and 64 tokens the moment the word embedding is gathered for its backward, with its unsharded
    gradient, (2 + 4) V h, is the peak instead: no activation is left then."""
    h, f, t_tok = 1024, 4096, 1024
    layer = 4 * h * h + 2 * h * f + 2 * h
    fsdp = {**GPT, "dropout": 0, "flash_attention": 1, "dp": 8, "sharding": "fsdp"}
    out, _ = peak(**fsdp, layers=4, micro_batch=2, global_batch=16)
    assert out[M_BUFFERS] == pytest.approx((2 * 2 + 4) * layer + 2 * t_tok * h + 2 * t_tok * f, rel=1e-12)
    # FSDP2 copies the prefetched layer out of its all-gather output: both live at once, one more 2 P
    out, _ = peak(**fsdp, layers=4, micro_batch=2, global_batch=16, fsdp_copy_out=1)
    assert out[M_BUFFERS] == pytest.approx((3 * 2 + 4) * layer + 2 * t_tok * h + 2 * t_tok * f, rel=1e-12)
    # without backward prefetch (PyTorch 1.x FSDP, overlap_param_gather = 0) only the layer being computed: 2 P
    out, _ = peak(**fsdp, layers=4, micro_batch=2, global_batch=16, overlap_param_gather=0)
    assert out[M_BUFFERS] == pytest.approx((2 + 4) * layer + 2 * t_tok * h + 2 * t_tok * f, rel=1e-12)
    out, stage = peak(**{**fsdp, "vocab": 256000, "seq_len": 64}, layers=4, micro_batch=1, global_batch=8)
    assert (stage, out[M_ACTIVATIONS]) == (0, 0.0)
    assert out[M_BUFFERS] == pytest.approx((2 + 4) * 256000 * h, rel=1e-12)


def test_module_wrapped_fsdp_without_backward_prefetch_gathers_one_unit():
    """A 16-bit model (no FP32 copy, 16-bit gradients) under module-wrapped FSDP on dp = 8, as minGPT on PyTorch
    1.10 FSDP: the units are the attention block 4 h^2 and each MLP matrix h f = 4 h^2 (h = 1024, f = 4 h), so
    U = 4 h^2. With backward prefetch the unit being computed and the next are gathered, 2 x 2 U, beside the
    unit's unsharded gradient 2 U; without it (``backward_prefetch = None``: a unit is gathered in its own
    pre-backward hook and freed in its post-backward hook before the gradient's reduce-scatter) 2 U + 2 U. The
    activation gradients 2 T h + 2 x 2 T f less fc2's released input 2 T f (T = 1024) come on top either way."""
    h, f, t_tok = 1024, 4096, 1024
    unit = 4 * h * h
    wrapped = {**GPT, "dropout": 0, "flash_attention": 1, "dp": 8, "sharding": "fsdp", "fsdp_module_wrap": 1,
               "master_weights": 0, "grad_reduce_bytes": 2, "layers": 4, "micro_batch": 2, "global_batch": 16}
    grads = 2 * t_tok * h + 2 * t_tok * f
    out, _ = peak(**wrapped)
    assert out[M_BUFFERS] == pytest.approx((2 * 2 + 2) * unit + grads, rel=1e-12)
    out, _ = peak(**wrapped, overlap_param_gather=0)
    assert out[M_BUFFERS] == pytest.approx((2 + 2) * unit + grads, rel=1e-12)


def test_embedding_gradient_transient_on_the_first_rank():
    """Distributed optimizer, pp = 2, m = 4 of 64 tokens, vocabulary 256,000: rank 0 ends each backward with
    the embedding's BF16 weight gradient 2 V h (before it is added into the FP32 main_grad), while one
    micro-batch is still in flight; that moment is its peak (memory timeline), 2 V h over its states."""
    from fastmodel.lm.memory_timeline import memory_timeline

    h, v = 1024, 256000
    columns = row(**{**GPT, "vocab": v, "seq_len": 64, "sharding": "distopt"}, layers=4, pp=2, micro_batch=1,
                  global_batch=4, **NO_OVERHEAD)
    stage0 = memory_timeline(columns).stages[0]
    top = int(np.argmax(stage0.totals))
    assert stage0.labels[top].endswith("emb")
    gradients = stage0.values[:, 1]
    assert gradients[top] - gradients[0] == pytest.approx(2 * v * h, rel=1e-12)


def test_last_rank_backward_has_released_the_head_inputs():
    """pp = 2, 1F1B, one micro-batch of T = s b = 1024 tokens, 4 layers (2 per rank), unfused GPT layers of
    s b h (34 + 5 a s / h). The last rank after its forward holds 2 layers and the final-norm and LM-head inputs
    (2 + 2) T h; when that micro-batch's backward reaches its last layer, the head's and the final norm's backward
    have run and autograd has released their saved inputs: 2 layers alone. Under DualPipe (not modelled) nothing
    is released."""
    from fastmodel.lm.memory_timeline import memory_timeline

    s, b, h, a = 512, 2, 1024, 16
    layer = s * b * h * (34 + 5 * a * s / h)
    last = memory_timeline(row(**GPT, layers=4, pp=2, micro_batch=b, global_batch=b, **NO_OVERHEAD)).stages[1]
    held = dict(zip(last.labels, last.values[:, M_ACTIVATIONS]))
    assert held["F0"] == pytest.approx(2 * layer + 4 * s * b * h, rel=1e-12)
    assert held["B0"] == pytest.approx(2 * layer, rel=1e-12)


def test_backward_releases_fc2_input_only_where_it_is_stored():
    """The MLP's activation gradients at a layer's backward (pp = 1, T = 1024, h = 1024, f = 4096, flash, no
    dropout): fc2's backward allocates its input's gradient 2 T f, then autograd releases fc2's saved input,
    then the activation's backward allocates fc1's output gradient 2 T f beside the first: 2 T h incoming +
    2 x 2 T f - g T f, g the stored input's bytes (2 in BF16). Under selective recompute listing ``mlp`` the
    MLP is checkpointed and its input recomputed, not counted among the stored tensors: nothing to take off."""
    h, f, t_tok = 1024, 4096, 1024
    base = {**GPT, "dropout": 0, "flash_attention": 1, "layers": 2, "micro_batch": 2, "global_batch": 2}
    out, _ = peak(**base)
    assert out[M_BUFFERS] == pytest.approx(2 * t_tok * h + (4 - 2) * t_tok * f, rel=1e-12)
    out, _ = peak(**base, recompute="selective", recompute_modules=RECOMPUTE_MODULES["mlp"])
    assert out[M_BUFFERS] == pytest.approx(2 * t_tok * h + 4 * t_tok * f, rel=1e-12)


def test_mlp_gradient_moment_is_the_second_for_every_stored_input_width():
    """mlp_grad_bytes by hand: the second moment (fc1's output gradient 2 c1 beside fc2's input gradient 2,
    less fc2's released input g) is ``(2 (c1 + 1) - g) rows width``; the first (2 rows width) is never larger,
    since g <= 2 (a 16-bit or FP8 input, or 0 where recomputed): at a 2-matrix MLP with a BF16 input they tie."""
    from fastmodel.kernels.lm.memory_peak import mlp_grad_bytes

    rows, width = 3.0, 5.0
    for gated, c1 in ((0, 1), (1, 2)):
        r = row(gated_mlp=gated)
        for g in (0.0, 1.0, 2.0):
            assert mlp_grad_bytes(r, width, rows, g) == (2 * (c1 + 1) - g) * rows * width
            assert mlp_grad_bytes(r, width, rows, g) >= 2 * rows * width
    assert mlp_grad_bytes(row(gated_mlp=0), width, rows, 2.0) == 2 * rows * width


def test_expert_fc2_input_recomputed_under_moe_act_or_fp8_act_input():
    """The MoE layer of tests/lm/test_memory.py (T = 128, h = 256, 8 experts of f_e = 512, SwiGLU, top-2, R = 256
    rows, ep = 2): buffers = the dispatch 2 x 2 R h + 2 T h incoming + the experts' gradients 2 (2 + 1) R f_e less
    the product g R f_e where stored (BF16: 4 R f_e). ``moe_act`` (BF16) and ``moe_act_input_fp8`` recompute the
    product in backward: nothing is taken off, 6 R f_e."""
    t_tok, h, fe = 128, 256, 512
    rows = 2 * t_tok
    moe = dict(layers=1, hidden=h, ffn=1024, heads=4, kv_heads=4, head_dim=64, vocab=100, seq_len=t_tok,
               gated_mlp=1, moe_experts=8, moe_topk=2, moe_ffn=fe, micro_batch=1, global_batch=2, dp=2, ep=2)
    dispatch = 2 * 2 * rows * h
    out, _ = peak(**moe)
    assert out[M_BUFFERS] == pytest.approx(dispatch + 2 * t_tok * h + 4 * rows * fe, rel=1e-12)
    out, _ = peak(**moe, moe_act_input_fp8=1)
    assert out[M_BUFFERS] == pytest.approx(dispatch + 2 * t_tok * h + 6 * rows * fe, rel=1e-12)
    out, _ = peak(**moe, recompute="selective", recompute_modules=RECOMPUTE_MODULES["moe_act"])
    assert out[M_BUFFERS] == pytest.approx(dispatch + 2 * t_tok * h + 6 * rows * fe, rel=1e-12)


# --- context parallelism ----------------------------------------------------------------------------------------------

#: a Llama-3-8B-shaped model with flash attention
LLAMA8B = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256, gated_mlp=1,
               flash_attention=1, tp=1, micro_batch=1, sharding="fsdp", grad_reduce_bytes=4)


@pytest.mark.parametrize("sharding", ["fsdp", "distopt"])
def test_fixed_tokens_per_device_memory_does_not_grow_with_cp(sharding):
    """32k tokens per device on 8 GPUs: 32k without CP (dp 8) or 262k over CP 8 (dp 1). Weights, gradients,
    optimizer (sharded over dp x cp = 8 either way), activations and the logits workspace depend on the tokens
    per device only; CP adds its ring buffers, K and V being received and sent, 2 x 2 x 2 T kv d. Doubling CP
    and the sequence again changes nothing."""
    base = dict(LLAMA8B, sharding=sharding, n_gpus=8)
    plain, _ = peak(**base, seq_len=32768, cp=1, dp=8, global_batch=8)
    ring, _ = peak(**base, seq_len=262144, cp=8, dp=1, global_batch=1)
    for kind in (M_WEIGHTS, M_GRADIENTS, M_OPTIMIZER, M_ACTIVATIONS):
        assert ring[kind] == pytest.approx(plain[kind], rel=1e-12), kind
    assert ring[M_BUFFERS] - plain[M_BUFFERS] == pytest.approx(8 * 32768 * 8 * 128, rel=1e-12)
    wider, _ = peak(**{**base, "n_gpus": 16}, seq_len=524288, cp=16, dp=1, global_batch=1)
    half, _ = peak(**{**base, "n_gpus": 16}, seq_len=262144, cp=8, dp=2, global_batch=2)
    assert np.allclose(wider, half, rtol=1e-12)


def test_all_to_all_cp_buffers():
    """DeepSpeed-Ulysses re-partitions Q, K and V into new tensors of their local size, 2 T (a d + 2 kv d)
    at T = 32k tokens per device (Jacobs et al. 2023), against the ring's 2 x 2 x 2 T kv d."""
    base = dict(LLAMA8B, n_gpus=8, seq_len=262144, cp=8, dp=1, global_batch=1)
    ring, _ = peak(**base, cp_algorithm="ring")
    ulysses, _ = peak(**base, cp_algorithm="alltoall")
    t_tok = 32768
    assert ulysses[M_BUFFERS] - ring[M_BUFFERS] == pytest.approx(
        2 * t_tok * (32 * 128 + 2 * 8 * 128) - 8 * t_tok * 8 * 128, rel=1e-12)


def test_all_gather_cp_buffers():
    """All-gather CP (Llama 3 sec. 3.3.2) holds every rank's K and V chunk, 2 cp T kv d, at T = 32k tokens per
    device over cp 8 (tp 1: 8 KV heads x 128), against the ring's 2 x 2 x 2 T kv d."""
    base = dict(LLAMA8B, n_gpus=8, seq_len=262144, cp=8, dp=1, global_batch=1)
    ring, _ = peak(**base, cp_algorithm="ring")
    gathered, _ = peak(**base, cp_algorithm="allgather")
    t_tok = 32768
    assert gathered[M_BUFFERS] - ring[M_BUFFERS] == pytest.approx(
        2 * 2 * 8 * t_tok * 8 * 128 - 8 * t_tok * 8 * 128, rel=1e-12)


def test_every_kind_shards_over_the_groups_the_stack_uses():
    """FSDP (TorchTitan's dp_shard_cp mesh) and Megatron's distributed optimizer
    (data_parallel_group_with_cp) shard over dp x cp = 8 with cp = 4: FSDP keeps FP32 shards 4 + 4 + 8 bytes
    of every parameter / 8; the distributed optimizer 12 / 8 of Adam beside replicated BF16 weights and FP32
    gradients; HSDP shards over its shard group only."""
    h, f, v, layers = 4096, 14336, 128256, 32
    params = layers * (2 * h * 32 * 128 + 2 * h * 8 * 128 + 3 * h * f + 2 * h) + 2 * v * h + h
    base = dict(LLAMA8B, n_gpus=8, seq_len=32768, cp=4, dp=2, global_batch=2)
    fsdp, _ = peak(**base)
    assert fsdp[M_WEIGHTS] == pytest.approx(4 * params / 8, rel=1e-12)
    assert fsdp[M_GRADIENTS] == pytest.approx(4 * params / 8, rel=1e-12)
    assert fsdp[M_OPTIMIZER] == pytest.approx(8 * params / 8, rel=1e-12)
    distopt, _ = peak(**{**base, "sharding": "distopt"})
    assert (distopt[M_WEIGHTS], distopt[M_OPTIMIZER]) == pytest.approx((2 * params, 12 * params / 8), rel=1e-12)
    hsdp, _ = peak(**{**base, "sharding": "hsdp", "shard_degree": 2})
    assert hsdp[M_OPTIMIZER] == pytest.approx(8 * params / 2, rel=1e-12)


# --- allocated and reserved -----------------------------------------------------------------------------------------

def test_allocated_reserved_and_per_device():
    """memory_allocated is the tensors (every kind but overhead), memory_reserved (1 + f) times it, and
    memory_per_device adds the overhead (here the CUDA context alone) to the allocated bytes (the allocator's cache is released
    when an allocation would fail)."""
    from fastmodel.lm.engine import evaluate_table

    columns = row(**GPT, layers=8, pp=4, micro_batch=2, global_batch=16, **{**NO_OVERHEAD, "cuda_context_bytes": 2**30},
                  allocator_cache_fraction=0.05)
    results = evaluate_table(columns[:, None])
    out, stage = peak(**GPT, layers=8, pp=4, micro_batch=2, global_batch=16)
    allocated = sum(out[k] for k in ALLOCATED)
    assert results["memory_allocated"][0] == pytest.approx(allocated, rel=1e-12)
    assert results["memory_reserved"][0] == pytest.approx(1.05 * allocated, rel=1e-12)
    assert results["memory_per_device"][0] == pytest.approx(allocated + 2**30, rel=1e-12)
    assert results["memory_peak_stage"][0] == stage == 0


def test_timeline_peak_is_the_kernel_peak():
    """The largest moment of the worst rank's memory timeline is memory_row's peak under 1F1B, GPipe and the
    interleaved schedule (the op orders of kernels/lm/pipeline.py against its closed-form in-flight counts)."""
    from fastmodel.lm.memory_timeline import memory_timeline

    for schedule, batch, vp, copy in (("1f1b", 16, 1, 0.0), ("gpipe", 8, 1, 0.0), ("interleaved", 16, 2, 0.0),
                                      ("1f1b", 16, 1, 4.0)):    # an optimizer-step gradient copy (moment of its own)
        plan = dict(layers=8, pp=4, vp=vp, micro_batch=2, global_batch=batch, pipeline_schedule=schedule,
                    step_grad_copy_bytes=copy)
        out, stage = peak(**GPT, **plan)
        timeline = memory_timeline(row(**GPT, **plan))
        overhead = timeline.stages[0].values[0, M_OVERHEAD]
        best = max(s.totals.max() - overhead for s in timeline.stages)
        assert best == pytest.approx(sum(out[k] for k in ALLOCATED), rel=1e-12)
        assert int(np.argmax([s.totals.max() for s in timeline.stages])) == int(stage)


def test_dualpipe_timeline_holds_p_plus_one_chunks():
    """DualPipe's op order (both directions on every rank) holds p + 1 micro-batches' activations at its peak on
    every rank, the closed form's count (DeepSeek-V3 report Table 2); the kernel adds the logits workspace and
    the embedding gradient at that same moment, so its peak bounds the timeline's from above, by less than
    those two terms."""
    from fastmodel.kernels.lm.layout import M_ACTIVATIONS
    from fastmodel.lm.memory_timeline import memory_timeline

    plan = dict(layers=8, pp=4, micro_batch=2, global_batch=16, pipeline_schedule="dualpipe")
    out, _ = peak(**GPT, **plan)
    timeline = memory_timeline(row(**GPT, **plan))
    one = peak(**GPT, **{**plan, "pp": 1, "layers": 2, "pipeline_schedule": "1f1b"})[0][M_ACTIVATIONS]
    overhead = timeline.stages[0].values[0, M_OVERHEAD]
    best = max(s.totals.max() - overhead for s in timeline.stages)
    kernel = sum(out[k] for k in ALLOCATED)
    assert kernel * 0.98 < best <= kernel
    for stage in timeline.stages:      # p + 1 = 5 chunks of 2 layers, and never 6
        held = stage.values[:, M_ACTIVATIONS].max()
        assert 4.5 * one < held < 6 * one


# --- dev data ---------------------------------------------------------------------------------------------------------

def test_b200_peak_allocated_in_sample_within_3_percent():
    """runs_dev_b200.jsonl publishes torch.cuda.max_memory_allocated, max over ranks (Megatron-LM on B200):
    every in-sample run's memory_allocated is within 3 %."""
    from fastmodel.lm.records import read_records
    from fastmodel.lm.validate import predict_records

    held = set(json.loads((DATA / "heldout.json").read_text())["files"]["runs_dev_b200.jsonl"])
    records = [r for r in read_records(DATA / "runs_dev_b200.jsonl")
               if r.id not in held and r.measured.get("memory_gib")]
    assert len(records) >= 10
    allocated = predict_records(records)["memory_allocated"] / 2**30
    errors = allocated / np.array([r.measured["memory_gib"] for r in records]) - 1.0
    assert np.max(np.abs(errors)) < 0.03, dict(zip([r.id for r in records], errors.round(3)))


# --- the worst rank ---------------------------------------------------------------------------------------------------

def test_worst_rank_can_be_a_middle_one():
    """pp = 4, 1F1B, m = 8 micro-batches of b = 2, 6 layers with the embedding and the loss in the split
    (``embedding_loss_in_split``: (6 + 2) / 4 = 2 slots a rank, rank 0 and rank 3 one layer each, ranks 1 and 2
    two). Rank i holds 4 - i micro-batches at the backward's start. Every rank's total at that moment (DDP,
    BF16 weights 2 + FP32 gradients 4 + Adam 12 = 18 B per parameter; a layer P = 4 h^2 + 2 h f + 2 h; the
    embedding V h on rank 0): rank 0 18 (P + V h) + 4 (layer + s b h), rank 1 18 x 2 P + 3 x 2 layer, rank 2
    18 x 2 P + 2 x 2 layer, beside the same buffers (4 s b h sent and received, 2 s b h + 2 s b f activation
    gradients). Rank 1, neither first nor last, is the worst; before every rank was evaluated, rank 0 was
    reported, 18 (P - V h) + 2 layer - 4 s b h lower."""
    s, b, h, a, f, v = 512, 2, 1024, 16, 4096, 1000
    layer = s * b * h * (34 + 5 * a * s / h)
    p = 4 * h * h + 2 * h * f + 2 * h
    buffers = 4 * s * b * h + 2 * s * b * h + 2 * s * b * f
    by_hand = [18 * (p + v * h) + 4 * (layer + s * b * h), 18 * 2 * p + 3 * 2 * layer, 18 * 2 * p + 2 * 2 * layer]
    out, stage = peak(**GPT, layers=6, pp=4, micro_batch=b, global_batch=16, embedding_loss_in_split=1)
    assert stage == 1
    assert out[M_ACTIVATIONS] == pytest.approx(3 * 2 * layer, rel=1e-12)
    assert sum(out[k] for k in ALLOCATED) == pytest.approx(max(by_hand) + buffers, rel=1e-12)
    assert by_hand[1] == max(by_hand)


def _every_rank_by_brute_force(columns):
    """(the largest total over every rank's ``stage_peak``, that rank), ranks 0 .. pp - 1 in a Python loop, from the
    per-layer terms the memory timeline takes (``memory_timeline._terms``, the kernel's set-up written in Python)."""
    from fastmodel.kernels.lm.layout import C_PP
    from fastmodel.kernels.lm.memory_peak import stage_peak
    from fastmodel.lm.memory_timeline import _terms

    t = _terms(columns)
    shared = (t["dense"], t["moe"], t["working"], t["gather"], t["comm"], t["grads"], t["logits"], t["resident"])
    totals = [sum(stage_peak(columns, float(stage), *shared)) for stage in range(int(columns[C_PP]))]
    return max(totals), totals


@pytest.mark.parametrize("plan", [
    dict(pipeline_schedule="1f1b", embedding_loss_in_split=1),
    dict(pipeline_schedule="1f1b", uneven_stages=1, layers=10),
    dict(pipeline_schedule="interleaved", vp=2, layers=16, uneven_stages=1),
    dict(pipeline_schedule="gpipe"),
    dict(pipeline_schedule="zb_h1", embedding_loss_in_split=1, layers=14),
    dict(pipeline_schedule="zb_h1", recompute="full"),     # deferred W residues larger than a checkpointed batch
    dict(pipeline_schedule="dualpipe"),
    dict(pipeline_schedule="dualpipe", pp=6),
    dict(pipeline_schedule="1f1b", pp=6, last_stage_layers=1),     # explicit layout: ranks 1-4 hold n_mid = 3
    dict(pipeline_schedule="1f1b", pp=6, embedding_loss_in_split=1, uneven_stages=1, layers=16),
])
@pytest.mark.parametrize("moe", [False, True])
def test_reported_peak_is_the_largest_over_every_rank(plan, moe):
    """Small plans of every schedule, dense and MoE (leading dense layers, MTP on the last rank): the peak
    ``memory_row`` reports is the largest of every rank's ``stage_peak`` total, enumerated rank by rank, and the
    rank it names holds that total. At pp = 6 a dense model's middle ranks are skipped without comparing their
    layers (``memory_row``'s ``uniform``), a MoE model's after comparing them."""
    model = dict(moe_experts=8, moe_topk=2, moe_ffn=512, dense_layers=3, mtp_layers=1, ep=2, dp=2) if moe else {}
    values = {**GPT, "layers": 12, "pp": 4, "micro_batch": 1, "global_batch": 16, **model, **plan}
    out = np.full(N_MEMORY_KINDS, np.nan)
    columns = row(**{**NO_OVERHEAD, "allocator_cache_fraction": 0, **values})
    stage = memory_row(columns, out)
    best, totals = _every_rank_by_brute_force(columns)
    assert sum(out[k] for k in ALLOCATED) == pytest.approx(best, rel=1e-12)
    assert totals[int(stage)] == best
