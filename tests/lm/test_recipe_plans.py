"""Published Megatron-Bridge recipe plans (``tests/data/recipe_plans.jsonl``, plan-only records) are answered.

Every plan in that file ran on NVIDIA's clusters: its configuration was published as a performance recipe
(``tests/data/make_recipe_plans.py`` names the repository, commit and file of each). So fastmodel must

- answer every one (the rule table refuses none, the results are finite),
- predict that each fits in memory under the default margin (the recipe ran), and
- predict an MFU that is physically sane: between 0.15 and 0.75 of the dense peak of the plan's precision.
  Upper bound: a training step cannot run faster than its GEMMs, and large dense cuBLAS/cuDNN GEMMs reach at
  most about 0.8 of the datasheet dense peak on H100 and Blackwell; the best published dense Megatron runs
  stay near 0.7 (MLPerf-class Llama / GPT-3). Lower bound: NVIDIA publishes these plans as its tuned
  performance recipes; a recipe running below 0.15 of its precision's peak (FP8 plans are held to the FP8 peak,
  which is twice the BF16 one) would not be published as one. Neither bound was chosen from fastmodel's output.

Plans fastmodel does not yet answer sanely are listed by id in ``KNOWN_*`` below (gaps to close, reasons in
docs/model.md's MoE sections and the closing notes of the issues); each test fails both when a listed plan starts passing (the
list must shrink) and when an unlisted plan fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.lm.layout import RECOMPUTE_NONE
from fastmodel.kernels.lm.memory_activations import layer_activation_bytes
from fastmodel.lm.memory_timeline import memory_timeline
from fastmodel.lm.records import read_records, with_measurements
from fastmodel.lm.rules import plan_status
from fastmodel.lm.validate import predict_records
from fastmodel.registry.lm import MEMORY_KINDS, STATUSES

DATA = Path(__file__).resolve().parents[1] / "data" / "recipe_plans.jsonl"
MFU_LOW, MFU_HIGH = 0.15, 0.75

#: plans predicted not to fit: ids of recipe_plans.jsonl (why, beside each)
KNOWN_MEMORY_GAPS: frozenset[str] = frozenset((
    # the DeepSeek-V3 GB300 FSDP plan fits since fine-grained activation offloading is modelled
    # (kernels/lm/memory_offload.py: it offloads core_attn and attn_proj, its assumptions cite the recipe lines)
    # since memory_row evaluates every pipeline rank (issue 23, h-worstrank): PP 16 x VP 8 with the embedding and
    # the loss in the split gives rank 0 seven layers and rank 1 eight; rank 1 runs 2 (16 - 2) + 7 x 16 = 140
    # warm-up forwards and one more before its first backward (get_pp_rank_microbatches), so it holds 141 one-layer
    # chunks: 140.0 GiB beside 41.6 GiB of states, 183.0 GiB per device against 169.2 / 175.2 GiB usable (the
    # CUDA-visible 178.35 / 184.31 GiB less the plan's allocator cache, 0.05 x 182.4 GiB allocated,
    # docs/model_memory.md "What a run keeps free: the default margin (issue 23)").
    # The tensor-by-tensor audit against Megatron-LM@0823c731 + TransformerEngine@d64bc14d (issue 23, h-fit405;
    # docs/model_memory.md "Llama 3.1 405B v2 recipe plans") finds every one of the 31.78 T h / t bytes a layer is
    # charged saved for backward, and nothing saved that is not charged beyond the RMSNorm rstd (0.0005 T h / t):
    # test_llama31_405b_v2_rank1_holds_what_megatron_core_and_te_save. 183.0 GiB is above the whole B200 capacity
    # CUDA reports (178.35 GiB) and 1.3 GiB below GB200's (184.31 GiB). No BF16 Llama 3.1 405B result appears in
    # Megatron-Bridge's performance summaries (144 commits of docs/performance-summary*.md: the GBS-1536 rows are
    # FP8, MXFP8 and NVFP4; the MXFP8 V2 plan, same layout, is predicted to fit at 165.6 GiB), and
    # Megatron-Bridge@0013c9a8 makes the B200 V2 config an alias of the GB200 one, so "they ran" is not shown.
    # Since TE's Userbuffers are charged (tp_comm_overlap: 12 x 256 MiB outside PyTorch's allocator, less the
    # 256 MiB TP all-gather they hold; kernels/lm/memory.py userbuffer_bytes) rank 1 needs 185.8 GiB, above both
    # capacities (3.84 / 9.80 GiB over with the plan's allocator cache)
    "mbridge-llama31-405b-b200-bf16-v2",
    "mbridge-llama31-405b-gb200-bf16-v2",
    # mbridge-llama31-405b-b200-fp8-cs-v2 (169.65 GiB per device, 0.22 GiB over the former unsourced 5% reserve)
    # fits since the default margin is the plan's own allocator cache (issue 23): 169.65 + 0.05 x 169.07 = 178.10
    # of the B200's CUDA-visible 178.35 GiB (docs/model_memory.md "What a run keeps free: the default margin")
))
#: plans predicted outside the MFU band. Closed by reading the recipes' pipeline layouts (DeepSeek-V3, Kimi K2:
#: the last rank holds 1 decoder layer + MTP + loss, not the uneven split's 4 + head, docs/model.md §11.22) and
#: Qwen3-235B's embedding/loss slots in the split, and DeepSeek-V3's node-limited routing on H100 (EP 64 over its
#: 8 routing groups' 8 nodes): eight DeepSeek-V3 FP8 plans, Qwen3-235B H100 FP8 V1/V2 and Kimi K2 H100 BF16.
#: Left (breakdowns and checked recipe settings in docs/model.md §11.22):
KNOWN_MFU_GAPS: frozenset[str] = frozenset((
    # pipeline bubble: GBS 256 (512) on PP 16 (8) leaves m = 16 micro-batches per rank, 1.07 s (0.70 s) of bubble
    # in a 2.75 s (2.61 s) step; the "large scale" presets keep the 256-GPU plan at a quarter of its batch
    "mbridge-deepseek-v3-b200-fp8-mx-large-scale",
    "mbridge-qwen3-235b-a22b-b200-fp8-mx-large-scale",
    # exposed expert-parallel traffic over InfiniBand (50 GB/s per GPU): EP 16-64 spans 2-8 nodes of 8 H100 / B200.
    # They run the NCCL alltoall dispatcher (set_workload_base_configs resets it when the workload config names no
    # flex backend, utils/overrides.py lines 264-267); a2a overlap is off except on the Qwen3 H100 plan
    # (batch-level, hides about half). Exposed EP is 38-69% of the step. What the launchers run (docs/model.md
    # §11.36): a default launch keeps that dispatcher (run_script's --moe_flex_dispatcher_backend defaults to -1,
    # which apply_flex_dispatcher_backend skips as "not a valid flex dispatcher backend"; Megatron-Bridge HEAD's
    # argument_parser.py says so, lines 875-877), in the r0.4.0 releases NVIDIA's README names for the 26.04
    # container, in the llmb-r0.4.1 commit DGX Cloud's kimi-k2/launch.sh pins and in the flat perf recipes
    "mbridge-gpt-oss-120b-b200-fp8-mx-v1",
    "mbridge-kimi-k2-b200-bf16",
    "mbridge-kimi-k2-b200-fp8-cs",
    "mbridge-kimi-k2-b200-fp8-mx",
    # Kimi K2 H100 (BF16 0.166 -> 0.149, §11.36): the Kimi K2 base recipe builds CommOverlapConfig(
    # tp_comm_overlap=False) (recipes/kimi/h100/kimi_k2.py line 187), so TP 8 with sequence parallelism runs its
    # all-gathers and reduce-scatters exposed, beside the EP 64 all-to-all over 8 nodes. BF16 is back in the band
    # (0.147 -> 0.158) since §11.44 runs MLA's replicated down-projections on the SP slice and gathers its latents
    "mbridge-kimi-k2-h100-fp8-cs",
    "mbridge-kimi-k2-h100-fp8-sc",
    "mbridge-qwen3-235b-a22b-h100-fp8-cs-large-scale",
))


@pytest.fixture(scope="module")
def predicted():
    records = read_records(DATA)
    status = np.zeros(len(records), dtype=np.int8)
    results = predict_records(records, status)
    return records, status, results


def test_the_file_holds_plans_only_from_published_recipe_code():
    raw = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    assert len(raw) == 150                                     # README and docs state the count
    assert len({r["id"] for r in raw}) == len(raw)
    for r in raw:
        assert "measured" not in r, r["id"]                     # plan-only: no measured timing anywhere
        assert "Megatron-Bridge@" in r["source_ref"] and "scripts/performance/configs/" in r["source_ref"]
    gpus = {r["system"]["gpu"] for r in raw}
    assert gpus == {"H100-SXM-80GB", "B200", "GB200", "GB300"}
    models = {r["model"]["name"] for r in raw}
    assert {"DeepSeek-V3", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "gpt-oss-120b", "Llama 3 70B",
            "Llama 3.1 405B", "Llama 3 8B"} <= models


def test_every_recipe_plan_is_answered(predicted):
    records, status, results = predicted
    refused = [(r.id, STATUSES[int(code)].name)
               for r, code in zip(records, plan_status(np.stack([r.columns for r in records], axis=1)))
               if code]
    assert refused == []
    not_finite = [r.id for r, code in zip(records, status) if code]
    assert not_finite == []
    assert np.all(np.isfinite(results["step_time"])) and np.all(results["step_time"] > 0)


def test_every_recipe_plan_fits_memory(predicted):
    records, _, results = predicted
    misfits = {r.id for r, fits in zip(records, results["fits_memory"]) if fits != 1.0}
    assert misfits - KNOWN_MEMORY_GAPS == set(), "plans that ran predicted not to fit"
    assert KNOWN_MEMORY_GAPS - misfits == set(), "listed gaps now fit: remove them from KNOWN_MEMORY_GAPS"


def test_llama31_405b_v2_rank1_holds_what_megatron_core_and_te_save():
    """docs/model_memory.md "Llama 3.1 405B v2 recipe plans" by hand. One Llama 3.1 405B layer (h 16384, 128
    query / 8 KV heads of 128, SwiGLU f 53248) at TP 4 with SP, BF16, T = 8192 tokens a micro-batch, keeps for
    backward what Megatron-LM@0823c731 + TransformerEngine@d64bc14d save: two RMSNorm inputs and the two local
    norm outputs (LayerNormLinear ``inputmat`` and ``ln_out``, 2 T h / t each), Q, K and V after the fused RoPE
    (2 T a d / t, 2 T kv d / t twice), the attention output O that linear_proj saves as its input (2 T a d / t),
    cuDNN's FP32 softmax statistics (4 T a / t), the SwiGLU input (2 x 2 T f / t) and fc2's input (2 T f / t):
    31.78125 T h / t. Not charged: each norm's FP32 rstd (4 T / t, 0.0005 T h / t a layer). No dropout masks
    (both dropouts 0), nothing for the residual adds. Rank 1 holds 2 (16 - 1 - 1) + (8 - 1) 16 + 1 = 141
    one-layer chunks at its first backward, and nothing else (it holds neither the embedding nor the loss)."""
    record = next(r for r in read_records(DATA) if r.id == "mbridge-llama31-405b-gb200-bf16-v2")
    t_tok, h, t, a, kv, d, f = 8192, 16384, 4, 128, 8, 128, 53248
    saved = {
        "input_layernorm input": 2 * t_tok * h / t, "linear_qkv input (local ln_out)": 2 * t_tok * h / t,
        "Q": 2 * t_tok * a * d / t, "K": 2 * t_tok * kv * d / t, "V": 2 * t_tok * kv * d / t,
        "O = linear_proj input": 2 * t_tok * a * d / t, "softmax stats": 4 * t_tok * a / t,
        "pre_mlp_layernorm input": 2 * t_tok * h / t, "linear_fc1 input (local ln_out)": 2 * t_tok * h / t,
        "SwiGLU input": 2 * 2 * t_tok * f / t, "linear_fc2 input": 2 * t_tok * f / t,
    }
    layer = sum(saved.values())
    assert layer / (t_tok * h / t) == pytest.approx(31.78125, rel=1e-12)
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    assert layer_activation_bytes(row, False, RECOMPUTE_NONE) == pytest.approx(layer, rel=1e-12)
    rank1 = memory_timeline(row).stages[1]
    peak = int(np.argmax(rank1.totals))
    assert rank1.labels[peak] == "B0"
    assert rank1.values[peak, MEMORY_KINDS.index("activations")] == pytest.approx(141 * layer, rel=1e-12)


def test_every_recipe_plan_has_a_sane_mfu(predicted):
    records, _, results = predicted
    outside = {r.id for r, mfu in zip(records, results["mfu"]) if not MFU_LOW <= mfu <= MFU_HIGH}
    assert outside - KNOWN_MFU_GAPS == set(), "MFU outside the physical band"
    assert KNOWN_MFU_GAPS - outside == set(), "listed gaps are now inside the band: remove them"


def test_validate_refuses_a_file_of_plan_only_records_and_points_to_batch():
    with pytest.raises(SpecError, match="plan-only records are predicted by `fastmodel batch`"):
        with_measurements(read_records(DATA), DATA)


def test_plans_carry_what_the_launch_sets_beside_the_workload_config():
    """docs/model.md §11.36: Kimi K2 launches with Muon (``--optimizer_type`` default "muon"; Megatron-Core's
    LayerWiseDistributedOptimizer with ``use_distributed_optimizer = False``: DDP gradients, ``muon_distributed``
    1) and, under MXFP8, without the FP8 parameter gather; the DeepSeek-V3 and Kimi K2 base recipes build
    ``CommOverlapConfig(tp_comm_overlap=False)``; DeepSeek-V3 on H100 turns the gradient-reduce overlap off; every
    other MoE family keeps Adam on the distributed optimizer."""
    raw = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    for r in raw:
        plan, name, gpu = r["plan"], r["model"]["name"], r["system"]["gpu"]
        kimi = name == "Kimi K2"
        assert plan.get("optimizer", "adam") == ("muon" if kimi else "adam"), r["id"]
        assert (plan["sharding"] == "ddp") == kimi, r["id"]
        if kimi and plan.get("fp8_recipe", "").startswith("mxfp8"):
            assert plan["fp8_params"] is False, r["id"]
        if name in ("Kimi K2", "DeepSeek-V3"):
            assert plan["tp_comm_overlap"] is False, r["id"]
        deepseek_h100 = name == "DeepSeek-V3" and gpu.startswith("H100")
        assert plan.get("overlap_grad_reduce", True) is not deepseek_h100, r["id"]


def test_graphed_plans_name_the_recipes_scope():
    # review MEDIUM 3: Megatron-Bridge's is_full_iteration_cuda_graph (src/megatron/bridge/utils/cuda_graph.py lines
    # 118-126 at b7b4e11): impl 'full_iteration', or 'local' with 'full_iteration' in the scope, captures the whole
    # forward-backward; 'transformer_engine' (and 'local' otherwise) per layer (docs/model.md §11.37)
    import ast
    import re
    raw = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    seen = {"none": 0, "layer": 0, "full_iteration": 0}
    for r in raw:
        flag = next((f for f in r["flags"] if f.startswith("cuda_graph_impl")), None)
        want = "none"
        if flag is not None:
            impl, scope = re.fullmatch(r"cuda_graph_impl '(\w+)', scope (.+)", flag).groups()
            scope = ast.literal_eval(scope)
            names = [scope] if isinstance(scope, str) else list(scope or ())
            want = "full_iteration" if impl == "full_iteration" or (impl == "local" and "full_iteration" in names) \
                else "layer"
        assert r["plan"]["cuda_graphs"] == want, r["id"]
        seen[want] += 1
    assert seen == {"none": 94, "layer": 33, "full_iteration": 23}
