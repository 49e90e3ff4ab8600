"""Per-layer CUDA graphs' static buffers in the memory model (kernels/lm/memory_peak.py ``cuda_graph_buffer_bytes``).

Hand-derived from Transformer Engine v1.6rc1 transformer_engine/pytorch/graph.py (the TE the MLPerf v4.0 NVIDIA GPT-3
submission pins, its Dockerfile ``TE_REVISION=v1.6rc1``): with ``_order`` every (layer, micro-batch) gets its own
forward and backward graph (lines 187-247); each keeps its static outputs (captured into the shared pool), its static
output gradients (``torch.empty_like`` of the outputs) and its static input gradients (captured) for as long as the
graphed callables live, and its forward copies the caller's input into its static input (lines 325-326). Beyond what
an eager run holds, that is 3 layer outputs ``X = 2 T h / t_sp`` per graph: ``3 m L_r X`` per rank.
docs/model_memory.md "CUDA graphs (issue 23)".
"""

import copy
import json
from pathlib import Path

import numpy as np

from fastmodel.kernels.lm.layout import M_BUFFERS, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_peak import cuda_graph_buffer_bytes
from fastmodel.lm.memory_timeline import memory_timeline
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
# T = b s = 2 x 1,024 tokens, h = 512, tp 2 with sequence parallelism: X = 2 B x 2,048 x 512 / 2 = 1 MiB
GPT = dict(layers=8, hidden=512, ffn=2048, heads=8, kv_heads=8, head_dim=64, vocab=64, seq_len=1024, gated_mlp=0,
           micro_batch=2, global_batch=12, dp=2, tp=2, pp=2, sequence_parallel=1, sharding="ddp", recompute="none",
           flash_attention=1, dropout=0, cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0,
           nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)
X = 2 * 2 * 1024 * 512 // 2


def peak(columns):
    out = np.zeros(N_MEMORY_KINDS)
    stage = memory_row(columns, out)
    return out, stage


def test_three_layer_outputs_per_layer_and_micro_batch():
    # m = 12 / (2 x 2) = 3 micro-batches, L_r = 8 / 2 = 4 layers per rank: 3 x 3 x 4 = 36 layer outputs of 1 MiB
    on = row(**GPT, cuda_graph_microbatch_buffers=1)
    assert cuda_graph_buffer_bytes(on, 0.0) == 3 * 3 * 4 * X == 36 * 2**20
    assert cuda_graph_buffer_bytes(on, 1.0) == 36 * 2**20
    # without sequence parallelism the layer output is replicated over tp: twice the bytes
    assert cuda_graph_buffer_bytes(row(**{**GPT, "sequence_parallel": 0}, cuda_graph_microbatch_buffers=1), 0.0) \
        == 72 * 2**20
    # eager (or graphs that reuse their buffers): nothing
    assert cuda_graph_buffer_bytes(row(**GPT), 0.0) == 0.0


def test_the_buffers_are_buffers_at_the_peak_and_at_every_moment_of_the_timeline():
    off, on = row(**GPT), row(**GPT, cuda_graph_microbatch_buffers=1)
    (a, stage_a), (b, stage_b) = peak(off), peak(on)
    assert stage_a == stage_b
    assert b[M_BUFFERS] - a[M_BUFFERS] == 36 * 2**20            # the whole difference, in the buffers kind
    assert np.array_equal(np.delete(b, M_BUFFERS), np.delete(a, M_BUFFERS))
    timeline_on, timeline_off = memory_timeline(on), memory_timeline(off)
    for with_graphs, without in zip(timeline_on.stages, timeline_off.stages):
        extra = with_graphs.values - without.values
        assert np.allclose(extra[:, M_BUFFERS], 36 * 2**20)      # the start, every forward and backward, the step
        assert np.allclose(np.delete(extra, M_BUFFERS, axis=1), 0.0)
    assert timeline_on.stages[0].labels[0] == "start"            # held before the step's first forward too
    assert np.isclose(max(s.totals.max() for s in timeline_on.stages), b.sum())   # the timeline's peak is the kernel's


def test_mlperf_gpt3_rows_hold_3_4_gib_of_graph_buffers():
    # GPT-3 175B, tp 4 (sequence parallel), pp 6, vp 8, b 1, s 2,048, global batch 2,904 over dp 484: m = 6 micro-batches,
    # 96 / 6 = 16 layers per rank, X = 2 x 2,048 x 12,288 / 4 = 12,582,912 B: 3 x 6 x 16 X = 3,623,878,656 B (3.375 GiB)
    record = next(json.loads(line) for line in RUNS.read_text().splitlines()
                  if '"mlperf-v40-gpt3-175b-eos-dfw_n1452' in line)
    assert record["plan"]["cuda_graph_microbatch_buffers"] is True
    on = lower_record(record).columns
    assert cuda_graph_buffer_bytes(on, 0.0) == 3 * 6 * 16 * 12_582_912 == 3_623_878_656
    eager = copy.deepcopy(record)
    del eager["plan"]["cuda_graph_microbatch_buffers"]
    (a, _), (b, stage) = peak(lower_record(eager).columns), peak(on)
    assert stage == 0.0                                         # rank 0 holds all 48 chunk forwards at its peak
    assert b.sum() - a.sum() == 3_623_878_656
    assert b.sum() < 0.95 * 80 * 2**30                          # the run ran: it still fits the usable HBM
