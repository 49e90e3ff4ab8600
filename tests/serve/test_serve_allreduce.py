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
    two = d["kernel_overhead_s"] + 3 * _hop(d) + 2 * 7 / 8 * mid / bw
    assert serve_allreduce(row, mid, 8.0, 1.0) == pytest.approx(two, rel=1e-12)
    assert serve_allreduce(row, mid, 4.0, 1.0) == pytest.approx(        # 4 GPUs: one-shot up to 512 KiB only
        d["kernel_overhead_s"] + 3 * _hop(d) + 2 * 3 / 4 * mid / bw, rel=1e-12)
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


# sglang PR #2904 (2025-01-15), "unit test performance in H100": vLLM's custom allreduce, latency in ms at
# TP 2/4/8 by message bytes (rows 256 KiB, 512 KiB, 1 MiB). Two sizes on the same algorithm give the per-byte rate.
VLLM_AR_H100_MS = {262144: (0.0129, 0.0206, 0.0241), 524288: (0.0177, 0.0269, 0.0304),
                   1048576: (0.0266, 0.0402, 0.0450)}


def test_vllm_kernel_rate_from_the_microbenchmark_by_hand():
    """TP 2 one-shot 256 KiB -> 1 MiB: 1 peer x 768 KiB in 13.7 us; TP 4 two-shot 512 KiB -> 1 MiB: 2 x 3/4 x
    512 KiB in 13.3 us; TP 8 two-shot 256 KiB -> 1 MiB: 2 x 7/8 x 768 KiB in 20.9 us: 57-66 GB/s, 0.135 of
    NVLink4's 450 GB/s within 10 %."""
    from fastmodel.serve.profiles import CUSTOM_AR_EFF_VLLM

    t = VLLM_AR_H100_MS
    rates = [1 * (MIB - 262144) / ((t[MIB][0] - t[262144][0]) * 1e-3),
             2 * 3 / 4 * (MIB - 524288) / ((t[MIB][1] - t[524288][1]) * 1e-3),
             2 * 7 / 8 * (MIB - 262144) / ((t[MIB][2] - t[262144][2]) * 1e-3)]
    assert rates == pytest.approx([57.4e9, 59.1e9, 65.8e9], rel=2e-3)
    for r in rates:
        assert r / 450e9 == pytest.approx(CUSTOM_AR_EFF_VLLM, rel=0.10)


def test_engine_rate_replaces_intra_eff_in_the_p2p_kernels_only():
    d = device_columns("H100")
    row = _row()
    row[COLUMN_INDEX["custom_allreduce_eff"]] = 0.135
    bw = d["intra_bw"] * 0.135                    # 60.75 GB/s
    small, mid = 2.0 * 8192, 1.0 * MIB
    assert serve_allreduce(row, small, 8.0, 1.0) == pytest.approx(
        d["kernel_overhead_s"] + 2 * _hop(d) + 7 * small / bw, rel=1e-12)          # 4 + 0.93 + 1.89 us
    assert serve_allreduce(row, mid, 8.0, 1.0) == pytest.approx(
        d["kernel_overhead_s"] + 3 * _hop(d) + 2 * 7 / 8 * mid / bw, rel=1e-12)    # 4 + 1.40 + 30.2 us
    big = 16.0 * MIB                              # NCCL keeps the device's intra_eff
    assert serve_allreduce(row, big, 8.0, 1.0) == allreduce_time(_row(), big, 8.0, 1.0)
    assert profile_columns("vllm", (0, 18, 0), 141 * 2**30)["custom_allreduce_eff"] == 0.135
    assert profile_columns("sglang", None, 141 * 2**30)["custom_allreduce_eff"] == 0.135
    assert "custom_allreduce_eff" not in profile_columns("trtllm", None, 141 * 2**30)     # device intra_eff


def test_70b_tp8_decode_pays_the_kernel_rate_per_token():
    """Llama-3.1-70B TP 8, 64 tokens a step: two 1 MiB two-shot allreduces per layer; at 0.135 of intra_bw each
    costs 2 x 7/8 x 1 MiB x (1/60.75 - 1/360) GB/s^-1 more than at intra_eff 0.80, x 2 x 80 layers per step."""
    d = device_columns("H100")
    kw = dict(tp=8, input_len=128, output_len=2, batch_size=64, custom_allreduce_bytes=8 * MIB)
    base = evaluate("llama3.1-70b", "H100", **kw)
    slow = evaluate("llama3.1-70b", "H100", custom_allreduce_eff=0.135, **kw)
    extra = 2 * 7 / 8 * MIB * (1 / (d["intra_bw"] * 0.135) - 1 / (d["intra_bw"] * d["intra_eff"]))
    assert slow["decode_comm"] - base["decode_comm"] == pytest.approx(2 * 80 * extra, rel=1e-6)
    assert slow["decode_gemm"] == base["decode_gemm"]
