"""Weights, gradients and optimizer states per device by sharding stage (kernels/lm/memory_states.py,
kernels/lm/memory_optimizer.py), as the memory kernel reports them, derived by hand from the equations in
docs/model_memory.md. The helpers (``memory``, ``small`` and its SMALL model) are tests/lm/test_memory.py's.
"""

import pytest

from fastmodel.kernels.lm.layout import M_BUFFERS, M_GRADIENTS, M_KV_CACHE, M_OPTIMIZER, M_OVERHEAD, M_WEIGHTS
from tests.lm.test_memory import memory, small

# --- hand-derived: weights, gradients, optimizer by sharding stage -------------------------------------------------

def _small_params():
    h, f, v, layers = 1024, 4096, 1000, 4
    return layers * (4 * h * h + 2 * h * f + 2 * h) + 2 * v * h + h   # untied embedding and head, final norm


def test_ddp_weights_gradients_adam():
    p = _small_params()
    out = small(dp=8, sharding="ddp")
    assert out[M_WEIGHTS] == 2 * p
    assert out[M_GRADIENTS] == 4 * p
    assert out[M_OPTIMIZER] == 12 * p
    assert out[M_KV_CACHE] == 0
    assert out[M_OVERHEAD] == 0
    # the CUDA context is overhead; the serving engine's flat framework_memory_bytes is not read here
    assert small(cuda_context_bytes=3e8, framework_memory_bytes=3e9)[M_OVERHEAD] == 3e8
    # the allocator's cache is released on demand: not overhead
    assert small(cuda_context_bytes=3e8, allocator_cache_fraction=0.05)[M_OVERHEAD] == 3e8


def test_zero1_vs_zero2_vs_zero3_on_64_gpus():
    """ZeRO paper Sec. 5 / Megatron distrib_optimizer.md on dp = 64, Adam, FP32 gradient reduction:
    ZeRO-1 2 + 4 + 12/64 bytes per parameter; ZeRO-2 2 + 4/64 + 12/64; ZeRO-3 (FSDP) keeps FP32 shards
    4/64 + 4/64 + 8/64 and gathers 2 layers of BF16 weights plus one layer of FP32 gradients."""
    p = _small_params()
    layer = 4 * 1024 * 1024 + 2 * 1024 * 4096 + 2 * 1024
    z1 = small(dp=64, sharding="zero1")
    assert (z1[M_WEIGHTS], z1[M_GRADIENTS]) == (2 * p, 4 * p)
    assert z1[M_OPTIMIZER] == pytest.approx(12 * p / 64, rel=1e-12)
    z2 = small(dp=64, sharding="zero2")
    assert z2[M_WEIGHTS] == 2 * p
    assert z2[M_GRADIENTS] == pytest.approx(4 * p / 64, rel=1e-12)
    assert z2[M_OPTIMIZER] == pytest.approx(12 * p / 64, rel=1e-12)
    z3 = small(dp=64, sharding="fsdp")
    assert z3[M_WEIGHTS] == pytest.approx(4 * p / 64, rel=1e-12)
    assert z3[M_GRADIENTS] == pytest.approx(4 * p / 64, rel=1e-12)
    assert z3[M_OPTIMIZER] == pytest.approx(8 * p / 64, rel=1e-12)
    # peak in a layer's backward (T = 1024): the gathers plus the activation gradients 2 T h + 2 x 2 T f less
    # fc2's released input 2 T f, larger than the logits 6 T V and than the gathered embedding and its gradient
    # (2 + 4) V h
    grads = 2 * 1024 * 1024 + 2 * 1024 * 4096
    assert z3[M_BUFFERS] == pytest.approx((2 * 2 + 4) * layer + grads, rel=1e-12)
    # DeepSpeed-style bucketed ZeRO-3 gathers per module: the largest matrix (1024 x 4096) in BF16 and its
    # FP32 gradient, plus one prefetch bucket of 5e7 elements x 2 bytes
    bucketed = small(dp=64, sharding="fsdp", collective_bucket_bytes=1e8)
    assert bucketed[M_BUFFERS] == pytest.approx((2 + 4) * 1024 * 4096 + 1e8 + grads, rel=1e-12)
    # HSDP: sharded within 8 devices, replicated 8 times
    hsdp = small(dp=64, sharding="hsdp", shard_degree=8)
    assert hsdp[M_OPTIMIZER] == pytest.approx(8 * p / 8, rel=1e-12)


def test_sgd_and_adafactor_optimizer_states():
    p = _small_params()
    assert small(optimizer="sgd")[M_OPTIMIZER] == 8 * p
    # Adafactor: 4-byte master + factored second moment, 4 bytes x (rows + cols) of each matrix:
    # 4 attention matrices (1024 x 1024) and 2 MLP matrices (1024 x 4096) per layer
    factored = 4 * 4 * (4 * (1024 + 1024) + 2 * (1024 + 4096))
    assert small(optimizer="adafactor")[M_OPTIMIZER] == pytest.approx(4 * p + factored, rel=1e-12)


def test_sixteen_bit_model_and_sgd_without_momentum():
    """torch.optim.SGD at its default momentum=0 keeps no state: the FP32 master alone, 4 bytes. A 16-bit model
    (built in FP16, no FP32 copy: master_weights = 0) keeps its 2-byte parameters and nothing else; Adam then
    keeps its two moments only, 16-bit like the parameters. Under FSDP the 16-bit model shards its 2-byte parameters and gradients."""
    p = _small_params()
    assert small(optimizer="sgd_no_momentum")[M_OPTIMIZER] == 4 * p
    half = small(optimizer="sgd_no_momentum", master_weights=0, grad_reduce_bytes=2)
    assert (half[M_WEIGHTS], half[M_GRADIENTS], half[M_OPTIMIZER]) == (2 * p, 2 * p, 0)
    # torch.optim creates its states like the parameter (zeros_like): a 16-bit model's Adam moments are 2 + 2
    assert small(master_weights=0)[M_OPTIMIZER] == 4 * p
    assert small(optimizer="sgd", master_weights=0)[M_OPTIMIZER] == 2 * p
    fsdp = small(dp=64, sharding="fsdp", optimizer="sgd_no_momentum", master_weights=0, grad_reduce_bytes=2)
    assert fsdp[M_WEIGHTS] == pytest.approx(2 * p / 64, rel=1e-12)
    assert fsdp[M_GRADIENTS] == pytest.approx(2 * p / 64, rel=1e-12)
    assert fsdp[M_OPTIMIZER] == 0
    # FSDP2 reducing a BF16 model's gradients in FP32 (KempnerForge) casts them back: the stored shard stays 2 bytes
    fp32_reduce = small(dp=64, sharding="fsdp", master_weights=0, grad_reduce_bytes=4)
    assert fp32_reduce[M_GRADIENTS] == pytest.approx(2 * p / 64, rel=1e-12)
    assert small(dp=64, sharding="fsdp", grad_reduce_bytes=4)[M_GRADIENTS] == pytest.approx(4 * p / 64, rel=1e-12)
    # with the FP32 master (mixed precision) FSDP's FP32 shards are the master: SGD without momentum adds nothing
    assert small(dp=64, sharding="fsdp", optimizer="sgd_no_momentum")[M_WEIGHTS] == pytest.approx(4 * p / 64)
    assert small(dp=64, sharding="fsdp", optimizer="sgd_no_momentum")[M_OPTIMIZER] == 0


@pytest.mark.parametrize("ffn", [2048, 8192])
def test_fsdp_module_wrap_gathers_one_module(ffn):
    """Module-wrapped FSDP (minGPT in the PyTorch FSDP GPT-175B benchmark: the attention block and each MLP linear
    are units) gathers the largest module, not the layer: two in flight in BF16 and its FP32 gradient,
    (2 x 2 + 4) x max(4 h^2, h f) -- the attention block (4 x 1024^2) at f = 2048, one MLP matrix (1024 x 8192)
    at f = 8192; plus the activation gradients 2 T h + 2 x 2 T f of the layer's backward (T = 1024) less fc2's
    input 2 T f, released before fc1's output gradient is allocated."""
    h, t_tok = 1024, 1024
    grads = 2 * t_tok * h + 2 * t_tok * ffn
    unit = max(4 * h * h, h * ffn)
    layer = 4 * h * h + 2 * h * ffn + 2 * h
    wrapped = small(dp=64, sharding="fsdp", ffn=ffn, fsdp_module_wrap=1)
    assert wrapped[M_BUFFERS] == pytest.approx((2 * 2 + 4) * unit + grads, rel=1e-12)
    assert small(dp=64, sharding="fsdp", ffn=ffn)[M_BUFFERS] == pytest.approx((2 * 2 + 4) * layer + grads, rel=1e-12)


def test_tensor_and_pipeline_sharding_of_weights():
    """tp = 4, pp = 2 on 4 layers: the first rank holds 2 layers / 4 + the vocab-parallel embedding V h / 4
    and the replicated norms 2 h per layer."""
    h, f, v = 1024, 4096, 1000
    first = 2 * ((4 * h * h + 2 * h * f) / 4 + 2 * h) + v * h / 4
    out = small(vocab=v, tp=4, pp=2, global_batch=8)
    assert out[M_WEIGHTS] == pytest.approx(2 * first, rel=1e-12)


def test_fp8_weights():
    """FP8 forms are kept of the GEMM weights only: the embedding, the head (a plain ColumnParallelLinear in
    Megatron-Core, no Transformer Engine module) and the norms stay BF16 with no FP8 copy
    (docs/model_memory.md "Weights"): 4 layers x 2 h norms + the final norm h + embedding and head 2 V h."""
    p = _small_params()
    h, v = 1024, 1000
    uncast = 4 * 2 * h + h + 2 * v * h
    assert small(precision="fp8")[M_WEIGHTS] == 3 * (p - uncast) + 2 * uncast     # BF16 + cached FP8 copy
    assert small(precision="fp8", fp8_params=1)[M_WEIGHTS] == (p - uncast) + 2 * uncast
    assert small()[M_WEIGHTS] == 2 * p                                              # BF16: unchanged


def test_fp8_weights_of_a_moe_model_leave_the_router_uncast():
    """A MoE layer's router (Megatron-Core ``router_gating_linear``, BF16/FP32) has no FP8 form either: one MoE
    layer more of E experts of width f_e adds h E uncast parameters beside its experts' 2 h f_e E cast ones."""
    h, v, e, fe = 1024, 1000, 8, 512
    moe = dict(moe_experts=e, moe_topk=2, moe_ffn=fe, layers=4, dense_layers=0)
    bf16, fp8 = small(**moe)[M_WEIGHTS], small(precision="fp8", **moe)[M_WEIGHTS]
    uncast = 4 * (2 * h + h * e) + h + 2 * v * h
    assert fp8 - bf16 == pytest.approx(bf16 / 2 - uncast, rel=1e-12)


def test_moe_expert_parallel_weights_and_distributed_optimizer():
    """8 experts of width 512, top-2, ep = 4 on dp = 8 (tp = 1): each device holds 2 experts per layer;
    the distributed optimizer shards non-expert states over dp = 8 and expert states over the expert-DP
    group 8 / 4 = 2."""
    h, e, fe, layers, v = 256, 8, 512, 2, 100
    attn = 4 * h * h + 2 * h
    router = h * e
    experts = e * 3 * h * fe / 4
    non_expert = layers * (attn + router) + 2 * v * h + h
    expert = layers * experts
    out = memory(layers=layers, hidden=h, ffn=1024, heads=4, kv_heads=4, head_dim=64, vocab=v, seq_len=128,
                 gated_mlp=1, tied_embeddings=0, moe_experts=e, moe_topk=2, moe_ffn=fe, micro_batch=1,
                 global_batch=8, dp=8, ep=4, sharding="distopt")
    assert out[M_WEIGHTS] == pytest.approx(2 * (non_expert + expert), rel=1e-12)
    assert out[M_OPTIMIZER] == pytest.approx(12 * (non_expert / 8 + expert / 2), rel=1e-12)


@pytest.mark.parametrize("sharding", ["distopt", "fsdp"])
def test_expert_states_shard_over_the_folded_expert_data_parallel_group(sharding):
    """MoE parallel folding with EP not dividing DP (docs/model_memory.md "Parameters per device"; docs/model.md
    §11.14): tp = 4, dp = 6 (24 GPUs), ep = 8 with etp = 1, so edp = tp dp / (etp ep) = 3. Each device holds one
    whole expert (8 experts over ep 8, etp 1) of 3 h f_e per layer and the non-expert weights over tp = 4; the
    distributed optimizer shards the non-expert Adam states over dp = 6 and the expert ones over edp = 3; FSDP
    keeps FP32 weight, gradient and Adam shards 4 + 4 + 8 bytes of each over the same groups. With etp = tp = 4
    the expert mesh needs 32 devices: the rule table refuses it (tests/lm/test_moe.py), so only etp 1 is here."""
    h, e, fe, f, layers, v, tp = 256, 8, 512, 1024, 2, 128, 4
    attn = (4 * h * h) / tp + 2 * h
    router = h * e
    non_expert = layers * (attn + router) + 2 * v * h / tp + h
    expert = layers * 3 * h * fe
    out = memory(layers=layers, hidden=h, ffn=f, heads=4, kv_heads=4, head_dim=64, vocab=v, seq_len=128,
                 gated_mlp=1, tied_embeddings=0, moe_experts=e, moe_topk=2, moe_ffn=fe, micro_batch=1,
                 global_batch=6, n_gpus=24, tp=tp, dp=6, ep=8, etp=1, sharding=sharding)
    if sharding == "distopt":
        assert out[M_WEIGHTS] == pytest.approx(2 * (non_expert + expert), rel=1e-12)
        assert out[M_OPTIMIZER] == pytest.approx(12 * (non_expert / 6 + expert / 3), rel=1e-12)
    else:
        sharded = non_expert / 6 + expert / 3
        assert (out[M_WEIGHTS], out[M_GRADIENTS], out[M_OPTIMIZER]) == pytest.approx(
            (4 * sharded, 4 * sharded, 8 * sharded), rel=1e-12)


def test_fsdp_with_pipeline_stages_and_one_reduction_per_step_holds_the_stage_unsharded():
    """FSDP + PP with reduce_every_microbatch = 0 (PyTorch pipelining under TorchTitan: every backward without
    gradient sync or reshard, one reduce-scatter after the stage's last backward; docs/model_memory.md "FSDP with
    pipeline stages"): rank 0 of 2 holds 2 layers and the embedding, P0 parameters; its FP32 gradients accumulate
    unsharded, 4 P0, and its gathered BF16 weights, 2 P0, sit beside the FP32 shards 4 P0 / 4. Reduced every
    micro-batch (Llama 3), both stay sharded: 4 P0 / 4 each. The optimizer's FP32 moments are sharded either way."""
    from fastmodel.kernels.lm.memory_peak import P_OPTIMIZER, phase_kinds
    from fastmodel.lm.table import row
    from tests.lm.test_memory import SMALL

    layer = 4 * 1024 * 1024 + 2 * 1024 * 4096 + 2 * 1024
    p0 = 2 * layer + 1000 * 1024

    def states(**values):
        columns = row(**{**SMALL, "pp": 2, "dp": 4, "global_batch": 16, "sharding": "fsdp", **values})
        return phase_kinds(columns, 0.0, P_OPTIMIZER, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)[:3]

    w, g, o = states(reduce_every_microbatch=0, fsdp_stage_gathered=1)
    assert (w, g) == pytest.approx((4 * p0 / 4 + 2 * p0, 4 * p0), rel=1e-12)
    assert o == pytest.approx(8 * p0 / 4, rel=1e-12)
    assert states(reduce_every_microbatch=1) == pytest.approx((4 * p0 / 4, 4 * p0 / 4, 8 * p0 / 4), rel=1e-12)
    assert states(reduce_every_microbatch=0, fsdp_stage_gathered=1, fp8_params=1)[0] == \
        pytest.approx(4 * p0 / 4 + 1 * p0, rel=1e-12)
    # a stack that reshards the weights (fsdp_stage_gathered = 0, the default: Megatron's no_sync) still holds the
    # gradients unsharded, but only the FP32 shards of the weights
    assert states(reduce_every_microbatch=0)[:2] == pytest.approx((4 * p0 / 4, 4 * p0), rel=1e-12)
    # reduced every micro-batch, a gathered stage holds the gathered weights beside sharded gradients
    assert states(reduce_every_microbatch=1, fsdp_stage_gathered=1)[:2] == \
        pytest.approx((4 * p0 / 4 + 2 * p0, 4 * p0 / 4), rel=1e-12)
    # without pipeline stages FSDP reduce-scatters each layer every micro-batch: the flag changes nothing
    assert small(dp=4, sharding="fsdp", reduce_every_microbatch=0)[M_GRADIENTS] == \
        small(dp=4, sharding="fsdp", reduce_every_microbatch=1)[M_GRADIENTS]


def test_fsdp_with_pipeline_stages_counts_the_held_stage_once():
    """FSDP + PP (docs/model_memory.md "FSDP with pipeline stages"): the gathered stage and its unsharded gradients
    are states, so the per-layer buffers do not add them again. SMALL at pp 2, dp 4, FP32 reduction (g = 4), BF16
    (c = 2), one layer L = 4 h^2 + 2 h f + 2 h parameters, backward prefetch on. Rank 0 at a backward holds its
    states 4 P0 / 4 + 2 P0 (weights) + 4 P0 (gradients) + 8 P0 / 4 (moments) and beside them only FSDP2's copy-out
    transient, c L = 2 L (0 without copy-out); at its embedding's backward the lookup's dense gradient 2 V h; at the
    loss (rank 1) no head gather. Resharding weights (fsdp_stage_gathered = 0): the current and prefetched layers
    (+ copy-out) gathered, (2 + 1) c L, no per-layer gradient. Reduced every micro-batch: (3 c + g) L as before."""
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_peak import P_BACKWARD, P_EMBEDDING, P_LOSS, phase_kinds
    from fastmodel.lm.table import row
    from tests.lm.test_memory import SMALL

    h, f, v = 1024, 4096, 1000
    layer = 4 * h * h + 2 * h * f + 2 * h
    p0 = 2 * layer + v * h

    def cols(**values):
        return row(**{**SMALL, "pp": 2, "dp": 4, "global_batch": 16, "sharding": "fsdp", "overlap_param_gather": 1,
                      "fsdp_copy_out": 1, **values})

    def at(columns, stage, phase):
        terms = peak_terms(columns)
        _, _, _, working, gather, comm, grad_work, logits = terms
        kinds = phase_kinds(columns, stage, phase, terms[0], terms[1], working, gather, comm, grad_work, logits, terms[2])
        return kinds, gather, comm, grad_work, logits

    held = cols(reduce_every_microbatch=0, fsdp_stage_gathered=1)
    (w, g, o, _, b), gather, comm, grad_work, _ = at(held, 0.0, P_BACKWARD)
    assert gather == pytest.approx(2 * layer, rel=1e-12)
    assert w + g + o + b - comm - grad_work == pytest.approx(p0 + 2 * p0 + 4 * p0 + 2 * p0 + 2 * layer, rel=1e-12)
    assert peak_terms(cols(reduce_every_microbatch=0, fsdp_stage_gathered=1, fsdp_copy_out=0))[4] == 0.0
    (_, _, _, _, b), _, comm, _, _ = at(held, 0.0, P_EMBEDDING)
    assert b - comm == pytest.approx(2 * v * h, rel=1e-12)
    (_, _, _, _, b), _, comm, _, logits = at(held, 1.0, P_LOSS)
    assert b - comm - logits == pytest.approx(0.0, abs=1e-6)
    assert peak_terms(cols(reduce_every_microbatch=0))[4] == pytest.approx(3 * 2 * layer, rel=1e-12)
    assert peak_terms(cols(reduce_every_microbatch=1))[4] == pytest.approx((3 * 2 + 4) * layer, rel=1e-12)
    # reduced every micro-batch: the embedding's unsharded gradient (g = 4) at its backward, beside its gathered
    # weight (c = 2) only when the stage is not held gathered (a state then): 4 V h, not 6 V h (review)
    (_, _, _, _, b), _, comm, _, _ = at(cols(reduce_every_microbatch=1, fsdp_stage_gathered=1), 0.0, P_EMBEDDING)
    assert b - comm == pytest.approx(4 * v * h, rel=1e-12)
    (_, _, _, _, b), _, comm, _, _ = at(cols(reduce_every_microbatch=1), 0.0, P_EMBEDDING)
    assert b - comm == pytest.approx((2 + 4) * v * h, rel=1e-12)


def test_fsdp_module_wrap_counts_mla_s_replicated_down_projections_whole():
    """Module-wrapped FSDP's attention unit per TP rank is ``attention_params_per_device`` (docs/model.md §11.44):
    DeepSeek-V3's attention 187,105,280 parameters, its down-projections h (q_lora + kv_lora + rope) = 7,168 x
    2,112 = 15,138,816 replicated over TP 8: (187,105,280 - 15,138,816) / 8 + 15,138,816 = 36,634,624 (was
    187,105,280 / 8 = 23,388,160), above the MLP's h f / t = 7,168 x 18,432 / 8 = 16,515,072 and the QKV formula's
    h (a + 2 kv) d / t = 7,168 x 130 x 64 / 8 = 7,454,720 (kv_heads 1, head_dim 64: not read by MLA)."""
    from fastmodel.kernels.lm.memory_fsdp import wrapped_module_params
    from fastmodel.lm.table import row

    mla = dict(mla=1, heads=128, kv_heads=1, head_dim=64, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, ffn=18432, gated_mlp=1, hidden=7168, sharding="fsdp", dp=8,
               fsdp_module_wrap=1)
    assert wrapped_module_params(row(**mla, tp=8)) == 36_634_624.0
    assert wrapped_module_params(row(**mla, tp=1)) == 187_105_280.0     # TP 1: the whole block


def test_largest_module_under_mla_is_a_projection_it_has_not_the_fused_qkv():
    """MLA has no fused QKV matrix (docs/model_memory.md, bucketed ZeRO-3; ``shape.largest_attention_matrix``).
    DeepSeek-V3's record dims (h 7,168, a 128, q_lora 1,536, kv_lora 512, nope 128, rope 64, v 128; kv_heads 128 and
    head_dim 128, which MLA does not read), by hand: ``linear_q_down_proj`` 7,168 x 1,536 = 11,010,048 and
    ``linear_kv_down_proj`` 7,168 x 576 = 4,128,768 (replicated over TP), ``linear_q_up_proj`` 1,536 x 128 x 192 =
    37,748,736, ``linear_kv_up_proj`` 512 x 128 x 256 = 16,777,216 and ``linear_proj`` 128 x 128 x 7,168 =
    117,440,512 (over TP). At TP 8 the output projection leads, 14,680,064; at TP 64 the replicated query
    down-projection, 11,010,048 (the output projection 1,835,008). The QKV formula gave 7,168 x 384 x 128 / 8 =
    44,040,192 at TP 8, above the MLP's 7,168 x 18,432 / 8 = 16,515,072, which is now the largest module."""
    from fastmodel.kernels.lm.memory_fsdp import largest_module_params
    from fastmodel.kernels.lm.shape import largest_attention_matrix
    from fastmodel.lm.table import row

    mla = dict(mla=1, heads=128, kv_heads=128, head_dim=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, ffn=18432, gated_mlp=1, hidden=7168)
    assert largest_attention_matrix(row(**mla, tp=8), 8.0) == 14_680_064.0
    assert largest_attention_matrix(row(**mla, tp=64), 64.0) == 11_010_048.0
    assert largest_attention_matrix(row(**mla, tp=1), 1.0) == 117_440_512.0
    # without a query low rank linear_q_proj is h a (nope + rope) = 7,168 x 128 x 192 = 176,160,768 at TP 1
    assert largest_attention_matrix(row(**{**mla, "q_lora_rank": 0}, tp=1), 1.0) == 176_160_768.0
    assert largest_module_params(row(**mla, tp=8)) == 16_515_072.0
    # GQA keeps the fused QKV: h 4,096, a 32, kv 8, d 128: 4,096 x 48 x 128 = 25,165,824 (output 16,777,216)
    gqa = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=1024, gated_mlp=1, tp=1)
    assert largest_module_params(row(**gqa)) == 25_165_824.0
