"""Run records (RUNS.md) validated like spec files: types, bounds, invariants, one-line errors (issue 25 item 1)."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.lm.records import lower_record, measured_step_time, read_records, with_measurements
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).resolve().parents[1] / "data"
LINES = (DATA / "runs_dev.jsonl").read_text().splitlines()
GPT22B = json.loads(LINES[0])                      # GPT-22B, 8 A100s, tp 8, no framework
LLAMA3 = json.loads(next(line for line in LINES if "llama3-paper-405b-s8192-n8192" in line))


def changed(record=GPT22B, **paths):
    """A copy of ``record`` with ``block__field=value`` set (``value`` DELETE removes the field)."""
    data = copy.deepcopy(record)
    for path, value in paths.items():
        *blocks, key = path.split("__")
        node = data
        for block in blocks:
            node = node[block]
        if value is DELETE:
            node.pop(key)
        else:
            node[key] = value
    return data


DELETE = object()

REFUSED = [
    ({"plan__tp": DELETE}, "plan.tp: required field missing"),
    ({"plan__sequence_parallel": "false"}, "plan.sequence_parallel: Input should be a valid boolean"),
    ({"plan__sequence_paralel": True}, "plan.sequence_paralel: unknown field (did you mean 'sequence_parallel'?)"),
    ({"framwork": "NeMo"}, "framwork: unknown field (did you mean 'framework'?)"),
    ({"model__layers": 47.5}, "model.layers: Input should be a valid integer"),
    ({"model__layers": 48.0}, "model.layers: Input should be a valid integer"),
    ({"plan__micro_batch": 4.0}, "plan.micro_batch: Input should be a valid integer"),
    ({"plan__tp": "8"}, "plan.tp: Input should be a valid integer"),
    ({"model__kv_heads": 128}, "model.kv_heads: 128 kv heads must divide the 64 query heads"),
    ({"model__kv_heads": 48}, "model.kv_heads: 48 kv heads must divide the 64 query heads"),
    ({"model__moe_experts": 8, "model__moe_topk": 9, "model__moe_ffn": 1024}, "model.moe_topk: 9 exceeds moe_experts 8"),
    ({"plan__sharding": "fsdp", "plan__shard_degree": 2}, "plan.shard_degree: 2 must divide dp = 1"),
    ({"plan__vp": 2}, "plan.vp: vp = 2 needs pp > 1"),
    ({"plan__vp": "unknown"}, "plan.vp: vp = 'unknown' needs pp > 1"),
    ({"plan__vp": "x"}, "plan.vp: expected a whole number >= 1 or \"unknown\""),
    ({"plan__global_batch": 8}, "plan.global_batch: 8 != micro_batch*dp*grad_accum = 4*1*1 (RUNS.md invariant)"),
    ({"plan__dp": 2}, "plan.dp: tp*pp*cp*dp = 16 but system.n_gpus = 8 (RUNS.md invariant)"),
    ({"plan__dp": DELETE, "plan__tp": 3}, "plan.tp: tp*pp*cp = 3 does not divide system.n_gpus = 8"),
    ({"system__hbm_bytes": 1}, "system.hbm_bytes: 1 is outside [100000000, 1e+14] bytes"),
    ({"system__peak_flops_bf16": 1e300}, "system.peak_flops_bf16: 1e+300 is outside [1000000000, 1e+18] FLOP/s"),
    ({"plan__sharding": "fdsp"}, "(did you mean 'fsdp'?)"),
    ({"plan__optimizer": "moun (block matrices)"}, "(did you mean 'muon'?)"),   # matched on its first word
    ({"plan__recompute": "partial_layers", "plan__recompute_num_layers": 49},
     "plan.recompute_num_layers: 49 exceeds the model's 48 layers"),
    ({"plan__activation_offload_layers": 49}, "plan.activation_offload_layers: 49 exceeds the model's 48 layers"),
    ({"plan__activation_offload_modules": ["attn_proj"]}, "plan.activation_offload_modules: attn_proj needs core_attn"),
    ({"plan__activation_offload_modules": ["gdp_qkv"]}, "plan.activation_offload_modules: Input should be "
     "'attn_norm', 'qkv_linear', 'core_attn', 'attn_proj', 'mlp_norm', 'expert_fc1' or 'moe_act' (got 'gdp_qkv')"),
    ({"plan__activation_offload_modules": ["core_attn"], "plan__activation_offload_layers": 4},
     "plan.activation_offload_modules: fine-grained activation offloading cannot run with layer-level CPU offloading"),
    ({"plan__recompute": "selective", "plan__recompute_modules": ["moe"],
      "plan__activation_offload_modules": ["moe_act"]},
     "plan.activation_offload_modules: expert_fc1 and moe_act cannot be offloaded while selective recompute lists moe"),
    # review15 #4: a stack's own permutation bytes in both passes or neither (docs/model.md §11.61)
    ({"plan__moe_permute_fwd_bytes": 38}, "plan.moe_permute_bwd_bytes: moe_permute_fwd_bytes > 0 needs "
     "moe_permute_bwd_bytes > 0 too"),
    ({"plan__moe_permute_bwd_bytes": 60}, "plan.moe_permute_fwd_bytes: moe_permute_bwd_bytes > 0 needs "
     "moe_permute_fwd_bytes > 0 too"),
    ({"plan__recompute_fraction": 5}, "plan.recompute_fraction: 5 is outside [0, 1]"),
    ({"plan__recompute_fraction": -0.5}, "plan.recompute_fraction: -0.5 is outside [0, 1]"),
    ({"plan__micro_batch": DELETE, "plan__global_batch": 4, "plan__grad_accum": 3},
     "plan.grad_accum: global_batch 4 is not a multiple of dp*grad_accum = 3"),
    # fp8 on a device without an FP8 peak is the rule table's no_fp8, a PlanError as in sweeps
    # (tests/lm/test_rules_agree.py), not a record error
    ({"stack": "megatron-cor"}, "stack: Input should be"),
    ({"model": [1]}, "model: expected an object (RUNS.md model block), got list"),
    ({"system": DELETE}, "system: required block missing"),
]


@pytest.mark.parametrize("change, message", REFUSED, ids=[m.split(":")[0] for _, m in REFUSED])
def test_a_bad_field_is_one_line_naming_file_line_block_and_field(change, message):
    with pytest.raises(SpecError) as caught:
        lower_record(changed(**change), "runs.jsonl:3")
    text = str(caught.value)
    assert text.startswith("runs.jsonl:3: ") and "\n" not in text
    assert message in text.replace("1000000000000000000", "1e+18"), text


def test_informational_fields_of_runs_md_are_accepted_and_not_read():
    info = changed(source_ref="paper", assumptions=["a"], flags=["b"], notes="c", tier=2, tier2_reasons=["d"],
                   reliability="A", workload="pretrain", parallelism_kind="tp_pp_dp", model__activation="gelu",
                   system__network="IB", system__inter_node_bw_assumed=True, plan__recompute_detail="every layer",
                   plan__recompute_modules=["core_attn"], plan__replicate_degree=1)
    np.testing.assert_array_equal(lower_record(info).columns, lower_record(GPT22B).columns)


def test_null_means_absent():
    a = lower_record(changed(plan__micro_batch=None, plan__grad_accum=None, plan__global_batch=8))
    b = lower_record(changed(plan__micro_batch=DELETE, plan__grad_accum=DELETE, plan__global_batch=8))
    np.testing.assert_array_equal(a.columns, b.columns)
    assert a.columns[C["micro_batch"]] == 1 and "micro_batch 1 assumed" in "; ".join(a.notes)


def test_a_missing_plan_tp_is_reported_as_plan_tp_by_every_command(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(GPT22B) + "\n" + json.dumps(changed(id="other")) + "\n"
                    + json.dumps(changed(plan__tp=DELETE)) + "\n")
    result = CliRunner().invoke(main, ["calibrate", str(path), "--folds", "0"])   # a miss too, as validate's
    assert result.exit_code == 0
    assert f"warning: refused, left out of the fit: {path}:3: plan.tp: required field missing" in result.stderr
    result = CliRunner().invoke(main, ["validate", str(path)])       # a miss: validate never stops a file
    assert result.exit_code == 0 and f"refused (a miss): {path}:3: plan.tp: required field missing" in result.stderr
    single = tmp_path / "r.json"
    single.write_text(json.dumps(changed(plan__tp=DELETE)))
    result = CliRunner().invoke(main, ["run", "-m", str(single)])
    assert result.exit_code == 2 and result.output.strip() == f"error: {single}: plan.tp: required field missing"


def test_a_schedule_name_may_carry_a_remark():
    record = changed(LLAMA3, plan__vp=2, plan__pipeline_schedule="interleaved 1F1B, sync P2P (VP_SIZE=2)")
    assert lower_record(record).columns[C["pipeline_schedule"]] == 1


def test_an_optimizer_is_its_first_word_and_a_remark():
    # docs/model.md §11.7 "Muon": "muon ..." is Muon on the layers' matrices and AdamW on the rest, whatever the
    # remark says (the modded-nanogpt records' text); the first word alone picks the optimizer
    text = "muon (block matrices) + adamw (tied embedding / lm_head)"
    assert lower_record(changed(plan__optimizer=text)).columns[C["optimizer"]] == 4
    assert lower_record(changed(plan__optimizer="adamw (muon-free)")).columns[C["optimizer"]] == 0


def test_a_schedule_that_contradicts_the_virtual_stages_is_refused():
    with pytest.raises(SpecError, match=r"plan\.pipeline_schedule: 1f1b runs one stage per rank"):
        lower_record(changed(LLAMA3, plan__vp=2, plan__pipeline_schedule="1f1b"))


def test_unmodelled_plan_fields_are_named_in_the_notes():
    # fp8_recipe is modelled (§11.19) on an FP8 run; on a bf16 one it is ignored with a note (tests/lm/test_lowering.py);
    # cuda_graphs is modelled (§11.37, tests/lm/test_cuda_graphs_time.py): no note
    # moe_grouped_gemm is modelled (§11.57, tests/lm/test_moe_sequential.py): its column, no note
    record = lower_record(changed(plan__cuda_graphs=True, plan__fsdp_forward_prefetch=True, plan__precision="fp8",
                                  plan__fp8_recipe="delayed", plan__moe_grouped_gemm=False))
    notes = "; ".join(record.notes)
    assert "plan.fsdp_forward_prefetch = True" in notes and "cuda_graphs" not in notes and "fp8_recipe" not in notes
    assert "moe_grouped_gemm" not in notes and record.columns[C["moe_grouped_gemm"]] == 0
    assert lower_record(changed(plan__moe_grouped_gemm=True)).columns[C["moe_grouped_gemm"]] == 1
    assert lower_record(changed()).columns[C["moe_grouped_gemm"]] == 1           # unstated: grouped
    assert record.columns[C["fp8_recipe"]] == 1 and record.columns[C["cuda_graphs"]] == 1
    assert "names no recipe" in "; ".join(lower_record(changed(plan__precision="fp8",
                                                               plan__fp8_recipe="e4m3 everywhere")).notes)
    assert "cuda_graphs" not in "; ".join(lower_record(changed(plan__cuda_graphs=False)).notes)


def test_measured_is_checked_only_when_read():
    for measured in ([1], "fast", {"step_time_s": -1.0}, {"step_time_s": "1.4"}, {}):
        record = lower_record(changed(measured=measured), "runs.jsonl:7")     # prediction never reads it
        with pytest.raises(SpecError) as caught:
            measured_step_time(record)
        assert str(caught.value).startswith("runs.jsonl:7: measured") and GPT22B["id"] in str(caught.value)
    assert measured_step_time(lower_record(GPT22B)) == GPT22B["measured"]["step_time_s"]


def test_validate_and_calibrate_name_the_records_they_skip(tmp_path):
    lines = LINES[:6] + [json.dumps(changed(measured={"step_time_s": float("inf")}))]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines).replace("Infinity", "1e999") + "\n")
    kept, skipped = with_measurements(read_records(path), path)
    assert len(kept) == 6 and len(skipped) == 1
    assert skipped[0].startswith(f"skipped: {path}:7: measured.step_time_s: run '{GPT22B['id']}'")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0 and "skipped:" in result.output and "step time by all runs" in result.output
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text(lines[-1].replace("Infinity", "1e999") + "\n")
    result = CliRunner().invoke(main, ["validate", str(only_bad)])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith(f"error: {only_bad}: measured")


def test_fsdp_rate_limiter_is_a_column_and_fsdp1_mixed_precision_is_noted_where_not_modelled():
    # docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter": limit_all_gathers reaches its column
    # (the registry default, 1, is the limiter on), so a record stating it is no longer noted
    on = lower_record(changed(plan__fsdp_limit_all_gathers=True, plan__zero_detail="ZeRO-1, buckets 5e8"))
    np.testing.assert_array_equal(on.columns, lower_record(GPT22B).columns)
    off = lower_record(changed(plan__fsdp_limit_all_gathers=False))
    assert off.columns[C["fsdp_limit_all_gathers"]] == 0 and "fsdp_limit_all_gathers" not in "; ".join(off.notes)
    post = lower_record(changed(plan__fsdp_backward_prefetch="post"))
    assert post.columns[C["fsdp_backward_prefetch"]] == 1
    # param_dtype fp32 (MixedPrecision left None on FP32 parameters): 4-byte gathers, not modelled -> noted;
    # the 16-bit dtypes are what the model gathers, and buffer_dtype is informational (module buffers not counted)
    fp32 = lower_record(changed(plan__fsdp_param_dtype="fp32", plan__fsdp_buffer_dtype="fp32"))
    assert "plan.fsdp_param_dtype = 'fp32'" in "; ".join(fp32.notes)
    assert "buffer_dtype" not in "; ".join(fp32.notes)
    bf16 = lower_record(changed(plan__fsdp_param_dtype="bf16", plan__fsdp_buffer_dtype="bf16"))
    np.testing.assert_array_equal(bf16.columns, lower_record(GPT22B).columns)
    assert "fsdp_param_dtype" not in "; ".join(bf16.notes)


@pytest.mark.parametrize("text, rotary, learned, alibi", [
    ("rotary", 1.0, 0.0, 0.0), ("RoPE (theta 500000)", 1.0, 0.0, 0.0), ("rotary (25% of head dim)", 0.25, 0.0, 0.0),
    ("learned", 0.0, 1.0, 0.0), ("absolute, learned", 0.0, 1.0, 0.0), ("ALiBi", 0.0, 0.0, 1.0), ("none", 0.0, 0.0, 0.0),
])
def test_position_embedding_text_sets_rotary_share_and_learned_table(text, rotary, learned, alibi):
    columns = lower_record(changed(model__position_embedding=text)).columns
    assert (columns[C["rotary_fraction"]], columns[C["learned_positions"]], columns[C["alibi_bias"]]) == \
        (rotary, learned, alibi)


def test_an_unknown_position_embedding_is_one_line_naming_the_field():
    with pytest.raises(SpecError, match=r"model\.position_embedding: 'sinusoid' names no position embedding"):
        lower_record(changed(model__position_embedding="sinusoid"))
    with pytest.raises(SpecError, match=r"did you mean 'rotary'"):
        lower_record(changed(model__position_embedding="rotery"))


def test_a_misspelt_block_is_named_beside_the_missing_one():
    """A hurried user's `modle` block: the missing `model` says which key looks like it (spec/records.block_missing)."""
    data = copy.deepcopy(GPT22B)
    data["modle"] = data.pop("model")
    with pytest.raises(SpecError, match=r"^runs.jsonl:3: model: required block missing \(the record has 'modle': a "
                                        r"misspelling of 'model'\?\)$"):
        lower_record(data, "runs.jsonl:3")
    del data["modle"]
    with pytest.raises(SpecError, match=r"model: required block missing$"):
        lower_record(data, "runs.jsonl:3")


def test_a_value_with_unit_text_says_records_take_plain_si_numbers():
    """`"hbm_bytes": "80 GB"` in a record (spec/record_blocks.first_error): the reason says why, not only the type."""
    with pytest.raises(SpecError) as caught:
        lower_record(changed(system__hbm_bytes="80 GB"), "runs.jsonl:3")
    assert str(caught.value) == ("runs.jsonl:3: system.hbm_bytes: Input should be a valid number (got '80 GB'); a record "
                                 "states plain numbers in SI units (bytes, FLOP/s, bytes/s, s), no unit text")
    with pytest.raises(SpecError) as caught:      # words, not a number with a unit: no such hint
        lower_record(changed(plan__global_batch="sixteen"), "runs.jsonl:3")
    assert str(caught.value).endswith("(got 'sixteen')")


def test_a_serving_record_among_run_records_is_named_as_one():
    """`fastmodel calibrate` on a file with a serving record: not "plan: required block missing"."""
    serving = json.loads((DATA / "serve_dev_load.jsonl").read_text().splitlines()[0])
    with pytest.raises(SpecError, match=r"^runs.jsonl:2: record: a serving record \(SERVE_RUNS.md\) where training run "
                                        r"records \(RUNS.md\) are read; serving records go to fastmodel serve"):
        lower_record(serving, "runs.jsonl:2")
