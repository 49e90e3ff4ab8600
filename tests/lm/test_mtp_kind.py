"""Terms that count the MTP module's transformer layer, audited against its kind (issues 22/23/26; docs/model.md
§11.4 "MTP module", "In other terms"): Megatron-Core builds that layer from the decoder's last layer's spec
(``shape.mtp_layer_is_moe``), so a MoE model whose last layer is dense (``moe_layer_freq`` 2, an even layer count)
has a dense MTP layer, and a DeepSeek-V3-like one (every layer after the leading dense ones MoE) a MoE one. Each
term is checked by hand with distinct per-kind unit values: the MTP layer adds exactly one layer of its kind.
Megatron-Core: megatron/core/transformer/multi_token_prediction.py, transformer_layer.py at NVIDIA/Megatron-LM@d98e8a6."""

import pytest

from fastmodel.kernels.lm.memory_activations import mtp_activation_bytes, stage_microbatch_bytes
from fastmodel.kernels.lm.memory_chunks import (
    chunk_microbatch_bytes,
    rank_wgrad_pending_bytes,
    wgrad_pending_layer_bytes,
)
from fastmodel.kernels.lm.memory_offload import host_offload_bytes, offloaded_layer_bytes
from fastmodel.kernels.lm.shape import mtp_layer_is_moe
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX, OFFLOAD_MODULES

#: 4 layers, MoE every second one from layer 0 (layers 0 and 2): the last layer, 3, is dense
MOE = dict(layers=4, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
           gated_mlp=1, moe_experts=8, moe_topk=2, moe_ffn=512, dense_layers=0, moe_layer_freq=2, ep=1, dp=1,
           micro_batch=1, global_batch=8, sharding="ddp", flash_attention=1, dropout=0, recompute="none",
           cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0)
#: the same with every layer MoE: the MTP layer is MoE (DeepSeek-V3's case)
ALL_MOE = dict(MOE, moe_layer_freq=1)
DENSE_LAYER, MOE_LAYER = 1.0, 1000.0       # per-kind unit bytes, far apart


def test_the_mtp_layer_s_kind_follows_the_decoder_s_last_layer():
    assert not mtp_layer_is_moe(row(**MOE, mtp_layers=1))
    assert mtp_layer_is_moe(row(**ALL_MOE, mtp_layers=1))
    assert mtp_layer_is_moe(row(**{**MOE, "layers": 5}, mtp_layers=1))     # layer 4 = 0 mod 2: MoE


@pytest.mark.parametrize("model, unit", [(MOE, DENSE_LAYER), (ALL_MOE, MOE_LAYER)])
def test_a_stage_keeps_the_mtp_layer_at_its_own_kind_per_micro_batch(model, unit):
    """``stage_microbatch_bytes`` on the last of 2 ranks: the module adds its layer, of its kind, and its inputs
    (``mtp_activation_bytes``). It charged the MoE layer's bytes whenever the model had experts."""
    one, none = row(**model, pp=2, mtp_layers=1), row(**model, pp=2, mtp_layers=0)
    added = stage_microbatch_bytes(one, 1.0, DENSE_LAYER, MOE_LAYER) - stage_microbatch_bytes(none, 1.0, DENSE_LAYER,
                                                                                              MOE_LAYER)
    assert added == pytest.approx(unit + mtp_activation_bytes(one), rel=1e-12)


@pytest.mark.parametrize("model, unit", [(MOE, DENSE_LAYER), (ALL_MOE, MOE_LAYER)])
def test_the_post_process_chunk_keeps_the_mtp_layer_at_its_own_kind(model, unit):
    """Interleaved (p 2, v 2): the last rank's chunk v - 1 holds the MTP modules (``chunk_microbatch_bytes``)."""
    values = dict(pp=2, vp=2, pipeline_schedule="interleaved")
    one, none = row(**model, **values, mtp_layers=1), row(**model, **values, mtp_layers=0)
    added = chunk_microbatch_bytes(one, 1.0, 1.0, DENSE_LAYER, MOE_LAYER) \
        - chunk_microbatch_bytes(none, 1.0, 1.0, DENSE_LAYER, MOE_LAYER)
    assert added == pytest.approx(unit + mtp_activation_bytes(one), rel=1e-12)


def test_zb_h1_s_pending_weight_gradients_count_the_mtp_layer_and_interleaved_dense_layers_at_their_kind():
    """``rank_wgrad_pending_bytes`` on the last of 2 ranks (layers 2 MoE, 3 dense; ``stage_layers`` gives 1 + 1):
    ``pT + pF`` without MTP, ``pT + 2 pF`` with it (pT, pF: ``wgrad_pending_layer_bytes`` of a MoE and a dense
    layer). The dense layer of ``moe_layer_freq`` 2 was dropped (the sum read ``dense_layers`` > 0) and the MTP
    layer counted as MoE."""
    values = dict(pp=2, pipeline_schedule="zb_h1")
    none, one = row(**MOE, **values, mtp_layers=0), row(**MOE, **values, mtp_layers=1)
    p_moe, p_dense = wgrad_pending_layer_bytes(none, True), wgrad_pending_layer_bytes(none, False)
    assert p_moe != p_dense
    assert rank_wgrad_pending_bytes(none, 1.0) == pytest.approx(p_moe + p_dense, rel=1e-12)
    assert rank_wgrad_pending_bytes(one, 1.0) == pytest.approx(p_moe + 2 * p_dense, rel=1e-12)
    all_moe = row(**ALL_MOE, **values, mtp_layers=1)
    assert rank_wgrad_pending_bytes(all_moe, 1.0) == pytest.approx(3 * wgrad_pending_layer_bytes(all_moe, True),
                                                                   rel=1e-12)


@pytest.mark.parametrize("model, moe", [(MOE, False), (ALL_MOE, True)])
def test_fine_grained_offload_pins_the_mtp_layer_s_own_kind_on_the_host(model, moe):
    """``host_offload_bytes`` without a pipeline (one rank, one micro-batch in flight): ``gpus_per_node x (held -
    max(o_d, o_m))``; the MTP layer, a ``TransformerLayer`` of its kind, offloads that kind's ``o`` (``moe_act``
    offloads routed-expert bytes in MoE layers only). It was charged ``o_m`` whenever the model had experts."""
    values = dict(pp=1, gpus_per_node=8, offload_modules=OFFLOAD_MODULES["core_attn"] + OFFLOAD_MODULES["moe_act"],
                  seq_len=4096, micro_batch=2, global_batch=2)     # T 8,192: tensors above the 2^20-element floor
    none, one = row(**{**model, **values}, mtp_layers=0), row(**{**model, **values}, mtp_layers=1)
    o_d, o_m = offloaded_layer_bytes(one, False), offloaded_layer_bytes(one, True)
    assert 0.0 < o_d < o_m
    assert host_offload_bytes(one) - host_offload_bytes(none) == pytest.approx(8 * (o_m if moe else o_d), rel=1e-12)


@pytest.mark.parametrize("model, mlp", [
    (dict(MOE, moe_experts=0, moe_topk=0, moe_layer_freq=1), 3 * (1024 + 4096)),  # dense model: its gated MLP
    (MOE, 3 * (1024 + 4096)),                   # MoE, last layer dense: the dense MLP
    (ALL_MOE, 8 * 3 * (1024 + 512)),            # MoE layer: the 8 local experts' 3 matrices of 1,024 x 512
])
def test_adafactor_factors_the_mtp_layer_at_its_kind_and_its_projection(model, mlp):
    """``adafactor_factored_bytes`` of the last of 2 ranks: 4 B x (rows + cols) per matrix. The MTP module adds
    its layer's attention 4 x (1,024 + 16 x 64) = 8,192, its MLP of its kind, and ``eh_proj`` 2,048 + 1,024 (TP 1).
    It counted the layer's MLP as routed experts always (none for a dense model) and not ``eh_proj``."""
    from fastmodel.kernels.lm.memory_optimizer import adafactor_factored_bytes

    values = dict(model, pp=2, optimizer="adafactor")
    added = adafactor_factored_bytes(row(**values, mtp_layers=1), 1.0) \
        - adafactor_factored_bytes(row(**values, mtp_layers=0), 1.0)
    assert added == pytest.approx(4 * (8192 + mlp + 2048 + 1024), rel=1e-12)


def test_hfu_counts_the_mtp_layer_s_own_flops():
    """HFU's executed FLOPs (``step.step_row``, one rank, no recompute, 8 micro-batches): the MTP module adds
    3 x (its layer's forward + its head's) per micro-batch. Its layer is dense here (T 512, TP 1): 2 T (4,194,304
    attention + 3 x 1,024 x 4,096 MLP parameters) = 17,179,869,184 plus the causal core 2 T (s / 2) a (d + d) =
    536,870,912; its head 2 T V h + eh_proj 2 T 2h h = 3,196,059,648. It counted the rank's average layer (MoE and
    dense mixed) in place of the MTP layer."""
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    def executed(mtp):
        res = evaluate_table(table(1, **MOE, pp=1, mtp_layers=mtp))
        return res["hfu"][0] * res["step_time"][0] * row(**MOE)[COLUMN_INDEX["peak_flops_16"]]

    layer = 2 * 512 * (4_194_304 + 3 * 1024 * 4096) + 2 * 512 * 256 * 16 * 128
    head = 2 * 512 * 1000 * 1024 + 2 * 512 * 2048 * 1024
    assert executed(1) - executed(0) == pytest.approx(8 * 3 * (layer + head), rel=1e-9)


def test_a_dense_mtp_layer_in_a_moe_model_runs_the_dense_layer_s_passes():
    """``mtp_breakdown.mtp_layer`` (the step charges each MTP layer its seconds): in a MoE model whose last layer is
    dense the MTP layer is a dense layer, not the mix's average layer (half MoE here). By hand (T 512, TP 1): its
    forward FLOPs 2 T (4,194,304 attention + 3 x 1,024 x 4,096 MLP parameters) + the causal core 2 T (s / 2) a
    (d + d) = 17,716,740,096, its matmul parameters 16,777,216, none routed; its seconds those of the
    same layer in a dense model of the same shape."""
    import numpy as np

    from fastmodel.kernels.lm.mtp_breakdown import mtp_layer
    from fastmodel.kernels.lm.passes import A_FLOPS, N_WORK

    work = np.zeros(N_WORK)
    seconds, params, experts = mtp_layer(row(**MOE, mtp_layers=1), work)
    assert work[A_FLOPS] == pytest.approx(2 * 512 * (4_194_304 + 3 * 1024 * 4096) + 2 * 512 * 256 * 16 * 128,
                                          rel=1e-12)
    assert (params, experts) == (16_777_216, 0.0)
    dense = dict(MOE, moe_experts=0, moe_topk=0, moe_layer_freq=1)
    assert seconds == pytest.approx(mtp_layer(row(**dense, mtp_layers=1), np.zeros(N_WORK))[0], rel=1e-12)


#: an ideal device for hand counts: GEMMs and attention at the 16-bit peak (989 TFLOP/s), no GEMM K overhead, no
#: launch overhead, memory-bound passes free (HBM 1e30 B/s), one SM (no wave quantization: a GEMM's useful share is
#: its tile padding only) and a vocabulary of whole tiles (1,024)
IDEAL = dict(gemm_eff_16=1.0, attn_eff=1.0, gemm_k_half=0.0, kernel_overhead_s=0.0, hbm_bw=1e30, sm_count=1,
             vocab=1024)


@pytest.mark.parametrize("model, forward, weight", [
    # dense MTP layer (T 512, TP 1): GEMMs 2 T (4,194,304 attention + 3 x 1,024 x 4,096 MLP) = 17,179,869,184,
    # the causal core 2 T (s / 2) a (d + d) = 536,870,912 (forward only); its head: the output layer once more
    # 2 T V h = 1,073,741,824 and eh_proj 2 T (2h) h = 2,147,483,648
    (MOE, 17_179_869_184 + 536_870_912 + 1_073_741_824 + 2_147_483_648,
     17_179_869_184 + 1_073_741_824 + 2_147_483_648),
    # MoE MTP layer: attention GEMMs 2 T 4,194,304 = 4,294,967,296; the experts, top-2 of 8 (128 rows each, a whole
    # row tile), 2 (2 T) 3 x 1,024 x 512 = 3,221,225,472; the router 2 T h E = 8,388,608 run at a 16-wide tile
    # (the smallest, tile_size) for E = 8 columns: 16,777,216 FLOP-seconds; core and head as above
    (ALL_MOE, 4_294_967_296 + 3_221_225_472 + 16_777_216 + 536_870_912 + 1_073_741_824 + 2_147_483_648,
     4_294_967_296 + 3_221_225_472 + 16_777_216 + 1_073_741_824 + 2_147_483_648),
])
def test_the_average_stage_s_forward_and_weight_passes_include_its_share_of_the_mtp_layers(model, forward, weight):
    """``step.busiest_stage``'s F_avg and W_avg (the bubble of ZB-H1 and DualPipe reads them), p 4, one MTP module,
    by hand on an ideal device (``IDEAL``: seconds = FLOPs / 989 TFLOP/s): F_avg grows by a quarter of the MTP
    layer's forward and its head's (the extra output-layer pass and ``eh_proj``), W_avg by a quarter of their
    weight-gradient GEMMs (the same GEMM FLOPs, no attention core). F_avg had the head's share only, so the MTP
    layer's forward and weight passes landed in the bubble's B. The dense case's ``average_mb`` grows by a quarter of
    3 x the GEMMs + 3.5 x the core (flash attention's backward 2.5 x its forward)."""
    import numpy as np

    from fastmodel.kernels.lm.passes import N_WORK
    from fastmodel.kernels.lm.step import busiest_stage

    peak = 989e12
    values = dict(model, pp=4, layers=8, global_batch=16, **IDEAL)
    none, one = row(**values, mtp_layers=0), row(**values, mtp_layers=1)
    _, avg0, f0, w0, *_ = busiest_stage(none, np.zeros(N_WORK))
    _, avg1, f1, w1, *_ = busiest_stage(one, np.zeros(N_WORK))
    assert f1 - f0 == pytest.approx(forward / peak / 4, rel=1e-9)
    assert w1 - w0 == pytest.approx(weight / peak / 4, rel=1e-9)
    if model is MOE:
        gemms, core = 17_179_869_184 + 1_073_741_824 + 2_147_483_648, 536_870_912
        assert avg1 - avg0 == pytest.approx((3 * gemms + 3.5 * core) / peak / 4, rel=1e-9)


def test_host_issue_of_the_average_stage_counts_its_share_of_the_mtp_layers():
    """Host-bound stages (``host_layer_s`` 1 s a layer forward, GPU time negligible), p 2, L 4, one MTP module:
    the average stage issues (4 + 1) / 2 = 2.5 layers, forward and backward 2 x 2.5 = 5 s per micro-batch, so the
    1F1B bubble (p - 1) x 5 = 5 s (was 4 s, the MTP layer's issue left out while its GPU time is in ``average_mb``);
    an interleaved evaluation every step of 1 iteration: (m + p - 1) x 2.5 = (8 + 1) x 2.5 = 22.5 s (was 18)."""
    from fastmodel.kernels.lm.first_rank import embedding_terms
    from fastmodel.kernels.lm.host_step import eval_time, host_bound_bubble

    r = row(**dict(MOE, pp=2, host_layer_s=1.0, eval_interval=1, eval_iters=1), mtp_layers=1)
    assert host_bound_bubble(r, 1e-6, 1e-7, 1e-7, 1e-6, embedding_terms(r)) == pytest.approx(5.0, rel=1e-12)
    assert eval_time(r, 1e-7, 8.0) == pytest.approx(22.5, rel=1e-12)


def test_the_mtp_layer_s_offload_copies_are_its_own_kind_s_against_its_own_passes():
    """``time_offload`` (one rank, 2 micro-batches, a 1 GB/s host link so every copy is exposed): the MTP layer, dense
    here, adds per micro-batch ``(c - F) + (c - B)`` with ``c`` its ``core_attn`` bytes 3 x 2 T a d = 3 x 2 x 8,192
    x 16 x 64 = 50,331,648 B over the link (no ``moe_act`` bytes: it has no experts) and F, B its own passes
    (``mtp_layer``). It was charged the rank's average layer's exposed copies (half MoE, with ``moe_act``)."""
    import numpy as np

    from fastmodel.kernels.lm.mtp_breakdown import mtp_layer
    from fastmodel.kernels.lm.passes import (
        A_BACKWARD_INPUT,
        A_BACKWARD_WEIGHT,
        A_EXPOSED_B,
        A_EXPOSED_F,
        A_FORWARD,
        A_RECOMPUTE,
        N_WORK,
    )
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    values = dict(MOE, pp=1, seq_len=4096, micro_batch=2, global_batch=4, host_link_bw=1e9, host_link_eff=1.0,
                  offload_modules=OFFLOAD_MODULES["core_attn"] + OFFLOAD_MODULES["moe_act"])
    d = np.zeros(N_WORK)
    mtp_layer(row(**values, mtp_layers=1), d)
    forward = d[A_FORWARD] + d[A_EXPOSED_F]
    backward = d[A_BACKWARD_INPUT] + d[A_BACKWARD_WEIGHT] + d[A_RECOMPUTE] + d[A_EXPOSED_B]
    c = 3 * 2 * 8192 * 16 * 64 / 1e9
    offload = [evaluate_table(table(1, **values, mtp_layers=m))["time_offload"][0] for m in (0, 1)]
    assert offload[1] - offload[0] == pytest.approx(2 * ((c - forward) + (c - backward)), rel=1e-9)


def test_the_mtp_layer_s_sp_replicated_gradients_join_the_tp_all_reduce():
    """``finalize_model_grads``' TP all-reduce of the sequence-parallel gradients (docs/model.md §11.44) on the rank
    holding the MTP module covers its layer too (a ``TransformerLayer`` of the same spec): MLA, h 1,024, q_lora 256,
    kv_lora 128, rope 32, per layer the norms 2 x 1,024 + 256 + 128 = 2,432 and the replicated down-projections
    1,024 x (256 + 128 + 32) = 425,984; L 4 + D 1 layers at 4 B over TP 2. Read as what SP adds to ``comm_dp``."""
    from fastmodel.kernels.nccl import allreduce_time
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    mla = dict(mla=1, heads=16, kv_heads=16, head_dim=64, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64,
               qk_rope_head_dim=32, v_head_dim=64, hidden=1024, ffn=4096, gated_mlp=1, layers=4, vocab=1000,
               seq_len=512, micro_batch=1, global_batch=8, dp=2, tp=2, n_gpus=4, sharding="zero1", pp=1,
               grad_reduce_bytes=4, mtp_layers=1)

    def comm_dp(sp):
        return evaluate_table(table(1, **mla, sequence_parallel=sp))["comm_dp"][0]

    r = row(**mla, sequence_parallel=1)
    expected = allreduce_time(r, 5 * (2432 + 425_984) * 4, 2.0, 1.0) + r[COLUMN_INDEX["collective_overhead_s"]]
    assert comm_dp(1) - comm_dp(0) == pytest.approx(expected, rel=1e-9)
