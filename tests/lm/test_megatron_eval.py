"""The evaluation a Megatron-LM run interleaves with its training steps (docs/model.md §11.17.1), derived by hand:
every ``eval_interval`` steps, ``eval_iters`` forward-only passes over a whole global batch (stanford-futuredata/
Megatron-LM 0bdc8181 megatron/training.py ``train`` lines 739-746, ``evaluate`` lines 809-833), so a run timed end
to end spends ``eval_iters / eval_interval x (m + pp - 1) x max(forward, host issue)`` more per step."""

import numpy as np
import pytest

from fastmodel.kernels.lm.passes import N_WORK
from fastmodel.kernels.lm.step import busiest_stage
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row, table
from fastmodel.lm.validate import predict_records
from tests.data_records import DATA, record_by_id

GPT = dict(
    layers=24,
    hidden=1024,
    ffn=4096,
    heads=16,
    kv_heads=16,
    head_dim=64,
    vocab=51200,
    seq_len=1024,
    global_batch=512,
    micro_batch=16,
    dp=8,
    n_gpus=8,
    recompute=0,
    gated_mlp=0,
)


def _results(**fields):
    return {k: float(v[0]) for k, v in evaluate_table(table(1, **{**GPT, **fields})).items()}


def test_no_schedule_no_evaluation():
    """The columns' default (0) and either one alone charge nothing: the step is the training step."""
    base = _results()
    assert base["time_eval"] == 0.0
    for fields in ({"eval_interval": 1000}, {"eval_iters": 100}):
        r = _results(**fields)
        assert r["time_eval"] == 0.0 and r["step_time"] == base["step_time"]


def test_host_bound_evaluation_by_hand():
    """A host issue of 1 s per layer forward (host_layer_s) is far above the GPU's forward: each evaluated
    micro-batch lasts the issue of its stage's layers. pp 2 (12 layers a stage), dp 4, micro-batch 16: m = 512 /
    (16 x 4) = 8 micro-batches, 8 + 2 - 1 = 9 forward slots a batch; 100 batches every 1000 steps:
    0.1 x 9 x 12 x 1 s = 10.8 s a step, added to the step time."""
    plan = dict(pp=2, dp=4, host_layer_s=1.0)
    base = _results(**plan)
    r = _results(**plan, eval_interval=1000, eval_iters=100)
    assert r["time_eval"] == pytest.approx(0.1 * 9 * 12 * 1.0, rel=1e-12)
    assert r["step_time"] - base["step_time"] == pytest.approx(10.8, rel=1e-9)


def test_gpu_bound_evaluation_is_the_forward_of_each_micro_batch():
    """One stage: the evaluation of a step is eval_iters / eval_interval x m forward passes of the stage (its
    layers' forward with their exposed forward communication, and the LM head's forward), the kernel's own
    forward (``busiest_stage``); 100 / 1000 x 4 micro-batches (512 / (16 x 8)). The forward is about a third of a
    training micro-batch here (GEMMs run once forward, twice backward), so the evaluation adds 2-5% of the step."""
    r = _results(eval_interval=1000, eval_iters=100)
    columns = row(**GPT, eval_interval=1000, eval_iters=100)
    stage_mb, _, forward, *_ = busiest_stage(columns, np.zeros(N_WORK))
    assert r["time_eval"] == pytest.approx(0.1 * 4 * forward, rel=1e-12)
    assert 0.25 < forward / stage_mb < 0.4
    assert 0.02 < r["time_eval"] / r["step_time"] < 0.05


def test_the_megablocks_rows_state_the_launch_scripts_schedule():
    """All 17 rows: --eval-iters 100 --eval-interval 1000 (exp/*/*.sh at 1647a0e), so 0.1 forward-only global batch
    a step; dMoE-Medium (micro-batch 8, 8 micro-batches) pays 0.8 forward micro-batches, its dense 356M twin
    (micro-batch 16, 4) 0.4 of twice the tokens."""
    rows = [r for r in (DATA / "runs_moe_public.jsonl").read_text().splitlines() if '"megablocks_2023"' in r]
    assert len(rows) == 17
    for line in rows:
        assert '"eval_interval": 1000' in line and '"eval_iters": 100' in line
    for run_id in ("megablocks-dmoe-medium-e64-top1-a100-n8", "megablocks-megatron-transformer-356m-a100-n8"):
        record = lower_record(record_by_id(run_id))
        predicted = predict_records([record])
        _, _, forward, *_ = busiest_stage(record.columns, np.zeros(N_WORK))
        m = 512 / (record_by_id(run_id)["plan"]["micro_batch"] * 8)
        assert predicted["time_eval"][0] == pytest.approx(0.1 * m * forward, rel=1e-9)


def test_the_exact_pipeline_path_keeps_the_evaluation_outside_the_micro_batch():
    """``fastmodel/lm/pipeline.stage_times`` splits the step back into per-micro-batch stage times: the evaluation is
    a once-per-step term like the optimizer step, so the stage times are the same with and without it."""
    from fastmodel.lm.pipeline import stage_times

    base = dict(GPT, pp=2, dp=4, micro_batch=4)
    plain = row(**base)
    evaluated = row(**base, eval_interval=1000, eval_iters=100)
    assert _results(**{**base, "eval_interval": 1000, "eval_iters": 100})["time_eval"] > 0.0
    a, b = stage_times(plain), stage_times(evaluated)
    assert np.allclose(a.forward, b.forward, rtol=1e-12) and np.allclose(a.backward, b.backward, rtol=1e-12)
