"""Framework stack profiles (fastmodel/lm/stacks): the parse of a framework text, the defaults each sets
(today's rules, moved unchanged), explicit stacks and the rule for vp = "unknown" (issue 26 item 4)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import BY_NAME, PROFILES, profile_for, resolve
from fastmodel.lm.stacks.base import tokens
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).resolve().parents[1] / "data"

# every framework text of the dev files, and the stack it names (by the documented parse, read by hand)
FRAMEWORKS = [
    ("TorchTitan (FSDP2), PyTorch nightly mid-2024", "torchtitan"),
    # the text names PyTorch FSDP and, as the trainer built on it, fms-fsdp: the trainer wins
    ("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", "fms-fsdp"),
    ("PyTorch 1.10 FSDP (minGPT), FP16, SGD", "pytorch-fsdp"),
    ("Meta internal (4D parallel: TP/CP/PP/FSDP-DP)", "meta-internal"),
    ("Megatron-DeepSpeed", "megatron-2021"),
    ("Megatron-DeepSpeed (3D)", "megatron-2021"),
    ("NeMo (MLPerf v4.0 NVIDIA submission, 24.04)", "megatron-core"),
    ("NeMo (MLPerf v3.1 submission, NGC 23.09)", "megatron-core"),
    # vTrain: the text names Megatron-LM and, as its codebase, the Megatron-DeepSpeed fork: the fork wins
    ("Megatron-LM (vTrain ground truth, 2023-24; data/README: Megatron-DeepSpeed codebase)", "megatron-2021"),
    # the B200 runs: "NGC PyTorch" is the container, not eager PyTorch (deliberate change from substring rules)
    ("Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0, NGC PyTorch 26.01 family (SimuMax B200 release "
     "v1.2 real runs)", "megatron-core"),
    ("DeepSpeed ZeRO-3", "deepspeed"),
    # GPT-NeoX names DeepSpeed, its engine, and Megatron, its model code's origin: GPT-NeoX wins (§11.66)
    ("GPT-NeoX (Megatron + DeepSpeed ZeRO-1), 2022-23, fp16", "gpt-neox"),
    # the 2021-22 papers' texts as their source CSVs give them; the records name stack megatron-2021 explicitly
    ("Megatron-LM (PTD-P)", "megatron-core"),
    ("Megatron-LM PTD-P", "megatron-core"),
    ("Megatron-LM", "megatron-core"),
    ("DeepSpeed 0.3 ZeRO-3 (no model parallelism)", "deepspeed"),
    ("Megatron-Core 0.9", "megatron-core"),
]


@pytest.mark.parametrize("framework, stack", FRAMEWORKS)
def test_a_framework_text_names_its_stack(framework, stack):
    profile, note = profile_for(framework)
    assert (profile.name, note) == (stack, None)


def test_every_framework_text_of_the_dev_files_is_in_the_table_above():
    seen = {json.loads(line).get("framework") for line in (DATA / "runs_dev.jsonl").read_text().splitlines()}
    assert seen - {None} <= {framework for framework, _ in FRAMEWORKS}


def test_names_match_whole_tokens_only():
    assert tokens("Megatron-LM (commit 23e00ed) + TE 2.11.0.") == "megatron-lm commit 23e00ed te 2.11.0"
    for text in ("NGC PyTorch 26.01", "PyTorch", "JAX on TPU", "deepspeedish", "Megatronic"):
        profile, note = profile_for(text)
        assert profile.name == "default" and repr(text) in note and "\n" not in note


def test_no_framework_picks_no_era_it_is_the_default_profile_with_a_note():
    profile, note = profile_for(None)
    assert profile.name == "default" and "no framework" in note and "\n" not in note


def test_dropping_framework_from_a_modern_record_does_not_make_it_a_2021_run():
    line = next(x for x in (DATA / "runs_dev.jsonl").read_text().splitlines() if "mlperf-v31" in x)
    record = json.loads(line)
    named = lower_record(record)
    del record["framework"]
    absent = lower_record(record)
    assert named.stack == "megatron-core" and absent.stack == "default"
    # Megatron-Core sets nothing beyond the registry but its counted MoE router kernels and its router
    # probabilities in the expert activation and its fused weight-gradient accumulation (read on the routed
    # experts' weight gradients: all three unused by a dense model)
    keep = ~np.isin(np.arange(len(named.columns)), [C["moe_mem_kernels"], C["moe_probs_in_experts"],
                                                    C["wgrad_fused_accumulation"]])
    assert np.array_equal(named.columns[keep], absent.columns[keep])
    assert named.columns[C["moe_mem_kernels"]] == 48.0 and absent.columns[C["moe_mem_kernels"]] == 0.0
    assert any("no framework" in note for note in absent.notes)


def test_every_dev_record_names_its_software():
    for line in (DATA / "runs_dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record.get("framework") or record.get("stack"), record["id"]


def test_an_explicit_stack_wins_over_the_framework_text():
    assert profile_for("PyTorch 1.10 FSDP", "megatron-core") == (BY_NAME["megatron-core"], None)


def test_every_profile_names_itself_and_has_a_source():
    assert len({p.name for p in PROFILES}) == len(PROFILES) and PROFILES[-1].name == "default"
    for profile in PROFILES:
        assert profile.source and profile.title


def resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, **fields), pp=16, layers=126)


def test_today_rules_are_the_profiles_defaults():
    # Megatron 2021-22 (named explicitly): unfused attention with dropout, DP communication after the backward
    old = resolve(ExecutionSpec(framework=None, stack="megatron-2021", sharding="distopt"), 16, 126)
    assert (old.flash_attention, old.dropout, old.overlap_grad_reduce, old.overlap_param_gather) == (
        False, True, False, False)
    assert old.collective_bucket_bytes is None
    # PyTorch FSDP: eager element-wise ops, op-level selective recompute; 1.x FSDP overlaps its reduce-scatter
    fsdp2x = resolved("PyTorch FSDP", sharding="fsdp")
    assert (fsdp2x.fused_kernels, fsdp2x.selective_policy, fsdp2x.flash_attention) == (False, "op", None)
    fsdp1x = resolved("PyTorch 1.10 FSDP", sharding="fsdp")
    assert (fsdp1x.flash_attention, fsdp1x.overlap_grad_reduce, fsdp1x.overlap_param_gather) == (False, True, False)
    assert resolved("PyTorch 1.10 FSDP", sharding="hsdp").overlap_grad_reduce is False
    titan = resolved("TorchTitan")
    assert (titan.fsdp_copy_out, titan.fused_kernels, titan.selective_policy) == (True, False, "op")
    # TorchTitan keeps an FSDP stage gathered under PP (reshard_after_forward = not pp_enabled); no other stack does
    assert titan.fsdp_stage_gathered is True
    assert all(resolved(f).fsdp_stage_gathered is None for f in ("Megatron-Core", "Meta internal", "PyTorch FSDP", None))
    for framework in ("Megatron-Core", "NeMo", "Meta internal", "something else", None):
        spec = resolved(framework)
        assert all(getattr(spec, f) is None for f in ("fused_kernels", "flash_attention", "dropout",
                                                     "overlap_grad_reduce", "fsdp_copy_out", "selective_policy"))


def test_deepspeed_defaults_come_from_its_source_by_stage_and_era():
    # constants.py v0.3.15: overlap_comm off for stages 1-2, on for stage 3; reduce_bucket_size 5e8 elements
    zero1 = resolved("DeepSpeed", sharding="distopt")
    assert (zero1.overlap_grad_reduce, zero1.overlap_param_gather, zero1.collective_bucket_bytes) == (False, False, 1e9)
    zero3 = resolved("DeepSpeed ZeRO-3", sharding="fsdp")
    assert (zero3.overlap_grad_reduce, zero3.overlap_param_gather, zero3.param_fetch_bw) == (True, True, None)
    # up to v0.4.1 the fetch is the framework's own, synchronous, at issue #1174's 8.95 GB in 0.470 - 0.060 s
    early = resolved("DeepSpeed 0.3 ZeRO-3", sharding="fsdp")
    assert (early.overlap_grad_reduce, early.overlap_param_gather) == (True, False)
    assert early.param_fetch_bw == pytest.approx(8.95e9 / 0.410)
    assert resolved("DeepSpeed v0.4.2", sharding="fsdp").param_fetch_bw is None
    # Megatron-DeepSpeed's ZeRO-3 is DeepSpeed's
    fork = resolved("Megatron-DeepSpeed 0.3", sharding="fsdp")
    assert (fork.overlap_grad_reduce, fork.collective_bucket_bytes, fork.flash_attention) == (True, 1e9, False)


def test_deepspeed_reduces_16_bit_gradients_and_others_keep_fp32():
    # engine.py v0.3.15 line 747: ZeRO refuses fp32_allreduce, so its gradients stay in the 16-bit dtype
    for sharding in ("distopt", "fsdp"):
        assert resolved("DeepSpeed", sharding=sharding).grad_reduce_dtype == "fp16"
    assert resolved("Megatron-DeepSpeed", sharding="fsdp").grad_reduce_dtype == "fp16"
    assert resolved("Megatron-Core").grad_reduce_dtype is None                  # lowered as fp32 main_grad
    assert resolved("DeepSpeed", sharding="fsdp", grad_reduce_dtype="fp32").grad_reduce_dtype == "fp32"
    line = next(x for x in (DATA / "runs_dev.jsonl").read_text().splitlines() if "529.6B-n640" in x)
    record = lower_record(json.loads(line))
    assert record.columns[C["grad_reduce_bytes"]] == 2


def test_a_field_the_execution_sets_is_not_overridden_by_its_stack():
    spec = resolved("TorchTitan", fused_kernels=True, selective_policy="megatron")
    assert (spec.fused_kernels, spec.selective_policy, spec.fsdp_copy_out) == (True, "megatron", True)


def test_unknown_virtual_stages_follow_the_stack_rule():
    notes = []
    # Llama 3 sec. 3.3.2: one layer per chunk, the embedding and the loss in chunks of their own: (126 + 2) / 16
    assert resolve(ExecutionSpec(framework="Meta internal", vp="unknown"), 16, 126, notes).vp == 8
    assert notes[0].startswith("vp unknown: 8") and "Llama 3" in notes[0]
    notes = []                                          # pp does not divide layers + 2: TorchTitan's default
    assert resolve(ExecutionSpec(framework="Meta internal", vp="unknown"), 16, 80, notes).vp == 2
    assert "TorchTitan" in notes[0] and "generate_split_points" in notes[0]
    assert resolved("Megatron-Core", vp="unknown").vp == 2
    notes = []
    assert resolve(ExecutionSpec(framework="DeepSpeed", vp="unknown"), 4, 80, notes).vp == 1   # no interleaving
    assert "TrainSchedule" in notes[0] and "schedule.py" in notes[0]


@pytest.mark.parametrize("framework, pp, vp, cited", [
    # Megatron-LM 23e00ed megatron/training/arguments.py lines 536-545: virtual stages need pp > 1 (p2p overlap on)
    ("Megatron-Core", 1, 1, "23e00ed megatron/training/arguments.py lines 536-545"),
    ("Megatron-Core", 2, 2, "the fewest"),
    # Megatron-LM de7dc40f88 megatron/arguments.py lines 118-121: pp > 2
    ("Megatron-DeepSpeed", 2, 1, "de7dc40f88 megatron/arguments.py lines 118-121"),
    ("Megatron-DeepSpeed", 4, 2, "the fewest"),
    # any other stack at one stage: nothing to interleave (was "vp unknown: 2")
    ("TorchTitan", 1, 1, "pp 1 is one pipeline stage"),
    ("Meta internal", 1, 1, "pp 1 is one pipeline stage"),
])
def test_unknown_virtual_stages_are_1_where_the_stack_cannot_interleave(framework, pp, vp, cited):
    notes = []
    assert resolve(ExecutionSpec(framework=framework, vp="unknown"), pp, 32, notes).vp == vp
    assert notes[0].startswith(f"vp unknown: {vp} (") and cited in notes[0]


def test_the_llama3_rows_resolve_vp_unknown_to_one_layer_per_virtual_stage():
    line = next(x for x in (DATA / "runs_dev.jsonl").read_text().splitlines() if "405b-s8192-n8192" in x)
    record = lower_record(json.loads(line))
    assert json.loads(line)["plan"]["vp"] == "unknown" and record.stack == "meta-internal"
    assert record.columns[C["vp"]] == 8 and record.columns[C["pipeline_schedule"]] == 1     # interleaved
    assert record.columns[C["uneven_stages"]] == 1                                       # 126 layers, 128 chunks
    assert record.columns[C["embedding_loss_in_split"]] == 1
    # FP32 reduce-scatter every micro-batch (sec. 3.3.2): the BF16 gradient cast to FP32 by its own kernel,
    # read 2 B, write 4 B; the sharded gradient accumulates after the reduce-scatter
    assert record.columns[C["grad_accum_bytes"]] == 2 + 4
    assert record.columns[C["reduce_every_microbatch"]] == 1
    assert resolved("Megatron-Core").grad_accum_bytes is None         # fused into the wgrad GEMM: column 0
    assert any(note.startswith("vp unknown: 8") for note in record.notes)


def test_meta_internal_gathers_k_and_v_for_context_parallelism():
    # Llama 3 sec. 3.3.2: all-gather based CP; every other stack keeps the registry's ring attention
    assert resolved("Meta internal").cp_algorithm == "allgather"
    assert resolved("Megatron-Core").cp_algorithm is None
    line = next(x for x in (DATA / "runs_dev.jsonl").read_text().splitlines() if "405b-s131072" in x)
    assert lower_record(json.loads(line)).columns[C["cp_algorithm"]] == 2
    assert resolve(ExecutionSpec(framework="Meta internal", cp_algorithm="ring"), 16, 126).cp_algorithm == "ring"


def test_unknown_recompute_follows_the_stack_rule():
    # Llama 3 sec. 3.3.2: 8K-token pre-training without activation checkpointing; longer: the selective default
    meta = BY_NAME["meta-internal"]
    assert meta.unknown_recompute(8192)[0] == "none" and "3.3.2" in meta.unknown_recompute(8192)[1]
    assert meta.unknown_recompute(131072)[0] == "selective"
    for name in ("megatron-core", "torchtitan", "default"):
        assert BY_NAME[name].unknown_recompute(8192) == ("selective", "selective assumed")


def test_the_llama3_rows_read_recompute_unknown_as_meta_ran_it():
    rows = {json.loads(x)["id"]: json.loads(x) for x in (DATA / "runs_dev.jsonl").read_text().splitlines()
            if "llama3-paper-405b" in x}
    for name, code in (("s8192-n8192", 0), ("s8192-n16384", 0), ("s131072-n16384", 1)):   # 0 none, 1 selective
        row = rows[f"llama3-paper-405b-{name}"]
        assert row["plan"]["recompute"] == "unknown"
        record = lower_record(row)
        assert record.columns[C["recompute"]] == code
        assert any(note.startswith("recompute unknown: " + ("none" if code == 0 else "selective"))
                   for note in record.notes)


def test_the_b200_runs_read_as_megatron_core_kernels():
    """The stack parse reads the B200 text as Megatron-Core kernels (fused kernels, Megatron's selective
    recompute) launched through Megatron-LM's own arguments (overlap switches off)."""
    line = (DATA / "runs_dev.jsonl").read_text().splitlines()[0]
    record = json.loads(line)
    del record["stack"]                                   # the GPT-22B run names megatron-2021 explicitly
    del record["plan"]["wgrad_fused_accumulation"]        # and states its fused wgrads (docs/model.md §11.46)
    record["framework"] = FRAMEWORKS[9][0]
    columns = lower_record(record).columns
    assert columns[C["fused_kernels"]] == 1 and columns[C["selective_policy"]] == 0
    record["stack"] = "pytorch-fsdp"                      # an explicit stack picks the eager reading back
    explicit = lower_record(record).columns
    assert explicit[C["fused_kernels"]] == 0 and explicit[C["selective_policy"]] == 1
    # and Megatron-Core's counted MoE router kernels (kernels/lm/moe.py moe_launch_time; unused by this dense run)
    assert columns[C["moe_mem_kernels"]] == 48.0 and explicit[C["moe_mem_kernels"]] == 0.0
    differ = {name for name, i in C.items() if explicit[i] != columns[i]}
    assert differ == {"fused_kernels", "selective_policy", "overlap_grad_reduce", "overlap_param_gather",
                      "moe_mem_kernels", "moe_probs_in_experts", "loss_traffic_bytes_per_logit", "step_grad_passes",
                      "step_master_copy", "step_zero_grad", "step_grad_check", "step_grad_prescale", "embedding_dense_grad",
                      "wgrad_fused_accumulation", "attn_fa2", "fsdp1_grad_passes", "fsdp_version", "ub_communicators",
                      "host_ops_layer", "host_op_s",    # eager PyTorch's counted host issue (docs/model.md §11.59)
                      "step_host_loops", "p2p_host_sync"}   # Megatron-Core's host syncs (docs/model.md §11.64)
    assert columns[C["moe_probs_in_experts"]] == 1 and explicit[C["moe_probs_in_experts"]] == 0
    # TE's Userbuffers under tp_comm_overlap (kernels/lm/memory.py userbuffer_bytes; this run has none)
    assert columns[C["ub_communicators"]] == 12 and explicit[C["ub_communicators"]] == 0
    assert columns[C["overlap_grad_reduce"]] == 0 and columns[C["overlap_param_gather"]] == 0


@pytest.mark.parametrize("framework, overlap", [
    ("Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0", 0),   # Megatron-LM's store_true flags: off
    ("Megatron-LM", 0),
    ("NeMo (MLPerf v4.0 NVIDIA submission, 24.04)", 1),               # NeMo recipes pass them on
    ("NeMo 2.0 on Megatron-LM", 1),                                   # a recipe launcher wins over its base
    ("Megatron-Bridge 0.2 (Megatron-LM core)", 1),
    ("Megatron-Core 0.9", 1),
])
def test_megatron_overlap_switches_follow_the_launcher(framework, overlap):
    execution = resolve(ExecutionSpec(framework=framework), 1, 12)
    assert execution.stack == "megatron-core"
    want = None if overlap else False                 # None: left to the registry column's default, on (1)
    assert execution.overlap_grad_reduce is want and execution.overlap_param_gather is want


def test_megatron_lm_fsdp_keeps_fsdp2s_backward_prefetch():
    """Megatron-LM's launcher turns the distributed optimizer's overlap_param_gather off, but its FSDP2 wrapper
    prefetches the next layer in backward on its own: under sharding fsdp the switch is left to the registry's
    default (on), so the FSDP gather buffer keeps the prefetched unit, (2 c + g) x the layer's parameters for
    FSDP1-style flat buffers: one layer more of 2 bytes than (c + g) without prefetch."""
    from fastmodel.kernels.lm.memory_fsdp import fsdp_gather_buffer_bytes, max_layer_params
    from fastmodel.lm.table import row

    fsdp = resolve(ExecutionSpec(framework="Megatron-LM", sharding="fsdp"), 1, 12)
    assert fsdp.overlap_param_gather is None and fsdp.overlap_grad_reduce is False
    distopt = resolve(ExecutionSpec(framework="Megatron-LM"), 1, 12)
    assert distopt.overlap_param_gather is False          # the distributed optimizer's switch is still off
    r = row(sharding="fsdp", dp=8, grad_reduce_bytes=4)
    assert r[C["overlap_param_gather"]] == 1
    assert fsdp_gather_buffer_bytes(r) == pytest.approx((2 * 2 + 4) * max_layer_params(r), rel=1e-12)


@pytest.mark.parametrize("framework, stack", [
    ("llm-foundry (Composer, PyTorch FSDP)", "composer"),
    ("MosaicML Composer 0.17", "composer"),
    ("HF Accelerate FSDP", "accelerate"),
    ("MaxText (JAX 0.4.30, XLA)", "maxtext"),
    ("OLMo-core (PyTorch FSDP2/HSDP, torch.compile), early 2025", "torchtitan"),
    ("KempnerForge (PyTorch FSDP2 + DTensor TP, torch.compile), git 01b461a, 2026-04", "kempnerforge"),
])
def test_fsdp_and_jax_stacks_are_named_by_their_framework_text(framework, stack):
    assert profile_for(framework) == (BY_NAME[stack], None)


def test_composer_accelerate_maxtext_defaults_come_from_their_source():
    # Composer FSDPConfig: mixed_precision DEFAULT -> reduce_dtype fp32; FSDP1 flat parameters; eager model code
    composer = resolved("Composer", sharding="fsdp")
    assert (composer.grad_reduce_dtype, composer.fsdp_copy_out, composer.fused_kernels) == ("fp32", False, False)
    # Accelerate set_mixed_precision: reduce_dtype = the mixed-precision dtype
    assert resolved("Accelerate", sharding="fsdp").grad_reduce_dtype == "bf16"
    assert resolved("Accelerate", sharding="fsdp", precision="fp16").grad_reduce_dtype == "fp16"
    # MaxText base.yml: grad_dtype float32; XLA fuses element-wise ops
    maxtext = resolved("MaxText", sharding="fsdp")
    assert (maxtext.grad_reduce_dtype, maxtext.fused_kernels) == ("fp32", True)


def test_torch_compile_fuses_element_wise_kernels_unless_the_run_says_otherwise():
    assert resolved("TorchTitan", torch_compile=True).fused_kernels is True
    assert resolved("TorchTitan", torch_compile=False).fused_kernels is False      # the stack's eager default
    assert resolved("TorchTitan").fused_kernels is False
    assert resolved("TorchTitan", torch_compile=True, fused_kernels=False).fused_kernels is False
    line = next(x for x in (DATA / "runs_fsdp_public.jsonl").read_text().splitlines() if "olmo2-1b-bf16" in x)
    data = json.loads(line)
    assert data["plan"]["torch_compile"] is True and lower_record(data).columns[C["fused_kernels"]] == 1
    data["plan"]["torch_compile"] = False
    assert lower_record(data).columns[C["fused_kernels"]] == 0


def test_torchtitan_loss_is_eager_or_compiled_with_the_run_and_megatron_keeps_vocab_parallel():
    # torchtitan/components/loss.py: cross_entropy(pred.float()), wrapped in torch.compile when compile is on
    assert resolved("TorchTitan").loss_impl == "eager"
    assert resolved("TorchTitan", torch_compile=True).loss_impl == "compiled"
    assert resolved("TorchTitan", torch_compile=True, loss_impl="eager").loss_impl == "eager"
    assert resolved("Megatron-LM").loss_impl is None                             # column default: vocab-parallel
    line = next(x for x in (DATA / "runs_fsdp_public.jsonl").read_text().splitlines() if "torchtitan-pr996" in x)
    assert lower_record(json.loads(line)).columns[C["loss_impl"]] == 1           # LOSS_IMPLS eager


def test_kempnerforge_trains_a_bf16_model_with_fsdp2_and_compile_by_default():
    # KempnerForge@01b461a TrainConfig.param_dtype: bf16 (and fp8) -> the master weight dtype is torch.bfloat16;
    # build_parallel_model casts the model to it; FSDP2 reduce_dtype fp32; compile_model defaults to true
    kf = resolved("KempnerForge", sharding="fsdp")
    assert (kf.master_weights, kf.fsdp_copy_out, kf.grad_reduce_dtype, kf.fused_kernels) == (False, True, "fp32", True)
    assert resolved("KempnerForge", sharding="fsdp", torch_compile=False).fused_kernels is False
    assert resolved("TorchTitan", sharding="fsdp").master_weights is None       # FP32 master (column default 1)


def test_torchtitan_compiled_moe_blocks_with_ep_and_ac_run_eager_before_pr_1895():
    # torchtitan 022f885f34: apply_ac wraps each block, apply_compile compiles the wrapped block (fullgraph=False
    # for MoE), apply_fsdp wraps block.moe.experts when ep > 1; a graph break in an AC-wrapped block makes the
    # whole block eager (pytorch/torchtitan #1895): fused only without EP or without AC, or when the run says so
    def tt(expert_parallel, **fields):
        spec = ExecutionSpec(framework="TorchTitan", torch_compile=True, **fields)
        return resolve(spec, pp=1, layers=48, notes=notes, expert_parallel=expert_parallel)

    notes: list[str] = []
    assert tt(True, recompute="full").fused_kernels is False
    assert len(notes) == 1 and "#1895" in notes[0]
    assert tt(True, recompute="selective").fused_kernels is False
    assert tt(True, recompute="none").fused_kernels is True
    assert tt(False, recompute="full").fused_kernels is True
    assert tt(True, recompute="full", fused_kernels=True).fused_kernels is True   # post-#1895 code says so
    assert tt(True, recompute="full").loss_impl == "compiled"                     # the loss compiles on its own
    assert resolve(ExecutionSpec(framework="Megatron-LM", torch_compile=True), 1, 48,
                   expert_parallel=True).fused_kernels is True                    # other stacks: no such rule
    line = next(x for x in (DATA / "runs_moe_public.jsonl").read_text().splitlines()
                if "torchtitan-deepep-qwen3-30b-a3b-b200-n8-lbs8" in x)
    record = lower_record(json.loads(line))
    assert record.columns[C["fused_kernels"]] == 0 and record.columns[C["loss_impl"]] == 2


def test_the_base_of_a_sweep_resolves_a_fusion_that_follows_the_plans_ep_at_the_ep_given():
    # TorchTitan's eager MoE blocks hold only with ep > 1 (above); the base columns are lowered at the ep a sweep's
    # stack partition (fastmodel/lm/sweep_stack.py) or a single plan (point_columns) gives, so ep > 1 points are
    # not fused (before: a SweepError asking the spec for fused_kernels; tests/lm/test_sweep_stack_axes.py)
    from fastmodel.lm.loader import load_cluster, load_lm_model
    from fastmodel.lm.sweep import base_columns

    moe, dense, cluster = load_lm_model("qwen3-30b-a3b"), load_lm_model("llama3.1-8b"), load_cluster("dgx-b200", 1)
    titan = ExecutionSpec(framework="TorchTitan", torch_compile=True, recompute="full")
    assert base_columns(moe, cluster, titan, 64)[C["fused_kernels"]] == 1                 # ep 1: compiled, fused
    assert base_columns(moe, cluster, titan, 64, ep=8)[C["fused_kernels"]] == 0           # EP + AC: eager blocks
    stated = ExecutionSpec(framework="TorchTitan", torch_compile=True, recompute="full", fused_kernels=True)
    assert base_columns(moe, cluster, stated, 64, ep=8)[C["fused_kernels"]] == 1          # post-#1895 code says so
    no_ac = ExecutionSpec(framework="TorchTitan", torch_compile=True, recompute="none")
    assert base_columns(moe, cluster, no_ac, 64, ep=8)[C["fused_kernels"]] == 1           # no AC: always fused
    megatron = ExecutionSpec(framework="Megatron-LM", torch_compile=True, recompute="full")
    assert base_columns(moe, cluster, megatron, 64, ep=8)[C["fused_kernels"]] == 1        # no such rule
    assert base_columns(dense, cluster, titan, 64)[C["fused_kernels"]] == 1


def test_torchtitan_keys_its_deepep_kernel_count_to_the_dispatcher_code_so_flex_counts_as_deepep():
    # registry MOE_DISPATCHERS: "flex" and "deepep" share code 2, one dispatcher; the count follows the code
    spec = dict(framework="TorchTitan (FSDP2 + EP, DeepEP dispatcher)", torch_compile=False, recompute="none")
    flex = resolve(ExecutionSpec(moe_dispatcher="flex", **spec), pp=1, layers=48, expert_parallel=True)
    deepep = resolve(ExecutionSpec(moe_dispatcher="deepep", **spec), pp=1, layers=48, expert_parallel=True)
    assert flex.moe_mem_kernels == deepep.moe_mem_kernels == 33.0


def test_fms_fsdp_reduces_bf16_gradients_and_keeps_the_pytorch_fsdp_kernels():
    # fms-fsdp@7746dac get_policies -> bfSixteen (param, reduce, buffer dtype BF16); FSDP1 flat parameters
    fms = resolved("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", sharding="fsdp")
    plain = resolved("PyTorch FSDP (post-2.2 nightly)", sharding="fsdp")
    assert (fms.grad_reduce_dtype, fms.fsdp_copy_out, fms.fused_kernels, fms.attn_fa2) == ("bf16", False, False, True)
    assert plain.grad_reduce_dtype is None                # the registry's FP32 reduction, as before


def test_fms_fsdp_hsdp_replica_allreduce_moves_bf16_gradient_shards_by_hand():
    """The 7B H100 record (HSDP: 8-GPU shards, 12 replicas, 800 Gb/s per node = 12.5 GB/s per GPU): the once-per-step
    replica all-reduce of each GPU's gradient shard, P/8 elements of 2 bytes, over 12 ranks one node apart (one NIC
    each, inter_eff 0.85). Hand: the Simple ring (8.4 us + 2 passes x 12 network steps of 9.6 us, x1.5: NCCL's ring
    plateau across nodes on an H100, v2.17.1-1 tuning.cc lines 342-345) beats NCCL's tree, which moves 2 x the shard
    at 0.92 of the bus (docs/model.md §11.5): t = 2 (11/12) (2 P/8) / (12.5e9 x 0.85) + 1.5 (8.4e-6 + 24 x 9.6e-6)."""
    from fastmodel.kernels.lm.parallel import data_parallel

    line = next(s for s in (DATA / "runs_dev.jsonl").read_text().splitlines() if "llama2-7b-arch-h100" in s)
    row = lower_record(json.loads(line)).columns
    assert row[C["grad_reduce_bytes"]] == 2.0
    p = 7.0e9
    hand = 2.0 * 11.0 / 12.0 * (2.0 * p / 8.0) / (12.5e9 * 0.85) + 1.5 * (8.4e-6 + 24 * 9.6e-6)
    comm, exposed, after, local, _, _ = data_parallel(row, p, 10.0, 10.0, 8.0, 96.0, 1.0, 0.0, True)
    assert comm == pytest.approx(hand, rel=1e-9)
    assert local == p / 8.0
    assert after == 0.0                             # FSDP at pp = 1: its gathers are per layer, not here
    assert exposed == pytest.approx(row[C["comm_sm_share"]] * hand, rel=1e-9)    # hidden behind a long backward


def test_every_record_lowers_to_values_its_columns_accept():
    """What a stack profile sets passes the registry's check of the column (registry/validators.py), so a user can
    state the plan the profile models: every record of tests/data, lowered, is inside every column's bounds (the
    DeepSpeed stage-0 fp16 profile's 25 gradient passes were outside step_grad_passes' [0, 16])."""
    from fastmodel.registry.lm import COLUMNS
    from fastmodel.registry.validators import column_problem

    files = sorted(DATA.glob("runs_*.jsonl")) + [DATA / "recipe_plans.jsonl", DATA / "dgxc_plans.jsonl"]
    problems, lowered = [], 0
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                record = lower_record(json.loads(line), str(path))
                lowered += 1
                problems += [f"{record.id}: {column.name}: {problem}" for column, value in
                             zip(COLUMNS, record.columns.reshape(-1)) if (problem := column_problem(column, float(value)))]
    assert lowered > 1000 and problems == []
