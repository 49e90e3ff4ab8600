"""Megatron-Core's blocking host syncs and the optimizer step's per-tensor host loops (docs/model.md §11.64,
``kernels/lm/host_syncs.py``): the tensors a rank holds, counted by hand from the TE layer specs, the seconds the
GPU idles after each sync, and which launchers set the two switches."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm import host_syncs as hs
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import resolve
from fastmodel.registry.lm import COLUMN_INDEX as C

B200 = Path(__file__).resolve().parents[1] / "data" / "runs_dev_b200.jsonl"
US = 1e-6


def _row(case: str) -> np.ndarray:
    for line in B200.read_text().splitlines():
        record = json.loads(line)
        if record["id"].endswith(case):
            return lower_record(record).columns.copy()
    raise KeyError(case)


DSV2_PP2 = "deepseekv2_tp1_ep4_pp2_dp4_l4_mbc4_cef"
LLAMA_PP2 = "llama3_70b_l12_tp1_pp2_dp4_mbc4_cef"
LLAMA_PP1 = "llama3_70b_l12_tp8_pp1_dp1_mbc4_cef"


def test_a_layers_tensors_by_hand():
    row = _row(DSV2_PP2)
    # MLA with both latents: input norm, q down, q up with its norm, kv down, kv up with its norm, output = 8;
    # the dense MLP: fc1 with its norm, fc2 = 3; the MoE block: its norm, the router, the shared experts' fc1 and
    # fc2 = 4, and fc1 and fc2 of each of the 160 / 4 local experts
    assert hs.layer_tensors(row, False) == (8 + 3, 0)
    assert hs.layer_tensors(row, True) == (8 + 4, 2 * 160 / 4)
    llama = _row(LLAMA_PP2)
    assert hs.layer_tensors(llama, False) == (3 + 3, 0)      # QKV with its norm, output; fc1 with its norm, fc2
    llama[C["rms_norm"]] = 0.0                              # a LayerNorm's bias is a tensor of its own
    assert hs.layer_tensors(llama, False) == (4 + 4, 0)


def test_each_ranks_tensors_by_hand():
    row = _row(DSV2_PP2)
    # rank 0: the dense layer 0, MoE layer 1, the word embedding; rank 1: MoE layers 2-3, final norm, output layer
    assert hs.rank_tensors(row, 0.0) == (11 + 12 + 1, 80)
    assert hs.rank_tensors(row, 1.0) == (2 * 12 + 2, 160)
    assert hs.rank_tensors(_row(LLAMA_PP2), 0.0) == (6 * 6 + 1, 0)
    assert hs.rank_tensors(_row(LLAMA_PP2), 1.0) == (6 * 6 + 2, 0)
    assert hs.rank_tensors(_row(LLAMA_PP1), 0.0) == (12 * 6 + 3, 0)


def test_a_distributed_optimizer_shard_holds_a_slice_of_the_tensors():
    assert hs.optimizer_tensors(26.0, 4.0) == 26 / 4 + 0.75      # one tensor straddles the slice's edge
    assert hs.optimizer_tensors(160.0, 1.0) == 160.0
    assert hs.optimizer_tensors(0.0, 4.0) == 0.0


def test_the_optimizer_host_loops_by_hand():
    row = _row(DSV2_PP2)
    assert row[C["step_host_loops"]] == 1.0
    # rank 1: 26 dense tensors over dp 4, 160 expert tensors over edp = 1 x 1 x 4 / (1 x 4) = 1
    n = 26 / 4 + 0.75 + 160
    lists = 1 * 2 + 2 * 2 + 2 * 1         # detach; p.data, p_grad.data; Python of two loops (µs)
    copy = 3 * 2 + 8 + 1                  # view, slice, .data; copy_; Python (µs)
    assert hs.optimizer_host_s(row, True, 0.0) == pytest.approx(n * (lists + copy) * US, rel=1e-12)
    # Adam over an FP32 main shard with FP32 gradients: master 4 + 4, moments 8 + 8, gradient 4, the 16-bit
    # weight 2, the copy's second read of the master 4 = 34 B a parameter; G = 1 ms hides 1 ms of the copy loop
    bw = row[C["hbm_bw"]] * row[C["hbm_eff"]] * row[C["stack_compute_eff"]]
    local = 1e-3 * bw / 34.0
    assert hs.optimizer_host_s(row, True, local) == pytest.approx(n * (lists + copy) * US - 1e-3, rel=1e-12)
    assert hs.optimizer_host_s(row, True, 1e12) == pytest.approx(n * lists * US, rel=1e-12)   # the copies hidden
    rank0 = 24 / 4 + 0.75 + 80
    assert hs.optimizer_host_s(row, False, 1e12) == pytest.approx(rank0 * lists * US, rel=1e-12)
    row[C["step_host_loops"]] = 0.0
    assert hs.optimizer_host_s(row, True, 0.0) == 0.0


def test_the_syncs_idle_by_hand():
    row = _row(DSV2_PP2)
    p2p = (4 + 2 * 2 - 3) * 8             # m + 2p - 3 exchanges on the critical path, one launch each (µs)
    loss = 4 * (8 * 8 + 4 * 2)            # per micro-batch: isinf; sum, 2 clones, to, cat, 2 divisions; 4 views
    buckets = 2 * 2 * 8                   # dense and expert buffers: isinf, then the next norm or the scaling
    assert hs.host_sync_s(row, 4.0, True, False) == pytest.approx((p2p + loss + buckets) * US, rel=1e-12)
    assert hs.host_sync_s(row, 4.0, False, False) == pytest.approx((p2p + buckets) * US, rel=1e-12)
    llama = _row(LLAMA_PP1)                # pp 1: no exchange, the loss on the only rank, one buffer
    assert hs.host_sync_s(llama, 4.0, False, False) == pytest.approx((4 * 72 + 16) * US, rel=1e-12)
    # interleaved, the record stating --no-overlap-p2p-communication (p2p_host_sync 2): m v + 2 p v - 3 exchanges
    interleaved = _row("llama3_70b_l8_tp1_pp4_vp2_dp2_mbc8_sync")
    assert interleaved[C["p2p_host_sync"]] == 2.0
    exchanges = (8 * 2 + 2 * 4 * 2 - 3) * 8
    assert hs.host_sync_s(interleaved, 8.0, True, False) == pytest.approx((exchanges + 8 * 72 + 16) * US, rel=1e-12)
    interleaved[C["p2p_host_sync"]] = 1.0        # the launcher's default: p2p overlapped under interleaving
    assert hs.host_sync_s(interleaved, 8.0, True, False) == pytest.approx((8 * 72 + 16) * US, rel=1e-12)
    # a host-bound stage: the GPU waits for every launch already, the issue after a sync is in max(GPU, host)
    assert hs.host_sync_s(row, 4.0, True, True) == 0.0 == hs.host_sync_s(interleaved, 8.0, True, True)


def test_the_step_carries_the_syncs_in_its_host_wait():
    row = _row(DSV2_PP2)
    off = row.copy()
    off[C["step_host_loops"]] = off[C["p2p_host_sync"]] = off[C["step_grad_check"]] = 0.0
    r = evaluate_table(np.stack([row, off], axis=1))
    # the last rank is the busiest here (§11.62): every sync of host_sync_s is on the path
    assert r["time_host_wait"][0] - r["time_host_wait"][1] == pytest.approx(360 * US, rel=1e-9)
    assert r["time_optimizer"][0] > r["time_optimizer"][1]


@pytest.mark.parametrize("framework, loops, p2p", [
    ("Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0", True, 1.0),
    ("NeMo (MLPerf v3.1 submission, NGC 23.09)", None, None),  # Apex's distributed Adam, not this optimizer
    ("Megatron-Bridge", None, None),                           # read at no commit here: not counted
    ("Megatron-LM v0.5", None, None),           # another version (Apex FusedAdam, no TE): not read, not counted
    ("Megatron-LM", None, None),                # no version: not the commit read (review17 F7)
])
def test_which_launchers_set_the_switches(framework, loops, p2p):
    spec = resolve(ExecutionSpec(framework=framework, stack="megatron-core"), pp=2, layers=12)
    assert spec.step_host_loops is loops and spec.p2p_host_sync == p2p
    fsdp = resolve(ExecutionSpec(framework=framework, stack="megatron-core", sharding="fsdp"), pp=1, layers=12)
    assert fsdp.step_host_loops is None                        # Megatron-FSDP's copy path was not read
