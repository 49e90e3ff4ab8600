"""Pipeline tails and whole-layer chunks (docs/model.md §11.27, the review LOWs of issues 22 and 26): a heavier last
rank's interleaved chunks hold whole layers (kernels/lm/memory_chunks.py ``layout_chunk_layers``); each end rank
reduces its gradients when its own backward ends, the last one during the drain (kernels/lm/pipeline.py
``pipeline_drain``, kernels/lm/dp_step.py ``_data_parallel_ranks``); per-layer CUDA graphs are refused under DualPipe
(``schedule_status``); an explicit layout's end ranks count their own dense and MoE layers (``_data_parallel_step``,
``layer.layer_kind_params``). Hand derivations."""

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.table import row, table

#: SMALL32 of tests/lm/test_pipeline_layout_short.py: 32 dense layers on 4 ranks, DDP
SMALL32 = dict(layers=32, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
               gated_mlp=0, tied_embeddings=0, micro_batch=2, global_batch=16, dp=1, n_gpus=4, pp=4,
               sharding="ddp", grad_reduce_bytes=4, cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0,
               nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)
H, F, V = 1024, 4096, 1000
GEMM = 4 * H * H + 2 * H * F                    # a dense layer's weights as the step counts them (no norms)


# --- LOW 4: whole layers per virtual stage ---------------------------------------------------------------------

def _chunks(values, n):
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_activations import head_activation_bytes
    from fastmodel.kernels.lm.memory_chunks import chunk_microbatch_bytes
    default, layout = row(**values), row(**values, last_stage_layers=n)
    dense, head = peak_terms(default)[0], head_activation_bytes(default)
    v = int(values["vp"])
    got = [chunk_microbatch_bytes(layout, 3.0, float(c), dense, 0.0) for c in range(v)]
    got[-1] -= head                             # the loss's chunk also holds the head's inputs
    return [g / dense for g in got]


def test_a_heavier_last_rank_spreads_whole_layers_over_its_chunks_by_hand():
    """Megatron-Core counts each virtual stage's ``t``s (pipeline_parallel_layer_layout.py@0823c73 line 167): whole
    layers. PP 4 x VP 2, n_last 15: the others hold ceil(17 / 3) = 6 (3 a chunk); 15 over 2 chunks is 8 + 7 (the extra
    layer in the earlier chunk, which holds more micro-batches in flight), not 7.5 + 7.5. PP 4 x VP 4, n_last 13
    (others ceil(19 / 3) = 7): 4, 3, 3, 3; n_last 16 divides: 4 each."""
    values = {**SMALL32, "vp": 2, "pipeline_schedule": "interleaved"}
    assert _chunks(values, 15) == pytest.approx([8.0, 7.0], rel=1e-12)
    assert _chunks(values, 14) == pytest.approx([7.0, 7.0], rel=1e-12)       # unchanged: 14 / 2 is whole
    values4 = {**values, "vp": 4}
    assert _chunks(values4, 13) == pytest.approx([4.0, 3.0, 3.0, 3.0], rel=1e-12)
    assert _chunks(values4, 16) == pytest.approx([4.0] * 4, rel=1e-12)


def test_a_lighter_last_rank_fills_whole_chunks_in_order_by_hand():
    """PP 4 x VP 4, n_last 5: the others hold ceil(27 / 3) = 9 layers, 2.25 a chunk on average; a chunk holds whole
    layers, at most ceil(2.25) = 3, so the last rank's 5 fill 3 + 2 + 0 + 0 (was 2.25 + 2.25 + 0.5 + 0)."""
    values = {**SMALL32, "vp": 4, "pipeline_schedule": "interleaved"}
    assert _chunks(values, 5) == pytest.approx([3.0, 2.0, 0.0, 0.0], rel=1e-12)
    assert _chunks(values, 2) == pytest.approx([2.0, 0.0, 0.0, 0.0], rel=1e-12)


# --- LOW 11: the last rank's reduction runs during the drain -----------------------------------------------------

def _backward(columns):
    """One average layer's backward seconds (B + W + R) as the step's passes give them."""
    from fastmodel.kernels.lm.passes import A_BACKWARD_INPUT, A_BACKWARD_WEIGHT, A_RECOMPUTE, N_WORK
    from fastmodel.kernels.lm.step import busiest_stage
    work = np.zeros(N_WORK)
    busiest_stage(columns, work)
    return work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE]


def test_the_drain_is_the_other_ranks_last_backward_chunks_by_hand():
    """1F1B on 4 ranks of 8 layers: the last micro-batch's backward crosses ranks 2, 1, 0 after the last rank's, 3 x 8
    layer backwards; interleaved with v = 2 one chunk each, 3 x 4; ZB-H1 and DualPipe fill it: 0."""
    from fastmodel.kernels.lm.pipeline import pipeline_drain
    plain = row(**SMALL32)
    b = _backward(plain)
    assert b > 0.0
    assert pipeline_drain(plain, 8.0, b) == pytest.approx(3 * 8 * b, rel=1e-12)
    assert pipeline_drain(row(**SMALL32, vp=2, pipeline_schedule="interleaved"), 8.0, b) == pytest.approx(
        3 * 4 * b, rel=1e-12)
    assert pipeline_drain(row(**SMALL32, pipeline_schedule="gpipe"), 8.0, b) == pytest.approx(3 * 8 * b, rel=1e-12)
    for schedule in ("zb_h1", "dualpipe"):
        assert pipeline_drain(row(**SMALL32, pipeline_schedule=schedule), 8.0, b) == 0.0
    assert pipeline_drain(row(**{**SMALL32, "pp": 1, "n_gpus": 1}), 32.0, b) == 0.0


@pytest.mark.parametrize("schedule, v, gap", [("1f1b", 1, 6.0), ("gpipe", 1, 6.0), ("interleaved", 2, 3.0),
                                              ("interleaved", 4, 1.5), ("zb_h1", 1, 0.0), ("dualpipe", 1, 0.0)])
def test_the_exact_schedule_ends_the_last_stage_the_drain_before_the_first(schedule, v, gap):
    """The exact path (docs/model.md §11.7.1) on 4 stages, 8 micro-batches, F = 1, B + W = 2 (W = 1) per stage: the
    last stage's last op ends (p - 1)(B + W)/v = 6 / v before stage 0's under 1F1B, GPipe and interleaved, as
    ``pipeline_drain`` charges; under ZB-H1 and DualPipe every stage ends together (drain 0)."""
    from fastmodel.kernels.lm.pipeline import pipeline_drain
    from fastmodel.lm.pipeline_program import pipeline_program, pipeline_slots, schedule_pipeline
    p, m = 4, 8
    program = pipeline_program(p, m, schedule, v)
    times = schedule_pipeline(program, pipeline_slots(1.0, 2.0, p, v, 0.0, 1.0))
    ends = [times.end[program.op_stream == s].max() for s in range(p)]
    assert ends[0] - ends[-1] == pytest.approx(gap, abs=1e-12)
    # the kernel's drain for 8 layers of 2 / 8 s backward each on the other ranks
    columns = row(**{**SMALL32, "global_batch": 32, "vp": v, "pipeline_schedule": schedule})
    assert pipeline_drain(columns, 8.0, 2.0 / 8.0) == pytest.approx(gap, abs=1e-12)


def test_the_step_waits_for_the_slower_end_ranks_reduction_after_its_own_backward_by_hand():
    """DDP over dp 2 without overlap (each rank all-reduces when its backward ends), layout n_last 14 on 4 ranks:
    rank 0 reduces 6 layers + the embedding (c_0), the last rank 14 layers + the head (c_3), which it starts
    3 x 6 layer backwards before rank 0 ends. Exposed DP = max(c_0, c_3 - 18 b); before, c_3. Under ZB-H1 (no drain)
    it stays c_3."""
    from fastmodel.kernels.nccl import allreduce_time
    values = {**SMALL32, "dp": 2, "n_gpus": 8, "overlap_grad_reduce": 0, "last_stage_layers": 14}
    columns = row(**values)
    c0 = allreduce_time(columns, 4.0 * (6 * GEMM + V * H), 2.0, 1.0)
    c3 = allreduce_time(columns, 4.0 * (14 * GEMM + V * H), 2.0, 1.0)
    drain = 3 * 6 * _backward(columns)
    result = evaluate_table(table(1, **values))
    assert result["comm_dp"][0] == pytest.approx(c3, rel=1e-12)            # the busier rank's communication
    assert result["exposed_dp"][0] == pytest.approx(max(c0, c3 - drain), rel=1e-9)
    assert result["exposed_dp"][0] < c3
    zb = evaluate_table(table(1, **values, pipeline_schedule="zb_h1"))
    assert zb["exposed_dp"][0] == pytest.approx(c3, rel=1e-12)


def test_without_a_layout_equal_ends_keep_the_first_ranks_reduction():
    """The default split with an untied head as large as the embedding: rank 0 ends last and reduces as much as the
    last rank, so the drain changes nothing: exposed DP is rank 0's 8 layers + embedding, all-reduced after its
    backward (no overlap)."""
    from fastmodel.kernels.nccl import allreduce_time
    values = {**SMALL32, "dp": 2, "n_gpus": 8, "overlap_grad_reduce": 0}
    columns = row(**values)
    result = evaluate_table(table(1, **values))
    assert result["exposed_dp"][0] == pytest.approx(allreduce_time(columns, 4.0 * (8 * GEMM + V * H), 2.0, 1.0),
                                                    rel=1e-12)


# --- LOW 9: per-layer CUDA graphs under DualPipe ------------------------------------------------------------------

def test_per_layer_cuda_graphs_are_refused_under_dualpipe_in_one_line():
    from fastmodel.errors import PlanError
    from fastmodel.kernels.lm.rules import plan_status_row
    from fastmodel.lm.rules import check_plan
    from fastmodel.registry.lm import STATUS_CODES
    values = {**SMALL32, "pipeline_schedule": "dualpipe"}
    assert plan_status_row(row(**values)) == 0
    assert plan_status_row(row(**values, cuda_graph_microbatch_buffers=1)) == STATUS_CODES["schedule_not_runnable"]
    assert plan_status_row(row(**SMALL32, cuda_graph_microbatch_buffers=1)) == 0       # 1F1B: the MLPerf runs' kind
    with pytest.raises(PlanError) as caught:
        check_plan(row(**values, cuda_graph_microbatch_buffers=1))
    text = str(caught.value)
    assert "\n" not in text and "plan.cuda_graph_microbatch_buffers = 1" in text and "WeightGradStore" in text


# --- LOW 10: an explicit layout's end ranks count their own dense and MoE layers ------------------------------------

#: 8 layers, the first 2 dense, 4 routed experts of width 1024 (top-1), PP 2, layout n_last 4: rank 0 holds 2 dense
#: and 2 MoE layers, the last rank 4 MoE layers and the head; DDP over dp 2 (edp 2), Muon
MOE = dict(SMALL32, layers=8, dense_layers=2, moe_experts=4, moe_ffn=1024, moe_topk=1, pp=2, dp=2, n_gpus=4,
           global_batch=8, last_stage_layers=4, overlap_grad_reduce=0, optimizer="muon")
ROUTED = 4 * 2 * H * 1024                       # one MoE layer's routed experts (2 matrices of h x 1024 each)
MOE_LAYER = 4 * H * H + H * 4                   # its attention and router (no shared experts)


def _first_rank_step(columns):
    from fastmodel.kernels.lm.dp_step import END_FIRST, _data_parallel_step
    from fastmodel.kernels.lm.layer import W_PARAMS
    from fastmodel.kernels.lm.passes import N_WORK
    from fastmodel.kernels.lm.step import busiest_stage
    from fastmodel.registry.lm import RESULTS
    work, out = np.zeros(N_WORK), np.zeros(len(RESULTS))
    stage_mb = busiest_stage(columns, work)[0]
    _data_parallel_step(columns, work, 4.0, work[W_PARAMS], 4.0, stage_mb, out, END_FIRST, 0.0)
    names = [r.name for r in RESULTS]
    return out[names.index("comm_dp")], out[names.index("time_optimizer")]


def test_the_first_ranks_reduction_and_muon_step_are_of_its_own_layers_by_hand():
    """Rank 0 holds 2 dense layers (2 GEMM) and 2 MoE layers (2 MOE_LAYER + 2 ROUTED) and the embedding V h; the
    dense all-reduce is of 4 B x (2 GEMM + 2 MOE_LAYER + V h), the experts' over edp 2 of 4 B x 2 ROUTED. The step's
    average layer (here the last rank's MoE layer, ``last_rank_all_moe``) charged it 4 MoE layers, 4 ROUTED, experts
    it does not hold, against Muon's 2 dense + 2 MoE matrices. Muon steps the layers' matrices, so what AdamW steps
    is the embedding and the two routers: V h + 2 x 4 h."""
    from fastmodel.kernels.lm.memory_states import stored_grad_bytes
    from fastmodel.kernels.lm.muon import muon_step
    from fastmodel.kernels.lm.step import optimizer_bytes_per_param, optimizer_step_bytes
    from fastmodel.kernels.nccl import allreduce_time
    from fastmodel.kernels.roofline import memory_bound_time
    columns = row(**MOE)
    non_expert = 2 * GEMM + 2 * MOE_LAYER + V * H
    comm, optimizer = _first_rank_step(columns)
    assert comm == pytest.approx(allreduce_time(columns, 4.0 * non_expert, 2.0, 1.0)
                                 + allreduce_time(columns, 4.0 * 2 * ROUTED, 2.0, 1.0), rel=1e-12)
    local = non_expert + 2 * ROUTED             # DDP: the rank steps every parameter it holds
    ns, muon_bytes, muon_params = muon_step(columns, 2.0, 2.0, stored_grad_bytes(columns), 0.0)
    assert local - muon_params == pytest.approx(V * H + 2 * 4 * H, rel=1e-12)
    hand = ns + memory_bound_time(columns, optimizer_step_bytes(columns, local, local) + muon_bytes
                                  - muon_params * optimizer_bytes_per_param(columns))
    assert optimizer == pytest.approx(hand, rel=1e-12)


def test_layer_kind_params_are_the_layer_costs_count():
    from fastmodel.kernels.lm.layer import W_EXPERT_PARAMS, W_PARAMS, layer_costs, layer_kind_params
    from fastmodel.kernels.lm.passes import N_WORK
    columns = row(**MOE)
    for moe in (False, True):
        work = np.zeros(N_WORK)
        layer_costs(columns, moe, False, work)
        assert layer_kind_params(columns, moe) == pytest.approx((work[W_PARAMS], work[W_EXPERT_PARAMS]), rel=1e-15)
    assert layer_kind_params(columns, False)[0] == GEMM
    assert layer_kind_params(columns, True) == (MOE_LAYER + ROUTED, ROUTED)


def test_per_chunk_overlapped_reductions_get_no_drain_credit_by_hand():
    """Interleaved (vp 2) with overlap_grad_reduce: each chunk's reduction is launched at one wall time on every
    rank (docs/model.md §11.28), so the last rank's drain is not credited; exposed DP is the slower end rank's own
    per-chunk exposure, the larger of the two ranks' values computed alone. Without overlap the reductions start
    when each rank's schedule ends and the drain counts (the test above)."""
    from fastmodel.kernels.lm.dp_window import per_chunk_collectives
    values = {**SMALL32, "dp": 2, "n_gpus": 8, "vp": 2, "pipeline_schedule": "interleaved",
              "last_stage_layers": 14}
    overlapped = row(**values, overlap_grad_reduce=1)
    assert per_chunk_collectives(overlapped)
    assert not per_chunk_collectives(row(**{**values, "dp": 1, "n_gpus": 4}, overlap_grad_reduce=1))
    assert not per_chunk_collectives(row(**{**values, "vp": 1, "pipeline_schedule": "1f1b"}))
    with_drain = evaluate_table(table(1, **values, overlap_grad_reduce=1))
    same_ends = evaluate_table(table(1, **{**values, "last_stage_layers": 8}, overlap_grad_reduce=1))
    # the heavier last rank (14 layers + head) reduces 1.7x what the equal split's rank 0 does and, with no drain
    # credit, stays exposed above it (1.14 against 0.65 ms; crediting the 3 x 6 layer-backward drain gave 0.49 ms)
    assert with_drain["comm_dp"][0] > 1.5 * same_ends["comm_dp"][0]
    assert with_drain["exposed_dp"][0] > 1.5 * same_ends["exposed_dp"][0]


# --- MEDIUM 2: any per-layer CUDA graph under DualPipe (docs/model.md §11.37) ----------------------------------

def test_layer_cuda_graphs_are_refused_under_dualpipe_full_iteration_is_not():
    from fastmodel.errors import PlanError
    from fastmodel.kernels.lm.rules import plan_status_row
    from fastmodel.lm.rules import check_plan
    from fastmodel.registry.lm import STATUS_CODES
    values = {**SMALL32, "pipeline_schedule": "dualpipe"}
    assert plan_status_row(row(**values, cuda_graphs="layer")) == STATUS_CODES["schedule_not_runnable"]
    assert plan_status_row(row(**values, cuda_graphs="full_iteration")) == 0   # the whole step's order is captured
    assert plan_status_row(row(**values, cuda_graphs="none")) == 0
    assert plan_status_row(row(**SMALL32, cuda_graphs="layer")) == 0          # 1F1B: Megatron-Core's per-layer graphs
    with pytest.raises(PlanError) as caught:
        check_plan(row(**values, cuda_graphs="layer"))
    text = str(caught.value)
    assert "\n" not in text and "plan.cuda_graphs = layer" in text and "WeightGradStore" in text
