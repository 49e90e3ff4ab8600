"""Mixture-of-experts terms of the real-world model (kernels/lm/moe.py, docs/model.md §11.14), derived by hand."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.moe import (
    FP8_DISPATCH_BYTES,
    expert_dp,
    expert_flops,
    expert_rows,
    expert_tp,
    expert_wgrad_extra,
    load_factor,
    moe_compute,
    permutation_pairs,
)
from fastmodel.kernels.lm.moe_dispatch import dispatch_time
from fastmodel.kernels.lm.parallel import exposed
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_WEIGHT,
    A_FORWARD,
    A_GEMM,
    N_WORK,
    expert_parallel_exposed,
    layer_passes,
)
from fastmodel.kernels.roofline import expert_gemm_time, expert_wgrad_roofline
from fastmodel.lm.api import record_values
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.rules import plan_status
from fastmodel.lm.stacks import megatron_core, resolve
from fastmodel.lm.table import row, table
from fastmodel.registry.lm import STATUS_CODES
from tests.suite_fixtures import NET

DATA = Path(__file__).resolve().parents[1] / "data"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"
#: an 8-expert top-2 model (Mixtral-8x7B shape), 4096-token sequences
MIXTRAL = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=32000, seq_len=4096, moe_experts=8,
               moe_topk=2, moe_ffn=14336, **NET)


def test_expert_tp_defaults_to_tp_and_edp_folds_the_attention_mesh():
    """Megatron-Core: --expert-tensor-parallel-size defaults to --tensor-model-parallel-size; the expert mesh
    etp x ep x edp is tp x cp x dp (MoE parallel folding)."""
    assert expert_tp(row(tp=4)) == 4 and expert_tp(row(tp=4, etp=1)) == 1
    assert expert_dp(row(tp=2, dp=16, ep=32, etp=1)) == 1             # 2 x 16 = 1 x 32 x 1
    assert expert_dp(row(tp=4, cp=2, dp=8, ep=8, etp=1)) == 8          # 4 x 2 x 8 = 1 x 8 x 8
    assert expert_dp(row(tp=4, dp=8, ep=8)) == 1                       # etp = tp = 4: 4 x 8 = 4 x 8 x 1


def test_ep_32_under_tp2_dp16_runs_when_the_expert_mesh_multiplies_out():
    """The issue's plan: 32 GPUs, TP 2 x DP 16, EP 32 (EP does not divide DP): legal with etp 1 (1 x 32 x 1 = 32);
    refused with etp 2 (2 x 32 = 64 devices > 32) and with 8 experts (EP 32 does not divide them)."""
    base = dict(MIXTRAL, moe_experts=64, n_gpus=32, tp=2, dp=16, ep=32, global_batch=64)
    codes = plan_status(np.stack([row(**base, etp=1), row(**base, etp=2), row(**{**base, "moe_experts": 8}, etp=1)],
                                 axis=1))
    assert list(codes) == [0, STATUS_CODES["experts_not_divisible"], STATUS_CODES["experts_not_divisible"]]


def test_load_factor_per_routing_mode():
    """Padded to capacity: cf; capacity without padding: the imbalance cut at cf; dropless: the imbalance."""
    assert load_factor(row(moe_capacity_factor=1.25, moe_pad_to_capacity=1, moe_imbalance=1.1)) == 1.25
    assert load_factor(row(moe_capacity_factor=1.25, moe_imbalance=1.5)) == 1.25
    assert load_factor(row(moe_capacity_factor=1.25, moe_imbalance=1.1)) == 1.1
    assert load_factor(row(moe_imbalance=1.3)) == 1.3


@pytest.mark.parametrize("tp,etp,ep", [(1, 1, 1), (4, 4, 8), (4, 1, 8), (2, 2, 4), (8, 1, 8), (2, 1, 2)])
def test_padding_to_capacity_costs_cf_times_the_routed_flops_whatever_tp_etp_ep(tp, etp, ep):
    """Per TP group of ``tp`` devices the routed expert FLOPs of one micro-batch are cf x 2 x 3 h f x k x b s:
    4096 tokens x 2 experts x 2 x 3 x 4096 x 14336 x cf 1.5 = 4.3293e12, whatever tp, etp and ep."""
    r = row(**MIXTRAL, tp=tp, etp=etp, ep=ep, dp=8, moe_capacity_factor=1.5, moe_pad_to_capacity=1)
    assert expert_flops(r) * tp == pytest.approx(1.5 * 4096 * 2 * 2 * 3 * 4096 * 14336, rel=1e-12)
    assert expert_rows(r) == pytest.approx(4096 / tp * etp * 2 * 1.5, rel=1e-12)


def test_hfu_stays_near_mfu_when_padding_at_capacity_one():
    """The issue's case: 8 experts, top-2, cf 1 padded, TP 4 / ETP 4 / EP 8 reported HFU 3.5 x MFU. Without
    recompute the executed FLOPs are the model FLOPs but for causal attention (flash runs half the scores):
    HFU / MFU within 0.8-1.0."""
    r = table(1, **MIXTRAL, tp=4, etp=4, ep=8, dp=8, n_gpus=32, moe_capacity_factor=1.0, moe_pad_to_capacity=1,
              sequence_parallel=1, recompute="none", global_batch=64)
    out = evaluate_table(r)
    assert 0.8 < out["hfu"][0] / out["mfu"][0] <= 1.0


def test_alltoall_dispatch_inside_one_domain_by_hand():
    """EP 8, etp 1, b s = 4096, k 2, h 4096: each rank sends 4096 x 2 x 4096 elements, 7/8 of them to peers,
    dispatch and combine in BF16 at 450 GB/s x 0.8: 2 x (2 x 33,554,432 x 7/8 / 360e9 + 3 us) = 0.33375 ms.
    FP8 dispatch: the dispatch at 1 + 4/128 bytes per element."""
    r = row(**MIXTRAL, ep=8, etp=1, dp=8)
    elements = 4096 * 2 * 4096
    one = 2 * elements * 7 / 8 / 360e9 + 3e-6
    assert dispatch_time(r)[0] == pytest.approx(2 * one, rel=1e-12)
    assert dispatch_time(r)[1] == 0.0                                   # no scale-out traffic
    fp8 = row(**MIXTRAL, ep=8, etp=1, dp=8, moe_fp8_dispatch=1)
    assert dispatch_time(fp8)[0] == pytest.approx(one + FP8_DISPATCH_BYTES * elements * 7 / 8 / 360e9 + 3e-6,
                                                  rel=1e-12)


def test_alltoall_dispatch_at_the_measured_nccl_alltoall_rate():
    """A device that measured its NCCL all-to-all apart from the rings (B200: alltoall_eff 0.64, 7.3 us per peer;
    docs/model.md §11.14.7) prices dispatch and combine at it: the case above at 450 GB/s x 0.64 = 288 GB/s and
    7 x 7.3 us = 51.1 us each, 2 x (2 x 33,554,432 x 7/8 / 288e9 + 51.1 us) = 0.5100 ms (0.33375 ms before)."""
    r = row(**MIXTRAL, ep=8, etp=1, dp=8, alltoall_eff=0.64, alltoall_latency=7.3e-6)
    one = 2 * 4096 * 2 * 4096 * 7 / 8 / 288e9 + 7 * 7.3e-6
    assert one == pytest.approx(255.0e-6, rel=1e-3)
    assert dispatch_time(r)[0] == pytest.approx(2 * one, rel=1e-12)


def test_alltoall_dispatch_across_domains_splits_the_traffic_per_tier():
    """EP 16 over two 8-GPU domains: 8/16 of each rank's copies cross the NICs (50 GB/s x 0.85), 7/16 stay on
    NVLink; the slower tier sets the time, plus the scale-out latency."""
    r = row(**{**MIXTRAL, "moe_experts": 16}, ep=16, etp=1, dp=16)
    nbytes = 2 * 4096 * 2 * 4096
    one = max(nbytes * 7 / 16 / 360e9, nbytes * 8 / 16 / 42.5e9) + 8e-6
    assert dispatch_time(r)[0] == pytest.approx(2 * one, rel=1e-12)
    # scale-out tier: half of the dispatch's and the combine's bytes (2 + 2 per element) through the NIC
    assert dispatch_time(r)[1] == pytest.approx(2 * nbytes * 8 / 16 / 42.5e9, rel=1e-12)


def test_deepep_sends_a_token_once_per_remote_domain():
    """DeepEP two-hop: 16 ranks in 2 domains, k = 8 of 16 experts, one per rank; a token reaches
    2 (1 - C(8, 8) / C(16, 8)) = 2 - 2/12870 domains on average (without replacement), half of them remote,
    instead of 8 x 8/16 = 4 NIC copies. Node-limited routing to one domain leaves 0.5 remote copies. Its 8
    experts sit on 8 distinct ranks (one expert per rank), and the forwarding rank of each domain sends over
    NVLink to the other 7/8 of them (docs/model.md §11.14.2)."""
    base = dict(MIXTRAL, moe_experts=16, moe_topk=8, ep=16, etp=1, dp=16, moe_dispatcher="deepep")
    tokens, h = 4096, 4096
    domains = 2 - 2 / 12870

    def one(remote):
        return max(tokens * 8 * h * 2 * 7 / 8 / 360e9, tokens * remote * h * 2 / 42.5e9) + 8e-6

    assert dispatch_time(row(**base))[0] == pytest.approx(2 * one(domains / 2), rel=1e-12)
    assert dispatch_time(row(**base, moe_max_nodes=1))[0] == pytest.approx(2 * one(0.5), rel=1e-12)
    assert dispatch_time(row(**base))[1] == pytest.approx(tokens * domains / 2 * h * 4 / 42.5e9, rel=1e-12)


def test_allgather_dispatch_gathers_the_expert_group():
    """All-gather dispatcher, EP 8 x etp 1: an all-gather of the group's 8 x 4096 tokens x h and a reduce-
    scatter of the outputs, each a ring of 7 steps moving 7/8 of the 2 x 8 x 4096 x 4096-byte buffer."""
    from fastmodel.kernels.nccl import allgather_time
    r = row(**MIXTRAL, ep=8, etp=1, dp=8, moe_dispatcher="allgather")
    gathered = 8 * 4096 * 4096 * 2
    assert dispatch_time(r)[0] == pytest.approx(2 * allgather_time(r, gathered, 8, 1), rel=1e-12)
    assert allgather_time(r, gathered, 8, 1) > gathered * 7 / 8 / 360e9     # ring latency on top


def test_overlap_modes_hide_what_the_schedule_pairs():
    """none: all exposed (the shared experts hide the dispatch with moe_shared_expert_overlap); batch-level and
    DualPipe: with pp 4 and 12 micro-batches the 3 unpaired ones (warm-up, cool-down) stay exposed, the other
    9/12 hide behind the partner's compute (exposed = what does not fit + comm_sm_share x what does)."""
    base = dict(MIXTRAL, pp=4, comm_sm_share=0.15, global_batch=96, micro_batch=1, dp=8)     # m = 12
    ep, shared, window = 0.004, 0.001, 0.010
    assert expert_parallel_exposed(row(**base), ep, shared, window) == ep
    assert expert_parallel_exposed(row(**base, moe_shared_expert_overlap=1), ep, shared, window) == \
        pytest.approx(0.003 + 0.15 * 0.001, rel=1e-12)
    for mode in ("batch", "dualpipe"):
        r = row(**base, moe_a2a_overlap=mode)
        assert expert_parallel_exposed(r, ep, shared, window) == \
            pytest.approx(3 / 12 * ep + 9 / 12 * 0.15 * ep, rel=1e-12)
        assert exposed(r, ep, window) == pytest.approx(0.15 * ep, rel=1e-12)


def test_layer_frequency_halves_the_moe_layers():
    """DeepSpeed-MoE's expert interval 2: 12 of 24 layers carry experts; the flops per token count 12 MoE
    and 12 dense layers."""
    dense = dict(layers=24, hidden=2048, ffn=8192, heads=16, kv_heads=16, vocab=51200, seq_len=2048, gated_mlp=0)
    moe = dict(dense, moe_experts=128, moe_topk=1, moe_ffn=8192)
    f_dense = evaluate_table(table(1, **dense))["flops_per_token"][0]
    f_every = evaluate_table(table(1, **moe))["flops_per_token"][0]
    f_half = evaluate_table(table(1, **moe, moe_layer_freq=2))["flops_per_token"][0]
    router = 6 * 2048 * 128
    assert f_every - f_dense == pytest.approx(24 * router, rel=1e-12)
    assert f_half - f_dense == pytest.approx(12 * router, rel=1e-12)


def _deepseek_v3():
    for line in (DATA / "runs_moe_public.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["id"] == "deepseek-v3-pretrain-h800-n2048-180k-gpuh-per-T":
            return record
    raise AssertionError("DeepSeek-V3 record missing")


def test_deepseek_v3_report_plan_against_180k_gpu_hours_per_trillion_tokens():
    """DeepSeek-V3 report (arXiv 2412.19437) Table 1 and sec. 3.2: 180K H800 GPU-hours per trillion tokens on
    2,048 GPUs, global batch 15,360 sequences of 4,096 tokens = 62,914,560 tokens per step. GPU-seconds per
    token 180,000 x 3,600 / 1e12 = 6.48e-4, so one step takes 6.48e-4 x 62,914,560 / 2,048 = 19.9066 s.
    The plan (PP 16 DualPipe, EP 64 over 8 nodes with DeepEP and FP8 dispatch, node-limited routing M = 4) is
    predicted within 15% (issue 22), with DualPipe hiding most of the all-to-all."""
    implied = 180_000 * 3_600 / 1e12 * 15_360 * 4_096 / 2_048
    assert implied == pytest.approx(19.9066, abs=1e-4)
    values, _ = record_values(_deepseek_v3())
    assert values["exposed_ep"] < 0.3 * values["comm_ep"]
    assert abs(values["step_time"] / implied - 1) < 0.15


def test_deepseek_v3_record_recomputes_the_reports_modules():
    """DeepSeek-V3 report sec. 3.2.3: all RMSNorm operations and the MLA up-projections are recomputed in the
    backward; the record states them as Megatron-Core recompute_modules, bits layernorm 2 + mla_up_proj 4."""
    from fastmodel.lm.records import lower_record
    from fastmodel.registry.lm import COLUMN_INDEX

    columns = lower_record(_deepseek_v3()).columns
    assert columns[COLUMN_INDEX["recompute_modules"]] == 2 + 4


def test_deepseek_v3_record_states_the_reports_memory_savers_as_fields():
    """DeepSeek-V3 report sec. 3.3.3: BF16 AdamW moments (master weights and gradients FP32), the SwiGLU input of
    the MoE cached in FP8 with its output recomputed, the attention output cached in E5M6; sec. 3.2.3: the
    RMSNorm outputs not stored. The record says each as a plan field (not in the optimizer's free text)."""
    from fastmodel.lm.records import lower_record
    from fastmodel.registry.lm import COLUMN_INDEX

    columns = lower_record(_deepseek_v3()).columns
    for name in ("optimizer_moments", "moe_act_input_fp8", "attn_out_e5m6", "norm_recompute_fp8"):
        assert columns[COLUMN_INDEX[name]] == 1, name


def test_a_misspelt_moment_dtype_names_the_field():
    from fastmodel.errors import SpecError
    from fastmodel.lm.records import lower_record

    record = _deepseek_v3()
    record["plan"]["optimizer_moments"] = "bf17"
    with pytest.raises(SpecError, match="optimizer_moments") as info:
        lower_record(record)
    assert "bf16" in str(info.value)


def test_sweeps_take_etp_as_a_degree():
    """``tp2.ep32.etp1`` on 32 GPUs is the folded mesh (legal); ``tp2.ep32`` keeps etp = tp = 2 and needs 64."""
    from fastmodel.lm.sweep import lm_sweep, mesh_label, parse_mesh

    assert parse_mesh("tp2.ep32.etp1") == {"tp": 2, "pp": 1, "cp": 1, "ep": 32, "etp": 1}
    assert parse_mesh("tp2.ep32")["etp"] == 0 and mesh_label(parse_mesh("tp2.ep32.etp1")) == "tp2.ep32.etp1"
    ds = lm_sweep("qwen3-30b-a3b", "dgx-h100", "llm-pretrain", num_nodes=4,
                  axes={"plan": ["tp2.ep32.etp1", "tp2.ep32"]})
    assert list(ds.status.values.ravel()) == [0, STATUS_CODES["experts_not_divisible"]]


def test_a_sweep_crossing_experts_with_topk_marks_k_above_e_instead_of_evaluating_it():
    """Each axis value alone makes a valid model (4 or 16 experts with Mixtral's top-2; top-2 or top-8 with 8
    experts), but the point of 4 experts and top-8 routes a token to 8 distinct experts of 4: status
    ``topk_above_experts`` (issue 22, bad input in a sweep: a status code), the other three evaluated."""
    from fastmodel.lm.sweep import lm_sweep

    ds = lm_sweep("mixtral-8x7b", "dgx-h100", "llm-pretrain", num_nodes=1,
                  axes={"moe_experts": [4, 16], "moe_topk": [2, 8], "plan": ["tp2.ep2"]})
    status = ds.status.squeeze("plan", drop=True)
    assert int(status.sel(moe_experts=4, moe_topk=8)) == STATUS_CODES["topk_above_experts"]
    assert [int(status.sel(moe_experts=e, moe_topk=k)) for e, k in ((4, 2), (16, 2), (16, 8))] == [0, 0, 0]
    assert np.isnan(float(ds.step_time.squeeze("plan", drop=True).sel(moe_experts=4, moe_topk=8)))
    columns = np.stack([row(**{**MIXTRAL, "moe_topk": k}, ep=8, dp=8, n_gpus=8, global_batch=8) for k in (8, 9)], axis=1)
    assert plan_status(columns).tolist() == [0, STATUS_CODES["topk_above_experts"]]


def test_timeline_draws_the_all_to_all_whole_and_waits_only_for_its_exposed_part():
    """DeepSeek-V3's plan (on a 1F1B pipeline: the timeline draws one direction) with and without the overlap of
    its all-to-all: the EP row holds comm_ep seconds either way; the compute row waits for all of it without
    overlap and for little of it with the overlap."""
    from fastmodel.lm.api import timeline

    record = _deepseek_v3()
    record["plan"]["pipeline_schedule"] = "1f1b"
    seen = {}
    for mode in ("none", "batch"):
        record["plan"]["moe_a2a_overlap"] = mode
        t, (values, _) = timeline(record=record), record_values(record)
        ep = np.asarray(t.row) == t.rows.index("ep")
        assert float(np.sum((np.asarray(t.end) - np.asarray(t.start))[ep])) == pytest.approx(values["comm_ep"], rel=1e-6)
        assert float(np.max(t.end)) == pytest.approx(values["step_time"], rel=1e-9)
        seen[mode] = (t.exposed(), values["exposed_ep"])
    assert seen["none"][1] == pytest.approx(values["comm_ep"], rel=1e-12)
    assert seen["batch"][0] < seen["none"][0] - 0.5 * values["comm_ep"]


def test_bad_moe_input_is_one_line_naming_the_field():
    """DualPipe's overlap without the DualPipe schedule, an unknown dispatcher, padding without a capacity."""
    from fastmodel.errors import SpecError
    from fastmodel.lm.records import lower_record

    record = _deepseek_v3()
    record["plan"]["pipeline_schedule"] = "1f1b"
    with pytest.raises(SpecError, match=r"plan\.moe_a2a_overlap: 'dualpipe' overlaps"):
        lower_record(record, "r.jsonl")
    record = _deepseek_v3()
    record["plan"]["moe_dispatcher"] = "deeep"
    with pytest.raises(SpecError, match=r"plan\.moe_dispatcher: .*did you mean 'deepep'"):
        lower_record(record, "r.jsonl")
    record = _deepseek_v3()
    record["model"]["moe_pad_to_capacity"] = True
    with pytest.raises(SpecError, match=r"model\.moe_pad_to_capacity: needs moe_capacity_factor > 0"):
        lower_record(record, "r.jsonl")


@pytest.mark.parametrize("name, published", [("deepseek-v2", 236e9), ("kimi-k2", 1.04e12), ("gpt-oss-120b", 116.83e9),
                                             ("llama4-maverick", 400e9), ("grok-1", 314e9), ("qwen3-30b-a3b", 30.5e9),
                                             ("qwen3-235b-a22b", 235e9)])
def test_builtin_moe_models_hold_their_published_parameter_counts(name, published):
    """Total parameters of the built-in MoE models from their public configs (the spec files cite them) against
    the totals their publishers state: DeepSeek-V2 report 236B, Kimi K2 report 1.04T, gpt-oss model card
    116.83B, Llama 4 model card 400B, xAI's Grok-1 release 314B, the Qwen3-30B-A3B and Qwen3-235B-A22B model cards
    30.5B and 235B; within 2% (norm and bias vectors, rounding of the published totals)."""
    from fastmodel.kernels.lm.memory_states import stage_params
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.lowering import model_values

    non_expert, expert = stage_params(row(**model_values(load_lm_model(name))), 0.0)
    assert (non_expert + expert) / published == pytest.approx(1.0, abs=0.02)


def test_deepseek_v3_holds_671b_and_its_mtp_module_one_moe_layer_and_a_projection():
    """DeepSeek-V3 report (arXiv 2412.19437) abstract: 671B total parameters in the main model; sec. 2.2: the MTP
    module shares the embedding and the output head and adds one transformer block (a MoE layer, as layers 4-61)
    and a 2h x h projection M over the two RMSNorm outputs it concatenates. The main model within 1% of 671B; the
    MTP module is the 61st layer's parameters (a MoE layer: layers 0-2 are the dense ones) plus 2 h^2 + 3 h
    (h = 7168; three RMSNorms: Megatron-Core's enorm, hnorm and final_layernorm, docs/model_memory.md)."""
    from fastmodel.kernels.lm.memory_states import stage_params
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.lowering import model_values

    values = model_values(load_lm_model("deepseek-v3"))
    assert values["mtp_layers"] == 1

    def total(**change):
        return sum(stage_params(row(**{**values, **change}), 0.0))

    assert total(mtp_layers=0) / 671e9 == pytest.approx(1.0, abs=0.01)
    moe_layer = total(mtp_layers=0) - total(mtp_layers=0, layers=60)
    assert total() - total(mtp_layers=0) == pytest.approx(moe_layer + 2 * 7168**2 + 3 * 7168, rel=1e-12)


def test_alltoall_with_several_local_experts_permutes_twice():
    """Megatron-Core's alltoall dispatcher (and TorchTitan's) sorts the received rows by local expert after the
    all-to-all and back before the combine: two permute + unpermute pairs; one expert per rank, the all-gather
    and DeepEP dispatchers: one."""
    assert permutation_pairs(row(**MIXTRAL, ep=4, dp=4)) == 2.0               # 2 local experts
    assert permutation_pairs(row(**MIXTRAL, ep=8, dp=8)) == 1.0               # 1 local expert
    assert permutation_pairs(row(**MIXTRAL, ep=4, dp=4, moe_dispatcher=1)) == 1.0
    assert permutation_pairs(row(**MIXTRAL, ep=4, dp=4, moe_dispatcher=2)) == 1.0


def test_moe_memory_bound_time_by_hand():
    """EP 4, 2 local experts, b s = 4096, k 2, h 4096, E 8, 48 counted kernels at 4 us, HBM 3.35 TB/s x 0.8:
    router 20 B x 4096 x 8 = 655,360 B; permutation 2 pairs x 8 B x 8192 rows x 4096 = 536,870,912 B;
    (655,360 + 536,870,912) / 2.68e12 + 48 x 4e-6 = 0.20057 ms + 0.192 ms."""
    r = row(**MIXTRAL, ep=4, dp=4, hbm_bw=3.35e12, hbm_eff=0.8, kernel_overhead_s=4e-6, moe_mem_kernels=48)
    mem = moe_compute(r, False)[1]
    assert mem == pytest.approx((20 * 4096 * 8 + 2 * 8 * 4096 * 2 * 4096) / 2.68e12 + 48 * 4e-6, rel=1e-12)
    uncounted = row(**MIXTRAL, ep=4, dp=4, hbm_bw=3.35e12, hbm_eff=0.8, kernel_overhead_s=4e-6)
    assert mem - moe_compute(uncounted, False)[1] == pytest.approx(48 * 4e-6, rel=1e-9)


def test_megatron_core_counts_its_router_and_dispatcher_kernels_and_the_docs_table_sums_to_it():
    core = resolve(ExecutionSpec(framework="Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0"), pp=1,
                   layers=4)
    assert core.moe_mem_kernels == megatron_core.MOE_MEM_KERNELS_MEGATRON_CORE
    # TorchTitan counts its own paths (§11.14.3, §11.61): uncompiled, the default all-to-all one
    assert resolve(ExecutionSpec(framework="TorchTitan"), pp=1, layers=4).moe_mem_kernels == 48.0
    assert resolve(ExecutionSpec(framework="TorchTitan", torch_compile=True), pp=1, layers=4).moe_mem_kernels is None
    given = resolve(ExecutionSpec(framework="NeMo", moe_mem_kernels=10), pp=1, layers=4)
    assert given.moe_mem_kernels == 10                                       # a plan's own count wins
    text = DOCS.read_text()
    block = text[text.index("<!-- moe-kernels-megatron-core -->"):text.index("<!-- /moe-kernels-megatron-core -->")]
    counts = [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]
    assert len(counts) >= 5
    assert sum(counts) == megatron_core.MOE_MEM_KERNELS_MEGATRON_CORE


#: B200 (specs/devices/b200.toml): the device terms of the routed experts' weight gradients
B200 = dict(peak_flops_16=2.25e15, gemm_eff_16=0.49, sm_count=148, gemm_tile_m=128, gemm_tile_n=256, gemm_k_half=128,
            hbm_bw=8e12, hbm_eff=0.8, kernel_overhead_s=4e-6)


def test_expert_weight_gradient_by_hand_on_the_deepseek_v2_ep8_shape():
    """20 local experts of 1,232 rows, forward (1232 x 5120) @ (5120 x 3072): each expert's 5120 x 3072 gradient
    in 40 x 12 tiles of 128 x 256, 9,600 tiles in 65 waves of 148 (Q = 9600 / 9620), reduced over 1,232 + 128
    rows: compute 2 x 20 x 5120 x 3072 x 1360 / (2.25e15 x 0.49 x Q); memory 20 x (2 x 1232 x 3072 + 2 x 1232 x
    5120 + 2 x 5120 x 3072) B / 6.4e12; the FP32 main gradient read 20 x 5120 x 3072 x 4 B / 6.4e12 = 0.19661 ms
    (Megatron's fused accumulation: beta = 1) comes on top; without it (beta = 0) nothing."""
    r = row(**B200)
    compute = 2.0 * 20 * 5120 * 3072 * 1360 / (2.25e15 * 0.49 * 9600 / 9620)
    memory = 20 * (2.0 * 1232 * 3072 + 2.0 * 1232 * 5120 + 2.0 * 5120 * 3072) / 6.4e12
    source = 20 * 5120 * 3072 * 4.0 / 6.4e12
    assert source == pytest.approx(0.19661e-3, rel=1e-4) and compute > memory
    assert expert_wgrad_roofline(r, 20.0, 1232.0, 3072.0, 5120.0, False, 4.0, 0.0) == pytest.approx(compute + source,
                                                                                                     rel=1e-12)
    assert expert_wgrad_roofline(r, 20.0, 1232.0, 3072.0, 5120.0, False, 0.0, 1.0) == pytest.approx(compute + 4e-6,
                                                                                                     rel=1e-12)
    assert expert_wgrad_roofline(r, 0.0, 1232.0, 3072.0, 5120.0, False, 4.0, 1.0) == 0.0


def test_fused_accumulation_adds_the_main_gradient_read_to_the_weight_gradient_pass_only():
    """Mixtral shape at EP 4 (2 local experts, 8,192 rows each, width 14,336): expert_wgrad_extra is the two
    grouped weight gradients less their forwards; wgrad_fused_accumulation adds the read of the main gradient,
    grad_reduce_bytes (4) per element of both gradients, 2 x 2 x 4096 x 14336 x 4 B / 6.4e12 (and 2 x 4096 x
    14336 for the down projection) -- to the weight-gradient pass and the GEMM time, nothing to the forward. The
    layer's dense linears read theirs too (docs/model.md §11.46): the attention's 4096 (32 + 2 x 8) 128 + 32 x 128
    x 4096 = 41,943,040 weights at TP 1; the router (4096 x 8) is not fused."""
    fused = row(**MIXTRAL, **B200, ep=4, dp=4, wgrad_fused_accumulation=1)
    plain = row(**MIXTRAL, **B200, ep=4, dp=4)
    rows = expert_rows(plain) / 2.0
    forward = expert_gemm_time(plain, 2.0, rows, 2.0 * 14336, 4096.0, False) \
        + expert_gemm_time(plain, 2.0, rows, 4096.0, 14336.0, False)
    wgrad = expert_wgrad_roofline(plain, 2.0, rows, 2.0 * 14336, 4096.0, False, 0.0, 1.0) \
        + expert_wgrad_roofline(plain, 2.0, rows, 4096.0, 14336.0, False, 0.0, 1.0)
    assert moe_compute(plain, False)[5] == pytest.approx(forward, rel=1e-12)
    assert expert_wgrad_extra(plain, False, forward) == pytest.approx(wgrad - forward, rel=1e-12)
    read = (2 * 2 * 4096 * 14336 + 2 * 4096 * 14336) * 4.0 / 6.4e12
    assert expert_wgrad_extra(fused, False, forward) - expert_wgrad_extra(plain, False, forward) == pytest.approx(read,
                                                                                                       rel=1e-9)
    dense = (4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096) * 4.0 / 6.4e12
    work_fused, work_plain = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_passes(fused, work_fused)
    layer_passes(plain, work_plain)
    assert work_fused[A_FORWARD] == work_plain[A_FORWARD]
    for slot in (A_BACKWARD_WEIGHT, A_GEMM):
        assert work_fused[slot] - work_plain[slot] == pytest.approx(read + dense, rel=1e-9)


def test_megatron_core_fuses_the_weight_gradient_accumulation():
    """Megatron-LM 23e00ed: --no-gradient-accumulation-fusion is store_false (fusion on), passed to TE's
    GroupedLinear as fuse_wgrad_accumulation; TorchTitan writes its gradients (not set)."""
    core = resolve(ExecutionSpec(framework="Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0"), pp=1,
                   layers=4)
    assert core.wgrad_fused_accumulation is True
    assert resolve(ExecutionSpec(framework="TorchTitan"), pp=1, layers=4).wgrad_fused_accumulation is None
