"""What a pipeline rank holds chunk by chunk (kernels/lm/memory_chunks.py): the interleaved schedule's chunks as
Megatron-Core builds them, ZB-H1's deferred weight gradients, and the memory timeline against the kernel on every
rank. Expectations are derived by hand from docs/model_memory.md ("Chunks in flight under the interleaved
schedule", "ZB-H1: what a deferred weight gradient keeps")."""

import itertools

import pytest

from fastmodel.kernels.lm.memory_activations import embedding_activation_bytes, head_activation_bytes
from fastmodel.kernels.lm.memory_chunks import (
    chunk_microbatch_bytes,
    held_bytes,
    rank_wgrad_pending_bytes,
    wgrad_pending_layer_bytes,
)
from fastmodel.kernels.lm.memory_peak import stage_peak
from fastmodel.lm.memory_timeline import _terms, stage_memory
from fastmodel.lm.table import row

#: Megatron 2022 GPT layer (2-matrix GeLU MLP, dropout, unfused attention), no overhead terms
GPT = dict(hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512, gated_mlp=0,
           tied_embeddings=0, dropout=1, flash_attention=0, dp=1, sharding="ddp", grad_reduce_bytes=4,
           cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0,
           micro_batch=1)
LAYER = 1.0e8           # bytes one layer keeps per micro-batch, a unit for the counts below (> the mask T h)


def interleaved(**extra):
    """p = 4, v = 2, 14 layers with the embedding and the loss in the split: 16 slots, 2 a chunk."""
    return row(**{**GPT, "layers": 14, "pp": 4, "vp": 2, "pipeline_schedule": "interleaved",
                  "embedding_loss_in_split": 1, "global_batch": 8, **extra})


def test_chunks_are_what_megatron_builds():
    """get_num_layers_to_build: (14 + 2) / (4 x 2) = 2 layers a chunk, one fewer in chunk 0 of rank 0 (with the
    embedding's dropout mask T h) and in chunk 1 of rank 3 (with the head's inputs (2 + 2) T h)."""
    r = interleaved()
    emb, head = embedding_activation_bytes(r), head_activation_bytes(r)
    assert emb == 512 * 1024 and head == 4 * 512 * 1024
    assert chunk_microbatch_bytes(r, 0.0, 0.0, LAYER, 0.0) == pytest.approx(LAYER + emb)
    assert chunk_microbatch_bytes(r, 0.0, 1.0, LAYER, 0.0) == pytest.approx(2 * LAYER)
    assert chunk_microbatch_bytes(r, 1.0, 0.0, LAYER, 0.0) == pytest.approx(2 * LAYER)
    assert chunk_microbatch_bytes(r, 3.0, 0.0, LAYER, 0.0) == pytest.approx(2 * LAYER)
    assert chunk_microbatch_bytes(r, 3.0, 1.0, LAYER, 0.0) == pytest.approx(LAYER + head)


def test_first_rank_holds_the_chunks_in_flight_not_their_average():
    """Rank 0, m = 8: W = 2 x 3 + 4 = 10 warm-up forwards, 11 chunks before the first backward: forwards 0-3 of
    chunk 0, 4-7 of chunk 1, 8-10 of chunk 0: seven chunk-0 (1 layer + mask) and four chunk-1 (2 layers), 15
    layers and 7 masks; a later backward holds eight chunk-0 and three chunk-1, 14 layers (not larger). The
    average over chunks would give 11 / 2 x (3 layers + mask) = 16.5 layers. At the embedding: after backward
    k = 4 (the first of chunk 0) 15 forwards (chunk 0: 0-3, 8-11; chunk 1: 4-7, 12-14) less backwards 0-3 of
    chunk 1 and 4 of chunk 0: seven chunk-0 and three chunk-1, 13 layers; after backward 5, 16 forwards less four
    chunk-1 and two chunk-0 backwards: six chunk-0 and four chunk-1, 14 layers and 6 masks, the larger."""
    r = interleaved()
    emb = embedding_activation_bytes(r)
    at_loss, at_backward, at_embedding = held_bytes(r, 0.0, LAYER, 0.0, 0.0)
    assert at_backward == pytest.approx(15 * LAYER + 7 * emb)
    assert at_embedding == pytest.approx(14 * LAYER + 6 * emb)


def test_last_rank_holds_one_loss_chunk_at_the_loss_and_none_later():
    """Rank 3, m = 8: W = 4, 5 chunks before the first backward: four chunk-0 (2 layers) and the loss's chunk 1
    (1 layer + head): 9 layers + head at the loss; the first backward has released that head (passed_head); from
    backward k = 4 on (chunk 0's backwards, 12 steady steps > p) five chunk-0: 10 layers, the backward's largest."""
    r = interleaved()
    head = head_activation_bytes(r)
    at_loss, at_backward, _ = held_bytes(r, 3.0, LAYER, 0.0, head)
    assert at_loss == pytest.approx(9 * LAYER + head)
    assert at_backward == pytest.approx(10 * LAYER)


def test_llama_405b_first_rank_holds_112_layers():
    """Llama 3.1 405B, PP 16 x VP 8, embedding and loss in the split (126 + 2 = 128 slots, one a chunk; chunk 0 of
    rank 0 is the embedding alone), m = 384: rank 0 runs W + 1 = 2 x 15 + 7 x 16 + 1 = 143 forwards before its
    first backward, 31 of them of chunk 0 (0 layers): 112 layers; rank 1 holds 141 chunks of one layer."""
    r = row(hidden=16384, ffn=53248, heads=128, kv_heads=8, head_dim=128, vocab=128256, seq_len=8192,
            layers=126, pp=16, vp=8, tp=4, dp=4, micro_batch=1, global_batch=1536, pipeline_schedule="interleaved",
            embedding_loss_in_split=1, dropout=0)
    assert held_bytes(r, 0.0, LAYER, 0.0, 0.0)[1] == pytest.approx(112 * LAYER)
    assert held_bytes(r, 1.0, LAYER, 0.0, 0.0)[1] == pytest.approx(141 * LAYER)


def test_gpt_layer_weight_gradient_residue_is_32_sbh():
    """Qi et al. 2024 Table 1: M_W = 32 s b h for the GPT layer (MHA, f = 4h, 16-bit, no TP): inputs of QKV, the
    output projection, fc1, fc2 2 + 2 + 2 + 8 and output gradients 6 + 2 + 8 + 2 (s b h units)."""
    r = row(**GPT, layers=4)
    assert wgrad_pending_layer_bytes(r, False) == pytest.approx(32 * 512 * 1024)


def test_zb_h1_rank_holds_its_deferred_weight_gradients():
    """ZB-H1, p = 4, m = 8, 8 layers (2 a rank): rank 2 defers its first two W passes; before I(2) it holds
    p - s = 2 micro-batches not through I and 2 through I but not W: 2 per_mb + 2 x 2 M_W. Rank 0 holds 1F1B's 4."""
    r = row(**GPT, layers=8, pp=4, pipeline_schedule="zb_h1", global_batch=8)
    per_mb = chunk_microbatch_bytes(r, 2.0, 0.0, LAYER, 0.0)
    assert rank_wgrad_pending_bytes(r, 2.0) == pytest.approx(2 * 32 * 512 * 1024)
    assert held_bytes(r, 2.0, LAYER, 0.0, 0.0)[1] == pytest.approx(2 * per_mb + 2 * 2 * 32 * 512 * 1024)
    assert held_bytes(r, 0.0, LAYER, 0.0, 0.0)[1] == pytest.approx(4 * chunk_microbatch_bytes(r, 0.0, 0.0, LAYER, 0.0))


CASES = [dict(pipeline_schedule=s, vp=v, embedding_loss_in_split=split, recompute=rc, vocab=vocab, global_batch=m)
         for s, v in (("1f1b", 1), ("gpipe", 1), ("zb_h1", 1), ("interleaved", 2), ("interleaved", 3))
         for split, rc, vocab, m in itertools.product((0, 1), ("none", "full"), (1000, 64000), (4, 8, 12))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_timeline_and_kernel_agree_on_every_rank(case):
    """The largest moment of every rank's memory timeline (the schedule's op order walked) is that rank's kernel
    peak (closed forms), under 1F1B, GPipe, ZB-H1 and the interleaved schedule."""
    layers = 4 * case["vp"] * 2 - 2 * case["embedding_loss_in_split"]
    r = row(**{**GPT, **case, "layers": layers, "pp": 4})
    t = _terms(r)
    for stage in range(4):
        timeline = stage_memory(r, stage, t).totals.max()
        kernel = sum(stage_peak(r, float(stage), t["dense"], t["moe"], t["working"], t["gather"], t["comm"],
                                t["grads"], t["logits"], t["resident"]))
        assert timeline == pytest.approx(kernel, rel=1e-12), stage
