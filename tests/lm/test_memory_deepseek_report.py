"""DeepSeek-V3's memory as its report states it (arXiv 2412.19437 sec. 3.2.1, 3.2.3, 3.3.1, 3.3.3), derived by hand
for the record ``deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T`` of tests/data/runs_moe_public.jsonl on pipeline
rank 1 (model stages 1 and 14 under DualPipe, 4 MoE layers each; the worst rank before the MTP loss's workspace
moved the peak to rank 0), kind by kind
(docs/model_memory.md, "MoE memory as the DeepSeek report states it"), and ``mla_latent_bytes``.

Model (report sec. 4.2): h = 7168, 128 heads, MLA d_c' = 1536, d_c = 512, d_h^R = 64, d_h = 128; 256 routed experts
of 2048 (4 per device under EP 64), 1 shared, top-8. Plan (sec. 3.2): PP 16 DualPipe, EP 64, ZeRO-1 over DP 128
(experts over 128 / 64 = 2), no TP, FP8, one sequence of 4,096 tokens per micro-batch (the record's assumption).
"""

import pytest

from fastmodel.kernels.lm.memory_activations import layer_activation_bytes, mla_latent_bytes
from fastmodel.kernels.lm.memory_recompute import kept_mode
from fastmodel.kernels.lm.memory_states import (
    stage_layers,
    stage_params,
    stage_uncast_params,
)
from fastmodel.kernels.lm.pipeline import microbatches_in_flight
from fastmodel.lm.api import record_values
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX
from tests.data_records import record_by_id
from tests.lm.test_memory_recompute_modules import bits

GIB = 2.0 ** 30
H, A, DQ, DC, DR, FE, E, K, T = 7168, 128, 1536, 512, 64, 2048, 256, 8, 4096
#: the busiest EP rank's load under aux-loss-free balancing (plan.moe_balance = aux_free; docs/model.md §11.14.5):
#: 1 + 0.04 sqrt(64 ln 64 / (256 ln 256)) = 1 + 0.04 sqrt(3) / 4; it scales the routed rows a rank keeps
LOAD = 1.0 + 0.04 * 3.0 ** 0.5 / 4.0
#: bytes per token of one MoE layer's routed rows that LOAD scales: FP8 expert input with its FP32 scale per 128
#: elements, the FP32 routing weight the weighted SwiGLU keeps (plan.moe_probs_in_experts, DeepSeek's training
#: profile, docs/model.md §11.50), FP8 SwiGLU inputs (8 x h x (1 + 4/128) + 8 x 4 + 8 x 2 f_e)
ROUTED = (1 + 4 / 128) * 8 * 7168 + 8 * 4 + 8 * 2 * 2048
#: bytes per token of one MoE layer at load 1 (test_deepseek_v3_moe_layer_bytes_per_token)
LAYER = 156_064
MLA = dict(mla=1, q_lora_rank=DQ, kv_lora_rank=DC, qk_nope_head_dim=128, qk_rope_head_dim=DR, v_head_dim=128,
           recompute="selective")


def _columns(record_id):
    return lower_record(record_by_id(record_id)).columns


def test_mla_latents_by_what_the_recompute_keeps():
    """Up-projections kept: the latents as their GEMM's input, g = 1 byte under FP8. ``mla_up_proj``: the recompute
    region's 16-bit inputs 2 (d_c' + d_c + d_h^R) (the latent norms are fused into the up-projections, inside it),
    whatever else the list holds."""
    fp8 = dict(MLA, precision="fp8")
    assert mla_latent_bytes(row(**fp8)) == 1 * (DQ + DC + DR)
    assert mla_latent_bytes(row(**fp8, recompute_modules=bits("mla_up_proj"))) == 2 * (DQ + DC + DR)
    deepseek = dict(fp8, recompute_modules=bits("layernorm", "mla_up_proj"), norm_recompute_fp8=1)
    assert mla_latent_bytes(row(**deepseek)) == 2 * (DQ + DC + DR)
    assert mla_latent_bytes(row(**MLA)) == 2 * (DQ + DC + DR)                      # BF16, kept: g = 2
    assert mla_latent_bytes(row(**MLA, recompute_modules=bits("mla_up_proj"))) == 2 * (DQ + DC + DR)


def test_deepseek_v3_moe_layer_bytes_per_token():
    """One MoE layer, one token, what the report's plan keeps (bytes):
    attention: residual 2 h (the norm recomputed, sec. 3.2.3: its FP8 output cast not kept), latents 2 x 2112
    (BF16 inputs of the recomputed norms and up-projections), attention output in E5M6 1.5 x 128 x 128
    (sec. 3.3.3 (1)), flash log-sum-exp 4 x 128 (the core is not recomputed);
    MoE block: residual 2 h, router logits and scores FP32 2 x 4 x 256, the 8 routed rows as FP8 expert input
    8 x h with one FP32 scale per 128 elements (FP8 dispatch, sec. 3.3.3; the records' recipe reads as blockwise,
    docs/model.md §11.19) and BF16 expert output 2 x 8 x h (kept for the gate's gradient: where the gate
    multiplies is not stated), the SwiGLU inputs in FP8 8 x 2 f_e and 2 f_e for the shared expert (sec. 3.3.3 (2));
    the routed rows times the busiest rank's ``LOAD``. Since the records set ``moe_probs_in_experts`` (DeepSeek's
    training profile applies the routing weight in the SwiGLU, docs/model.md §11.50) the BF16 expert output
    2 x 8 x h = 114,688 B gives way to the FP32 weight of each routed row, 4 x 8 B: 270,720 -> 156,064 B."""
    columns = _columns("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T")
    attention = 2 * H + 2 * (DQ + DC + DR) + 1.5 * A * 128 + 4 * A
    moe = 2 * H + 2 * 4 * E + (1 + 4 / 128) * K * H + 4 * K + 1 * K * 2 * FE + 1 * 2 * FE
    assert attention == 43_648 and moe == 112_416 and attention + moe == LAYER
    got = layer_activation_bytes(columns, True, kept_mode(columns)) / T
    assert got == pytest.approx(attention + moe + (LOAD - 1.0) * ROUTED, rel=1e-12)
    # with the gate outside the experts the expert output alone, 2 x 8 x h = 114,688 B, was 42 % of 270,720
    gate_outside = columns.copy()
    gate_outside[COLUMN_INDEX["moe_probs_in_experts"]] = 0.0
    got = layer_activation_bytes(gate_outside, True, kept_mode(gate_outside)) / T
    assert got == pytest.approx(LAYER + 2 * K * H - 4 * K + (LOAD - 1.0) * (ROUTED + 2 * K * H - 4 * K), rel=1e-12)
    assert 2 * K * H / (LAYER + 2 * K * H - 4 * K) == pytest.approx(0.4236, abs=1e-4)


def test_deepseek_v3_worst_rank_by_kind():
    """Rank 1 (the worst rank until the FP8 recipe was read; rank 0 now) holds model stages 1 and 14 (DualPipe,
    sec. 3.2.1 Table 2: parameters 2x), 4 MoE layers each.
    Per MoE layer: MLA 11,010,048 + 37,748,736 + 4,128,768 + 16,777,216 + 117,440,512 = 187,105,280, norms
    2 h + d_c' + d_c = 16,384, shared expert 3 h f_e = 44,040,192, router h E = 1,835,008; routed experts
    4 x 44,040,192. Weights 2 + (1 + 4 / 128^2) B (BF16 + one orientation of the 128 x 128 block-scaled FP8 cast:
    plan.fp8_weight_transpose_per_use, DeepSeek's training profile transposes each FP8 weight per micro-batch,
    docs/model.md §11.50; Transformer Engine's Float8BlockScaling would cache both on Hopper, 2 + 2 x (1 + 4 / 128^2)),
    except the norms and routers (2 h + d_c' + d_c + h E per layer), which no FP8
    GEMM reads (sec. 3.3.1: gating and norms in BF16/FP32) and stay at 2 B, gradients FP32 4 B unsharded under
    ZeRO-1 (sec. 3.3.3), optimizer FP32 master + BF16 moments 8 B over
    DP 128 (experts over 2). Activations: p + 1 = 17 micro-batches in flight (15 of stage 1, 2 of stage 14) x 4
    layers x (156,064 B + (LOAD - 1) x ROUTED B of routed rows) x 4,096 tokens."""
    columns = _columns("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T")
    assert stage_layers(columns, 1) == (0.0, 4.0, 0.0) and stage_layers(columns, 14) == (0.0, 4.0, 0.0)
    non_expert_layer = 187_105_280 + 16_384 + 44_040_192 + 1_835_008
    expert_layer = 4 * 3 * H * FE
    non_expert, expert = stage_params(columns, 1)
    assert non_expert == 8 * non_expert_layer and expert == 8 * expert_layer
    params = 8 * (non_expert_layer + expert_layer)
    weight_bytes = 2 + (1 + 4 / 128 ** 2)
    uncast = 8 * (16_384 + 1_835_008)
    assert stage_uncast_params(columns, 1) == uncast
    weights_hand = weight_bytes * params - (weight_bytes - 2) * uncast
    assert weights_hand / GIB == pytest.approx(9.132, abs=1e-3)                       # weights
    assert 4 * params / GIB == pytest.approx(12.194, abs=1e-3)                       # gradients
    assert 8 * (8 * non_expert_layer / 128 + 8 * expert_layer / 2) / GIB == pytest.approx(5.358, abs=1e-3)
    assert microbatches_in_flight(columns, 1) == 17
    assert 17 * 4 * LAYER * T / GIB == pytest.approx(40.483, abs=1e-3)               # activations at LOAD 1
    weights, gradients, optimizer, activations, _ = _rank_peak(columns, 1.0)
    assert weights == pytest.approx(weights_hand, rel=1e-12)
    assert gradients == pytest.approx(4 * params, rel=1e-12)
    assert optimizer == pytest.approx(8 * (8 * non_expert_layer / 128 + 8 * expert_layer / 2), rel=1e-12)
    assert activations == pytest.approx(17 * 4 * (LAYER + (LOAD - 1.0) * ROUTED) * T, rel=1e-12)


def _rank_peak(columns, stage):
    """(weights, gradients, optimizer, activations, buffers) at pipeline rank ``stage``'s peak (memory_row's terms)."""
    from fastmodel.kernels.lm import memory
    from fastmodel.kernels.lm.memory_peak import stage_peak
    from fastmodel.kernels.lm.memory_recompute import recompute_working_bytes, stored_layer_bytes
    kept = kept_mode(columns)
    dense, moe = layer_activation_bytes(columns, False, kept), layer_activation_bytes(columns, True, kept)
    return stage_peak(columns, stage, stored_layer_bytes(columns, dense), stored_layer_bytes(columns, moe),
                      recompute_working_bytes(columns, max(dense, moe)), memory.fsdp_gather_buffer_bytes(columns),
                      memory.comm_buffer_bytes(columns), memory.backward_grad_bytes(columns),
                      memory.logits_workspace_bytes(columns))


def test_deepseek_v3_rank_0_holds_the_peak():
    """Rank 0 holds stages 0 and 15 under DualPipe: the embedding and the shared head, 3 dense layers, 5 MoE layers
    and the MTP module, 6.2 B parameters against rank 1's 3.3 B (89.2 against 69.1 GiB allocated since the routing
    weight is applied in the SwiGLU and one FP8 weight orientation is kept, docs/model.md §11.50).
    At the loss it also holds, beside the main head's workspace 6 B per logit, the MTP depth's FP32 softmax,
    4 B x 4,096 x 129,280 = 1.97 GiB (Megatron-Core process_mtp_loss, docs/model_memory.md "MTP module"), and one
    micro-batch of stage 15 in flight keeps the MTP module's inputs (6 + 3 g) T h = 9 x 4,096 x 7,168 B (FP8:
    g = 1), the three FP8 ones with their blockwise FP32 scale per 128 elements (3 x 4/128 B per element), beside
    its MoE layer's 156,064 B per token (and its routed rows at the busiest rank's load, LOAD)."""
    columns = _columns("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T")
    values, _ = record_values(record_by_id("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T"))
    assert values["memory_peak_stage"] == 0
    assert values["memory_buffers"] == pytest.approx(_rank_peak(columns, 0.0)[4], rel=1e-12)
    without = columns.copy()
    without[COLUMN_INDEX["mtp_layers"]] = 0.0
    rank0, plain = _rank_peak(columns, 0.0), _rank_peak(without, 0.0)
    assert rank0[4] - plain[4] == pytest.approx(4 * T * 129_280, rel=1e-12)
    assert rank0[3] - plain[3] == pytest.approx((LAYER + (LOAD - 1.0) * ROUTED + 9 * H + 3 * H * 4 / 128) * T,
                                                 rel=1e-12)
    assert sum(rank0) > sum(_rank_peak(columns, 1.0))


def test_deepseek_v3_rank_0_keeps_no_fp8_form_of_embedding_head_gating_and_norms():
    """Sec. 3.3.1 keeps "the embedding module, the output head, MoE gating modules, normalization operators" in
    BF16/FP32, so rank 0 (stages 0 and 15 under DualPipe) keeps no FP8 form of: the word embedding and the shared
    head 2 V h, the final norm h and the MTP module's three norms 3 h, the norms of its 9 layers (3 dense + 1 MoE of
    stage 0, 4 MoE + the MTP layer of stage 15) 9 x (2 h + d_c' + d_c), and the routers of its 6 MoE layers
    6 x h E: 1,864,544,256 parameters at 2 B instead of 2 + (1 + 4/128^2) B (one FP8 orientation kept, §11.50),
    1.74 GiB less."""
    columns = _columns("deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T")
    uncast = 2 * 129_280 * H + 4 * H + 9 * (2 * H + DQ + DC) + 6 * H * E
    assert uncast == 1_864_544_256
    assert stage_uncast_params(columns, 0) == uncast
    non_expert, expert = stage_params(columns, 0)
    weight_bytes = 2 + (1 + 4 / 128 ** 2)
    weights = _rank_peak(columns, 0.0)[0]
    assert weights == pytest.approx(weight_bytes * (non_expert + expert) - (weight_bytes - 2) * uncast, rel=1e-12)
    assert (weight_bytes - 2) * uncast / GIB == pytest.approx(1.737, abs=1e-3)
