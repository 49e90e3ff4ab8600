"""fastmodel/lm/rules.py: a refused plan names the rule it breaks, its fields and their values (A10)."""

import pytest

from fastmodel.errors import PlanError
from fastmodel.lm.rules import check_plan, expert_mesh_refusal, locate_plan_error, plan_status
from fastmodel.lm.table import row
from fastmodel.registry.lm import STATUS_CODES

MOE = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=32000, seq_len=4096, moe_experts=64,
           moe_topk=2, moe_ffn=14336, n_gpus=32, tp=2, dp=16, global_batch=64)


@pytest.mark.parametrize("plan, said", [
    (dict(ep=32, etp=2), "plan etp = 2 x ep = 32 = 64 does not divide tp x cp x dp = 2 x 1 x 16 = 32"),
    (dict(ep=64, etp=0), "etp = tp = 2 (plan etp unset) x ep = 64 = 128 does not divide tp x cp x dp"),
    (dict(ep=32, etp=1, moe_experts=48), "model.moe_experts = 48 is not divisible by plan ep = 32"),
])
def test_experts_not_divisible_names_the_rule_its_fields_and_values(plan, said):
    """The status keeps its one code (kernels and sweeps unchanged); the one-configuration message says which of
    its two rules broke: the experts over ep, or the expert mesh etp x ep against tp x cp x dp."""
    column = row(**{**MOE, **plan})
    assert plan_status(column[:, None])[0] == STATUS_CODES["experts_not_divisible"]
    with pytest.raises(PlanError, match="experts_not_divisible") as info:
        check_plan(column)
    assert said in str(info.value)
    assert ("moe_experts" in said) != ("does not divide" in str(info.value))


@pytest.mark.parametrize("plan, broken", [
    (dict(ep=32, etp=1), False),     # 1 x 32 divides 2 x 1 x 16 = 32; 64 / 32 experts
    (dict(ep=16, etp=0), False),     # etp = tp = 2: 2 x 16 = 32 divides 32
    (dict(ep=32, etp=2), True),      # 2 x 32 = 64 does not divide 32
    (dict(ep=32, etp=1, moe_experts=48), True),       # 48 / 32 is no whole number
    (dict(ep=32, etp=1, moe_experts=48, global_batch=63), True),    # an earlier rule broken too: still found
    (dict(ep=1, moe_experts=0), False),                # a dense model has no expert mesh
])
def test_expert_mesh_refusal_applies_the_one_structural_rule_alone(plan, broken):
    """``validate``'s one applied rule (fastmodel.lm.rules.expert_mesh_refusal, the rule table's
    ``expert_mesh_broken``): by hand, experts divisible by ep and etp x ep dividing tp x cp x dp; found whatever
    rule before it the configuration breaks (global_batch 63 is batch_not_divisible first in the table)."""
    column = row(**{**MOE, **plan})
    error = expert_mesh_refusal(column, "f.jsonl:4: plan")
    assert (error is not None) == broken
    if broken:
        assert error.rule == "experts_not_divisible" and str(error).startswith(
            "f.jsonl:4: plan: illegal plan (experts_not_divisible): ")


def test_a_model_file_whose_experts_ep_does_not_divide_is_named_with_its_field(tmp_path):
    """Audit 22.B2: the model file is at fault (100 experts, ep 32), so the line names it and the field; a
    built-in model, a dict or a spec, or the other expert rule (the plan's etp x ep), keep the plan's label."""
    error = PlanError("experts_not_divisible", "model.moe_experts = 100 is not divisible by plan ep = 32 (...)",
                      "plan 'tp2.ep32.etp1'")
    model = tmp_path / "e100.toml"
    assert str(locate_plan_error(error, str(model))).startswith(
        f"{model}: model.moe_experts, plan 'tp2.ep32.etp1': illegal plan (experts_not_divisible): model.moe_experts "
        "= 100")
    assert str(locate_plan_error(error, model, "t.toml: task.plan")).startswith(
        f"{model}: model.moe_experts, t.toml: task.plan: illegal plan")
    for given in ("qwen3-30b-a3b", {"layers": 2}, None):
        assert locate_plan_error(error, given) is error
    mesh = PlanError("experts_not_divisible", "plan etp = 2 x ep = 32 = 64 does not divide ...", "plan 'tp2.ep32'")
    assert locate_plan_error(mesh, str(model)) is mesh


def test_devices_not_divisible_names_n_gpus():
    """A10: -s gb300-nvl72 --nodes 1 -p tp8.pp4 said no n_gpus; now n_gpus and tp x pp x cp with values."""
    with pytest.raises(PlanError, match=r"n_gpus = 4 is not a multiple of tp x pp x cp = 8 x 4 x 1 = 32"):
        check_plan(row(**{**MOE, "moe_experts": 0, "n_gpus": 4, "tp": 8, "pp": 4, "dp": 1}))


#: a DeepSeek-V2 (4-layer) run of runs_dev_b200.jsonl: 160 experts top-6, tp 1, dp 8, ep 8, etp 1, alltoall
DEEPSEEK_V2 = "simumax-b200-deepseekv2_tp1_ep8_pp1_dp8_l4_mbc4_cef"


@pytest.mark.parametrize("block, change, said", [
    ("plan", {"ep": 7}, "plan: illegal plan (experts_not_divisible): model.moe_experts = 160 is not divisible by "
                        "plan ep = 7"),
    ("plan", {"ep": 16}, "plan: illegal plan (experts_not_divisible): plan etp = 1 x ep = 16 = 16 does not divide "
                         "tp x cp x dp = 1 x 1 x 8 = 8"),
    ("model", {"moe_topk": 200}, "model.moe_topk: 200 exceeds moe_experts 160"),
    ("plan", {"moe_dispatcher": "bogus"}, "plan.moe_dispatcher: Input should be 'alltoall', 'allgather'"),
])
def test_bad_moe_input_is_one_line_naming_file_field_and_rule_exit_2(tmp_path, block, change, said):
    """Issue 22, bad input: an expert mesh that does not multiply out, experts that EP does not divide, a top-k
    above the expert count, an unknown dispatcher: ``fastmodel run -m record.json`` prints one line naming the
    file, the field and the rule, and exits 2."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from fastmodel.cli import main

    lines = (Path(__file__).resolve().parents[1] / "data" / "runs_dev_b200.jsonl").read_text().splitlines()
    record = next(json.loads(line) for line in lines if DEEPSEEK_V2 in line)
    record[block].update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(record))
    result = CliRunner().invoke(main, ["run", "-m", str(path)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"error: {path}: ") and said in result.output, result.output


def test_layers_not_divisible_names_the_layers_the_degrees_and_where_to_allow_it():
    """Walk of issues 22-23: `run -m deepseek-v3 ... -p pp8.ep64` said "layers not divisible by pp x vp
    (execution.uneven_stages = true allows it)" though run takes no execution; DeepSeek-V3's 61 layers divide by
    no pp > 1. The reason gives the numbers, the degrees that divide and where uneven_stages is set."""
    with pytest.raises(PlanError, match="layers_not_divisible") as info:
        check_plan(row(**{**MOE, "layers": 61, "n_gpus": 16, "tp": 1, "pp": 8, "dp": 2, "ep": 1}))
    assert str(info.value).endswith(
        "model.layers = 61 is not divisible by pp x vp = 8 x 1 = 8 (pp x vp dividing them: 1, 61); "
        "execution.uneven_stages = true allows it (run's -x uneven_stages=true or --execution FILE, a sweep file's "
        "[execution] table, execution= in Python, or a run record's plan block)"), str(info.value)
    with pytest.raises(PlanError, match=r"pp x vp = 4 x 2 = 8 \(pp x vp dividing them: 1, 2, 3, 4, 6, 12\)"):
        check_plan(row(**{**MOE, "layers": 12, "n_gpus": 4, "tp": 1, "pp": 4, "vp": 2, "dp": 1, "ep": 1}))



@pytest.mark.parametrize("global_batch, micro_batch, code", [(48, 8, "schedule_not_runnable"), (64, 1, "ok"),
                                                             (32, 8, "ok"), (3, 1, "too_few_microbatches")])
def test_interleaved_micro_batches_not_a_multiple_of_pp_is_refused(global_batch, micro_batch, code):
    """docs/model.md §11.45: Megatron-Core's interleaved schedule refuses m mod pp != 0 (before core_r0.10 by its
    divisibility check, since then by 0 < m mod N < pp with N = microbatch_group_size_per_vp_stage = pp by
    default). pp 4, vp 2, dp 1: m = global_batch / micro_batch = 6 (refused), 64 and 4 (run), 3 (< pp)."""
    dense = {**MOE, "moe_experts": 0, "moe_topk": 0, "moe_ffn": 0, "n_gpus": 4, "tp": 1, "pp": 4, "vp": 2, "dp": 1,
             "global_batch": global_batch, "micro_batch": micro_batch}
    column = row(**dense)
    assert plan_status(column[:, None])[0] == STATUS_CODES[code]
    if code == "schedule_not_runnable":            # m = 48 / 8 = 6, 6 mod 4 = 2
        with pytest.raises(PlanError, match="schedule_not_runnable") as info:
            check_plan(column)
        assert "6 micro-batches (global_batch / (micro_batch x dp) = 48 / (8 x 1)) is not a multiple of pp = 4" \
            in str(info.value)
        assert "(stacks on PyTorch's ScheduleInterleaved1F1B, e.g. torchtitan, run any m that its rounds divide)" \
            in str(info.value)
        assert plan_status(row(**{**dense, "vp": 1})[:, None])[0] == 0      # 1F1B runs m = 6 on pp 4
        # PyTorch's ScheduleInterleaved1F1B (the TorchTitan profile sets the column) runs m = 6 on pp 4
        assert plan_status(row(**{**dense, "interleave_any_microbatches": 1})[:, None])[0] == 0


@pytest.mark.parametrize("global_batch, rounds, code", [(48, 1, "ok"), (72, 2, "schedule_not_runnable"),
                                                        (80, 2, "ok"), (64, 2, "ok")])
def test_interleave_any_microbatches_refuses_what_pytorch_refuses(global_batch, rounds, code):
    """docs/model.md §11.45: under interleave_any_microbatches (TorchTitan) the rule is PyTorch's
    ScheduleInterleaved1F1B.__init__ (pytorch@00722e6): number_of_rounds = max(1, m // pp), ValueError when
    m % number_of_rounds != 0. pp 4, vp 2, dp 1, micro_batch 8: m = 6 -> 1 round, runs; m = 9 -> 9 // 4 = 2
    rounds, 9 mod 2 = 1, refused; m = 10 -> 2 rounds, runs; m = 8 -> 2 rounds, runs. Megatron-Core's rule (the
    column at 0) refuses 6, 9 and 10 (not multiples of 4) and runs 8."""
    dense = {**MOE, "moe_experts": 0, "moe_topk": 0, "moe_ffn": 0, "n_gpus": 4, "tp": 1, "pp": 4, "vp": 2, "dp": 1,
             "global_batch": global_batch, "micro_batch": 8}
    m = global_batch // 8
    assert max(1, m // 4) == rounds
    column = row(**{**dense, "interleave_any_microbatches": 1})
    assert plan_status(column[:, None])[0] == STATUS_CODES[code]
    megatron = "ok" if m % 4 == 0 else "schedule_not_runnable"
    assert plan_status(row(**dense)[:, None])[0] == STATUS_CODES[megatron]
    if code == "schedule_not_runnable":
        with pytest.raises(PlanError, match="schedule_not_runnable") as info:
            check_plan(column)
        assert ("9 micro-batches (global_batch / (micro_batch x dp) = 72 / (8 x 1)) is not a multiple of the number "
                "of rounds max(1, floor(m / pp)) = 2 (pp = 4)") in str(info.value)
        assert "ScheduleInterleaved1F1B" in str(info.value)


def test_a_fused_accumulation_beside_an_accumulation_pass_is_refused_by_the_rule_table():
    """docs/model.md §11.46: wgrad_fused_accumulation charges the main-gradient read inside the weight-gradient GEMM
    and grad_accum_bytes a pass of its own; both at once charge the traffic twice, so the table refuses the pair
    (a single configuration: PlanError; a sweep crossing the two axes: the status, never a crash) and either
    alone is legal, grad_accum_bytes = 0 beside the fusion too."""
    dense = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=32000, seq_len=4096, n_gpus=8, tp=8,
                 global_batch=8)
    twice = STATUS_CODES["wgrad_accumulation_twice"]
    assert plan_status(row(**dense, wgrad_fused_accumulation=1, grad_accum_bytes=6.0).reshape(-1, 1))[0] == twice
    for legal in (dict(wgrad_fused_accumulation=1), dict(grad_accum_bytes=6.0),
                  dict(wgrad_fused_accumulation=1, grad_accum_bytes=0.0)):
        assert plan_status(row(**dense, **legal).reshape(-1, 1))[0] == 0, legal
    with pytest.raises(PlanError, match=r"illegal plan \(wgrad_accumulation_twice\): wgrad_fused_accumulation with "
                                        r"grad_accum_bytes > 0"):
        check_plan(row(**dense, wgrad_fused_accumulation=1, grad_accum_bytes=10.0))


def test_a_sweep_crossing_the_two_accumulations_keeps_the_status():
    from fastmodel.lm.sweep import lm_sweep

    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=1,
                  axes={"plan": ["tp8"], "grad_accum_bytes": [0.0, 6.0], "wgrad_fused_accumulation": [False, True]})
    status = ds.status.squeeze()
    assert int(status.sel(grad_accum_bytes=6.0, wgrad_fused_accumulation=True)) == STATUS_CODES[
        "wgrad_accumulation_twice"]
    assert int(status.where(status.grad_accum_bytes == 0.0, 0).sum() + status.sel(
        grad_accum_bytes=6.0, wgrad_fused_accumulation=False)) == 0
