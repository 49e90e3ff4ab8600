"""The data-parallel overlap window under interleaving (kernels/lm/dp_window.py, docs/model.md §11.28).

Hand-derived case: p = 2 ranks, v = 2 chunks, m = 4 micro-batches. Megatron-Core's backward order on a rank
(schedules.py ``get_model_chunk_id``, core_v0.7.0.beta): virtual micro-batch k runs chunk
``v - 1 - (k mod 4) // 2``, i.e. k = 0..7 -> chunks 1, 1, 0, 0, 1, 1, 0, 0; chunk c's last one is k = 5 (c = 1)
and k = 7 (c = 0) = ``m v - 1 - c p``. On rank 0 the reduction of chunk 1 starts after k = 5 with two chunk
backwards b left; chunk 0's starts after the last. With b = 1 s:

- R = 3 s (1.5 s a chunk): chunk 1 reduces over [-2, -0.5], chunk 0 over [0, 1.5]: 1.5 s exposed, window 1.5 s.
- R = 6 s (3 s a chunk): chunk 1 over [-2, 1], chunk 0 queues behind it, [1, 4]: 4 s exposed, window 2 s.
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.dp_window import chunked_window, dp_overlap_windows
from fastmodel.kernels.lm.parallel import data_parallel
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C

PLAN = dict(layers=8, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=8, seq_len=2048, tp=1,
            pp=2, vp=2, dp=8, n_gpus=16, micro_batch=1, global_batch=32, sharding="distopt", overlap_grad_reduce=1,
            overlap_param_gather=1, pipeline_schedule="interleaved")


def test_two_chunks_two_ranks_by_hand():
    # per-chunk hidden compute: p chunk backwards = 2 x 1 s
    assert chunked_window(3.0, 2.0, 2.0) == pytest.approx(1.5, rel=1e-15)
    assert chunked_window(6.0, 2.0, 2.0) == pytest.approx(2.0, rel=1e-15)
    assert 3.0 - chunked_window(3.0, 2.0, 2.0) == pytest.approx(1.5, rel=1e-15)    # chunk 0 alone exposed
    assert 6.0 - chunked_window(6.0, 2.0, 2.0) == pytest.approx(4.0, rel=1e-15)    # queue: ends at t = 4


def test_window_matches_a_queue_of_chunks_launched_p_backwards_apart():
    # v = 4 chunks, launches at -c h (c = 3..0) on one stream; the last finish past t = 0 is the exposed part
    for total, h in ((2.0, 1.0), (4.0, 1.0), (10.0, 1.0), (10.0, 0.5)):
        done = -np.inf
        for c in (3, 2, 1, 0):
            done = max(done, -c * h) + total / 4.0
        assert total - chunked_window(total, 4.0, h) == pytest.approx(max(done, 0.0), rel=1e-12)
    assert chunked_window(5.0, 1.0, 9.0) == 0.0     # one chunk: nothing after its launch


def _stage_collectives(columns, params):
    """The stage's reduction and gather under the distributed optimizer: reduce-scatter and all-gather over dp = 8
    adjacent devices (tp = cp = 1), gradients in ``grad_reduce_bytes``, 16-bit weights; one collective per model
    chunk (v = 2), each of half the bytes and with its own latency (docs/model.md §11.65)."""
    grad = params * columns[C["grad_reduce_bytes"]]
    return 2.0 * allgather_time(columns, grad / 2.0, 8.0, 1.0), 2.0 * allgather_time(columns, params, 8.0, 1.0)


def test_interleaved_windows_from_the_stage_collectives():
    columns = row(**PLAN)
    params = 4e8
    reduce, gather = _stage_collectives(columns, params)
    assert reduce > 0.0 and gather > 0.0
    # 4 layers a stage: backward 4 x 2 ms, forward 4 x 1 ms of one micro-batch
    comm, _, _, _, backward, forward = data_parallel(columns, params, 8e-3, 4e-3, 8.0, 8.0, 1.0, 0.0, True)
    assert comm == pytest.approx(reduce + gather, rel=1e-12)     # the collectives the windows are taken from
    # chunk backward b = 2 layers x 2 ms; chunk c's reduction has c p b = 8 ms c after its launch
    assert backward == pytest.approx(min(reduce / 2.0, 2.0 * 4e-3), rel=1e-12)
    assert forward == pytest.approx(min(gather / 2.0, 2.0 * 2e-3), rel=1e-12)
    assert dp_overlap_windows(columns, reduce, gather, 8e-3, 4e-3) == pytest.approx((backward, forward), rel=1e-15)
    # the expert call (chunked False) keeps the windows it is given
    assert data_parallel(columns, params, 8e-3, 4e-3, 8.0, 8.0, 1.0, 0.0, False)[4:] == (8e-3, 4e-3)


def test_without_interleaving_the_window_is_one_micro_batch_of_the_stage():
    for plan in (dict(PLAN, vp=1, pipeline_schedule="1f1b"), dict(PLAN, pipeline_schedule="zb_h1", vp=1),
                 dict(PLAN, dp=1, n_gpus=2), dict(PLAN, sharding="fsdp")):
        assert dp_overlap_windows(row(**plan), 0.5, 0.25, 8e-3, 4e-3) == pytest.approx((8e-3, 4e-3), rel=1e-15)
        assert data_parallel(row(**plan), 4e8, 8e-3, 4e-3, 8.0, 8.0, 1.0, 0.0, True)[4:] == (8e-3, 4e-3)


def test_ddp_windows_take_its_allreduce_and_no_gather():
    columns = row(**dict(PLAN, sharding="ddp"))
    reduce = 2.0 * allreduce_time(columns, 4e8 * columns[C["grad_reduce_bytes"]] / 2.0, 8.0, 1.0)    # per chunk
    comm, _, after, _, backward, forward = data_parallel(columns, 4e8, 8e-3, 4e-3, 8.0, 8.0, 1.0, 0.0, True)
    assert comm == pytest.approx(reduce, rel=1e-12) and after == 0.0
    assert backward == pytest.approx(min(reduce / 2.0, 2.0 * 4e-3), rel=1e-12)
    assert forward == 0.0       # no gather: nothing to hide behind the forward


def test_each_chunk_collective_pays_its_ring_latency_by_hand():
    # MLPerf v3.1 n1344 (§11.65): dp 336 at stride tp = 4, two members a DGX node, 168 nodes. At 900 MB and at
    # 75 MB a chunk the ring runs NCCL's LL128 (§11.5: Simple's 2.19 ms of latency costs more than LL128's 8%
    # bandwidth), whose pass costs 10 us + 168 NVLink hops of 1.9 us + 168 network hops of 4.0 us (the device's
    # Simple hops 3.4 and 9.6 us scaled by NCCL's ratios): 1.001 ms. v = 12 chunk reduce-scatters and all-gathers
    # pay it 12 times where one stage-wide collective paid it once: 2 (v - 1) L more, the bandwidth terms alike
    columns = next(r for r in _records() if r.id == "mlperf-v31-gpt3-175b-nvidia-n1344").columns
    assert columns[C["vp"]] == 12 and columns[C["dp"]] == 336 and columns[C["tp"]] == 4
    assert columns[C["intra_latency"]] == 3.4e-6 and columns[C["inter_latency"]] == 9.6e-6
    latency = 10e-6 + 168 * 1.9e-6 + 168 * 4.0e-6
    params = 4.5e8
    whole = allgather_time(columns, params * columns[C["grad_reduce_bytes"]], 336.0, 4.0) \
        + allgather_time(columns, params * 2.0, 336.0, 4.0)
    comm = data_parallel(columns, params, 0.05, 0.02, 336.0, 336.0, 4.0, 0.0, True)[0]
    assert comm - whole == pytest.approx(2 * 11 * latency, rel=1e-9)
    assert 1e3 * latency == pytest.approx(1.001, abs=0.001)


def _records():
    from pathlib import Path

    from fastmodel.lm.records import read_records
    return read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")
