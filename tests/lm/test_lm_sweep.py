"""Real-world sweeps: grid construction, the rule table and plan enumeration (docs/model.md §11.9)."""

import re

import numpy as np
import pytest

from fastmodel.errors import PlanError, SpecError, SweepError
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.rules import check_plan, plan_status
from fastmodel.lm.sweep import all_meshes, lm_sweep
from fastmodel.lm.table import table
from fastmodel.registry.lm import STATUS_CODES

AXES = {"num_nodes": [4, 8], "plan": ["tp8.pp2", "tp4.pp4", "tp8", "tp3", "tp16"], "micro_batch": [1, 2]}


@pytest.fixture(scope="module")
def grid():
    return lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", axes=AXES)


def test_grid_has_one_dimension_per_axis_with_labels(grid):
    assert grid.step_time.dims == ("num_nodes", "plan", "micro_batch")
    assert list(grid.plan.values) == ["tp8.pp2", "tp4.pp4", "tp8", "tp3", "tp16"]
    assert grid.step_time.attrs["units"] == "s"


def test_illegal_points_keep_their_reason_and_nan(grid):
    tp3 = grid.sel(plan="tp3")
    assert (tp3.status == STATUS_CODES["devices_not_divisible"]).all()      # 32 and 64 GPUs
    assert np.isnan(tp3.step_time).all()

def test_tp_across_nodes_is_a_legal_plan_priced_on_the_scale_out_network(grid):
    """TP 16 on 8-GPU DGX H100 nodes spans 2 NVLink domains: legal (Megatron runs it), every point evaluated,
    with more exposed TP communication per step than TP 8 under the same other degrees (docs/model.md §11.18)."""
    tp16, tp8 = grid.sel(plan="tp16"), grid.sel(plan="tp8")
    assert (tp16.status == 0).all() and np.isfinite(tp16.step_time).all()
    assert (tp16.comm_tp > tp8.comm_tp).all()


def test_tp16_on_slow_nics_runs_slower_than_tp8():
    """Llama 3.1 8B on 2 DGX H100 nodes with 100 Gb/s NICs (inter_bw 12.5 GB/s per GPU), no TP overlap: TP 16 moves
    its activations through the NICs at 8 x 12.5 x 0.85 GB/s per domain and its step is longer than TP 8 x DP 2,
    whose only inter-node traffic is the (overlapped) gradient reduction."""
    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=2,
                  axes={"plan": ["tp8", "tp16"], "inter_bw": [12.5e9]}, execution={"tp_comm_overlap": False},
                  global_batch=64)
    assert (ds.status == 0).all()
    tp8, tp16 = (float(ds.step_time.sel(plan=p).squeeze()) for p in ("tp8", "tp16"))
    assert tp16 > tp8


def test_a_run_record_with_tp_across_nodes_is_answered():
    """A run record whose tp (16) exceeds its gpus_per_node (8) is predicted, not refused: Narayanan et al.'s
    GPT 18.4B on 256 A100s re-planned from tp 8 x dp 32 to tp 16 x dp 16 pays more TP communication."""
    import json
    from pathlib import Path

    from fastmodel.lm.api import record_values

    lines = (Path(__file__).parents[1] / "data" / "runs_dev.jsonl").read_text().splitlines()
    record = next(r for r in map(json.loads, lines) if r["id"] == "narayanan2021_t1-GPT-18.4B-n256-tp8pp1-full")
    tp8, _ = record_values(record)
    record["plan"].update(tp=16, dp=16, grad_accum=8)     # micro-batch 8 (SC21 run_table_1.sh): 1024 / (8 x 16)
    tp16, _ = record_values(record)
    assert record["system"]["gpus_per_node"] == 8
    assert np.isfinite(tp16["step_time"]) and tp16["step_time"] > 0.0
    assert tp16["comm_tp"] > tp8["comm_tp"] > 0.0


def test_every_grid_point_equals_the_same_configuration_evaluated_alone(grid):
    for nodes in (4, 8):
        for mb in (1, 2):
            for plan in ("tp8.pp2", "tp4.pp4"):
                n = nodes * 8
                alone = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=nodes,
                                 axes={"plan": [plan], "micro_batch": [mb]})
                point = grid.sel(num_nodes=nodes, plan=plan, micro_batch=mb)
                assert float(point.step_time) == float(alone.step_time.squeeze())
                assert int(point.status) == int(alone.status.squeeze())
                if int(point.status) == 0:
                    assert float(point.tokens_per_s) * float(point.step_time) == pytest.approx(2048 * 8192)
                    # the grid's own per-GPU throughput: tokens / step / (dp x tp x pp) devices
                    assert float(point.tokens_per_s_per_gpu) * n == pytest.approx(float(point.tokens_per_s))


def test_rule_table_codes_match_hand_checks():
    # the fifth: tp 16 on 8-GPU domains, legal (§11.18)
    # the sixth: 2 micro-batches on 4 stages, interleaved (vp 2, schedule code 1); the eighth the same under 1F1B
    params = table(8, layers=80, heads=[64, 64, 64, 64, 64, 64, 36, 64], kv_heads=8, n_gpus=64,
                   tp=[8, 3, 8, 8, 16, 8, 8, 8], pp=[2, 1, 3, 2, 1, 4, 1, 4], cp=1,
                   dp=[4, 64 / 3, 64 / 24, 4, 4, 2, 8, 2], vp=[1, 1, 1, 1, 1, 2, 1, 1],
                   pipeline_schedule=[0, 0, 0, 0, 0, 1, 0, 0],
                   global_batch=[64, 64, 64, 6, 64, 4, 64, 4], micro_batch=1, domain_size=8)
    status = plan_status(params)
    assert list(status) == [0, STATUS_CODES["devices_not_divisible"], STATUS_CODES["devices_not_divisible"],
                            STATUS_CODES["batch_not_divisible"], 0,
                            STATUS_CODES["too_few_microbatches"], STATUS_CODES["heads_not_divisible"], 0]


def test_1f1b_with_fewer_micro_batches_than_stages_runs_with_the_longer_bubble():
    """Megatron's 1F1B caps its warm-up at min(p - rank - 1, m) (schedules.py), so m < p runs: the step is the
    same closed form, m micro-batch times plus the (p - 1)-stage fill and drain."""
    base = dict(layers=24, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=50304, seq_len=1024,
                n_gpus=4, tp=1, pp=4, dp=1, micro_batch=1, domain_size=8)
    two, eight = evaluate_table(table(1, **base, global_batch=2)), evaluate_table(table(1, **base, global_batch=8))
    assert plan_status(table(1, **base, global_batch=2))[0] == 0
    # the same fill and drain (p - 1 = 3 average micro-batch times) and the same time per micro-batch
    assert two["pipeline_bubble"][0] == pytest.approx(eight["pipeline_bubble"][0], rel=1e-12)
    assert two["pipeline_bubble"][0] > 0.0

    def per_micro_batch(r, m):
        return (r["step_time"][0] - r["pipeline_bubble"][0] - r["time_optimizer"][0] - r["exposed_pp"][0]
                - r["exposed_dp"][0]) / m
    assert per_micro_batch(two, 2) == pytest.approx(per_micro_batch(eight, 8), rel=1e-12)


def test_single_configuration_raises_the_first_broken_rule():
    column = table(1, layers=80, pp=3, n_gpus=24, tp=8, dp=1, heads=64, kv_heads=8, global_batch=24)[:, 0]
    with pytest.raises(PlanError, match="layers_not_divisible"):
        check_plan(column)


def test_plan_all_enumerates_no_mesh_the_rule_table_refuses_for_its_shape():
    """Every mesh of ``plan = "all"`` passes the rule table's shape rules (heads, layers, experts,
    sequence) at every GPU count it divides; and of a wider candidate set, each mesh the rule table
    refuses for its shape is one ``all_meshes`` leaves out."""
    import itertools

    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep import base_columns
    from fastmodel.registry.lm import COLUMN_INDEX

    model, cluster = load_lm_model("mixtral-8x7b"), load_cluster("dgx-h100", 8)
    meshes = all_meshes(model, cluster, 64)
    assert {"tp": 8, "pp": 2, "cp": 1, "ep": 4, "etp": 0} in meshes
    assert {"tp": 8, "pp": 2, "cp": 1, "ep": 4, "etp": 1} in meshes      # MoE parallel folding
    shape_rules = {STATUS_CODES[k] for k in ("heads_not_divisible", "layers_not_divisible", "experts_not_divisible",
                                             "sequence_not_divisible")}
    base = base_columns(model, cluster, load_execution({}), 4096)
    candidates = [dict(zip(("tp", "pp", "cp", "ep"), m)) for m in
                  itertools.product((1, 2, 3, 4, 8, 16, 64), (1, 2, 3, 4, 5, 8, 64), (1, 2, 3), (1, 2, 3, 4, 8, 16))]
    refused = 0
    for mesh in candidates:
        if 64 % (mesh["tp"] * mesh["pp"] * mesh["cp"]) or (64 // (mesh["tp"] * mesh["pp"] * mesh["cp"])) % mesh["ep"]:
            continue
        column = base.copy()
        for key, value in {**mesh, "dp": 64 // (mesh["tp"] * mesh["pp"] * mesh["cp"])}.items():
            column[COLUMN_INDEX[key]] = value
        status = int(plan_status(column[:, None])[0])
        if status in shape_rules:
            refused += 1
            assert mesh not in [{k: m[k] for k in mesh} for m in meshes], (mesh, status)
    # the candidate set does exercise the shape rules: tp 64 (32 heads), pp 64 (32 layers), ep 16 (8 experts)
    assert refused >= 5


def test_moe_and_mla_models_evaluate():
    ds = lm_sweep("deepseek-v3", "gb200-nvl72", "llm-pretrain", num_nodes=64,
                  axes={"plan": ["tp4.ep32", "tp2.ep64"]}, execution={"precision": "fp8"})
    ok = ds.status == 0
    assert bool(ok.any())
    assert np.isfinite(ds.step_time.where(ok)).any()
    assert float(ds.comm_ep.where(ok).max()) > 0


def test_bad_axes_are_one_line_errors():
    with pytest.raises(SweepError, match="did you mean 'micro_batch'"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"micro_bach": [1]})
    with pytest.raises(SweepError, match="empty"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"tp": []})
    with pytest.raises(SweepError, match="not a degree"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tq8"]})
    with pytest.raises(SpecError, match="MAD-Max model"):
        lm_sweep("llama2-70b", "dgx-h100", "llm-pretrain")


@pytest.mark.parametrize("axis, values", [("micro_batch", [1, 1.5]), ("tp", [2.5]), ("global_batch", [1024.5]),
                                          ("vp", [1.5]), ("eval_iters", [0.5])])
def test_a_count_axis_takes_whole_numbers(axis, values):
    """Hurried-user walk: ``micro_batch = [1.5]`` in a sweep file ran, every point batch_not_divisible ("every
    point of the sweep is illegal"), where ``-x micro_batch=1.5`` is refused as not an integer; a fractional
    degree, batch or count is now refused by name, the first offending value named."""
    with pytest.raises(SweepError, match=rf"^axes\.{axis}: every value must be a whole number \(got {values[-1]}\)$"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={axis: values})


@pytest.mark.parametrize("axis, values, said", [
    ("hbm_bytes", ["80GB", 80e9], "80000000000.0 is the same value as '80GB'"),
    ("sharding", ["distopt", "zero1"], "'zero1' and 'distopt' are one point to the model, code 1: an alias or "
                                       "modelled alike"),
    ("sharding", ["fsdp", "hsdp"], "'hsdp' and 'fsdp' are one point to the model, code 3: an alias or modelled alike"),
    ("precision", ["bf16", "fp16"], "'fp16' and 'bf16' are one point to the model, code 0: an alias or modelled "
                                    "alike"),
    ("cuda_graphs", [False, "none"], "'none' is the same value as False"),
])
def test_one_value_under_two_spellings_is_a_duplicate(axis, values, said):
    """Hurried-user walk: the duplicate check compared the values as written, so ``hbm_bytes = ['80GB', 80e9]``
    (80 GB = 8e10 bytes) or two names of one code (SHARDING_CODES: distopt and zero1 are both 1) made the same
    point twice; now compared as the numbers evaluated."""
    with pytest.raises(SweepError, match=rf"^axes\.{axis}: {re.escape(said)} \(duplicate point\)$"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={axis: values})


def test_the_duplicate_check_is_linear_in_the_axis_length():
    """The first check compared every pair: a 100,000-value range axis (the size refusal's test) took minutes."""
    import time

    from fastmodel.lm.sweep import _axis_values

    start = time.perf_counter()
    _axis_values("micro_batch", list(range(1, 100_001)), None, None, 8)
    assert time.perf_counter() - start < 20
    with pytest.raises(SweepError, match=r"'full' is the same value as 'full'"):   # the Python API's axes too
        _axis_values("recompute", ["full", "full"], None, None, 8)


def test_a_code_axis_takes_names_not_numbers():
    """Hurried-user walk: ``recompute = ["full", 1]`` ran (1 is selective's code) where ``-x recompute=1`` is
    refused; a coded axis takes the names of its code table."""
    with pytest.raises(SweepError, match=r"^axes\.recompute: 1 is not a name; choose one of none, selective, full, "
                                         r"partial_layers$"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"recompute": ["full", 1]})


def test_a_count_axis_accepts_whole_floats():
    """A log range makes floats (1.0, 2.0, 4.0): whole values stay accepted."""
    from fastmodel.lm.sweep import _axis_values

    labels, numeric = _axis_values("micro_batch", [1.0, 2.0, 4.0], None, None, 8)
    assert numeric.tolist() == [1.0, 2.0, 4.0]


def test_throughput_identity_holds_for_every_legal_point(grid):
    ok = grid.status == 0
    product = (grid.tokens_per_s * grid.step_time).where(ok)
    assert np.allclose(product.values[np.isfinite(product.values)], 2048 * 8192)


def test_table_path_and_grid_path_agree():
    ds = lm_sweep("llama3-8b", "dgx-a100-80gb", "llm-pretrain", num_nodes=8, axes={"plan": ["tp2.pp2"]},
                  execution={"sharding": "fsdp"})
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep import base_columns
    from fastmodel.registry.lm import COLUMN_INDEX

    base = base_columns(load_lm_model("llama3-8b"), load_cluster("dgx-a100-80gb", 8),
                        load_execution({"sharding": "fsdp"}), 2048)
    for key, value in {"tp": 2, "pp": 2, "dp": 16, "shard_degree": 16}.items():
        base[COLUMN_INDEX[key]] = value
    alone = evaluate_table(base[:, None])
    assert float(ds.step_time.squeeze()) == pytest.approx(alone["step_time"][0], rel=1e-12)


def test_a_column_axis_outside_the_registry_bounds_is_refused():
    from fastmodel.errors import SweepError
    from fastmodel.lm.sweep import lm_sweep

    with pytest.raises(SweepError, match=r"axes.uneven_stages: 2 is outside \[0, 1\]"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"uneven_stages": [0, 2]})
    with pytest.raises(SweepError, match=r"axes.gemm_eff_16: 1.5 is outside \[0.05, 1\]"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"gemm_eff_16": [1.5]})
    # a unit string is named as typed beside the number it parsed to
    with pytest.raises(SweepError, match=r"axes.hbm_bytes: 2e\+15 is outside \[100000000, 1e\+14\] bytes "
                                         r"\(given as '2 PB'\)$"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"hbm_bytes": ["80 GB", "2 PB"]})


def test_an_unknown_dispatcher_in_a_sweep_file_is_one_line_exit_2(tmp_path):
    """Issue 22, bad input in a sweep: an axis naming an unknown moe_dispatcher is refused before any point is
    evaluated, in one line naming the file, the field and the choices (with the nearest name), exit 2."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "moe.toml"
    path.write_text('model = "mixtral-8x7b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\n'
                    'plan = ["tp2.ep2"]\nmoe_dispatcher = ["alltoall", "deepeep"]\n')
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out.nc")])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"{path}: axes.moe_dispatcher: unknown value 'deepeep'" in result.output
    assert "(did you mean 'deepep'?)" in result.output and not (tmp_path / "out.nc").exists()


def test_a_plan_in_any_case_or_with_spaces_is_the_same_mesh_and_dp_is_named():
    """`TP8.PP4`, `tp8 pp4`, `tp8, pp4` are tp8.pp4 (the MAD-Max plans take any case too); `dp8` says dp fills."""
    from fastmodel.lm.sweep import parse_mesh

    for text in ("TP8.PP4", "tp8 pp4", "tp8, pp4", "Tp8,Pp4"):
        assert parse_mesh(text) == parse_mesh("tp8.pp4") == {"tp": 8, "pp": 4, "cp": 1, "ep": 1, "etp": 0}
    assert parse_mesh("DP") == parse_mesh("dp")
    with pytest.raises(SweepError, match=r"^plan 'tp8.dp8': 'dp8': dp is not given, it fills the cluster"):
        parse_mesh("tp8.dp8")
    with pytest.raises(SweepError, match=r"'pq4' is not a degree like tp8"):
        parse_mesh("tp8.pq4")


def test_a_scalar_axis_is_a_one_point_axis_as_fastmodel_sweep_documents():
    """``fastmodel.sweep``'s docstring: an axis is "a list, a scalar, or a range". A scalar number of nodes or a
    single plan string is the one-point list (it crashed with a TypeError on ``len(4)`` before)."""
    import fastmodel as fm

    scalar = fm.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"num_nodes": 4, "plan": "tp2.pp2"})
    listed = fm.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"num_nodes": [4], "plan": ["tp2.pp2"]})
    assert scalar.step_time.sizes == listed.step_time.sizes == {"num_nodes": 1, "plan": 1}
    assert float(scalar.step_time.item()) == float(listed.step_time.item()) > 0


def test_a_range_axis_is_expanded_as_fastmodel_sweep_documents():
    import fastmodel as fm

    ranged = fm.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain",
                      axes={"num_nodes": {"start": 2, "stop": 4, "num": 2}, "plan": "tp2.pp2"})
    assert list(ranged.num_nodes.values) == [2, 4]
    with pytest.raises(SweepError):
        fm.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"num_nodes": {"start": 2, "stop": 4}})


def test_an_execution_value_no_point_can_run_is_one_line():
    """Walk of issues 22-23: an axis value the execution spec refuses at every point was evaluated as another
    value with status ok (moe_dispatcher 'deepep_ll' as all-to-all; moe_a2a_overlap 'dualpipe' under 1F1B as
    batch-level overlap, step times equal to the 'batch' column's). It is now refused before any work, with the
    reason the same value gets in the [execution] table. moe_a2a_overlap 'dualpipe'
    under another schedule, fixed in the execution or of a schedule axis, stays in the grid as
    schedule_not_runnable (the project's rule for illegal sweep points; polish2 item 4), never batch overlap."""
    moe = ("qwen3-30b-a3b", "dgx-h100", "llm-pretrain")
    with pytest.raises(SweepError, match=r"^axes\.moe_dispatcher: 'deepep_ll' is DeepEP's low-latency decode kernels"):
        lm_sweep(*moe, axes={"plan": ["tp2.ep8"], "moe_dispatcher": ["alltoall", "deepep_ll"]})
    runnable = STATUS_CODES["schedule_not_runnable"]
    fixed = lm_sweep(*moe, axes={"plan": ["tp2.pp2.ep8"], "moe_a2a_overlap": ["none", "batch", "dualpipe"]})
    assert fixed.status.sel(moe_a2a_overlap="dualpipe").item() == runnable
    assert (fixed.status.sel(moe_a2a_overlap=["none", "batch"]) != runnable).all()
    assert np.isnan(fixed.step_time.sel(moe_a2a_overlap="dualpipe").item())
    crossed = lm_sweep(*moe, axes={"plan": ["tp2.pp2.ep8"], "pipeline_schedule": ["1f1b", "gpipe"],
                                   "moe_a2a_overlap": ["dualpipe"]})
    assert (crossed.status == runnable).all()       # every point illegal: the all-illegal grid of any sweep
    with pytest.raises(SpecError, match="execution.moe_dispatcher: 'deepep_ll'"):   # the table's own refusal
        lm_sweep(*moe, axes={"plan": ["tp2.ep8"]}, execution={"moe_dispatcher": "deepep_ll"})


def test_an_interleaved_schedule_axis_with_vp_unset_is_refused_as_run_refuses_it():
    """Review 5 F6 (there at 255afc0c): ``pipeline_schedule = ["1f1b", "interleaved"]`` with vp unset ran its
    interleaved points as status 0 (160.437 s against 160.622 s for 1F1B, Megatron-DeepSpeed zero1 tp2.pp4), which
    ``run -x pipeline_schedule=interleaved`` refuses; with vp > 1 (or "unknown") in the spec it runs."""
    spec = {"framework": "Megatron-DeepSpeed", "precision": "bf16", "sharding": "zero1"}
    axes = {"plan": ["tp2.pp4"], "pipeline_schedule": ["1f1b", "interleaved"]}
    with pytest.raises(SweepError, match=r"^axes\.pipeline_schedule: pipeline_schedule 'interleaved' needs vp > 1"):
        lm_sweep("llama2-13b", "dgx-a100-80gb", "llm-pretrain", num_nodes=4, axes=axes, execution=spec)
    axes["pipeline_schedule"] = ["interleaved"]
    ds = lm_sweep("llama2-13b", "dgx-a100-80gb", "llm-pretrain", num_nodes=4, axes=axes, execution={**spec, "vp": 2})
    assert (ds.status == 0).all()


def test_dualpipe_overlap_runs_where_the_grid_runs_dualpipe():
    """The overlap axis is accepted beside a DualPipe schedule (the execution's, or one value of a schedule axis):
    there it hides the all-to-all as batch-level overlap does under 1F1B."""
    moe = ("qwen3-30b-a3b", "dgx-h100", "llm-pretrain")
    ds = lm_sweep(*moe, num_nodes=8, axes={"plan": ["tp2.pp2.ep8"], "moe_a2a_overlap": ["none", "dualpipe"]},
                  execution={"pipeline_schedule": "dualpipe"})
    assert (ds.status == 0).all()
    hidden = ds.exposed_ep.sel(moe_a2a_overlap="dualpipe").item()
    assert hidden < ds.exposed_ep.sel(moe_a2a_overlap="none").item() == ds.comm_ep.sel(moe_a2a_overlap="none").item()
    crossed = lm_sweep(*moe, num_nodes=8, axes={"plan": ["tp2.pp2.ep8"], "pipeline_schedule": ["1f1b", "dualpipe"],
                                                "moe_a2a_overlap": ["none", "dualpipe"]})
    assert crossed.exposed_ep.sel(pipeline_schedule="dualpipe", moe_a2a_overlap="dualpipe").item() == hidden


def test_a_sweep_file_whose_framework_names_no_stack_says_so_once(tmp_path):
    """Records and `fastmodel run` note a framework text that names no stack profile (stacks.profile_for); a sweep
    file's ``[execution] framework`` got the default profile silently. It prints the same note, once per sweep,
    on stderr; a framework naming a stack prints none."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.lm.stacks import profile_for

    note = profile_for("FooTrainer")[1]
    assert note and "names no known stack" in note
    for framework, expected in (("FooTrainer", 1), ("Megatron-Core", 0)):
        path = tmp_path / f"{framework}.toml"
        path.write_text(f'model = "llama3-70b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[execution]\n'
                        f'framework = "{framework}"\n[axes]\nnum_nodes = [4]\nplan = ["tp8.pp4"]\nmicro_batch = [1, 2]\n')
        run = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / f"{framework}.nc")],
                                 catch_exceptions=False)
        assert run.exit_code == 0, run.output
        assert run.stderr.count(f"note: {note}") == expected and run.stderr.count("note:") == expected, run.stderr


def test_a_task_with_a_madmax_plan_runs_the_mesh_given_to_it():
    """Coverage walk: the built-in tasks llm-pretrain-fsdp (``fsdp/ddp``) and llm-moe-pretrain (``tp,ddp/ddp``) carry
    MAD-Max plan strings for the MAD-Max engine; a real-world model refused them even with a mesh given (``-p ep8``,
    a sweep's plan axis: "give one with --plan"). The task's plan is now refused only when it would be read. Both
    tasks say 2,048 sequences, as llm-pretrain: the same step as llm-pretrain's at the same mesh."""
    from click.testing import CliRunner

    import fastmodel
    from fastmodel.cli import main
    from fastmodel.errors import SpecError

    ds = fastmodel.evaluate("llama3.1-8b", "dgx-h100", "llm-pretrain-fsdp", plan="tp2", num_nodes=1)
    same = fastmodel.evaluate("llama3.1-8b", "dgx-h100", "llm-pretrain", plan="tp2", num_nodes=1)
    assert float(ds.step_time) == float(same.step_time) > 0
    grid = fastmodel.sweep(model="qwen3-30b-a3b", system="dgx-h100", task="llm-moe-pretrain",
                           axes={"plan": ["dp", "ep8"], "num_nodes": [1]})
    assert (grid.status.values == 0).all()
    with pytest.raises(SpecError, match=r"^llm-pretrain-fsdp: task\.plan: 'fsdp/ddp' is a MAD-Max plan \(DENSE/EMB\)"):
        fastmodel.evaluate("llama3.1-8b", "dgx-h100", "llm-pretrain-fsdp", num_nodes=1)
    result = CliRunner().invoke(main, ["run", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--nodes", "1", "-t",
                                       "llm-moe-pretrain", "-p", "ep8"])
    assert result.exit_code == 0 and "step time" in result.output
    refused = CliRunner().invoke(main, ["run", "-m", "qwen3-30b-a3b", "-s", "dgx-h100", "--nodes", "1", "-t",
                                        "llm-moe-pretrain"])
    assert refused.exit_code == 2 and "task.plan: 'tp,ddp/ddp' is a MAD-Max plan" in refused.output


def test_a_gpu_without_a_device_file_is_noted_once_by_the_sweep():
    """Hurried-user walk: a system file's misspelt ``gpu = "H100-SXM-80G"`` swept on generic efficiencies without
    a word, where ``fastmodel run`` notes it; the sweep prints run's note once (run_notes)."""
    from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
    from fastmodel.lm.sweep_plan import LMSweepPlan
    from fastmodel.spec.devices import no_device_note

    model, execution = load_lm_model("llama3-8b"), load_execution(None)
    typo = load_cluster({"kind": "cluster", "name": "t", "gpu": "H100-SXM-80G", "num_nodes": 1, "gpus_per_node": 8,
                         "peak_flops_bf16": "989 TFLOP/s", "hbm_bytes": "80 GB", "hbm_bw_bytes_s": "3350 GB/s",
                         "intra_node_bw_bytes_s_per_gpu": "450 GB/s", "inter_node_bw_bytes_s_per_gpu": "50 GB/s"})
    plan = LMSweepPlan(model, typo, execution, 64, {"micro_batch": [1]})
    assert plan.run_notes == (no_device_note("H100-SXM-80G"),)
    assert "did you mean 'h100-sxm-80gb'?" in plan.run_notes[0]
    assert LMSweepPlan(model, load_cluster("dgx-h100"), execution, 64, {"micro_batch": [1]}).run_notes == ()
    assert plan.dataset_attrs()["notes"] == plan.run_notes[0]          # the Python API's Dataset keeps it too
    assert "notes" not in LMSweepPlan(model, load_cluster("dgx-h100"), execution, 64,
                                      {"micro_batch": [1]}).dataset_attrs()
