"""The per-configuration shortcuts of the lm step kernels give the bits a fresh computation gives (docs/performance.md,
"The dense sweep after the BF16 layers and the SP gathers"): the SP gathers and the wgrad re-gather windows reuse
times the layer has already taken (docs/model.md §11.40, §11.41), and the BF16-layer accumulators (§11.39) go into
the caller's vectors. Each check is exact (``==``), against the pre-change formulas written out here."""

import numpy as np
import pytest

from fastmodel.kernels.lm.first_rank import embedding_terms
from fastmodel.kernels.lm.fp4 import train_gemm_format
from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, layer_costs
from fastmodel.kernels.lm.parallel import exposed
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.lm.step import busiest_stage, busiest_stage_into
from fastmodel.kernels.nccl import allgather_time
from fastmodel.kernels.roofline import gemm_roofline, gemm_weight_bytes, sp_gather_bytes
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import BLACKWELL, HOPPER, TP, H, sp_row

# a GQA layer with a gated MLP, three sequences per micro-batch (tokens 6,144: not a power of two)
SHAPE = {
    "layers": 8.0,
    "heads": 96.0,
    "kv_heads": 8.0,
    "head_dim": 128.0,
    "ffn": 49152.0,
    "gated_mlp": 1.0,
    "micro_batch": 3.0,
    "collective_overhead_s": 20e-6,
}
FORMATS = [
    ("bf16", "unstated", HOPPER),
    ("fp8", "delayed", HOPPER),
    ("fp8", "tensorwise", HOPPER),
    ("fp8", "mxfp8", BLACKWELL),
    ("fp8", "blockwise", HOPPER),
    ("fp4", "unstated", BLACKWELL),
]


def _fresh_tp(row, linears):
    """(forward, backward) TP seconds with every gather timed at its own bytes (kernels/lm/layer.py before)."""
    tokens, o = row[C["micro_batch"]] * row[C["seq_len"]], row[C["collective_overhead_s"]]
    elements = tokens * H
    scatter = allgather_time(row, 2.0 * elements, TP, 1.0)
    gather = allgather_time(row, sp_gather_bytes(row, False) * elements, TP, 1.0)
    fixed = 4.0 * o + amax_reduction_time(row)
    backward = 2.0 * (allgather_time(row, sp_gather_bytes(row, True) * elements, TP, 1.0) + scatter) + fixed
    return 2.0 * (gather + scatter) + fixed, backward + linears * (gather + o)


def _fresh_hidden(row, fc1_width):
    """The re-gathers' hidden seconds with the gather and both dgrad windows timed again (layer.py before)."""
    tokens, o = row[C["micro_batch"]] * row[C["seq_len"]], row[C["collective_overhead_s"]]
    fmt = train_gemm_format(row)
    wb, eff = gemm_weight_bytes(fmt), row[C["stack_compute_eff"]]
    comm = allgather_time(row, sp_gather_bytes(row, False) * tokens * H, TP, 1.0) + o
    width = (row[C["heads"]] + 2.0 * row[C["kv_heads"]]) * row[C["head_dim"]] / TP
    qkv = gemm_roofline(row, 1.0, tokens, width, H, fmt, wb, 1.0) / eff
    fc1 = gemm_roofline(row, 1.0, tokens, fc1_width / TP, H, fmt, wb, 1.0) / eff
    return comm - exposed(row, comm, qkv) + (comm - exposed(row, comm, fc1))


@pytest.mark.parametrize("precision, recipe, cc", FORMATS)
def test_a_dense_layers_tp_times_are_the_fresh_ones_bit_for_bit(precision, recipe, cc):
    row = sp_row(precision, recipe, cc, **SHAPE)
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    assert (work[W_TP], work[W_TP_BACKWARD]) == _fresh_tp(row, 2.0)
    assert work[W_TP_HIDDEN] == _fresh_hidden(row, 2.0 * 49152.0) > 0.0


@pytest.mark.parametrize("precision, recipe, cc", FORMATS)
def test_a_moe_layers_shared_expert_window_is_the_fresh_one_bit_for_bit(precision, recipe, cc):
    """The shared expert's FC1, (m - 1) s f_moe / t wide, is the window of the MoE layer's second re-gather."""
    row = sp_row(precision, recipe, cc, moe_experts=64.0, moe_topk=2.0, moe_ffn=1408.0, moe_shared_experts=2.0, **SHAPE)
    work = np.zeros(N_WORK)
    layer_costs(row, True, False, work)
    assert work[W_TP_HIDDEN] == _fresh_hidden(row, 2.0 * 2.0 * 1408.0) > 0.0


def test_no_regather_window_under_tp_overlap():
    """With tp_comm_overlap the layer's own rule hides its TP and W_TP_HIDDEN is not read (passes, timeline): 0."""
    row = sp_row("bf16", tp_comm_overlap=1.0, **SHAPE)
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    assert work[W_TP_HIDDEN] == 0.0
    assert (work[W_TP], work[W_TP_BACKWARD]) == _fresh_tp(row, 2.0)


def _columns(**execution):
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    return point_columns(
        "llama3.1-70b", "dgx-h100", load_train_task("llm-pretrain"), plan="tp8.pp4", execution=execution, num_nodes=16
    )


@pytest.mark.parametrize(
    "execution",
    [
        {},
        {"precision": "fp8", "fp8_recipe": "blockwise", "bf16_layers_start": 2, "bf16_layers_end": 1},
        {"precision": "fp8", "fp8_recipe": "blockwise", "bf16_layers_end": 3},
    ],
)
def test_busiest_stage_into_overwrites_the_callers_vectors(execution):
    """Vectors full of NaN (a frame vector starts undefined) give busiest_stage's result exactly; an end without
    BF16 layers gets zeros."""
    columns = _columns(**execution)
    work, into_work = np.zeros(N_PASS_WORK), np.zeros(N_PASS_WORK)
    expected = busiest_stage(columns, work)
    d_first, d_last, d_mtp = (np.full(N_PASS_WORK, np.nan) for _ in range(3))
    got = busiest_stage_into(columns, into_work, d_first, d_last, d_mtp, embedding_terms(columns))
    assert got[:7] == expected[:7] and got[8] == expected[8]
    np.testing.assert_array_equal(got[7], expected[7])
    np.testing.assert_array_equal(into_work, work)
    start, end = execution.get("bf16_layers_start", 0), execution.get("bf16_layers_end", 0)
    assert not np.isnan(d_first).any() and not np.isnan(d_last).any() and not np.isnan(d_mtp).any()
    assert (np.abs(d_first).sum() > 0.0) == (start > 0) and (np.abs(d_last).sum() > 0.0) == (end > 0)
    # each end's accumulators as bf16_layer_work computed them in new vectors before it took frame vectors
    # (np.zeros for the 16-bit row's passes and the row's, the 16-bit row a copy, their difference): the same bits
    for count, got_work in ((start, d_first), (end, d_last)):
        np.testing.assert_array_equal(got_work, _fresh_bf16_work(columns) if count else np.zeros(N_PASS_WORK))


def _fresh_bf16_work(row):
    """One BF16 layer's accumulators minus the average layer's, in new zeroed vectors (bf16_layers.py before)."""
    from fastmodel.kernels.lm.passes import layer_passes_of

    wide, base = np.zeros(N_PASS_WORK), np.zeros(N_PASS_WORK)
    sixteen = row.copy()
    sixteen[C["precision"]], sixteen[C["fp8_params"]] = 0.0, 0.0
    layer_passes_of(sixteen, wide, False)
    layer_passes_of(row, base, False)
    return wide - base


def test_kept_kind_costs_price_every_rank_bit_for_bit():
    """A by-kind step (``rank_lead.priced_by_kind``: DeepSeek-V3, 3 leading dense layers, pp > 1) costs each layer
    kind once for the average layer (``passes.layer_passes_keeping``) and prices every candidate rank from those
    costs (``rank_layer_passes_kept``, ``moe_layer_passes_kept``): each rank's accumulators and micro-batch equal a
    fresh ``rank_layer_passes`` / ``layer_passes_of`` bit for bit, ``work[W_*]`` included (the last kind's costs), on
    the recipe plans whose middle (H100 FP8 sc V2) and last rank (GB300 BF16 V2) lead, at the ranks' own counts
    and at all-dense, all-MoE and empty ones. Interpreted (tests/interpreted.py): no kernel compiled for it."""
    from tests.interpreted import run_interpreted

    result = run_interpreted("""
import numpy as np
from fastmodel.kernels.lm.passes import (N_KIND_COSTS, N_WORK, layer_passes, layer_passes_keeping, layer_passes_of,
    moe_layer_passes_kept, rank_layer_passes, rank_layer_passes_kept)
from fastmodel.kernels.lm.rank_lead import priced_by_kind
from fastmodel.lm.records import read_records

result = []
for record in read_records("tests/data/recipe_plans.jsonl"):
    if record.id not in ("mbridge-deepseek-v3-h100-fp8-sc-v2", "mbridge-deepseek-v3-gb300-bf16-v2"):
        continue
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    costs, kept, fresh = np.full(N_KIND_COSTS, np.nan), np.full(N_WORK, np.nan), np.full(N_WORK, np.nan)
    layer_passes_keeping(row, kept, costs)
    layer_passes(row, fresh)
    same = [bool(priced_by_kind(row)), bool(np.array_equal(kept, fresh, equal_nan=True))]
    for dense, moe in ((3.0, 5.0), (0.0, 8.0), (0.0, 13.0), (1.0, 15.0), (3.0, 0.0), (0.0, 0.0)):
        t_fresh = rank_layer_passes(row, fresh, dense, moe)
        t_kept = rank_layer_passes_kept(row, kept, dense, moe, costs)
        same += [bool(t_kept == t_fresh), bool(np.array_equal(kept, fresh, equal_nan=True))]
    layer_passes_of(row, fresh, True)
    moe_layer_passes_kept(row, kept, costs)
    same.append(bool(np.array_equal(kept, fresh, equal_nan=True)))
    result.append(same)
""")
    assert len(result) == 2 and all(all(same) for same in result), result


@pytest.mark.parametrize(
    ("model", "plan", "nodes"),
    [("llama3.1-70b", "tp8.pp4", 16), ("deepseek-v2", "tp1.ep8", 16), ("deepseek-v2", "tp1.pp4.ep8", 16),
     ("qwen3-30b-a3b", "tp1.pp4.ep8", 8), ("deepseek-v3", "tp1.pp8.ep8", 64)],
)
@pytest.mark.parametrize("host_link_bw", [None, 2e8])
def test_the_offload_copies_come_from_the_steps_own_passes(model, plan, nodes, host_link_bw):
    """busiest_stage_into's tenth value (offload_time.offload_layer_from: the average layer's passes the step took,
    the MoE layer's from the last rank's passes where it is all MoE) is offload_layer_s's fresh passes bit for bit:
    a dense model, a MoE model with a leading dense layer (mixed, and all-MoE last rank), one without dense layers,
    DeepSeek-V3 priced by kind; the host link as built and one slow enough to expose the copies."""
    from fastmodel.kernels.lm.offload_time import offload_layer_s
    from fastmodel.kernels.lm.step import last_rank_all_moe
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    columns = point_columns(model, "dgx-h100", load_train_task("llm-pretrain"), plan=plan, num_nodes=nodes,
                            execution={"uneven_stages": model == "deepseek-v3"})     # 61 layers
    columns[C["offload_modules"]] = 127.0 if "deepseek" in model else 12.0     # every module; core_attn + attn_proj
    if host_link_bw:
        columns[C["host_link_bw"]] = host_link_bw
    vectors = [np.full(N_PASS_WORK, np.nan) for _ in range(4)]
    got = busiest_stage_into(columns, *vectors, embedding_terms(columns))[9]
    all_moe = last_rank_all_moe(columns)
    assert all_moe == (plan == "tp1.pp4.ep8" and model == "deepseek-v2")
    expected = offload_layer_s(columns, np.zeros(N_PASS_WORK), all_moe)
    assert got == expected and (expected > 0.0 or host_link_bw is None)
