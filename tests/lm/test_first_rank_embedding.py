"""The word embedding's TP collectives and dense gradient on the first pipeline rank at pp > 1 (docs/model.md
§11.44 item 1d, §11.43's DeepSeek-V2 note; kernels/lm/first_rank.py, kernels/lm/bubble_last.py
``embedding_warmup``), each against a hand derivation: where they run and how often, the first rank's layers
under an explicit layout, the step and its bubble when the last rank leads (1F1B: the sum form holds e + g once;
interleaved: p (e + g)) and when the first rank leads with its BF16 layers (its breakdown carries e in its TP and
g in its memory-bound time; the step is still the sum of its parts)."""

import numpy as np
import pytest

from fastmodel.kernels.lm.bubble_last import embedding_warmup
from fastmodel.kernels.lm.first_rank import embedding_ends, embedding_stage_tp, embedding_terms, first_rank_layers
from fastmodel.kernels.lm.layer import W_MEM, head_costs
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
from fastmodel.lm.table import row as table_row
from fastmodel.registry.lm import BREAKDOWN, PIPELINE_SCHEDULES, PRECISION_CODES
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import MICRO, SEQ, TP, H, sp_row

OVERHEAD = 20e-6
PARTS = BREAKDOWN.overlapped     # the parts that add up to step_time (registry/lm.py)


def _row(**values) -> np.ndarray:
    return sp_row(overhead=OVERHEAD, **values)


def _ends(row):
    """``embedding_ends`` with the row's own embedding terms, as ``step.step_row`` hands them."""
    return embedding_ends(row, embedding_terms(row))


def _warmup(row):
    """``embedding_warmup`` with the row's own embedding terms."""
    return embedding_warmup(row, embedding_terms(row))


def test_the_embedding_runs_on_the_first_rank_at_pp_above_one():
    """MLPerf GPT-3 175B's shape (T = 2,048 tokens, h = 12,288, TP 4, SP): VocabParallelEmbedding reduce-scatters
    its 2 B output forward and all-gathers its gradient backward, c = AG(2 T h) + o each way (§11.44 item 1b). At
    pp 1 the head's rank holds it (layer.head_costs): nothing here. At pp 4 the first rank, e = 2c a micro-batch;
    under DualPipe the two end ranks embed half the micro-batches each, e / 2 beside the head's half. Without SP
    the forward all-reduce alone; without TP nothing."""
    c = allgather_time(_row(), 2.0 * SEQ * MICRO * H, TP, 1.0) + OVERHEAD
    assert embedding_stage_tp(_row(pp=1.0)) == (0.0, 0.0)
    assert embedding_stage_tp(_row(pp=4.0)) == pytest.approx((c, c), rel=1e-12)
    assert _ends(_row(pp=4.0)) == pytest.approx((2.0 * c, 0.0, c, 2.0 * c), rel=1e-12)
    dualpipe = _row(pp=4.0, pipeline_schedule=PIPELINE_SCHEDULES["dualpipe"])
    assert _ends(dualpipe) == pytest.approx((0.0, c, c, 2.0 * c), rel=1e-12)
    ar = allreduce_time(_row(), 2.0 * SEQ * MICRO * H, TP, 1.0) + OVERHEAD
    assert _ends(_row(pp=4.0, sequence_parallel=0.0)) == pytest.approx((ar, 0.0, ar, ar), rel=1e-12)
    assert _ends(_row(pp=4.0, tp=1.0)) == (0.0, 0.0, 0.0, 0.0)


def test_the_dense_gradient_is_the_first_ranks_backward_at_pp_above_one():
    """DeepSeek-V2 at tp 1 (V h = 102,400 x 5,120, FP32 main gradient, B200 8 TB/s x 0.80): each micro-batch the
    embedding's backward zero-fills a 2 B gradient of the whole weight, main_grad.add_ reads it (2 B) and reads and
    writes the FP32 main gradient (8 B): g = 524,288,000 x 12 B / 6.4 TB/s = 0.98304 ms (§11.43). At pp 2 it is
    rank 0's, in the backward: ends (g, 0, 0, g); under DualPipe each end rank embeds half the micro-batches,
    (0, g / 2, 0, g). At pp 1 the head's rank holds it, g / 2 in each of the head's passes (layer.head_costs):
    the same g a micro-batch, and nothing in the ends. With TP 2 the weight is V h / 2 a rank: g / 2, beside the
    collectives e (the ends' forward e_F unchanged)."""
    common = dict(micro_batch=1, seq_len=4096, vocab=102400, hidden=5120, tp=1, hbm_bw=8e12, hbm_eff=0.8,
                  grad_reduce_bytes=4, loss_traffic_bytes_per_logit=52, embedding_dense_grad=1)
    g = 102400 * 5120 * 12 / (8e12 * 0.8)
    assert g == pytest.approx(0.98304e-3, rel=1e-12)
    assert _ends(table_row(**common, pp=2)) == pytest.approx((g, 0.0, 0.0, g), rel=1e-12)
    dualpipe = table_row(**common, pp=2, pipeline_schedule="dualpipe")
    assert _ends(dualpipe) == pytest.approx((0.0, g / 2.0, 0.0, g), rel=1e-12)
    assert _ends(table_row(**common, pp=1)) == (0.0, 0.0, 0.0, 0.0)
    on, off = np.zeros(N_WORK), np.zeros(N_WORK)
    head_costs(table_row(**common, pp=1), on)
    head_costs(table_row(**{**common, "embedding_dense_grad": 0}, pp=1), off)
    assert 2.0 * (on[W_MEM] - off[W_MEM]) == pytest.approx(g, rel=1e-12)     # PP 1: the same g a micro-batch
    tp2 = table_row(**{**common, "tp": 2}, pp=2)
    e_f, e_b = embedding_stage_tp(tp2)
    assert e_f > 0.0
    assert _ends(tp2) == pytest.approx((e_f + e_b + g / 2.0, 0.0, e_f, e_f + e_b + g / 2.0), rel=1e-12)


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
    assert _warmup(_row(pp=4.0, vp=2.0, layers=32.0, pipeline_schedule=interleaved)) == pytest.approx(
        3.5 * e, rel=1e-12)
    assert _warmup(_row(pp=4.0, vp=1.0, layers=32.0)) == 0.0
    assert _warmup(_row(pp=4.0, vp=2.0, layers=32.0, embedding_loss_in_split=1.0)) == 0.0
    assert _warmup(_row(pp=4.0, vp=2.0, layers=30.0, uneven_stages=1.0)) == 0.0
    assert _warmup(_row(pp=4.0, vp=2.0, layers=32.0, uneven_stages=1.0)) == pytest.approx(3.5 * e, rel=1e-12)


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


def _dense_grad(columns):
    """g by hand: the embedding's dense gradient a micro-batch, V h / t x (2 + 2 + 2 x 4) B at the HBM's
    effective bandwidth (FP32 main gradient; §11.43); 0 without ``embedding_dense_grad``."""
    nbytes = columns[C["vocab"]] * columns[C["hidden"]] / columns[C["tp"]] * 12.0
    assert columns[C["grad_reduce_bytes"]] == 4.0 and columns[C["master_weights"]] > 0.0
    speed = columns[C["hbm_bw"]] * columns[C["hbm_eff"]] * columns[C["stack_compute_eff"]]
    return nbytes / speed if columns[C["embedding_dense_grad"]] > 0.0 else 0.0


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("vp", [1, 2])
def test_the_bubble_holds_the_first_ranks_embedding(vp, dense):
    """tp2.pp4, 8 layers a rank, the last rank (8 t + t_head) the busiest: 1F1B's bubble is the sum of the ranks
    before the last, 3 x 8 t + e (the first holds the embedding, §11.43); interleaved (v = 2) the credited
    (p t_avg - t_last)/v = (3 x 8 t + e)/2 and the wait (4 - 1/2) e: 12 t + 4 e. The step is the sum of its parts,
    and the last rank's micro-batch carries no embedding. With the dense gradient (Megatron-LM's launcher) rank 0's
    backward grows by g = V h / 2 x 12 B / 6.4 TB/s = 0.4925 ms: e + g in place of e."""
    from fastmodel.kernels.lm.step import busiest_stage

    columns = _llama3_8b("tp2.pp4", **({"vp": 2, "pipeline_schedule": "interleaved"} if vp == 2 else {}),
                         **({"embedding_dense_grad": True} if dense else {}))
    assert columns[C["pp"]] == 4.0 and columns[C["layers"]] == 32.0 and columns[C["vp"]] == vp
    t = layer_time(_layer_work(columns))
    g = _dense_grad(columns)
    assert (g == pytest.approx(128256 * 4096 / 2 * 12 / 6.4e12, rel=1e-12)) if dense else g == 0.0
    e = sum(embedding_stage_tp(columns)) + g
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


@pytest.mark.parametrize("dense", [False, True])
def test_a_first_rank_leading_with_bf16_layers_carries_its_embedding(dense):
    """fp8 (tensorwise), tp2.pp4, the first 8 layers in BF16: rank 0's 8 BF16 layers outrun the last rank's 8 layers
    and head (as at tp 1, tests/lm/test_fp4_layers.py), and rank 0 also runs the embedding's reduce-scatter and
    all-gather: t_mb = 8 t16 + e, its breakdown's exposed TP m (8 x_tp16 + e) with x_tp16 a BF16 layer's exposed
    TP, and the step the sum of its parts (§11.44 item 1d, §11.39). With the dense gradient g (§11.43): t_mb =
    8 t16 + e + g, the exposed TP as before and the memory-bound time m g more than without it."""
    from fastmodel.kernels.lm.step import busiest_stage

    plan = dict(precision="fp8", fp8_recipe="tensorwise", bf16_layers_start=8)
    columns = _llama3_8b("tp2.pp4", **plan, **({"embedding_dense_grad": True} if dense else {}))
    g = _dense_grad(columns)
    wide = columns.copy()
    wide[C["precision"]] = PRECISION_CODES["bf16"]
    wide[C["fp8_params"]] = 0.0
    high = _layer_work(wide)
    t16 = layer_time(high)
    e = sum(embedding_stage_tp(columns))
    stage_mb, *_, layers, share, n16, _, emb = busiest_stage(columns, np.zeros(N_WORK))
    assert (layers, share, n16) == (8.0, 0.0, 8.0) and emb == pytest.approx(e + g, rel=1e-15) and e > 0.0
    assert stage_mb == pytest.approx(8.0 * t16 + e + g, rel=1e-12)
    r = _results(columns)
    m = columns[C["global_batch"]] / (columns[C["micro_batch"]] * columns[C["dp"]])
    assert r["exposed_tp"] == pytest.approx(m * (8.0 * high[A_TP_EXPOSED] + e), rel=1e-9)
    assert r["comm_tp"] == pytest.approx(_results(_llama3_8b("tp2.pp4", **plan))["comm_tp"], rel=1e-12)
    memory = _results(_llama3_8b("tp2.pp4", **plan))["time_memory_bound"]
    assert r["time_memory_bound"] == pytest.approx(memory + m * g, rel=1e-12)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)
    # the timeline draws e as rank 0's own ops (e_F before its layers' forwards, e_B after their backwards),
    # not spread over the layers' TP ops
    from fastmodel.lm.timeline import timeline

    ops = timeline(columns)
    spans = dict(zip(ops.names, ops.end - ops.start))
    forward, backward = embedding_stage_tp(columns)
    assert spans["mb0 embedding tp fwd"] == pytest.approx(forward, rel=1e-9)
    assert spans["mb0 embedding tp bwd"] == pytest.approx(backward, rel=1e-9)
    assert spans.get("mb0 embedding dense grad", 0.0) == pytest.approx(g, rel=1e-9)     # its own op (§11.43)


def test_the_first_and_middle_ranks_are_priced_by_layer_kind():
    """Megatron-Bridge DeepSeek-V3 H100 FP8 sc V2 (tp 2, pp 8, vp 2, 'Et*4|(t*4|)*14tmL', 3 dense layers): rank 0
    holds layers 0-3 and 32-35, 3 dense + 5 MoE and the embedding, 3 t_d + 5 t_m + e (153.6 ms; 153.0 before
    §11.56's MLA RoPE and its mla_up_proj recompute, 151.9 before docs/model.md §11.46); a middle rank 8 MoE layers,
    8 t_m (183.8 ms; 183.2, 182.5), so the middle rank leads, not
    rank 0 (at the average layer both were 8 t_avg, and e made rank 0 lead). t_d, t_m: the dense and MoE kinds'
    passes (layer_kinds_passes 0-2, 2-4); a rank's mix (rank_layer_passes) is the sum of its layers' (§11.44 item
    1d, "by layer kind")."""
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
    assert rank_layer_passes(row, work, 3.0, 5.0) == pytest.approx(3.0 * t_d + 5.0 * t_m, rel=1e-12)
    e = sum(embedding_stage_tp(row))
    first = 3.0 * t_d + 5.0 * t_m + e
    assert first == pytest.approx(0.1536, abs=1e-4) and 8.0 * t_m == pytest.approx(0.1838, abs=1e-4)
    assert e > 0.0      # at the average layer rank 0 (8 t_avg + e) beat the middle rank (8 t_avg) by e: it led
    stage_mb, *_, layers, share, n16, _, emb = busiest_stage(row, np.zeros(N_WORK))
    assert (layers, share, n16, emb) == (8.0, 0.0, 0.0, 0.0)
    assert stage_mb == pytest.approx(8.0 * t_m, rel=1e-12)
    r = _results(row)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)


def test_an_all_moe_last_rank_is_priced_by_kind_against_a_middle_rank():
    """Megatron-Bridge DeepSeek-V3 GB300 BF16 V2 (tp 1, pp 4, vp 4, 'Et*4|(t*4|)*14tmL', 3 dense layers, 1 MTP
    module): the last rank holds chunks 3, 7, 11, 15, 4 + 4 + 4 + 1 = 13 layers, all MoE (the dense layers 0-2 are
    in chunk 0, rank 0), with the MTP module and the LM head; the busiest middle rank (rank 2: chunks 2, 6, 10, 14)
    16 MoE layers. By hand from the kinds' passes t_m (layer_kinds_passes 2-4), the head's (head_passes) and the MTP
    layer's t_mtp (mtp_layer_into; the decoder's last layer is MoE, so t_mtp = t_m):
    last = 13 t_m + head + t_mtp = 14 t_m + head = 336.93 ms against the middle rank's 16 t_m = 334.51 ms, so the
    last rank leads (§11.58's Blackwell Ultra exponential rate on the forward only; 333.34 and 330.41 with it on the
    backward too, review 13 finding 1; 339.38 and 337.31 before §11.58; 339.81 and 337.81 before §11.56's MLA RoPE;
    338.19 and 336.65 before §11.46). Priced at the mix's average layer (13 t_avg + head + t_mtp = 334.03 ms, under
    the by-kind middle rank's 334.51; 330.44 with the backward scaled, 336.48 before §11.58) it understated the last
    rank by 2.9 ms (review 2 finding 1; §11.44 item 1d)."""
    from fastmodel.kernels.lm.mtp_breakdown import mtp_layer_into
    from fastmodel.kernels.lm.step import busiest_stage
    from fastmodel.lm.records import read_records

    record = next(r for r in read_records("tests/data/recipe_plans.jsonl")
                  if r.id == "mbridge-deepseek-v3-gb300-bf16-v2")
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    assert (row[C["pp"]], row[C["vp"]], row[C["dense_layers"]], row[C["mtp_layers"]]) == (4.0, 4.0, 3.0, 1.0)
    assert stage_layers(row, 3.0) == (0.0, 13.0, 1.0) and stage_layers(row, 2.0)[:2] == (0.0, 16.0)
    work = np.zeros(N_WORK)
    layer_kinds_passes(row, work, 2, 4)
    t_m = layer_time(work)
    layer_kinds_passes(row, work, 0, 4)
    t_avg = layer_time(work)
    head = sum(head_passes(row, work))
    t_mtp = mtp_layer_into(row, work, np.zeros(N_WORK))[0]
    assert t_mtp == pytest.approx(t_m, rel=1e-12)
    assert _ends(row) == (0.0, 0.0, 0.0, 0.0)      # one model copy, no split slots: no e on the ends
    last, middle = 14.0 * t_m + head, 16.0 * t_m
    assert last == pytest.approx(0.33693, abs=1e-5) and middle == pytest.approx(0.33451, abs=1e-5)
    assert 13.0 * t_avg + head + t_mtp == pytest.approx(0.33403, abs=1e-5)    # the average layer's pricing
    stage_mb, *_, layers, share, n16, _, emb = busiest_stage(row, np.zeros(N_WORK))
    assert (layers, share, n16, emb) == (13.0, 1.0, 0.0, 0.0)
    assert stage_mb == pytest.approx(last, rel=1e-12)
    r = _results(row)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)


def test_rank_zeros_dense_layers_are_counted_chunk_by_chunk_under_interleaving():
    """Rank 0 holds virtual stages 0, p, 2p, ... (rank_lead.first_rank_kinds; review 2 finding 3). DeepSeek-V3 H100
    FP8 cs V2 (``Et|(tt|)*30mL``, pp 8, vp 4, k = 3): chunk 0 is the embedding and layer 0, chunk 8 layers 15-16,
    chunk 16 31-32, chunk 24 47-48, so 1 dense + 6 MoE (c = 8 / 4 = 2, s_0 = 7 - 3 x 2 = 1; counted as one block,
    min(3, 7) = 3 dense); GB300 BF16 V2 (``Et*4|(t*4|)*14tmL``, pp 4, vp 4): chunk 0 holds layers 0-3, all three
    dense layers, 3 + 13 as before; DeepSeek-V2 (pp 16, v = 1, k = 1): min(1, 4) = 1. Interpreted
    (tests/interpreted.py): no kernel compiled for it."""
    from tests.interpreted import run_interpreted

    kinds = run_interpreted("""
import numpy as np
from fastmodel.kernels.lm.rank_lead import first_rank_kinds
from fastmodel.lm.records import read_records

wanted = ("mbridge-deepseek-v3-h100-fp8-cs-v2", "mbridge-deepseek-v3-gb300-bf16-v2",
          "deepseek-v2-pretrain-h800-172.8k-gpuh-per-T")
result = {}
for path in ("tests/data/recipe_plans.jsonl", "tests/data/runs_moe_public.jsonl"):
    for record in read_records(path):
        if record.id in wanted:
            result[record.id] = [float(x) for x in first_rank_kinds(np.asarray(record.columns, dtype=np.float64).ravel())]
""")
    assert kinds == {"mbridge-deepseek-v3-h100-fp8-cs-v2": [1.0, 6.0], "mbridge-deepseek-v3-gb300-bf16-v2": [3.0, 13.0],
                     "deepseek-v2-pretrain-h800-172.8k-gpuh-per-T": [1.0, 3.0]}
