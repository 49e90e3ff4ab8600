"""One layer's forward costs (kernels/lm/layer.py): the idle time each tensor-parallel collective adds."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_TP, layer_costs
from fastmodel.kernels.nccl import allgather_time
from fastmodel.kernels.roofline import gemm_roofline, gemm_time
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import lower_record
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).parents[1] / "data"
TP8 = "simumax-b200-llama3_70b_l12_tp8_pp1_dp1_mbc32_cef"


def _record(record_id):
    for line in (DATA / "runs_dev_b200.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data["id"] == record_id:
            return lower_record(data)
    raise AssertionError(record_id)


def _tp(row):
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    return work[W_TP]


@pytest.mark.parametrize("sp, collectives", [(1.0, 4), (0.0, 2)])
def test_each_tp_collective_idles_the_gpu_once(sp, collectives):
    """Sequence parallelism runs an all-gather and a reduce-scatter around attention and around the MLP (4 per
    forward pass); without it two all-reduces run: 4 or 2 times collective_overhead_s (23.6 us on B200)."""
    row = _record(TP8).columns.copy()
    assert row[C["collective_overhead_s"]] == pytest.approx(23.6e-6)
    row[C["sequence_parallel"]] = sp
    bare = row.copy()
    bare[C["collective_overhead_s"]] = 0.0
    assert _tp(row) - _tp(bare) == pytest.approx(collectives * 23.6e-6, rel=1e-9)


def test_the_step_pays_it_forward_and_backward_on_every_layer_and_micro_batch():
    """Llama 3 70B (12 layers), TP 8 with SP, 32 micro-batches, no TP overlap: 12 x 32 x (4 + 4) collectives
    each 23.6 us longer, plus the backward's two wgrad re-gathers (docs/model.md §11.41), which run under their own
    dgrad GEMM (D): each costs max(0, AG + o - D) + s min(AG + o, D). QKV's D (0.150 ms) lies between AG
    (0.142 ms) and AG + o (0.166 ms): o adds (AG + o - D) + s D - s AG = 0.70 o; FC1's D (0.516 ms) holds
    AG + o: s o. So 12 x 32 x 8.85 o = 80.2 ms more step time; and the LM head's re-gather of its SP input
    (docs/model.md §11.42) under the head's dgrad GEMM (T x 8,192 x 128,256 / 8, far longer): s o per micro-batch,
    32 x 0.15 o = 0.11 ms; since §11.44 the head's forward input gather (o exposed) and its backward reduce-scatter
    under the wgrad GEMM (s o) each micro-batch, the embedding's reduce-scatter forward and its gradient's
    all-gather backward (2 o exposed, one rank holds both ends), and the once-a-step TP all-reduce of the norms'
    gradients (o)."""
    row = _record(TP8).columns
    bare = row.copy()
    bare[C["collective_overhead_s"]] = 0.0
    step = evaluate_table(np.stack([row, bare], axis=1))["step_time"]
    o, s, h, tokens = 23.6e-6, row[C["comm_sm_share"]], 8192.0, 4096.0
    ag = allgather_time(row, 2.0 * tokens * h, 8.0, 1.0)
    qkv = gemm_roofline(row, 1.0, tokens, (64.0 + 16.0) * 128.0 / 8.0, h, False, 2.0, 1.0)
    fc1 = gemm_roofline(row, 1.0, tokens, 2.0 * 28672.0 / 8.0, h, False, 2.0, 1.0)
    assert ag < qkv < ag + o < fc1
    regather_o = (ag + o - qkv) + s * qkv - s * ag + s * o
    assert regather_o / o == pytest.approx(0.85, abs=0.01)
    head_dgrad = gemm_time(row, tokens, row[C["vocab"]] / 8.0, h, False)
    assert head_dgrad > ag + o
    assert step[0] - step[1] == pytest.approx(12 * 32 * (8 * o + regather_o) + 32 * (2 * s * o + 3 * o) + o, rel=1e-6)


def _tp16_layer(**values):
    """A Llama 3 70B-shaped layer (h 8,192, micro-batch 1 x 8,192 tokens) under TP 16 on 8-GPU NVLink domains: the
    tensor-parallel group spans 2 domains (docs/model.md §11.18); the table's default network (registry/lm.py)."""
    from fastmodel.lm.table import row

    base = dict(hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, layers=80, seq_len=8192, micro_batch=1,
                n_gpus=16, tp=16, dp=1, domain_size=8, intra_bw=450e9, intra_eff=0.8, intra_latency=3.4e-6,
                inter_bw=50e9, inter_eff=0.85, inter_latency=9.6e-6, collective_overhead_s=0.0)
    return row(**{**base, **values})


def test_tp_across_two_nodes_prices_its_all_reduces_on_eight_nics_per_node():
    """TP 16 over 2 nodes of 8, no SP: 2 forward all-reduces of S = 2 B x 8,192 tokens x 8,192 = 128 MiB. g_in = 8
    members per domain, g_out = 2 domains; each device moves V = 2 x 15/16 x S = 240 MiB; the bus is
    min(NVLink 450 x 0.8 = 360 GB/s, 8 NICs x 50 x 0.85 = 340 GB/s) = 340 GB/s. NCCL's candidates (kernels/nccl.py,
    §11.5): ring Simple 8.4 us + 2 passes x (14 NVLink steps x 3.4 us + 2 network steps x 9.6 us) + V / bus;
    ring LL128 10 us + 2 x (14 x 3.4 x 1.9/3.4 + 2 x 9.6 x 4.0/9.6) us + V / (0.92 bus); ring LL (a quarter of the
    bus) and NCCL's tree, 2 S at 0.92 of the bus plus 2 x (7 NVLink hops + log2(2 nodes) = 1 network hop): Simple
    28 us hops, LL128 4.4 us + 1.25 / 8.5 us hops at 120/128 of that bandwidth (treeCorrectionFactor at log2i(128 MiB
    >> 6) = 21: Simple .9, LL128 1.0). NCCL's ring plateau (v2.17.1-1 tuning.cc lines 342-345: across nodes, from
    16 / 16 x 64 KiB on, x1.5 at compute capability >= 9.0 or unstated) puts the Simple ring's 142 us of latency at
    213 us (0.953 ms), so the LL128 ring wins: 79.2 us + 0.805 ms = 0.884 ms (0.882 ms, Simple, without it)."""
    s = 2.0 * 8192 * 8192
    v = 2.0 * 15.0 / 16.0 * s
    bus = min(450e9 * 0.8, 8 * 50e9 * 0.85)
    simple = 8.4e-6 + 2 * (14 * 3.4e-6 + 2 * 9.6e-6) + v / bus
    ll128 = 10.0e-6 + 2 * (14 * 1.9e-6 + 2 * 4.0e-6) + v / (0.92 * bus)
    ll = 3.6e-6 + 2 * (14 * 0.47e-6 * 1.8 + 2 * 2.7e-6) + v / (0.25 * bus)
    tree_ll128 = 4.4e-6 + 2 * (7 * 1.25e-6 + 1 * 8.5e-6) + 2 * s / (0.92 * 120 / 128 * bus)
    simple_plateau = 1.5 * (8.4e-6 + 2 * (14 * 3.4e-6 + 2 * 9.6e-6)) + v / bus
    tree_simple = 2 * (7 * 28e-6 + 1 * 28e-6) + 2 * s / (0.92 * bus * 0.9)
    assert ll128 < min(simple_plateau, ll, tree_simple, tree_ll128) and simple < ll128
    assert (simple, simple_plateau, ll128) == (pytest.approx(882.17e-6, abs=0.01e-6),
                                               pytest.approx(953.17e-6, abs=0.01e-6),
                                               pytest.approx(883.73e-6, abs=0.01e-6))
    assert _tp(_tp16_layer(sequence_parallel=0)) == pytest.approx(2 * ll128, rel=1e-12)
    # with the ring fixed (collective_algorithm 1), NCCL's fastest protocol: LL128 for 128 MiB
    assert _tp(_tp16_layer(sequence_parallel=0, collective_algorithm=1)) == pytest.approx(2 * ll128, rel=1e-12)
    # with SP: 2 all-gathers + 2 reduce-scatters, ring only, 15/16 S each, one pass: Simple
    gather = 8.4e-6 + 14 * 3.4e-6 + 2 * 9.6e-6 + 15.0 / 16.0 * s / bus
    assert _tp(_tp16_layer(sequence_parallel=1)) == pytest.approx(4 * gather, rel=1e-12)


def test_tp_across_nodes_costs_more_than_inside_one_when_the_nics_are_slow():
    """The same layer at TP 8 in one domain moves 2 x 7/8 S at the NVLink bus of 360 GB/s; at TP 16 over 100 Gb/s
    NICs (12.5 GB/s each, 8 x 12.5 x 0.85 = 85 GB/s per domain) it moves 2 x 15/16 S at 85 GB/s: over 4x slower."""
    slow = dict(inter_bw=12.5e9, sequence_parallel=0)
    assert _tp(_tp16_layer(**slow)) > 4.0 * _tp(_tp16_layer(**slow, tp=8, n_gpus=8))
