"""Layouts Megatron-Core runs with short and empty stages (docs/model.md §11.25, issue 22): accepted and priced by
the ranks' own layers (kernels/lm/memory_states.py ``layout_busiest_layers``, kernels/lm/dp_step.py
``_data_parallel_ranks``), and what Megatron-Core refuses still refused (kernels/lm/rules.py ``layout_broken``,
fastmodel/lm/rules.py ``layout_reason``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.table import row, table

# 32 dense layers on 4 ranks: the default split holds 8 on each; the layout's last rank 14 leaves the other three
# 18, 6 each (Megatron-Core e.g. "Et*6|t*6|t*6|t*14L")
BASE = dict(layers=32, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=4096, seq_len=2048,
            gated_mlp=0, tied_embeddings=0, n_gpus=8, pp=4, dp=2, micro_batch=1, recompute="none",
            sharding="ddp", grad_reduce_bytes=4)
H, F, V = 1024, 4096, 4096
LAYER = 4 * H * H + 2 * H * F + 2 * H          # q, k, v, o; the 2-matrix MLP; two norms (parameters)


def _status(**values):
    from fastmodel.kernels.lm.rules import plan_status_row
    return plan_status_row(row(**{**BASE, "global_batch": 16, **values}))


def _per_microbatch(**values):
    """Seconds one more micro-batch adds to the step (m 8 -> 16): the busiest rank's micro-batch."""
    small = evaluate_table(table(1, **{**BASE, **values}, global_batch=16))["step_time"][0]
    large = evaluate_table(table(1, **{**BASE, **values}, global_batch=32))["step_time"][0]
    return (large - small) / 8


def test_an_underfilled_layout_at_pp4_is_answered_with_its_busiest_rank_by_hand():
    from fastmodel.kernels.lm.layer import N_WORK
    from fastmodel.kernels.lm.memory_states import layout_busiest_layers, stage_layers
    from fastmodel.kernels.lm.passes import head_passes
    columns = row(**BASE, global_batch=16, last_stage_layers=14)
    assert _status(last_stage_layers=14) == 0
    assert layout_busiest_layers(columns) == 6                       # ceil((32 - 14) / 3)
    assert [stage_layers(columns, float(r))[0] for r in range(4)] == [6.0, 6.0, 6.0, 14.0]
    # t_layer: one more layer per rank (32 -> 36 layers: 8 -> 9 on every rank); t_head from the head's passes
    t_layer = _per_microbatch(layers=36) - _per_microbatch()
    t_head = sum(head_passes(columns, np.zeros(N_WORK)))
    assert 0.0 < t_head < t_layer
    # default: 8 t_layer + t_head on the last rank; layout 14: max(6 t_layer, 14 t_layer + t_head), 6 layers more
    assert _per_microbatch(last_stage_layers=14) == pytest.approx(_per_microbatch() + 6 * t_layer, rel=1e-9)
    # layout 2: the others hold ceil(30 / 3) = 10, a middle rank leads: 10 t_layer = default + 2 t_layer - t_head
    assert _per_microbatch(last_stage_layers=2) == pytest.approx(
        _per_microbatch() + 2 * t_layer - t_head, rel=1e-9)


def test_empty_stages_and_indivisible_layer_counts_run_under_a_layout():
    from fastmodel.kernels.lm.memory_states import stage_layers
    from fastmodel.registry.lm import STATUS_CODES
    # the last rank holds all 32: ranks 0-2 build no decoder layer ("E|||t*32L"); 0 on the last: 11 on the others
    assert [_status(last_stage_layers=n) for n in (0, 1, 20, 31, 32)] == [0] * 5
    empty = row(**BASE, global_batch=16, last_stage_layers=32)
    assert [stage_layers(empty, float(r))[0] for r in range(4)] == [0.0, 0.0, 0.0, 32.0]
    result = evaluate_table(table(1, **BASE, global_batch=16, last_stage_layers=32))
    assert np.isfinite(result["step_time"][0]) and np.isfinite(result["memory_per_device"][0])
    # 30 layers do not divide over 4 ranks: refused without a layout, run with one (Megatron-Core asks none)
    assert _status(layers=30) == STATUS_CODES["layers_not_divisible"]
    assert _status(layers=30, last_stage_layers=6) == 0


#: SMALL of tests/lm/test_memory.py on 32 layers and 4 ranks, DDP, 4 micro-batches (rank 0 holds 4 in flight)
SMALL32 = dict(layers=32, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
               gated_mlp=0, tied_embeddings=0, micro_batch=2, global_batch=8, dp=1, n_gpus=4, pp=4,
               sharding="ddp", grad_reduce_bytes=4, cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0,
               nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)


def _kinds(columns, stage):
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_peak import stage_peak
    return np.array(stage_peak(columns, float(stage), *peak_terms(columns)))


def test_the_memory_of_an_underfilled_layout_is_each_ranks_own_layers_by_hand():
    from fastmodel.kernels.lm.memory import peak_terms
    default, layout = row(**SMALL32), row(**SMALL32, last_stage_layers=14)
    stored = peak_terms(default)[0]                 # one layer's saved activations of one micro-batch
    # the last rank (1F1B: one micro-batch in flight): 6 layers more, DDP 2 + 4 + 12 bytes a parameter
    (w0, g0, o0, a0, b0), (w1, g1, o1, a1, b1) = _kinds(default, 3), _kinds(layout, 3)
    assert (w1 - w0, g1 - g0, o1 - o0) == (6 * 2 * LAYER, 6 * 4 * LAYER, 6 * 12 * LAYER)
    assert a1 - a0 == pytest.approx(6 * stored, rel=1e-12) and b0 == b1
    # rank 0 (4 micro-batches in flight): 2 layers fewer
    (w0, g0, o0, a0, b0), (w1, g1, o1, a1, b1) = _kinds(default, 0), _kinds(layout, 0)
    assert (w0 - w1, g0 - g1, o0 - o1) == (2 * 2 * LAYER, 2 * 4 * LAYER, 2 * 12 * LAYER)
    assert a0 - a1 == pytest.approx(4 * 2 * stored, rel=1e-12)
    # the reported peak is the worst rank's: rank 0 by default (8 layers, 4 micro-batches), the last rank under the
    # layout (14 layers and the head: 18 B a parameter, 87% of its peak), with its states
    assert int(np.argmax([_kinds(default, r).sum() for r in range(4)])) == 0
    assert int(np.argmax([_kinds(layout, r).sum() for r in range(4)])) == 3
    result = evaluate_table(table(1, **SMALL32, last_stage_layers=14))
    assert result["memory_peak_stage"][0] == 3.0
    states = [result[k][0] for k in ("memory_weights", "memory_gradients", "memory_optimizer")]
    assert states == list(_kinds(layout, 3)[:3])


def test_interleaved_a_last_rank_heavier_than_the_others_spreads_its_layers_over_its_chunks():
    """PP 4 x VP 2: n_last 14 against 6 on each other rank (3 a chunk) gives the last rank 7 + 7, not 3 + 11 (the
    loss's chunk holds the fewest micro-batches in flight); a lighter one (n_last 2, others 10: 5 a chunk) still
    fills its first chunk: 2 + 0 (memory_chunks.layout_chunk_layers)."""
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_activations import head_activation_bytes
    from fastmodel.kernels.lm.memory_chunks import chunk_microbatch_bytes
    values = {**SMALL32, "vp": 2, "pipeline_schedule": "interleaved", "global_batch": 16}
    default = row(**values)
    dense, head = peak_terms(default)[0], head_activation_bytes(default)
    for n, (first, second) in ((14, (7, 7)), (2, (2, 0))):
        layout = row(**values, last_stage_layers=n)
        assert _status(**{k: v for k, v in values.items() if k in ("vp", "pipeline_schedule")},
                       last_stage_layers=n) == 0
        chunks = [chunk_microbatch_bytes(layout, 3.0, c, dense, 0.0) for c in (0.0, 1.0)]
        assert chunks == pytest.approx([first * dense, second * dense + head], rel=1e-12)
    # the other ranks: 3 layers a chunk under n_last 14
    assert chunk_microbatch_bytes(row(**values, last_stage_layers=14), 1.0, 0.0, dense, 0.0) == pytest.approx(
        3 * dense, rel=1e-12)


def test_the_data_parallel_reduction_is_of_the_slower_end_ranks_own_gradients_by_hand():
    """DDP over dp 2: one all-reduce of the rank's FP32 gradients, counted as the step counts parameters (a layer's
    GEMM weights 4 h^2 + 2 h f, kernels/lm/layer.py W_PARAMS; the head's or the embedding's V h). Default: 8 layers
    beside the larger end (equal ends: V h); layout 14: the last rank's 14 layers + head; layout 2: rank 0's 10
    layers + embedding (the last rank's 2 layers + head are fewer)."""
    from fastmodel.kernels.nccl import allreduce_time

    def comm(**values):
        return evaluate_table(table(1, **BASE, global_batch=16, **values))["comm_dp"][0]

    def allreduce(params, **values):
        return allreduce_time(row(**BASE, global_batch=16, **values), params * 4.0, 2.0, 1.0)

    gemm = 4 * H * H + 2 * H * F
    assert comm() == pytest.approx(allreduce(8 * gemm + V * H), rel=1e-12)
    assert comm(last_stage_layers=14) == pytest.approx(allreduce(14 * gemm + V * H, last_stage_layers=14), rel=1e-12)
    assert comm(last_stage_layers=2) == pytest.approx(allreduce(10 * gemm + V * H, last_stage_layers=2), rel=1e-12)


# --- what Megatron-Core refuses stays refused: one line, exit 2; a status in a sweep ------------------------------

RECIPES = Path(__file__).resolve().parents[1] / "data" / "recipe_plans.jsonl"


def test_a_layout_megatron_refuses_is_one_cli_line_exit_2(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main
    line = next(line for line in RECIPES.read_text().splitlines() if "mbridge-deepseek-v3-b200-bf16-v1" in line)
    record = json.loads(line)
    assert record["plan"]["last_stage_layers"] == 1
    record["plan"]["last_stage_layers"] = 62                       # DeepSeek-V3 has 61 decoder layers
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    result = CliRunner().invoke(main, ["run", "-m", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert "layout_not_runnable" in result.output and "plan.last_stage_layers = 62 exceeds the model's 61 layers " \
        "(Megatron-Core validate_layer_layout: a layout's decoder layers must match num_layers)" in result.output


def test_a_sweep_keeps_the_refused_layouts_status():
    from fastmodel.api import sweep
    ds = sweep("llama3-8b", "dgx-h100", "llm-pretrain",
               {"num_nodes": [4], "plan": ["tp2.pp4"], "last_stage_layers": [-1, 14, 32, 33]})
    names = ds.status.attrs["flag_meanings"].split()
    assert [names[int(s)] for s in ds.status.values.ravel()][-1] == "layout_not_runnable"
    assert all(names[int(s)] != "layout_not_runnable" for s in ds.status.values.ravel()[:3])
