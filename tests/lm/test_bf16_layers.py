"""The layers a low-precision run keeps in BF16 (docs/model.md §11.39): the head's costs survive a leading first
rank, the counts Megatron-LM refuses are refused (and BF16 layers under DualPipe), the BF16 layers split by virtual
chunk, and the timeline's TP ops and exposed TP follow the kernel's forward / backward split."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK as N_LAYER_WORK
from fastmodel.kernels.lm.layer import W_PARAMS
from fastmodel.kernels.lm.passes import N_WORK, head_passes
from fastmodel.kernels.lm.step import busiest_stage, last_rank_all_moe


def _columns(model, system, plan, num_nodes=None, **execution):
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    train = load_train_task("llm-pretrain")
    return point_columns(model, system, train, plan=plan, execution=execution, num_nodes=num_nodes)


def test_a_leading_first_rank_keeps_the_heads_costs_for_the_step():
    """DeepSeek-V2 (60 layers, the first dense, every other MoE), tp1.pp4.ep8 on 16 DGX H100, FP8 blockwise, the
    first 15 layers in BF16: rank 0's 15 BF16 layers outrun the last rank's 15 MoE layers and the head, so rank 0
    leads (head share 0, 15 BF16 layers). Its layers are the average's, re-run after the last rank's MoE passes;
    that re-run must leave the head's parameters (V h / t = 102,400 x 5,120 = 524,288,000) and FLOPs in work[W_*],
    which step_row reads as the head's, not the layer's (the average layer's 669,089,792)."""
    columns = _columns("deepseek-v2", "dgx-h100", "tp1.pp4.ep8", 16, precision="fp8", fp8_recipe="blockwise",
                       bf16_layers_start=15)
    assert last_rank_all_moe(columns)
    work = np.zeros(N_WORK)
    *_, layers, share, n16, _, _ = busiest_stage(columns, work)
    assert (layers, share, n16) == (15.0, 0.0, 15.0)
    head = np.zeros(N_WORK)
    head_passes(columns, head)
    assert head[W_PARAMS] == 102_400 * 5_120 == 524_288_000
    np.testing.assert_array_equal(work[:N_LAYER_WORK], head[:N_LAYER_WORK])


def _row(precision, **values):
    from tests.lm.lowprec_rows import precision_row

    return precision_row(precision, **{"peak_flops_8": 4.5e15, "peak_flops_4": 9e15, "compute_capability": 10.0,
                                       **values})


def test_the_rule_table_refuses_the_bf16_layer_counts_megatron_refuses():
    """Megatron-LM@d98e8a6 transformer_config.py 1527-1557, under fp8: BF16 layers with the delayed recipe (its
    default, line 594-596; so an unstated recipe too) raise, and so does a count above num_layers // pp per end.
    L = 30, pp = 4: floor(30 / 4) = 7 (ceil would allow 8); vp = 2: an end chunk's floor(30 / 8) = 3. A sweep
    keeps the code of each point."""
    from fastmodel.kernels.lm.bf16_layers import bf16_layers_cap
    from fastmodel.lm.rules import plan_status
    from fastmodel.registry.lm import STATUS_CODES

    ok, delayed, above = 0, STATUS_CODES["bf16_layers_delayed"], STATUS_CODES["bf16_layers_above_stage"]
    base = dict(layers=32.0, pp=4.0, uneven_stages=1.0, n_gpus=4.0, tp=1.0, cp=1.0, ep=1.0, dp=1.0, global_batch=8.0,
                micro_batch=1.0)
    cases = [
        (_row("fp8", fp8_recipe=0.0, bf16_layers_start=1.0, **base), delayed),      # unstated: Megatron's delayed
        (_row("fp8", fp8_recipe=1.0, bf16_layers_end=1.0, **base), delayed),
        (_row("fp8", fp8_recipe=1.0, **base), ok),                                  # no BF16 layer: nothing refused
        (_row("fp8", fp8_recipe=2.0, bf16_layers_start=8.0, **base), ok),           # 32 // 4 = 8
        (_row("fp8", fp8_recipe=2.0, bf16_layers_start=9.0, **base), above),
        (_row("fp8", fp8_recipe=2.0, bf16_layers_end=8.0, **{**base, "layers": 30.0}), above),  # 30 // 4 = 7
        (_row("fp8", fp8_recipe=2.0, bf16_layers_end=7.0, **{**base, "layers": 30.0}), ok),
        (_row("fp4", bf16_layers_end=4.0, vp=2.0, **{**base, "layers": 30.0}), above),  # 30 // 8 = 3
        (_row("fp4", bf16_layers_end=3.0, vp=2.0, **{**base, "layers": 30.0}), ok),
        (_row("bf16", bf16_layers_start=99.0, **base), ok),                         # read only under fp8 / fp4
    ]
    assert bf16_layers_cap(cases[5][0]) == 7.0 and bf16_layers_cap(cases[7][0]) == 3.0
    table = np.stack([row for row, _ in cases], axis=1)
    assert list(plan_status(table)) == [code for _, code in cases]


def test_fastmodel_run_refuses_them_with_one_line_and_exit_2():
    from click.testing import CliRunner

    from fastmodel.cli import main

    args = ["run", "-m", "llama3-8b", "-s", "dgx-b200", "-t", "llm-pretrain", "-x", "precision=fp8"]
    result = CliRunner().invoke(main, [*args, "-x", "bf16_layers_start=1"])
    assert result.exit_code == 2 and "bf16_layers_delayed" in result.output
    result = CliRunner().invoke(main, [*args, "-x", "fp8_recipe=tensorwise", "-p", "tp1.pp4", "-x", "bf16_layers_end=9"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "bf16_layers_end = 9: each at most floor(layers / pp) = floor(32 / 4) = 8" in result.output


def _tp_ops(tl):
    """(forward, backward) seconds of the layers' TP collectives in a timeline (the LM head's left out)."""
    tp = [(n, e - s) for n, s, e in zip(tl.names, tl.start, tl.end) if n.endswith(" tp") and "LM head" not in n]
    return sum(d for n, d in tp if " fwd " in n), sum(d for n, d in tp if " bwd " in n)


def test_the_timeline_splits_tp_forward_and_backward_as_the_kernel_does_under_mxfp8_and_sp():
    """Llama 3 8B, tp4 with SP on a DGX B200, MXFP8, selective recompute (no TP replayed): a layer's forward TP seconds are W_TP (its
    all-gathers move 1.03125 B an element) and its backward W_TP_BACKWARD (2.0625 B: rowwise and columnwise
    copies, §11.40), so the timeline's backward : forward TP is W_TP_BACKWARD / W_TP, not 1 (the equal
    collectives the 1 / (1 + backward runs) split assumed). With 2 + 2 BF16 layers the BF16 layers' ops carry the
    bf16 row's split (its own W_TP_BACKWARD / W_TP)."""
    from fastmodel.kernels.lm.bf16_layers import bf16_row
    from fastmodel.kernels.lm.layer import W_TP, W_TP_BACKWARD, layer_costs, recompute_share
    from fastmodel.lm.timeline import timeline
    from fastmodel.registry.lm import COLUMN_INDEX as C

    columns = _columns("llama3-8b", "dgx-b200", "tp4", precision="fp8", fp8_recipe="mxfp8", sequence_parallel=True)
    assert columns[C["sequence_parallel"]] == 1.0 and recompute_share(columns)[0] == 0.0  # selective: no TP replay
    work = np.zeros(N_LAYER_WORK)
    layer_costs(columns, False, False, work)
    assert work[W_TP_BACKWARD] > 1.01 * work[W_TP] > 0.0
    forward, backward = _tp_ops(timeline(columns))
    assert backward / forward == pytest.approx(work[W_TP_BACKWARD] / work[W_TP], rel=1e-9)
    kept = _columns("llama3-8b", "dgx-b200", "tp4", precision="fp8", fp8_recipe="mxfp8", sequence_parallel=True,
                    bf16_layers_start=2, bf16_layers_end=2)
    wide = np.zeros(N_LAYER_WORK)
    layer_costs(bf16_row(kept), False, False, wide)
    ratio16 = wide[W_TP_BACKWARD] / wide[W_TP]  # 16-bit gathers (and §11.41's wgrad re-gathers backward)
    assert abs(ratio16 - work[W_TP_BACKWARD] / work[W_TP]) > 0.01
    tl = timeline(kept)
    seconds = tl.end - tl.start
    for on, ratio in ((True, ratio16), (False, work[W_TP_BACKWARD] / work[W_TP])):  # BF16 layers, the FP8 ones
        pick = [("(BF16)" in n) == on and n.endswith(" tp") and "LM head" not in n for n in tl.names]
        f = float(np.sum(seconds[np.array([p and " fwd " in n for p, n in zip(pick, tl.names)])]))
        b = float(np.sum(seconds[np.array([p and " bwd " in n for p, n in zip(pick, tl.names)])]))
        assert b / f == pytest.approx(ratio, rel=1e-9)


def test_under_interleaving_only_an_end_chunks_layers_are_the_end_ranks():
    """Megatron-Core places layers by virtual chunk (``get_transformer_layer_offset``): L = 32, pp = 4, vp = 2,
    chunks of 32 / 8 = 4 layers, rank r holding chunks r and r + 4. start = 8 (Megatron's floor(32 / 4) allows it)
    puts layers 0-3 on rank 0 and 4-7 on rank 1, which the model, charging BF16 layers to the end ranks only, would
    put all on rank 0: refused (bf16_layers_above_stage); start = 4 (rank 0's first chunk) runs, as does 8
    without interleaving."""
    from fastmodel.kernels.lm.bf16_layers import bf16_layers_cap
    from fastmodel.kernels.lm.pipeline_orders import virtual_stage
    from fastmodel.lm.pipeline import chunk_layers
    from fastmodel.lm.rules import plan_status
    from fastmodel.registry.lm import STATUS_CODES

    base = dict(layers=32.0, pp=4.0, n_gpus=4.0, tp=1.0, cp=1.0, ep=1.0, dp=1.0, global_batch=8.0, micro_batch=1.0,
                pipeline_schedule=1.0, fp8_recipe=2.0)
    # the model's placement: virtual stage k = chunk x pp + rank (virtual_stage) holds chunk_layers' count, in order
    counts = chunk_layers(32, 4, 2)
    chunks = sorted((virtual_stage("interleaved", 4, s, c), s, int(counts[c, s])) for c in range(2) for s in range(4))
    ranks = [s for _, s, n in chunks for _ in range(n)]
    assert ranks[:8] == [0] * 4 + [1] * 4
    cap = bf16_layers_cap(_row("fp8", vp=2.0, **base))
    assert cap == 4.0 and set(ranks[:4]) == {0} and ranks[4] != 0      # the cap is rank 0's first chunk, no more
    rows = [_row("fp8", vp=2.0, bf16_layers_start=8.0, **base), _row("fp8", vp=2.0, bf16_layers_start=4.0, **base),
            _row("fp8", vp=1.0, bf16_layers_start=8.0, **{**base, "pipeline_schedule": 0.0})]
    codes = list(plan_status(np.stack(rows, axis=1)))
    assert codes == [STATUS_CODES["bf16_layers_above_stage"], 0, 0]


def test_the_timelines_forward_exposed_tp_is_the_kernels_without_tp_overlap():
    """Llama 3 8B, tp4 with SP on a DGX B200, BF16, Megatron defaults (no tp_comm_overlap): the kernel exposes the
    whole forward TP (``passes._add_layer_kind``: tp_share 1 without overlap) and takes the wgrad re-gathers'
    hidden seconds (W_TP_HIDDEN, §11.41) off the backward only, so a micro-batch's forward gaps on the compute
    stream are layers x A_EXPOSED_F, not the collectives' forward share of the exposed seconds."""
    from fastmodel.kernels.lm.layer import W_TP_HIDDEN, layer_costs
    from fastmodel.kernels.lm.passes import A_EXPOSED_F, layer_passes
    from fastmodel.lm.timeline import timeline
    from fastmodel.registry.lm import COLUMN_INDEX as C

    columns = _columns("llama3-8b", "dgx-b200", "tp4", sequence_parallel=True)
    assert columns[C["tp_comm_overlap"]] == 0.0 and columns[C["cp"]] == columns[C["ep"]] == 1.0
    layer = np.zeros(N_LAYER_WORK)
    layer_costs(columns, False, False, layer)
    assert layer[W_TP_HIDDEN] > 0.0                 # the re-gathers hide some backward TP: the splits differ
    work = np.zeros(N_WORK)
    layer_passes(columns, work)
    tl = timeline(columns)
    on = [i for i in np.argsort(tl.start) if tl.stream[i] == 0]
    fwd = [i for i in on if tl.names[i].startswith("mb0 ") and " fwd" in tl.names[i] and "LM head" not in tl.names[i]]
    head = next(i for i in on if tl.names[i] == "mb0 LM head fwd")
    busy = float(np.sum([tl.end[i] - tl.start[i] for i in fwd]))
    gaps = tl.start[head] - tl.start[fwd[0]] - busy
    assert gaps == pytest.approx(columns[C["layers"]] * work[A_EXPOSED_F], rel=1e-9)


def test_bf16_layers_under_dualpipe_are_refused():
    """DualPipe puts stages s and pp - 1 - s on rank s (``pipeline.mirror_stage``): with pp 4, rank 0 holds copy
    A's first layers and copy B's last, which bf16_stage_layers (the first layers on rank 0, the last on rank 3)
    does not place, and Megatron-LM, whose flags these are, runs no DualPipe: refused (bf16_layers_dualpipe),
    while 1F1B with the same layers runs and DualPipe without BF16 layers or under bf16 runs."""
    from fastmodel.kernels.lm.pipeline import mirror_stage
    from fastmodel.lm.rules import plan_status
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.registry.lm import PIPELINE_SCHEDULES, STATUS_CODES

    base = dict(layers=32.0, pp=4.0, n_gpus=4.0, tp=1.0, cp=1.0, ep=1.0, dp=1.0, global_batch=8.0, micro_batch=1.0)
    dual, one = float(PIPELINE_SCHEDULES["dualpipe"]), float(PIPELINE_SCHEDULES["1f1b"])
    row = _row("fp4", bf16_layers_end=2.0, pipeline_schedule=dual, **base)
    assert row[C["pipeline_schedule"]] == dual and mirror_stage(row, 0.0) == 3.0   # rank 0 also runs stage 3
    rows = [row, _row("fp4", bf16_layers_end=2.0, pipeline_schedule=one, **base),
            _row("fp4", pipeline_schedule=dual, **base), _row("bf16", bf16_layers_end=2.0, pipeline_schedule=dual, **base)]
    assert list(plan_status(np.stack(rows, axis=1))) == [STATUS_CODES["bf16_layers_dualpipe"], 0, 0, 0]
