"""Memory per device of the real-world LM model (kernels/lm/memory.py), by memory kind: pipeline schedules,
buffers, the KV cache, the table kernel and the dev runs (activations: test_memory_activations.py; weights,
gradients and optimizer states: test_memory_states.py).

Golden values come from Korthikanti et al. 2022 (Figures 1 and 7, via the CSV in tests/data) or are
derived by hand below from the equations in docs/model_memory.md; no expectation calls the kernel's helpers.
"""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import (
    M_ACTIVATIONS,
    M_BUFFERS,
    M_GRADIENTS,
    M_OPTIMIZER,
    M_WEIGHTS,
    N_MEMORY_KINDS,
)
from fastmodel.kernels.lm.memory import kv_cache_bytes_per_token, memory_row, memory_table
from fastmodel.lm.table import row, table

DATA = Path(__file__).resolve().parents[1] / "data"

GIB = 2.0 ** 30


def memory(**values) -> np.ndarray:
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(row(**values), out)
    return out


def small(**values) -> np.ndarray:
    """``memory`` of the SMALL model with ``values`` replacing its settings."""
    return memory(**{**SMALL, **values})


# --- hand-derived: per-layer activations ------------------------------------------------------------------------------

#: a small dense model: 4 layers, h 1024, 16 heads of 64, 2-matrix MLP 4h, vocab 1000, untied
SMALL = dict(layers=4, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
             gated_mlp=0, tied_embeddings=0, micro_batch=2, global_batch=2, dp=1, sharding="ddp",
             grad_reduce_bytes=4, cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0,
             nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)


# --- hand-derived: pipeline schedules ---------------------------------------------------------------------------------

def _peak_activations(schedule, vp, pp=4, m=8):
    # untied + large vocab would move the peak to the last rank; a tiny vocab keeps it on the first
    return small(layers=16, vocab=8, global_batch=2 * m, flash_attention=1,
                  pp=pp, vp=vp, pipeline_schedule=schedule)[M_ACTIVATIONS]


def test_in_flight_micro_batches_1f1b_interleaved_gpipe():
    """pp = 4, m = 8 micro-batches, 16 layers (4 per rank). First rank: 1F1B holds min(p, m) = 4 micro-batches
    of its 4 layers = 16 layer-sets; interleaved with v = 2 holds 2 (p-1) + (v-1) p + 1 = 11 chunks of 2 layers
    = 22 layer-sets (= L (1 + (p-1)/(p v)), Korthikanti Sec. 4.2.3); GPipe holds all 8 x 4 = 32 on every rank."""
    s, b, h = 512, 2, 1024
    # norm and linear inputs 4 x 2 T h, Q K V O 4 x 2 T h, log-sum-exp 4 T a, GeLU input and output 2 x 2 T f
    per_layer = 8 * s * b * h + 8 * s * b * h + 4 * s * b * 16 + 2 * 2 * s * b * 4096
    assert _peak_activations("1f1b", 1) == pytest.approx(16 * per_layer, rel=1e-12)
    assert _peak_activations("interleaved", 2) == pytest.approx(22 * per_layer, rel=1e-12)
    # GPipe: every rank holds all 8 micro-batches, so the last one, which adds the final-norm and head
    # inputs 4 T h per micro-batch, is the most loaded; at its first backward one micro-batch has passed them
    assert _peak_activations("gpipe", 1) == pytest.approx(32 * per_layer + 7 * 4 * s * b * h, rel=1e-12)
    # fewer micro-batches than stages: 1F1B holds m = 2
    assert _peak_activations("1f1b", 1, m=2) == pytest.approx(2 * 4 * per_layer, rel=1e-12)


def test_embedding_and_loss_in_the_pipeline_split_free_a_layer_on_the_first_rank():
    """14 layers, pp = 4, 1F1B, m = 8. Without the rule the busiest rank holds ceil(14 / 4) = 4 layers and the
    first rank is counted at 4 x 4 micro-batches = 16 layer-sets. With the embedding and the loss each taking a
    layer's slot (Megatron-Core account_for_*_in_pipeline_split; Llama 3 sec. 3.3.2) the split is of 16 slots,
    4 per rank, and the first rank holds 3 layers: 4 x 3 = 12 layer-sets."""
    s, b, h = 512, 2, 1024
    per_layer = 8 * s * b * h + 8 * s * b * h + 4 * s * b * 16 + 2 * 2 * s * b * 4096
    common = dict(layers=14, vocab=8, global_batch=16, flash_attention=1, pp=4, uneven_stages=1)
    assert small(**common)[M_ACTIVATIONS] == pytest.approx(16 * per_layer, rel=1e-12)
    assert small(**common, embedding_loss_in_split=1)[M_ACTIVATIONS] == pytest.approx(12 * per_layer, rel=1e-12)
    # no pipeline: nothing to balance, the rule changes nothing
    one = dict(layers=14, vocab=8, flash_attention=1)
    assert small(**one, embedding_loss_in_split=1)[M_ACTIVATIONS] == small(**one)[M_ACTIVATIONS]


def test_learned_position_table_sits_on_the_first_rank_whole_on_every_tp_rank():
    """GPT-2-style learned positions: s x h parameters beside the word embedding (V h / t), not split over TP;
    DDP keeps 2 (weights) + 4 (FP32 gradients) + 12 (Adam) bytes of each."""
    s, h = 512, 1024
    base = small(tp=2, sequence_parallel=1)
    learned = small(tp=2, sequence_parallel=1, learned_positions=1)
    assert learned[M_WEIGHTS] - base[M_WEIGHTS] == pytest.approx(2 * s * h, rel=1e-12)
    assert learned[M_GRADIENTS] - base[M_GRADIENTS] == pytest.approx(4 * s * h, rel=1e-12)
    assert learned[M_OPTIMIZER] - base[M_OPTIMIZER] == pytest.approx(12 * s * h, rel=1e-12)


def test_most_loaded_rank_is_the_last_with_a_large_lm_head():
    """pp = 2, 1F1B, 1 micro-batch in flight on each rank (m = 1): the last rank adds the untied LM head
    (V h weights) and the logits workspace 6 T V / t, so it is reported."""
    s, b, h, v = 512, 2, 1024, 256000
    out = small(vocab=v, pp=2, global_batch=2)
    per_layer_params = 4 * h * h + 2 * h * 4096 + 2 * h
    last_params = 2 * per_layer_params + v * h + h
    assert out[M_WEIGHTS] == pytest.approx(2 * last_params, rel=1e-12)
    logits = 6 * s * b * v
    pp_buffers = 2 * 2 * s * b * h
    assert out[M_BUFFERS] == pytest.approx(logits + pp_buffers, rel=1e-12)


@pytest.mark.parametrize("impl, per_logit", [("vocab_parallel", 6), ("eager", 12), ("compiled", 4)])
def test_loss_workspace_by_implementation(impl, per_logit):
    """The last rank's loss workspace per logit, by how the loss is computed (docs/model_memory.md):
    Megatron vocab-parallel: BF16 logits 2 + their FP32 copy 4 = 6; eager ``cross_entropy(logits.float())``
    in its backward: the saved FP32 log-softmax 4, the NLL gradient 4 and the log-softmax gradient 4 = 12
    (the BF16 logits dropped by the caller); compiled: the saved BF16 logits 2 + the BF16 input gradient 2 = 4.
    pp = 2, T = s b = 1024 tokens, V = 256,000: the loss phase is the last rank's peak, buffers = workspace +
    the PP send/receive 2 x 2 T h."""
    s, b, h, v = 512, 2, 1024, 256000
    out = small(vocab=v, pp=2, global_batch=2, loss_impl=impl)
    assert out[M_BUFFERS] == pytest.approx(per_logit * s * b * v + 2 * 2 * s * b * h, rel=1e-12)


def test_fsdp_holds_only_the_lm_head_gathered_at_the_loss():
    """FSDP over 4 ranks, pp = 1, T = s b = 1024 tokens, V = 256,000, h = 1024: at the loss no layer is
    gathered (each was resharded after its forward, none prefetched yet, no gradient to reduce-scatter): the
    buffers are the LM head gathered in BF16, 2 V h, and the loss workspace 6 T V. The layer gathers
    (2 c + g) x layer params of the backward are smaller than this, so the loss is the peak."""
    s, b, h, v = 512, 2, 1024, 256000
    out = small(vocab=v, dp=4, global_batch=8, sharding="fsdp")
    assert out[M_BUFFERS] == pytest.approx(2 * v * h + 6 * s * b * v, rel=1e-12)


def test_communication_buffers_and_logits_workspace():
    """tp = 2 with SP, cp = 2, pp = 2, m = 1 (T = b s / cp = 512 tokens): the TP all-gather 2 T h, the CP ring's
    K and V sent and received 2 x 2 x 2 T (kv/t) d, one PP activation sent and one received 2 x 2 T h / t. The
    last rank (head inputs, head weights) is the most loaded. With a vocabulary of 8 its logits workspace
    6 T V / t is smaller than the activation gradients of a layer's backward (the incoming 2 T h / t and the
    2-matrix MLP's fc1 and GeLU output gradients 2 x 2 T f / t less the GeLU output 2 T f / t, released by fc2's
    backward before fc1's output gradient is allocated), so the peak is in the backward; with a
    vocabulary of 256,000 it is at the loss."""
    t_tok, h, kv_width, f = 512, 1024, 8 * 64, 4096
    comm = 2 * t_tok * h + 8 * t_tok * kv_width + 4 * t_tok * h / 2
    grads = 2 * t_tok * h / 2 + 2 * t_tok * f / 2
    out = small(vocab=8, tp=2, sequence_parallel=1, cp=2, pp=2, global_batch=2, flash_attention=1)
    assert out[M_BUFFERS] == pytest.approx(comm + grads, rel=1e-12)
    out = small(vocab=256000, tp=2, sequence_parallel=1, cp=2, pp=2, global_batch=2, flash_attention=1)
    assert out[M_BUFFERS] == pytest.approx(comm + 6 * t_tok * 256000 / 2, rel=1e-12)


def test_moe_layer_activations_and_dispatch_buffer():
    """One MoE layer, 8 experts of 512 (SwiGLU), top-2, ep = 2, T = 128 tokens, h = 256, 4 heads of 64,
    flash, no dropout. Attention as in a dense layer (norm and QKV inputs 4 T h, Q K V O 8 T h, log-sum-exp
    4 T a); the MLP block keeps norm and router
    inputs 4 T h, FP32 router logits and probabilities 2 x 4 T E, the permuted rows and expert outputs
    (2 + 2) R h and the experts' gate/up 4 R f_e and product 2 R f_e over R = k T = 256 rows. The EP dispatch
    holds its send and receive buffers 2 x 2 R h."""
    t_tok, h, a, e, k, fe = 128, 256, 4, 8, 2, 512
    rows = k * t_tok
    attention = 4 * t_tok * h + 8 * t_tok * h + 4 * t_tok * a
    mlp = 4 * t_tok * h + 2 * 4 * t_tok * e + 4 * rows * h + 4 * rows * fe + 2 * rows * fe
    head = 0    # the final-norm and head inputs 4 T h are released before the peak, the layer's backward
    out = memory(layers=1, hidden=h, ffn=1024, heads=a, kv_heads=a, head_dim=64, vocab=100, seq_len=t_tok,
                 gated_mlp=1, moe_experts=e, moe_topk=k, moe_ffn=fe, micro_batch=1, global_batch=2, dp=2, ep=2)
    assert out[M_ACTIVATIONS] == pytest.approx(attention + mlp + head, rel=1e-12)
    # the peak is in a layer's backward: the dispatch buffers plus the activation gradients, the incoming 2 T h
    # and the experts' SwiGLU gate/up and product gradients 2 x (2 + 1) R f_e less the product 2 R f_e, which
    # fc2's backward releases first (the model has no dense layer)
    grads = 2 * t_tok * h + 4 * rows * fe
    assert out[M_BUFFERS] == pytest.approx(2 * 2 * rows * h + grads, rel=1e-12)


def test_kv_cache_bytes_per_token():
    """Llama-3-70B: 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 B/token; at tp = 8 one KV head per
    device: 40,960. DeepSeek-V3 MLA: (512 + 64) x 61 x 2 = 70,272 B/token on every TP rank."""
    llama = dict(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128)
    assert kv_cache_bytes_per_token(row(**llama)) == 327680
    assert kv_cache_bytes_per_token(row(**llama, tp=8)) == 40960
    assert kv_cache_bytes_per_token(row(**llama, tp=16)) == 40960    # KV heads replicated past tp = kv_heads
    mla = row(layers=61, hidden=7168, heads=128, mla=1, kv_lora_rank=512, qk_rope_head_dim=64,
              qk_nope_head_dim=128, v_head_dim=128, tp=8)
    assert kv_cache_bytes_per_token(mla) == 70272


def test_memory_table_matches_memory_row():
    params = table(3, layers=[4, 8, 16], tp=[1, 2, 4], sharding=[0, 1, 3], dp=[1, 2, 4], global_batch=8)
    result = memory_table(params)
    assert result.shape == (N_MEMORY_KINDS, 3)
    for j in range(3):
        out = np.empty(N_MEMORY_KINDS)
        memory_row(np.ascontiguousarray(params[:, j]), out)
        np.testing.assert_array_equal(result[:, j], out)
    assert np.all(np.isfinite(result)) and np.all(result >= 0)


# --- dev runs ---------------------------------------------------------------------------------------------------------

#: record sources of frameworks that predate FlashAttention and run dropout (Megatron 2021-22 papers,
#: Megatron-DeepSpeed, minGPT on PyTorch 1.x); the same rule as the run-record reader of issue 10
LEGACY_SOURCES = ("korthikanti", "narayanan", "bloom", "mtnlg", "aws")


def record_columns(r: dict) -> dict:
    """A run record (../shared/data/RUNS.md) as memory-relevant columns, with the schema's fill-in rules:
    micro_batch from global_batch / (dp grad_accum), else 1; recompute unknown -> the stack's rule; partial layers
    without a fraction -> 0.5; hsdp -> fsdp with its shard_degree; PyTorch-native frameworks run eager
    element-wise kernels; TorchTitan's "op-level" selective AC is op-level checkpointing; the norm is the
    record's ``normalization``, else RMSNorm for gated-MLP models and LayerNorm for GPT-style ones.
    Korthikanti Table 5's "selective" rows are the paper's sequence parallelism + selective recompute (its
    Sec. 6), so they get sequence_parallel. ``vp = "unknown"`` takes the virtual stages the record reader's
    stack rule gives (docs/model.md §11.8)."""
    from fastmodel.lm.records import lower_record
    from fastmodel.registry.lm import COLUMN_INDEX

    m, s, p = r["model"], r["system"], r["plan"]
    vp = int(lower_record(r).columns[COLUMN_INDEX["vp"]]) if p.get("vp") == "unknown" else (p.get("vp") or 1)
    legacy = r["id"].startswith(LEGACY_SOURCES)
    framework = (r.get("framework") or "").lower()
    dp, ga = p["dp"], p.get("grad_accum")
    micro = p.get("micro_batch") or (p["global_batch"] // (dp * ga) if ga else 1)
    if p["recompute"] == "unknown":                     # the stack's rule (docs/model.md §11.8)
        from fastmodel.lm.stacks import profile_for
        recompute = profile_for(r.get("framework"), r.get("stack"))[0].unknown_recompute(m["seq_len"])[0]
    else:
        recompute = p["recompute"]
    sp = bool(p.get("sequence_parallel")) or (r["id"].startswith("korthikanti") and recompute == "selective")
    fraction = p.get("recompute_fraction") or (0.5 if recompute == "partial_layers" else 0.0)
    return dict(
        layers=m["layers"], hidden=m["hidden"], ffn=m["ffn"], heads=m["heads"], kv_heads=m["kv_heads"],
        head_dim=m["head_dim"], vocab=m["vocab"], seq_len=m["seq_len"], gated_mlp=int(m["ffn_kind"] == "swiglu3"),
        tied_embeddings=int(bool(m.get("tied_embeddings", legacy))), moe_experts=m.get("moe_experts") or 0,
        moe_topk=m.get("moe_topk") or 0, moe_ffn=m.get("moe_ffn") or 0, hbm_bytes=s["hbm_bytes"],
        tp=p["tp"], pp=p["pp"], vp=vp, cp=p["cp"], ep=p.get("ep") or 1, dp=dp,
        sharding={"hsdp": "fsdp"}.get(p["sharding"], p["sharding"]), shard_degree=p.get("shard_degree") or 0,
        micro_batch=micro, global_batch=p["global_batch"], recompute=recompute, recompute_fraction=fraction,
        sequence_parallel=int(sp), precision=p["precision"], fp8_params=int(bool(p.get("fp8_params"))),
        grad_reduce_bytes=2 if p.get("grad_reduce_dtype") in ("bf16", "fp16") else 4,
        optimizer=(p.get("optimizer") or "adam").lower(),
        pipeline_schedule="interleaved" if vp > 1 else "1f1b",
        dropout=int(legacy), flash_attention=int(not legacy),
        collective_bucket_bytes=1e8 if (legacy and p["sharding"] == "fsdp") else 0,
        fused_kernels=0 if any(k in framework for k in ("pytorch", "torchtitan")) else 1,
        selective_policy=int("op-level" in (p.get("recompute_detail") or "")),
        rms_norm=int("rms" in m.get("normalization", "rmsnorm" if m["ffn_kind"] == "swiglu3" else "layernorm")))


def dev_records() -> list[dict]:
    import json
    with open(DATA / "runs_dev.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


#: Megatron-LM / NeMo runs with every plan input published (no fsdp, no recompute guess): the setting the
#: Korthikanti terms describe. A run that ran must fit its device.
MEGATRON_SOURCES = ("korthikanti", "narayanan2021_t1", "mlperf", "mtnlg")


def test_dev_runs_memory_report(capsys):
    """Predicted peak memory of every dev run (printed; ``pytest -s -k dev_runs``). No dev record publishes
    ``measured.memory_gib``; where one does, its error is printed beside it. The Megatron-LM runs must fit."""
    lines = [f"{'run':60s} {'pred GiB':>8s} {'HBM':>5s} {'meas':>6s}  weights grads optim activ buffers"]
    for r in dev_records():
        out = memory(**record_columns(r))
        total = out.sum() / GIB
        hbm = r["system"]["hbm_bytes"] / GIB
        measured = r["measured"].get("memory_gib")
        parts = " ".join(f"{out[k] / GIB:6.1f}" for k in (M_WEIGHTS, M_GRADIENTS, M_OPTIMIZER, M_ACTIVATIONS,
                                                            M_BUFFERS))
        meas = f"{measured:6.1f}" if measured else "     -"
        flag = " over HBM" if total > hbm else ""
        lines.append(f"{r['id'][:60]:60s} {total:8.1f} {hbm:5.0f} {meas}  {parts}{flag}")
        assert np.isfinite(total) and total > 0
        if r["id"].startswith(MEGATRON_SOURCES):
            assert total <= hbm, r["id"]
        if measured:
            lines[-1] += f"  error {100 * (total / measured - 1):+.1f} %"
    with capsys.disabled():
        print("\n" + "\n".join(lines))


#: Mixtral 8x7B (Jiang et al. 2024, Table 1): h 4096, 32 heads of 128, 8 KV heads, 8 experts of 14336, top-2
MIXTRAL = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=32000, seq_len=4096,
               gated_mlp=1, moe_experts=8, moe_topk=2, moe_ffn=14336, micro_batch=1, global_batch=1024)


def test_fsdp_gather_buffer_of_moe_layers_shards_with_tp():
    """Issue 25 item 10: the gathered MoE layer of layer-wrapped FSDP is the device's part. Attention per
    layer 2 h a d + 2 h kv d = 41,943,040 parameters over t plus two norms 2 h; router h E = 32,768; routed
    experts E 3 h f = 1,409,286,144, over t without EP (TorchTitan puts them on the TP mesh), over ep etp
    with EP. Buffer (2 x 2 + 4) bytes per parameter (two BF16 layers in flight, one FP32 gradient)."""
    from fastmodel.kernels.lm.memory_fsdp import fsdp_gather_buffer_bytes

    attention, norms, router, experts = 41_943_040, 2 * 4096, 8 * 4096, 8 * 3 * 4096 * 14336

    def buffer(**plan):
        return fsdp_gather_buffer_bytes(row(**{**MIXTRAL, "sharding": "fsdp", "dp": 8, **plan}))

    assert buffer(tp=1) == 8 * (attention + norms + router + experts)
    assert buffer(tp=8) == 8 * (attention / 8 + norms + router + experts / 8) == 1_451_556_864
    assert buffer(tp=8, ep=8, etp=1) == 8 * (attention / 8 + norms + router + experts / 8)     # one expert each
    assert buffer(tp=8, ep=2, etp=1) == 8 * (attention / 8 + norms + router + experts / 2)     # etp 1: whole experts
    assert buffer(tp=4, ep=2, etp=4) == 8 * (attention / 4 + norms + router + experts / 8)
    assert buffer(tp=8, sharding="zero2") == 0.0


def test_fsdp_needs_less_memory_than_zero2_for_mixtral_with_tp():
    """The probe's case: Mixtral 8x7B, tp 8, 64 GPUs: FSDP keeps 4 + 4 + 8 bytes per parameter over the
    shard group where ZeRO-2 keeps the BF16 weights whole; the gathered buffer no longer outweighs that. Not with
    pipeline stages and one reduction per step (the default ``reduce_every_microbatch = 0``): the stage's
    gradients accumulate unsharded and its weights stay gathered (docs/model_memory.md "FSDP with pipeline
    stages"), 2 + 4 bytes per parameter more than the shards, so FSDP there holds more than ZeRO-2."""
    from fastmodel.lm.sweep import lm_sweep

    ds = lm_sweep("mixtral-8x7b", "dgx-h100", "llm-pretrain", num_nodes=8,
                  axes={"sharding": ["zero2", "fsdp"], "plan": ["tp8", "tp4", "tp8.pp4", "tp8.ep8"]})
    total = ds.memory_per_device
    flat = ["tp8", "tp4", "tp8.ep8"]
    assert (total.sel(sharding="fsdp", plan=flat) < total.sel(sharding="zero2", plan=flat)).all()
    assert float(total.sel(sharding="fsdp", plan="tp8.pp4")) > float(total.sel(sharding="zero2", plan="tp8.pp4"))
    buffers = ds.memory.sel(memory_kind="buffers", sharding="fsdp")
    assert float(buffers.sel(plan="tp8")) < 0.6 * float(buffers.sel(plan="tp4"))
