"""The word embedding's TP collectives on the first pipeline rank at pp > 1 (docs/model.md §11.44 item 1d;
kernels/lm/first_rank.py, kernels/lm/bubble_last.py ``embedding_warmup``), each against a hand derivation:
where they run and how often, the first rank's layers under an explicit layout, the step and its bubble when the
last rank leads (1F1B: the sum form holds e once; interleaved: p e) and when the first rank leads with its BF16
layers (its breakdown carries e; the step is still the sum of its parts)."""

import numpy as np
import pytest

from fastmodel.kernels.lm.bubble_last import embedding_warmup
from fastmodel.kernels.lm.first_rank import embedding_ends, embedding_stage_tp, first_rank_layers
from fastmodel.kernels.lm.memory_states import stage_layers
from fastmodel.kernels.lm.passes import (
    A_TP_EXPOSED,
    N_WORK,
    head_passes,
    layer_kinds_passes,
    layer_passes,
    layer_time,
    rank_layer_passes,
)
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.lm.engine import evaluate_table
from fastmodel.registry.lm import BREAKDOWN, PIPELINE_SCHEDULES, PRECISION_CODES
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import MICRO, SEQ, TP, H, sp_row

OVERHEAD = 20e-6
PARTS = BREAKDOWN.overlapped     # the parts that add up to step_time (registry/lm.py)


def _row(**values) -> np.ndarray:
    return sp_row(overhead=OVERHEAD, **values)


def test_the_embedding_runs_on_the_first_rank_at_pp_above_one():
    """MLPerf GPT-3 175B's shape (T = 2,048 tokens, h = 12,288, TP 4, SP): VocabParallelEmbedding reduce-scatters
    its 2 B output forward and all-gathers its gradient backward, c = AG(2 T h) + o each way (§11.44 item 1b). At
    pp 1 the head's rank holds it (layer.head_costs): nothing here. At pp 4 the first rank, e = 2c a micro-batch;
    under DualPipe the two end ranks embed half the micro-batches each, e / 2 beside the head's half. Without SP
    the forward all-reduce alone; without TP nothing."""
    c = allgather_time(_row(), 2.0 * SEQ * MICRO * H, TP, 1.0) + OVERHEAD
    assert embedding_stage_tp(_row(pp=1.0)) == (0.0, 0.0)
    assert embedding_stage_tp(_row(pp=4.0)) == pytest.approx((c, c), rel=1e-12)
    assert embedding_ends(_row(pp=4.0)) == pytest.approx((2.0 * c, 0.0, c, 2.0 * c), rel=1e-12)
    dualpipe = _row(pp=4.0, pipeline_schedule=PIPELINE_SCHEDULES["dualpipe"])
    assert embedding_ends(dualpipe) == pytest.approx((0.0, c, c, 2.0 * c), rel=1e-12)
    ar = allreduce_time(_row(), 2.0 * SEQ * MICRO * H, TP, 1.0) + OVERHEAD
    assert embedding_ends(_row(pp=4.0, sequence_parallel=0.0)) == pytest.approx((ar, 0.0, ar, ar), rel=1e-12)
    assert embedding_ends(_row(pp=4.0, tp=1.0)) == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("pp, vp, last, first", [
    (16.0, 2.0, 2.0, 3.0),   # Kimi K2 H100 'Et|(tt|)*30L': rank 0 holds stages 0 (E, 1 layer) and 16 (2)
    (8.0, 4.0, 6.0, 7.0),    # DeepSeek-V3 H100 'Et|(tt|)*30mL': stages 0, 8, 16, 24 = 1 + 2 + 2 + 2
    (8.0, 2.0, 5.0, 8.0),    # DeepSeek-V3 H100 FP8 sc V2 'Et*4|(t*4|)*14tmL': stages 0 (E, 4) and 8 (4)
])
def test_the_first_rank_of_an_explicit_layout_takes_the_uneven_splits_shortfall(pp, vp, last, first):
    """61 layers, the last rank's count stated: the other ranks' even split rounds (61 - last) / (pp - 1) up
    (layout_busiest_layers: 59 / 15 -> 4, 55 / 7 -> 8, 56 / 7 = 8); the recipes' layouts give the embedding's
    stage the layer short (the layout strings, traced by hand in the parameters)."""
    row = _row(layers=61.0, pp=pp, vp=vp, last_stage_layers=last)
    dense, moe, _ = stage_layers(row, 0.0)
    assert dense + moe == np.ceil((61.0 - last) / (pp - 1.0))
    assert first_rank_layers(row) == first
    assert first_rank_layers(_row(layers=64.0, pp=4.0)) == 16.0         # no layout: the even split


def test_the_interleaved_wait_on_the_embedding_by_hand():
    """embedding_warmup: (p - 1/v) e beyond the credited form's e / v: p = 4, v = 2: 3.5 e; v = 1 (the 1F1B sum holds
    e once) 0; rank 0's first chunk a layer lighter (the embedding in the split; 30 layers on 4 x 2 uneven
    stages) 0; 32 layers on 4 x 2 uneven stages (whole chunks) 3.5 e."""
    e = sum(embedding_stage_tp(_row(pp=4.0)))
    interleaved = PIPELINE_SCHEDULES["interleaved"]
    assert embedding_warmup(_row(pp=4.0, vp=2.0, layers=32.0, pipeline_schedule=interleaved)) == pytest.approx(
        3.5 * e, rel=1e-12)
    assert embedding_warmup(_row(pp=4.0, vp=1.0, layers=32.0)) == 0.0
    assert embedding_warmup(_row(pp=4.0, vp=2.0, layers=32.0, embedding_loss_in_split=1.0)) == 0.0
    assert embedding_warmup(_row(pp=4.0, vp=2.0, layers=30.0, uneven_stages=1.0)) == 0.0
    assert embedding_warmup(_row(pp=4.0, vp=2.0, layers=32.0, uneven_stages=1.0)) == pytest.approx(3.5 * e, rel=1e-12)


def _llama3_8b(plan, **execution):
    """Llama 3 8B on one DGX B200 node (``fastmodel run -m llama3-8b -s dgx-b200 -t llm-pretrain -p PLAN -x
    sequence_parallel=true``): 32 layers, 8 a rank at pp 4."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    train = load_train_task("llm-pretrain")
    return point_columns(load_lm_model("llama3-8b"), "dgx-b200", train, plan=train.mesh(plan),
                         execution={"sequence_parallel": True, **execution})


def _results(columns):
    return {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}


def _layer_work(columns):
    work = np.zeros(N_WORK)
    layer_passes(columns, work)
    return work


@pytest.mark.parametrize("vp", [1, 2])
def test_the_bubble_holds_the_first_ranks_embedding(vp):
    """tp2.pp4, 8 layers a rank, the last rank (8 t + t_head) the busiest: 1F1B's bubble is the sum of the ranks
    before the last, 3 x 8 t + e (the first holds the embedding, §11.43); interleaved (v = 2) the credited
    (p t_avg - t_last)/v = (3 x 8 t + e)/2 and the wait (4 - 1/2) e: 12 t + 4 e. The step is the sum of its parts,
    and the last rank's micro-batch carries no embedding."""
    from fastmodel.kernels.lm.step import busiest_stage

    columns = _llama3_8b("tp2.pp4", **({"vp": 2, "pipeline_schedule": "interleaved"} if vp == 2 else {}))
    assert columns[C["pp"]] == 4.0 and columns[C["layers"]] == 32.0 and columns[C["vp"]] == vp
    t = layer_time(_layer_work(columns))
    e = sum(embedding_stage_tp(columns))
    assert e > 0.0
    head = sum(head_passes(columns, np.zeros(N_WORK)))
    stage_mb, average, *_, share, _, _, emb = busiest_stage(columns, np.zeros(N_WORK))
    assert (share, emb) == (1.0, 0.0)
    assert stage_mb == pytest.approx(8.0 * t + head, rel=1e-12)
    assert average == pytest.approx(8.0 * t + (head + e) / 4.0, rel=1e-12)
    r = _results(columns)
    assert r["time_host_wait"] == 0.0
    bubble = 3.0 * 8.0 * t + e if vp == 1 else 12.0 * t + 4.0 * e
    assert r["pipeline_bubble"] == pytest.approx(bubble, rel=1e-9)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)


def test_a_first_rank_leading_with_bf16_layers_carries_its_embedding():
    """fp8 (tensorwise), tp2.pp4, the first 8 layers in BF16: rank 0's 8 BF16 layers outrun the last rank's 8 layers
    and head (as at tp 1, tests/lm/test_fp4_layers.py), and rank 0 also runs the embedding's reduce-scatter and
    all-gather: t_mb = 8 t16 + e, its breakdown's exposed TP m (8 x_tp16 + e) with x_tp16 a BF16 layer's exposed
    TP, and the step the sum of its parts (§11.44 item 1d, §11.39)."""
    from fastmodel.kernels.lm.step import busiest_stage

    columns = _llama3_8b("tp2.pp4", precision="fp8", fp8_recipe="tensorwise", bf16_layers_start=8)
    wide = columns.copy()
    wide[C["precision"]] = PRECISION_CODES["bf16"]
    wide[C["fp8_params"]] = 0.0
    high = _layer_work(wide)
    t16 = layer_time(high)
    e = sum(embedding_stage_tp(columns))
    stage_mb, *_, layers, share, n16, _, emb = busiest_stage(columns, np.zeros(N_WORK))
    assert (layers, share, n16) == (8.0, 0.0, 8.0) and emb == pytest.approx(e, rel=1e-15) and e > 0.0
    assert stage_mb == pytest.approx(8.0 * t16 + e, rel=1e-12)
    r = _results(columns)
    m = columns[C["global_batch"]] / (columns[C["micro_batch"]] * columns[C["dp"]])
    assert r["exposed_tp"] == pytest.approx(m * (8.0 * high[A_TP_EXPOSED] + e), rel=1e-9)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)
    # the timeline draws e as rank 0's own ops (e_F before its layers' forwards, e_B after their backwards),
    # not spread over the layers' TP ops
    from fastmodel.lm.timeline import timeline

    ops = timeline(columns)
    spans = dict(zip(ops.names, ops.end - ops.start))
    forward, backward = embedding_stage_tp(columns)
    assert spans["mb0 embedding tp fwd"] == pytest.approx(forward, rel=1e-9)
    assert spans["mb0 embedding tp bwd"] == pytest.approx(backward, rel=1e-9)


def test_the_first_and_middle_ranks_are_priced_by_layer_kind():
    """Megatron-Bridge DeepSeek-V3 H100 FP8 sc V2 (tp 2, pp 8, vp 2, 'Et*4|(t*4|)*14tmL', 3 dense layers): rank 0
    holds layers 0-3 and 32-35, 3 dense + 5 MoE and the embedding, 3 t_d + 5 t_m + e (151.9 ms); a middle rank 8
    MoE layers, 8 t_m (182.5 ms), so the middle rank leads, not rank 0 (at the average layer both were 8 t_avg,
    and e made rank 0 lead). t_d, t_m: the dense and MoE kinds' passes (layer_kinds_passes 0-2, 2-4); a rank's
    mix (rank_layer_passes) is the sum of its layers' (§11.44 item 1d, "by layer kind")."""
    from fastmodel.kernels.lm.step import busiest_stage
    from fastmodel.lm.records import read_records

    record = next(r for r in read_records("tests/data/recipe_plans.jsonl")
                  if r.id == "mbridge-deepseek-v3-h100-fp8-sc-v2")
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    assert (row[C["pp"]], row[C["vp"]], row[C["dense_layers"]]) == (8.0, 2.0, 3.0)
    work = np.zeros(N_WORK)
    layer_kinds_passes(row, work, 0, 2)
    t_d = layer_time(work)
    layer_kinds_passes(row, work, 2, 4)
    t_m = layer_time(work)
    layer_kinds_passes(row, work, 0, 4)
    t_avg = layer_time(work)
    assert rank_layer_passes(row, work, 3.0, 5.0) == pytest.approx(3.0 * t_d + 5.0 * t_m, rel=1e-12)
    e = sum(embedding_stage_tp(row))
    first = 3.0 * t_d + 5.0 * t_m + e
    assert first == pytest.approx(0.1519, abs=1e-4) and 8.0 * t_m == pytest.approx(0.1825, abs=1e-4)
    assert 8.0 * t_avg + e > 8.0 * t_avg            # the average layer's pricing, which let rank 0 lead
    stage_mb, *_, layers, share, n16, _, emb = busiest_stage(row, np.zeros(N_WORK))
    assert (layers, share, n16, emb) == (8.0, 0.0, 0.0, 0.0)
    assert stage_mb == pytest.approx(8.0 * t_m, rel=1e-12)
    r = _results(row)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)
