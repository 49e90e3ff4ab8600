"""The serving engines' peer-to-peer allreduce (kernels/serve/allreduce.py), derived by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.serve.allreduce import serve_allreduce
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, device_columns, evaluate
from fastmodel.serve.profiles import profile_columns

MIB = 1024 * 1024


def _row(device="H100", limit=8 * MIB):
    row = columns("llama3.1-70b", device, tp=8, input_len=128, output_len=128, batch_size=1).copy()
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = limit
    return row


def _hop(d):
    return d["intra_latency"] * 0.47 / 3.4      # NCCL's LL NVLink hop (tuning.cc .47 us of Simple's 3.4 us)


def test_one_shot_two_shot_and_nccl_by_hand():
    d = device_columns("H100")
    bw = d["intra_bw"] * d["intra_eff"]
    row = _row()
    small = 2.0 * 8192          # one token of a 8192-wide model in BF16
    one = d["kernel_overhead_s"] + 2 * _hop(d) + 7 * small / bw
    assert serve_allreduce(row, small, 8.0, 1.0) == pytest.approx(one, rel=1e-12)
    mid = 1.0 * MIB             # over vLLM's 256 KiB one-shot limit at 8 GPUs, under 8 MiB: two-shot
    two = d["kernel_overhead_s"] + 3 * _hop(d) + 6.0e-6 + 2 * 7 / 8 * mid / bw
    assert serve_allreduce(row, mid, 8.0, 1.0) == pytest.approx(two, rel=1e-12)
    assert serve_allreduce(row, mid, 4.0, 1.0) == pytest.approx(        # 4 GPUs: one-shot up to 512 KiB only
        d["kernel_overhead_s"] + 3 * _hop(d) + 6.0e-6 + 2 * 3 / 4 * mid / bw, rel=1e-12)
    assert serve_allreduce(row, 400 * 1024, 4.0, 1.0) == pytest.approx(
        d["kernel_overhead_s"] + 2 * _hop(d) + 3 * 400 * 1024 / bw, rel=1e-12)
    assert serve_allreduce(row, mid, 2.0, 1.0) == pytest.approx(        # 2 GPUs: always one-shot
        d["kernel_overhead_s"] + 2 * _hop(d) + mid / bw, rel=1e-12)
    big = 16.0 * MIB            # over the buffer: NCCL
    assert serve_allreduce(row, big, 8.0, 1.0) == allreduce_time(row, big, 8.0, 1.0)
    assert serve_allreduce(row, small, 3.0, 1.0) == allreduce_time(row, small, 3.0, 1.0)     # unsupported size
    assert serve_allreduce(row, small, 8.0, 2.0) == allreduce_time(row, small, 8.0, 2.0)     # spans two nodes
    assert serve_allreduce(_row(limit=0.0), small, 8.0, 1.0) == allreduce_time(row, small, 8.0, 1.0)
    # the P2P kernel beats NCCL's LL ring (3.6 us + 14 hops) on one token
    assert one < 3.6e-6 + 14 * _hop(d)


def test_decode_step_saves_two_allreduces_per_layer():
    d = device_columns("H100")
    kw = dict(tp=4, input_len=128, output_len=128, batch_size=1)
    nccl = evaluate("llama3.1-70b", "H100", custom_allreduce_bytes=0, **kw)
    p2p = evaluate("llama3.1-70b", "H100", custom_allreduce_bytes=8 * MIB, **kw)
    h = 8192
    volume = 2 * 3 / 4 * 2.0 * h
    ring = 3.6e-6 + 2 * 3 * _hop(d) + volume / (d["intra_bw"] * d["intra_eff"] / 4)
    assert ring < 2 * math.log2(4) * d["intra_latency"]          # NCCL: LL ring beats the tree
    one = d["kernel_overhead_s"] + 2 * _hop(d) + 3 * 2.0 * h / (d["intra_bw"] * d["intra_eff"])
    assert nccl["decode_comm"] - p2p["decode_comm"] == pytest.approx(2 * 80 * (ring - one) * 127, rel=1e-6)
    assert nccl["decode_gemm"] == p2p["decode_gemm"]


def test_engine_profiles_set_their_buffers():
    big = 141 * 2**30
    assert profile_columns("vllm", (0, 18, 0), big)["custom_allreduce_bytes"] == 8 * MIB
    assert profile_columns("sglang", None, big)["custom_allreduce_bytes"] == 8 * MIB
    assert profile_columns("trtllm", None, big)["custom_allreduce_bytes"] == 4 * MIB + 1   # up to 4 MiB
    assert np.all(columns("llama3.1-8b", "H100", batch_size=1)[COLUMN_INDEX["custom_allreduce_bytes"]] == 0.0)


def test_expert_parallel_without_attention_dp_reduces_like_a_dense_mlp():
    """Without attention DP every GPU of the TP group holds every token: EP needs no dispatch, one allreduce of
    the partial expert outputs over the group (vLLM use_all2all_kernels = dp_size > 1 and use_ep; TensorRT-LLM
    enable_alltoall needs enable_attention_dp). Under attention DP the all-to-all stays."""
    from fastmodel.kernels.nccl import alltoall_time
    from fastmodel.kernels.serve.costs import layer_comm

    row = columns("mixtral-8x7b", "H100", tp=8, ep=8, batch_size=16).copy()
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = 8 * MIB
    h = row[COLUMN_INDEX["hidden"]]
    m = 16.0
    one = serve_allreduce(row, 2.0 * m * h, 8.0, 1.0)
    assert layer_comm(row, m, 1.0) == pytest.approx(2.0 * one, rel=1e-12)
    assert layer_comm(row, m, 0.0) == pytest.approx(2.0 * one, rel=1e-12)
    dp = row.copy()                       # 4 attention-DP groups of 2: the dispatch and combine all-to-alls
    dp[COLUMN_INDEX["tp"]] = 2.0
    dp[COLUMN_INDEX["attention_dp"]] = 4.0
    mine = 2.0 * m / 4.0 * h
    expected = serve_allreduce(dp, mine, 2.0, 1.0) + 2.0 * alltoall_time(dp, mine * dp[COLUMN_INDEX["moe_topk"]],
                                                                          8.0, 1.0)
    assert layer_comm(dp, m, 1.0) == pytest.approx(expected, rel=1e-12)     # each expert on one GPU: no allreduce


def test_attention_dp_with_the_all_gather_dispatcher_gathers_and_scatters_over_the_stage():
    """vLLM's and SGLang's default EP path under attention DP (moe_dispatcher 1): all-gather every group's tokens
    and reduce-scatter the outputs over the tp x attention_dp GPUs, an allreduce's volume of all m tokens;
    TensorRT-LLM keeps its all-to-all only for ep > top_k on GB200/GB300 (multi-node NVLink)."""
    from fastmodel.kernels.serve.costs import layer_comm
    from fastmodel.serve.profiles import moe_dispatcher

    row = columns("mixtral-8x7b", "H100", tp=2, attention_dp=4, ep=8, batch_size=16).copy()
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = 8 * MIB
    row[COLUMN_INDEX["moe_dispatcher"]] = 1.0
    h = row[COLUMN_INDEX["hidden"]]
    m = 16.0
    expected = serve_allreduce(row, 2.0 * m / 4.0 * h, 2.0, 1.0) + serve_allreduce(row, 2.0 * m * h, 8.0, 1.0)
    assert layer_comm(row, m, 1.0) == pytest.approx(expected, rel=1e-12)
    assert moe_dispatcher("vllm", 8, 2, True) == 1.0
    assert moe_dispatcher("sglang", 8, 2, True) == 1.0
    assert moe_dispatcher("trtllm", 8, 2, True) == 0.0
    assert moe_dispatcher("trtllm", 4, 8, True) == 1.0      # Kimi-K2.5's top-8 over EP 4: all-gather
    assert moe_dispatcher("trtllm", 8, 2, False) == 1.0     # one 8-GPU node (B200): no multi-node NVLink
    from fastmodel.serve.records import multi_node_nvlink
    assert multi_node_nvlink({"system": {"nvlink_domain_size": 72, "gpus_per_node": 4}}, {})
    assert multi_node_nvlink({"system": {}}, {"domain_size": 72})                       # GB200's device file
    assert not multi_node_nvlink({"system": {"gpus_per_node": 8}}, {})                  # B200 / H100 nodes



# vLLM PR #24111 (2025-09-02), "Isolated primitives benchmark results", H100, TP=6, hidden 8192, BF16: vLLM's
# custom allreduce in ms by message MiB (0.5 ... 4 MiB = 32 ... 256 tokens).
CA_TP6_H100_MS = {"1stage": (0.013, 0.021, 0.030, 0.038, 0.053, 0.070),
                  "2stage": (0.015, 0.017, 0.020, 0.026, 0.029, 0.037)}
CA_MIB = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def _fit(ys):
    """Least-squares line through (CA_MIB, ys in us): (intercept us, slope us per MiB)."""
    xm, ym = sum(CA_MIB) / 6, sum(ys) / 6
    slope = sum((x - xm) * (y - ym) for x, y in zip(CA_MIB, ys)) / sum((x - xm) ** 2 for x in CA_MIB)
    return ym - slope * xm, slope


def test_one_shot_agrees_with_vllms_benchmark_and_two_shot_takes_its_measured_intercept():
    """One-shot: intercept 5.15 us against the model's 4 + 2 x 0.47 = 4.94; slope 16.2 us/MiB against 5 peers at
    360 GB/s = 14.6. Two-shot: intercept 11.4 us against 4 + 3 x 0.47 = 5.41, so TWO_SHOT_SYNC_S = 6.0 us; slope
    6.3 us/MiB against 2 x 5/6 at 360 GB/s = 4.85 (not changed)."""
    from fastmodel.kernels.serve.allreduce import TWO_SHOT_SYNC_S, one_shot, two_shot

    d = device_columns("H100")
    bw = d["intra_bw"] * d["intra_eff"]
    i1, s1 = _fit([1e3 * t for t in CA_TP6_H100_MS["1stage"]])
    i2, s2 = _fit([1e3 * t for t in CA_TP6_H100_MS["2stage"]])
    assert (i1, s1) == pytest.approx((5.15, 16.18), abs=0.01)
    assert (i2, s2) == pytest.approx((11.41, 6.29), abs=0.01)
    model_i1 = 1e6 * (d["kernel_overhead_s"] + 2 * _hop(d))
    model_i2 = 1e6 * (d["kernel_overhead_s"] + 3 * _hop(d))
    assert model_i1 == pytest.approx(i1, abs=0.25)
    assert 1e6 * 5 * MIB / bw == pytest.approx(s1, rel=0.11)
    assert TWO_SHOT_SYNC_S == pytest.approx((i2 - model_i2) * 1e-6, abs=0.05e-6)
    row = _row()
    for mib in (0.5, 4.0):
        b = mib * MIB
        assert one_shot(row, b, 6.0) == pytest.approx(d["kernel_overhead_s"] + 2 * _hop(d) + 5 * b / bw, rel=1e-12)
        assert two_shot(row, b, 6.0) == pytest.approx(
            d["kernel_overhead_s"] + 3 * _hop(d) + 6.0e-6 + 2 * 5 / 6 * b / bw, rel=1e-12)
