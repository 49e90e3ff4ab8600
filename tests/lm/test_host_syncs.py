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
    assert hs.host_sync_s(row, 4.0, True) == pytest.approx((p2p + loss + buckets) * US, rel=1e-12)
    assert hs.host_sync_s(row, 4.0, False) == pytest.approx((p2p + buckets) * US, rel=1e-12)
    llama = _row(LLAMA_PP1)                # pp 1: no exchange, the loss on the only rank, one buffer
    assert hs.host_sync_s(llama, 4.0, False) == pytest.approx((4 * 72 + 16) * US, rel=1e-12)
    # interleaved, the record stating --no-overlap-p2p-communication (p2p_host_sync 2): m v + 2 p v - 3 exchanges
    interleaved = _row("llama3_70b_l8_tp1_pp4_vp2_dp2_mbc8_sync")
    assert interleaved[C["p2p_host_sync"]] == 2.0
    exchanges = (8 * 2 + 2 * 4 * 2 - 3) * 8
    assert hs.host_sync_s(interleaved, 8.0, True) == pytest.approx((exchanges + 8 * 72 + 16) * US, rel=1e-12)
    interleaved[C["p2p_host_sync"]] = 1.0        # the launcher's default: p2p overlapped under interleaving
    assert hs.host_sync_s(interleaved, 8.0, True) == pytest.approx((8 * 72 + 16) * US, rel=1e-12)
    # a host-bound stage (issue beyond the GPU longer than the exchanges' idle): the exchanges' launch is inside it
    assert hs.host_wait_s(interleaved, 8.0, True, 1.0) == pytest.approx(1.0 + (8 * 72 + 16) * US, rel=1e-12)


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


def test_a_host_bound_stage_keeps_the_checks_and_takes_the_longer_of_issue_and_exchanges():
    """review17 F6 follow-up: on a host-bound stage the first launch after an exchange's ``synchronize()`` is a
    layer operator, inside the issue time; the loss tail and the buckets' calls after their checks are not."""
    row = _row(DSV2_PP2)
    p2p, checks = (4 + 2 * 2 - 3) * 8 * US, (4 * 72 + 2 * 16) * US     # 40 µs; 288 + 32 µs (as above)
    assert hs.host_wait_s(row, 4.0, True, 0.0) == pytest.approx(p2p + checks, rel=1e-12)
    assert hs.host_wait_s(row, 4.0, True, 10 * US) == pytest.approx(p2p + checks, rel=1e-12)   # issue < exchanges
    assert hs.host_wait_s(row, 4.0, True, 1e-3) == pytest.approx(1e-3 + checks, rel=1e-12)     # issue > exchanges
    assert hs.host_wait_s(row, 4.0, False, 1e-3) == pytest.approx(1e-3 + 2 * 16 * US, rel=1e-12)


def _with_host_layer(row, seconds):
    out = row.copy()
    out[C["host_layer_s"]] = seconds
    return out


def test_a_host_bound_setting_reaches_the_step_through_its_host_wait():
    """review17 F6: the step-level check, on the row the attempt used. Megatron-Core's profile counts no host
    operators (``host_ops_layer`` 0, §11.59), so a slower ``host_op_s`` or eager vs graphed replays multiply 0; a
    per-layer issue time (``host_layer_s``, as a calibration sets it) does reach the step."""
    row = _row(DSV2_PP2)
    assert row[C["host_ops_layer"]] == 0.0 and row[C["host_layer_s"]] == 0.0
    m, p, layers = 4.0, 2.0, 2.0          # micro-batches, stages, layers of the busiest (last) and average stage
    h1, h2 = 0.05, 0.1                    # both far above the GPU's ~12 ms a layer pass: host-bound
    r = evaluate_table(np.stack([row, _with_host_layer(row, h1), _with_host_layer(row, h2)], axis=1))
    # a micro-batch lasts the issue (2 + 0 recompute) x layers x h on every stage: the busiest stage's m of them in
    # the host wait, the 1F1B bubble's (p - 1) of the average stage's in the bubble
    issue = 2.0 * layers * (h2 - h1)
    assert r["time_host_wait"][2] - r["time_host_wait"][1] == pytest.approx(m * issue, rel=1e-9)
    assert r["pipeline_bubble"][2] - r["pipeline_bubble"][1] == pytest.approx((p - 1.0) * issue, rel=1e-9)
    assert r["step_time"][2] - r["step_time"][1] == pytest.approx((m + p - 1.0) * issue, rel=1e-9)
    assert r["pipeline_bubble"][1] == pytest.approx((p - 1.0) * 2.0 * layers * h1, rel=1e-12)
    # the loss and bucket checks stay on a host-bound stage; the exchanges' launch is inside the issue
    off = [_with_host_layer(row, h1) for _ in range(2)]
    off[1][C["step_host_loops"]] = off[1][C["p2p_host_sync"]] = off[1][C["step_grad_check"]] = 0.0
    r_off = evaluate_table(np.stack(off, axis=1))
    assert r_off["time_host_wait"][0] - r_off["time_host_wait"][1] == pytest.approx((4 * 72 + 2 * 16) * US,
                                                                                    rel=1e-9)


@pytest.mark.parametrize("case", [DSV2_PP2, LLAMA_PP1])
def test_a_slower_host_never_makes_the_step_faster(case):
    """Across the GPU-bound / host-bound crossing the step is continuous and non-decreasing in the host's issue
    time (the rule before: the syncs dropped at the crossing, a slower host 0.30-0.36 ms faster)."""
    row = _row(case)

    def run(grid):
        return evaluate_table(np.stack([_with_host_layer(row, h) for h in grid], axis=1))

    coarse = np.linspace(0.0, 0.02, 81)
    wait = run(coarse)["time_host_wait"]
    i = int(np.argmax(np.abs(wait - wait[0]) > 1e-12))     # the first setting past the crossing
    assert i > 0
    fine = run(np.linspace(coarse[i - 1], coarse[i], 201))  # 1.25 µs of layer issue a step of the grid
    assert np.all(np.diff(fine["step_time"]) >= -1e-12)
