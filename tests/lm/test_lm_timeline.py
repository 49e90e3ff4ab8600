"""Per-op timeline of the real-world model (fastmodel/lm/timeline.py, docs/model.md §11.12)."""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.lm.timeline import KINDS, STREAMS, timeline
from fastmodel.registry.lm import COLUMN_INDEX

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDS = {r.id: r for r in read_records(DATA / "runs_dev.jsonl")}


def _total(tl, stream, kind=None):
    on = tl.stream == STREAMS.index(stream)
    if kind is not None:
        on &= tl.kind == KINDS.index(kind)
    return float(np.sum(tl.end[on] - tl.start[on]))


@pytest.mark.parametrize("record_id", sorted(RECORDS))
def test_the_timeline_ends_at_the_predicted_step_and_adds_up_to_the_breakdown(record_id):
    columns = RECORDS[record_id].columns
    r = {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}
    tl = timeline(columns)
    assert tl.end.max() == pytest.approx(r["step_time"], rel=1e-9)
    assert np.all(tl.end >= tl.start)
    # compute ops on one stream never overlap
    on = tl.stream == 0
    order = np.argsort(tl.start[on])
    assert np.all(tl.start[on][order][1:] >= tl.end[on][order][:-1] - 1e-9 * r["step_time"])
    compute = r["time_gemm"] + r["time_attention"] + r["time_memory_bound"]
    drawn = sum(_total(tl, "compute", k) for k in ("gemm", "attention", "memory_bound", "recompute", "head"))
    assert drawn == pytest.approx(compute, rel=1e-9)
    assert _total(tl, "compute", "bubble") == pytest.approx(r["pipeline_bubble"], rel=1e-9, abs=1e-12)
    assert _total(tl, "compute", "optimizer") == pytest.approx(r["time_optimizer"], rel=1e-9, abs=1e-12)
    exposed = sum(r[f"exposed_{g}"] for g in ("tp", "cp", "ep", "pp", "dp"))
    assert tl.exposed() == pytest.approx(exposed, rel=1e-6, abs=1e-9 * r["step_time"])
    assert _total(tl, "compute", "overhead") == pytest.approx(columns[COLUMN_INDEX["step_overhead_s"]], abs=1e-9)


def test_a_pipeline_splits_its_bubble_between_warm_up_and_cool_down_and_orders_the_micro_batches():
    record = next(r for r in RECORDS.values() if r.columns[COLUMN_INDEX["pp"]] > 1)
    tl = timeline(record.columns)
    bubbles = [(s, e) for n, s, e in zip(tl.names, tl.start, tl.end) if n.startswith("pipeline")]
    assert len(bubbles) == 2 and bubbles[0][0] == 0.0
    heads = [s for n, s in zip(tl.names, tl.start) if n.endswith("LM head fwd")]
    pp, dp = (record.columns[COLUMN_INDEX[k]] for k in ("pp", "dp"))
    micro_batches = record.columns[COLUMN_INDEX["global_batch"]] / (record.columns[COLUMN_INDEX["micro_batch"]] * dp)
    assert len(heads) == round(micro_batches)
    assert heads == sorted(heads)
    assert bubbles[0][1] <= heads[0] and bubbles[1][0] >= heads[-1]
    assert pp > 1


def test_cli_draws_the_timeline_of_a_real_world_model_and_of_a_run_record(tmp_path):
    out = tmp_path / "tl.png"
    result = CliRunner().invoke(main, ["plot", "timeline", "-m", "llama3.1-8b", "-s", "dgx-h100", "-t",
                                       "llm-pretrain", "--nodes", "1", "-p", "tp2", "-o", str(out), "--aggregate"])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
    record = tmp_path / "run.json"
    line = next(line for line in (DATA / "runs_dev.jsonl").read_text().splitlines() if "torchtitan" in line)
    record.write_text(line)
    out2 = tmp_path / "record.svg"
    result = CliRunner().invoke(main, ["plot", "timeline", "-m", str(record), "-o", str(out2), "--window", "0:0.5"])
    assert result.exit_code == 0, result.output
    assert "ops:compute:gemm" in out2.read_text()


def test_cli_timeline_errors_are_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["plot", "timeline", "-m", "llama3.1-8b", "-s", "dgx-h100", "-t",
                                       "llm-pretrain", "--nodes", "1", "-p", "tp3", "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert "tp3" in result.output and len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(main, ["plot", "timeline", "-m", "llama3.1-8b", "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert not (tmp_path / "x.png").exists()


def test_every_op_kind_has_its_own_colour():
    from fastmodel.kernels.streams import CATEGORY_NAMES
    from fastmodel.plot import style as S
    from fastmodel.plot.timeline import KIND_COLOURS, KIND_LABELS

    for kinds in (KINDS, CATEGORY_NAMES):          # each engine's op kinds: a colour and a label each
        assert set(kinds) <= set(KIND_COLOURS) and set(kinds) <= set(KIND_LABELS)
        colours = [KIND_COLOURS[k] for k in kinds] + [S.PALETTE["exposed"]]
        assert len(set(colours)) == len(colours)


@pytest.mark.parametrize("plan", ["tp8.pp4", "tp4.cp2", "dp"])
def test_point_columns_build_the_point_a_sweep_evaluates(plan):
    """``fastmodel run`` and the timeline build one configuration in Python (lm_sweep.point_columns); the grid
    kernel builds the same point from its index: every result must agree."""
    from fastmodel.lm.api import config_values, evaluate_lm

    direct = config_values("llama3.1-70b", "dgx-h100", "llm-pretrain", plan=plan, num_nodes=8)
    grid = evaluate_lm("llama3.1-70b", "dgx-h100", "llm-pretrain", plan=plan, num_nodes=8)
    for name in ("step_time", "mfu", "exposed_dp", "memory_per_device"):
        assert direct[name] == pytest.approx(float(grid[name]), rel=1e-12), name
    assert direct["fits_memory"] == bool(grid["fits_memory"])


def test_with_the_loss_in_the_split_a_middle_stage_is_drawn_with_its_full_layers_and_no_head():
    # Llama 3 405B, 126 layers, PP 16, the embedding and the loss each take a layer's slot (Llama 3 sec. 3.3.2):
    # (126 + 2) / 16 = 8 layers on a middle rank, 7 + the LM head on the last; the head (2 x 8192 x 16384 x
    # 128256 / TP 8 FLOPs per sequence forward) is lighter than a layer, so the busiest rank is a middle one
    columns = RECORDS["llama3-paper-405b-s8192-n8192"].columns
    tl = timeline(columns)
    assert not any("LM head" in n for n in tl.names)
    assert tl.per_layer
    first = {n.split(" ")[1] for n in tl.names if n.startswith("mb0 L") and " fwd" in n}
    assert len(first) == 8


def test_per_projection_tp_draws_its_extra_backward_all_reduces_in_the_backward():
    # KempnerForge's DTensor plan without sequence parallelism (kernels/lm/passes.py tp_pass_factors): two
    # row-parallel all-reduces forward as Megatron's, and one backward all-reduce per column-parallel input,
    # q, k, v, gate, up = 5 for the forward's 2; full recompute replays the forward's 2 in the backward:
    # TP backward : forward = (5 + 2) / 2
    import json

    from fastmodel.lm.records import lower_record

    line = next(x for x in (DATA / "runs_fsdp_public.jsonl").read_text().splitlines() if "n2-tp2-fsdp1" in x)
    data = json.loads(line)
    data["plan"]["sequence_parallel"] = False
    columns = lower_record(data).columns
    tl = timeline(columns)
    tp = [(n, e - s) for n, s, e in zip(tl.names, tl.start, tl.end) if n.endswith(" tp") and "LM head" not in n]
    forward = sum(d for n, d in tp if " fwd " in n)
    backward = sum(d for n, d in tp if " bwd " in n)
    assert columns[COLUMN_INDEX["recompute"]] == 2 and forward > 0
    assert backward / forward == pytest.approx(7.0 / 2.0, rel=1e-9)
