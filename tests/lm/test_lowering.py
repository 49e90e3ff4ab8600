"""Specs lower straight to columns (issue 21 item 2): one function for sweeps and run records."""

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.loader import load_cluster, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.lm.records import lower_record
from fastmodel.lm.sweep import base_columns, point_columns
from fastmodel.lm.table import encode
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import COLUMNS
from tests.data_records import record_by_id

EXECUTIONS = [
    ExecutionSpec(),
    ExecutionSpec(framework="TorchTitan (FSDP2)", sharding="fsdp", recompute="full", sequence_parallel=False),
    ExecutionSpec(framework=None, sharding="fsdp", precision="fp16", recompute="partial_layers"),
    ExecutionSpec(framework="PyTorch 1.10 FSDP", sharding="hsdp", shard_degree=2, grad_reduce_dtype="bf16"),
    ExecutionSpec(stack="deepspeed", vp=2, micro_batch=2, tp_comm_overlap=True, optimizer="sgd",
                  recompute="partial_layers", recompute_num_layers=8),
]


@pytest.mark.parametrize("model_name, cluster_name", [("llama3.1-8b", "dgx-h100"), ("deepseek-v3", "dgx-h100"),
                                                      ("llama3.1-70b", "dgx-a100-40gb")])
@pytest.mark.parametrize("execution", EXECUTIONS, ids=range(len(EXECUTIONS)))
def test_a_spec_and_the_run_record_describing_it_lower_to_the_same_columns(model_name, cluster_name, execution):
    model, cluster = load_lm_model(model_name), load_cluster(cluster_name, 2)
    if execution.precision == "fp8" and not cluster.peak_flops_fp8:
        pytest.skip("no FP8 peak")
    mesh = Mesh(tp=2, pp=2, dp=cluster.n_gpus // 4)
    record = {"id": "r", "framework": execution.framework, "stack": execution.stack,
              "model": model.record_block(), "system": cluster.record_block(),
              "plan": execution.plan_block(tp=2, pp=2, global_batch=64 * mesh.dp)}
    got = lower(model, cluster, execution, mesh, 64 * mesh.dp)
    want = lower_record(record).columns
    if model.layers % (2 * (execution.vp if execution.vp != "unknown" else 2)):
        want[C["uneven_stages"]] = 0.0           # a record that ran says so; the spec leaves it to the rules
    np.testing.assert_array_equal(got, want)


def test_a_sweep_base_is_the_lowering_with_a_trivial_mesh():
    model, cluster = load_lm_model("llama3.1-70b"), load_cluster("dgx-h100", 4)
    execution = ExecutionSpec(sharding="fsdp")
    base = base_columns(model, cluster, execution, 512)
    np.testing.assert_array_equal(base, lower(model, cluster, execution, Mesh(dp=32), 512))
    assert (base[C["n_gpus"]], base[C["dp"]], base[C["shard_degree"]]) == (32, 32, 32)


def test_one_point_is_the_base_with_its_mesh():
    columns = point_columns("llama3.1-70b", "dgx-h100", "llm-pretrain", plan="tp8.pp4", num_nodes=16)
    assert (columns[C["tp"]], columns[C["pp"]], columns[C["dp"]], columns[C["n_gpus"]]) == (8, 4, 4, 128)


def test_every_execution_field_named_like_a_column_reaches_its_column():
    model, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    changed = {"uneven_stages": True, "sharding": "zero2", "overlap_grad_reduce": False,
               "overlap_param_gather": False, "collective_algorithm": "tree", "collective_bucket_bytes": 1e7,
               "fsdp_copy_out": True, "sequence_parallel": True, "tp_comm_overlap": True, "cp_algorithm": "alltoall",
               "micro_batch": 4, "recompute": "full", "selective_policy": "op", "activation_offload": 0.25,
               "precision": "fp8", "fp8_params": True, "optimizer": "adafactor", "fused_kernels": False,
               "flash_attention": False, "dropout": True, "moe_dispatcher": "deepep",
               "moe_a2a_overlap": "batch", "moe_fp8_dispatch": True, "moe_shared_expert_overlap": True,
               "moe_grouped_gemm": False, "moe_imbalance": 1.25, "moe_mem_kernels": 30.0, "moe_sync_issue_ops": 13.0, "param_fetch_bw": 2e10,
               "moe_permute_fwd_bytes": 38.0, "moe_permute_bwd_bytes": 60.0, "moe_combine_saved_bytes": 4.0,
               "host_ops_layer": 60.0,
               "host_op_s": 2e-5, "embedding_loss_in_split": True, "master_weights": False, "fsdp_module_wrap": True,
               "grad_accum_bytes": 10.0, "grad_allreduce": True, "reduce_every_microbatch": True, "loss_impl": "eager", "moe_probs_in_experts": True,
               "loss_traffic_bytes_per_logit": 52.0, "step_grad_passes": 1.0, "step_master_copy": True,
               "step_zero_grad": True, "step_grad_check": True, "step_grad_prescale": True, "embedding_dense_grad": True,
               "embedding_fp32_grads": "sharded", "step_host_loops": True, "p2p_host_sync": 2.0,
               "fp8_weight_transpose_per_use": True,
               "wgrad_fused_accumulation": True, "optimizer_moments": "bf16",
               "moe_act_input_fp8": True, "attn_out_e5m6": True, "norm_recompute_fp8": True,
               "muon_ns_steps": 10.0, "muon_ns_gram_square": False, "muon_distributed": False,
               "attn_fa2": True, "tp_per_projection": True, "sp_wgrad_regather": False, "fp8_recipe": "blockwise", "last_stage_layers": 3.0,
               "step_grad_copy_bytes": 4.0, "fsdp_stage_gathered": True, "bf16_layers_start": 1.0, "bf16_layers_end": 2.0,
               "cuda_graphs": "full_iteration", "cuda_graph_microbatch_buffers": True, "fsdp1_grad_passes": 2.0, "fsdp_version": 2.0,
               "eval_interval": 1000.0, "ub_communicators": 10.0, "ub_ring_exchange_rs": 1.0,
               "eval_iters": 100.0, "pp_engine_deepspeed": True, "pp_exchange_2021": 2.0, "ddp_bucket_copy": True,
               "allocator_expandable_segments": True,
               "interleave_any_microbatches": True, "fsdp_backward_prefetch": "post", "fsdp_limit_all_gathers": False,
               "fsdp_units_in_checkpoint": True, "fa_qkv_prepare": True}
    columns = [name for name in ExecutionSpec.model_fields if name in C and name not in ("vp", "pipeline_schedule",
                                                                                       "recompute_fraction",
                                                                                       "shard_degree",
                                                                                       "recompute_modules")]
    assert sorted(columns) == sorted(changed)            # a new column-named field needs a value here
    # the fused accumulation is refused beside grad_accum_bytes (docs/model.md §11.46): lowered on its own, and
    # the rest under the stack that fuses none (megatron-core's fusion would meet grad_accum_bytes there)
    apart = {"wgrad_fused_accumulation": changed.pop("wgrad_fused_accumulation")}
    for fields in (changed, apart):
        got = lower(model, cluster, ExecutionSpec(**fields, stack="default"), Mesh(dp=8), 64)
        for name, value in fields.items():
            assert got[C[name]] == float(encode(name, value)) != COLUMNS[C[name]].default, name


def test_fields_lowered_by_rule():
    model, cluster = load_lm_model("llama3.1-70b"), load_cluster("dgx-h100", 2)     # 80 layers

    def col(name, **fields):
        return lower(model, cluster, ExecutionSpec(**fields), Mesh(pp=4, dp=4), 64)[C[name]]

    assert col("grad_reduce_bytes", grad_reduce_dtype="bf16") == 2 and col("grad_reduce_bytes") == 4
    # a 16-bit model (no FP32 master): autograd's gradients have the parameters' 16 bits, unless the plan says
    assert col("grad_reduce_bytes", master_weights=False) == 2
    assert col("grad_reduce_bytes", master_weights=False, grad_reduce_dtype="fp32") == 4
    assert col("recompute_fraction", recompute="partial_layers", recompute_num_layers=20) == 0.25
    assert col("recompute_fraction", recompute="partial_layers") == 0.5
    assert col("recompute_fraction", recompute="full", recompute_fraction=0.3) == 0     # only partial_layers
    assert col("pipeline_schedule", vp=4) == 1 and col("pipeline_schedule") == 0
    assert col("vp", vp="unknown") == 2                   # Megatron-Core: the stack's rule
    assert col("shard_degree", sharding="fsdp") == 4 and col("shard_degree", sharding="hsdp", shard_degree=2) == 2
    assert col("shard_degree", sharding="distopt", shard_degree=2) == 0
    with pytest.raises(SpecError, match="execution.recompute_num_layers: 81 exceeds the model's 80 layers"):
        col("recompute_fraction", recompute="partial_layers", recompute_num_layers=81)
    # DeepSpeed's PipelineEngine has no interleaving (TrainSchedule, one chunk per stage): the stack rule gives 1
    assert col("vp", vp="unknown", stack="deepspeed") == 1


def test_an_execution_spec_is_strict():
    for bad in ({"vp": 1.0}, {"sequence_parallel": "true"}, {"stack": "nemo"}, {"recompute_fraction": 2.0},
                {"pipeline_schedule": "interleaved"}, {"vp": 2, "pipeline_schedule": "gpipe"}, {"sharding": "zero3"}):
        with pytest.raises(ValueError):
            ExecutionSpec(**bad)


def test_the_fsdp_gpt3_benchmark_record_lowers_its_source_facts():
    """aws-fsdp-gpt3-175b (runs_dev.jsonl): torch.optim.SGD at momentum 0, a model built in FP16 (no master),
    minGPT's attention and MLP linears wrapped as their own FSDP units (mrshenli/ptd_benchmark@62f8c89)."""
    import json
    from pathlib import Path

    from fastmodel.registry.lm import OPTIMIZER_CODES

    path = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
    record = next(json.loads(line) for line in path.read_text().splitlines()
                  if json.loads(line)["id"] == "aws-fsdp-gpt3-175b-s512-n128")
    columns = lower_record(record).columns
    assert columns[C["optimizer"]] == OPTIMIZER_CODES["sgd_no_momentum"] == 3
    assert (columns[C["master_weights"]], columns[C["fsdp_module_wrap"]], columns[C["grad_reduce_bytes"]]) == (0, 1, 2)


def test_recompute_modules_lower_to_the_sum_of_their_bits_under_selective_recompute_only():
    model, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    selective = ExecutionSpec(recompute="selective", recompute_modules=["mla_up_proj", "moe_act", "mla_up_proj"])
    assert lower(model, cluster, selective, Mesh(dp=8), 64)[C["recompute_modules"]] == 4 + 8
    notes: list[str] = []
    full = ExecutionSpec(recompute="full", recompute_modules=["mlp"])
    assert lower(model, cluster, full, Mesh(dp=8), 64, notes)[C["recompute_modules"]] == 0
    assert any("only read under selective recompute" in n for n in notes)
    assert lower(model, cluster, ExecutionSpec(), Mesh(dp=8), 64)[C["recompute_modules"]] == 0


def test_moe_only_fields_on_a_dense_model_are_ignored_with_a_note():
    """A dense model (moe_experts = 0) has no experts to route: model.moe_routing (or moe_max_nodes, ...) stated on
    it lowers to the same columns as without it, with a note naming the fields, as recompute_modules outside
    selective recompute does; defaults are not noted."""
    record = record_by_id("korthikanti2022_t5-GPT-22B-n8-tp8pp1-full", "runs_dev.jsonl")
    assert record["model"]["moe_experts"] == 0
    plain = lower_record(record)
    assert not any("dense model" in note for note in plain.notes)
    record["model"].update(moe_routing="round_robin", moe_max_nodes=4, moe_layer_freq=1)
    noted = lower_record(record)
    np.testing.assert_array_equal(noted.columns, plain.columns)
    assert "model.moe_max_nodes = 4, model.moe_routing = 'round_robin' ignored: a dense model (moe_experts = 0) " \
        "has no experts" in noted.notes


def test_moe_balance_on_a_dense_model_is_ignored_with_a_note():
    """A dense model has no router to balance: moe_balance stated on it lowers to the same columns as without it,
    with one note; on a model with experts it sets moe_expert_maxvio (aux_loss: 0.52) and no such note."""
    cluster, mesh = load_cluster("dgx-h100", 1), Mesh(dp=8)
    dense, moe = load_lm_model("llama3.1-8b"), load_lm_model("deepseek-v3")
    notes: list[str] = []
    got = lower(dense, cluster, ExecutionSpec(moe_balance="aux_loss"), mesh, 64, notes)
    np.testing.assert_array_equal(got, lower(dense, cluster, ExecutionSpec(), mesh, 64))
    assert notes.count("moe_balance = 'aux_loss' ignored: a dense model (moe_experts = 0) has no experts") == 1
    notes = []
    assert lower(moe, cluster, ExecutionSpec(moe_balance="aux_loss"), mesh, 64, notes)[C["moe_expert_maxvio"]] == 0.52
    assert not any("moe_balance" in note for note in notes)


def test_moe_balance_beside_a_stated_moe_imbalance_is_ignored_with_a_note():
    """A stated moe_imbalance wins over the method's figure (docs/model.md §11.14.5): moe_balance beside it lowers to
    the columns of the plan without it (moe_expert_maxvio stays 0), with one note saying so."""
    cluster, mesh, moe = load_cluster("dgx-h100", 1), Mesh(dp=8), load_lm_model("deepseek-v3")
    notes: list[str] = []
    got = lower(moe, cluster, ExecutionSpec(moe_balance="aux_loss", moe_imbalance=1.3), mesh, 64, notes)
    np.testing.assert_array_equal(got, lower(moe, cluster, ExecutionSpec(moe_imbalance=1.3), mesh, 64))
    assert got[C["moe_expert_maxvio"]] == 0.0 and got[C["moe_imbalance"]] == 1.3
    assert notes.count("moe_balance = 'aux_loss' ignored: moe_imbalance = 1.3 is stated (by the plan or its stack) "
                       "and wins (docs/model.md §11.14.5)") == 1


def test_fp8_recipe_on_a_16_bit_run_is_ignored_with_a_note():
    """fp8_recipe scales FP8 GEMM inputs, which a bf16 run has none of: a spec's recipe is noted once (the column
    is read only under precision fp8), and a record's text is not parsed (no "recipe is unstated" note); the
    record's columns equal those without the field. Under fp8 the recipe is read and not noted."""
    model, cluster, mesh = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1), Mesh(dp=8)
    notes: list[str] = []
    lower(model, cluster, ExecutionSpec(fp8_recipe="tensorwise"), mesh, 64, notes)
    assert notes.count("fp8_recipe 'tensorwise' ignored: precision 'bf16' runs no FP8 GEMMs") == 1
    notes = []
    columns = lower(model, cluster, ExecutionSpec(precision="fp8", fp8_recipe="tensorwise"), mesh, 64, notes)
    assert columns[C["fp8_recipe"]] == encode("fp8_recipe", "tensorwise") and not any("ignored" in n for n in notes)
    record = record_by_id("korthikanti2022_t5-GPT-22B-n8-tp8pp1-full", "runs_dev.jsonl")
    assert record["plan"].get("precision", "bf16") != "fp8"
    plain = lower_record(record)
    record["plan"]["fp8_recipe"] = "delayed scalng"
    noted = lower_record(record)
    np.testing.assert_array_equal(noted.columns, plain.columns)
    precision = record["plan"].get("precision", "bf16")
    assert [n for n in noted.notes if "fp8_recipe" in n] == \
        [f"fp8_recipe 'delayed scalng' ignored: precision {precision!r} runs no FP8 GEMMs"]


def test_a_stack_that_fuses_and_a_plan_that_adds_an_accumulation_pass_are_refused():
    """docs/model.md §11.46: megatron-core fuses the accumulation into the weight-gradient GEMMs (its read
    charged); a plan stating grad_accum_bytes > 0 besides would charge the main-gradient traffic twice. The
    lowering refuses it under execution.grad_accum_bytes, a run record under plan.grad_accum_bytes, each naming
    the stack; with the fusion turned off, or 0 bytes, it lowers."""
    model, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    with pytest.raises(SpecError, match=r"^s\.toml: execution\.grad_accum_bytes: .* charged twice .*\(stack "
                                        r"megatron-core sets one of the two\)$"):
        lower(model, cluster, ExecutionSpec(grad_accum_bytes=6.0), Mesh(dp=8), 64, source="s.toml")
    off = lower(model, cluster, ExecutionSpec(grad_accum_bytes=6.0, wgrad_fused_accumulation=False), Mesh(dp=8), 64)
    assert (off[C["grad_accum_bytes"]], off[C["wgrad_fused_accumulation"]]) == (6.0, 0.0)
    assert lower(model, cluster, ExecutionSpec(grad_accum_bytes=0.0), Mesh(dp=8), 64)[C["wgrad_fused_accumulation"]] == 1
    record = record_by_id("mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo", "runs_dev.jsonl")
    record["plan"]["grad_accum_bytes"] = 6.0
    with pytest.raises(SpecError, match=r"^r\.jsonl: plan\.grad_accum_bytes: .*\(stack megatron-core sets one"):
        lower_record(record, "r.jsonl")
    record["plan"]["wgrad_fused_accumulation"] = True           # both stated: the record schema refuses the pair
    with pytest.raises(SpecError, match=r"^r\.jsonl: plan\.grad_accum_bytes: .* charged twice"):
        lower_record(record, "r.jsonl")
