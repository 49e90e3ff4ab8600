"""TorchTitan's DeepEP MoE path at pytorch/torchtitan 022f885f34 against what the model charges (docs/model.md
§11.14.3), derived by hand: full recompute re-runs DeepEP's dispatch and combine, and the permutation bytes the
model charges a step lie inside the range the source's ops move."""

import re
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.moe import PERMUTE_BYTES_PER_ELEMENT, ROUTER_BYTES_PER_SCORE, moe_compute
from fastmodel.kernels.lm.moe_dispatch import dispatch_time
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_INPUT,
    A_BACKWARD_WEIGHT,
    A_EP_COMM,
    A_FORWARD,
    A_MEM,
    A_RECOMPUTE,
    BACKWARD_MEM,
    N_WORK,
    layer_passes,
    layer_time,
)
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve, torchtitan
from fastmodel.lm.table import row

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"

#: Qwen3-30B-A3B (flavor 30B-A3B-deepep) on one 8-GPU B200 node as the TorchTitan DeepEP rows run it: EP 8, local
#: batch 8 x 4096, forced round-robin routing, no shared expert
QWEN3 = dict(layers=48, hidden=2048, ffn=6144, heads=32, kv_heads=4, head_dim=128, vocab=151936, seq_len=4096,
             moe_experts=128, moe_topk=8, moe_ffn=768, moe_shared_experts=0, dense_layers=0, moe_round_robin=1,
             ep=8, etp=1, dp=8, micro_batch=8, global_batch=64, moe_dispatcher="deepep", domain_size=8,
             intra_bw=900e9, intra_eff=0.72, intra_latency=3e-6, inter_bw=50e9, inter_eff=0.85,
             inter_latency=8e-6, hbm_bw=8e12, hbm_eff=0.8)


def _ep_comm(recompute):
    work = np.zeros(N_WORK)
    layer_passes(row(**QWEN3, recompute=recompute), work)
    return work[A_EP_COMM]


def test_full_recompute_runs_the_deepep_dispatch_and_combine_a_third_time():
    """TorchTitan's full AC wraps the whole block (``_apply_full_ac``, ``ptd_checkpoint_wrapper`` with
    ``early_stop`` False, ACConfig's default) so the recomputed forward calls ``FusedDispatch.forward`` and
    ``FusedCombine.forward`` again: per MoE layer and micro-batch, forward + recompute + backward = 3 times the
    forward's dispatch + combine, against 2 without recompute (every layer is a MoE layer here)."""
    forward = dispatch_time(row(**QWEN3, recompute=2))[0]
    assert _ep_comm(2) == pytest.approx(3.0 * forward, rel=1e-12)
    assert _ep_comm(0) == pytest.approx(2.0 * forward, rel=1e-12)


def test_permutation_bytes_of_a_recomputed_step_lie_inside_the_deepep_paths_own_tally():
    """Per routed hidden element (R = k T rows of h, T tokens received; with k = 8, T h = R h / 8), the DeepEP
    path's ops at 022f885f34 move: forward, run twice under full AC -- ``permute`` index_select 2 + 2;
    ``unpermute`` zeros 2/8, scatter_add read 2 and the atomic read-modify-write of the T x h output between
    4/8 (once per output element) and 4 (once per routed row); ``zeros_like(x)`` + add 8/8 -- 7.75 to 11.25 B;
    backward once -- scatter_add's gather 2 + 2; index_select's index_add zeros 2/8, read 2, read-modify-write
    4/8 to 4 -- 6.75 to 10.25 B. A step: 22.25 to 32.75 B. The model charges 8 B per forward (one permutation
    pair, DeepEP), x (1 + 1 recompute + 2 backward, the memory-bound convention) = 32 B: inside the range."""
    forward_low = 4.0 + 0.25 + 2.0 + 0.5 + 1.0
    forward_high = 4.0 + 0.25 + 2.0 + 4.0 + 1.0
    backward_low, backward_high = 4.0 + 0.25 + 2.0 + 0.5, 4.0 + 0.25 + 2.0 + 4.0
    low, high = 2.0 * forward_low + backward_low, 2.0 * forward_high + backward_high
    assert (low, high) == (22.25, 32.75)
    r = row(**QWEN3, recompute=2)
    tokens, rows, h = 8 * 4096, 8 * 8 * 4096, 2048
    router = ROUTER_BYTES_PER_SCORE * tokens * 128
    permute = moe_compute(r, False)[1] * 8e12 * 0.8 - router
    assert permute == pytest.approx(PERMUTE_BYTES_PER_ELEMENT * rows * h, rel=1e-9)
    charged = (1.0 + 1.0 + BACKWARD_MEM) * PERMUTE_BYTES_PER_ELEMENT
    assert charged == 32.0 and low <= charged <= high


def _titan(**fields):
    spec = ExecutionSpec(framework="TorchTitan (FSDP2 + EP, torch.compile, DeepEP dispatcher)", **fields)
    return resolve(spec, pp=1, layers=48, expert_parallel=True).moe_mem_kernels


def test_torchtitan_counts_its_deepep_paths_small_kernels_when_the_blocks_run_eager_and_the_docs_table_sums_to_it():
    """Compiled + full AC + EP (the rows: the blocks fall back to eager, §11.14.1) or not compiled: 33 kernels per
    MoE layer forward; compiled without AC (Inductor fuses the router): not counted; the all-to-all path: its own."""
    count = torchtitan.MOE_MEM_KERNELS_TORCHTITAN_DEEPEP
    assert _titan(torch_compile=True, recompute="full", moe_dispatcher="deepep") == count == 33.0
    assert _titan(torch_compile=False, recompute="none", moe_dispatcher="deepep") == count
    assert _titan(torch_compile=True, recompute="none", moe_dispatcher="deepep") is None
    # the all-to-all path counts its own kernels (§11.61), not DeepEP's
    assert _titan(torch_compile=True, recompute="full", moe_dispatcher="alltoall") == 48.0
    assert _titan(torch_compile=True, recompute="full", moe_dispatcher="deepep", moe_mem_kernels=5) == 5
    text = DOCS.read_text()
    block = text[text.index("<!-- moe-kernels-torchtitan-deepep -->"):
                 text.index("<!-- /moe-kernels-torchtitan-deepep -->")]
    counts = [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]
    assert len(counts) == 7 and sum(counts) == count


def test_the_counted_kernels_add_their_launch_and_tail_to_a_moe_layer_forward_by_hand():
    """33 kernels x kernel_overhead_s 4 us = 0.132 ms per MoE layer forward (B200's 4 us, §11.3); a step of the
    rows repeats it in the recompute and twice in the backward (memory-bound convention): 4 x 48 x 0.132 ms =
    25.3 ms per micro-batch."""
    plain = moe_compute(row(**QWEN3, kernel_overhead_s=4e-6), False)[1]
    counted = moe_compute(row(**QWEN3, kernel_overhead_s=4e-6, moe_mem_kernels=33), False)[1]
    assert counted - plain == pytest.approx(33 * 4e-6, rel=1e-9)
    assert 4 * 48 * (counted - plain) == pytest.approx(0.025344, rel=1e-9)


def _titan_sync(**fields):
    spec = ExecutionSpec(framework="TorchTitan (FSDP2 + EP, torch.compile, DeepEP dispatcher)", **fields)
    resolved = resolve(spec, pp=1, layers=48, expert_parallel=True)
    return resolved.moe_sync_issue_ops, resolved.host_op_s


def test_torchtitan_counts_the_ops_its_deepep_path_issues_onto_an_idle_gpu_after_its_host_syncs():
    """Four blocking syncs per MoE layer forward on the eager DeepEP path (§11.14.6): DeepEP's wait for the
    receive counts, the blocking host-to-device copy of the counts, the two ``masked_select`` of ``permute``;
    after them the host issues 1 + 1 + 8 + 2 + 1 = 13 operators before the GPU has a long kernel again, at the
    eager 20 us each (§11.7). Same conditions as the small-kernel count: not for compiled-without-AC or all-to-all."""
    count = torchtitan.MOE_SYNC_ISSUE_OPS_TORCHTITAN_DEEPEP
    assert _titan_sync(torch_compile=True, recompute="full", moe_dispatcher="deepep") == (count, 20e-6)
    assert count == 1 + 1 + 8 + 2 + 1
    assert _titan_sync(torch_compile=True, recompute="none", moe_dispatcher="deepep") == (None, None)
    # all-to-all: no DeepEP syncs; its own one (the receive counts' copy, 3 operators after it, §11.61)
    assert _titan_sync(torch_compile=True, recompute="full", moe_dispatcher="alltoall") == (3.0, 20e-6)
    text = DOCS.read_text()
    block = text[text.index("<!-- moe-sync-ops-torchtitan-deepep -->"):
                 text.index("<!-- /moe-sync-ops-torchtitan-deepep -->")]
    counts = [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]
    assert len(counts) == 5 and sum(counts) == count


def _passes(**fields):
    work = np.zeros(N_WORK)
    layer_passes(row(**QWEN3, recompute=2, kernel_overhead_s=4e-6, **fields), work)
    return work


def test_the_sync_idle_time_runs_in_the_forward_and_the_recomputed_forward_only_by_hand():
    """13 ops x 20 us = 0.26 ms of GPU idle per MoE layer forward; full AC runs the forward twice (forward +
    recompute) and the backward has no sync: 0.52 ms per MoE layer and micro-batch, 48 x 0.52 = 24.96 ms a step
    of the rows (one micro-batch). It sits in the forward and recompute passes and in the memory-bound tally,
    never in the backward passes."""
    plain = _passes(host_op_s=20e-6)
    synced = _passes(host_op_s=20e-6, moe_sync_issue_ops=13)
    idle = 13 * 20e-6
    assert synced[A_FORWARD] - plain[A_FORWARD] == pytest.approx(idle, rel=1e-9)
    assert synced[A_RECOMPUTE] - plain[A_RECOMPUTE] == pytest.approx(idle, rel=1e-9)
    assert synced[A_BACKWARD_INPUT] == pytest.approx(plain[A_BACKWARD_INPUT], rel=1e-12)
    assert synced[A_BACKWARD_WEIGHT] == pytest.approx(plain[A_BACKWARD_WEIGHT], rel=1e-12)
    assert synced[A_MEM] - plain[A_MEM] == pytest.approx(2 * idle, rel=1e-9)
    assert 48 * (layer_time(synced) - layer_time(plain)) == pytest.approx(0.02496, rel=1e-9)
    assert _passes(moe_sync_issue_ops=13)[A_FORWARD] == pytest.approx(plain[A_FORWARD], rel=1e-12)  # host_op_s 0


def test_a_measured_deepep_rate_sets_the_intranode_dispatch_and_combine_by_hand():
    """B200's ``deepep_nvl_bw`` = 500.75 GB/s, the harmonic mean of the branch's tuned 516.71 (dispatch) and 485.75
    GB/s (combine), both received bytes including the rank's own share over the kernel time (§11.14.6). The
    rows' round-robin routing sends each token to one rank (D_r = 1): per direction 32,768 x 2,048 x 2 B =
    134.2 MB received, 0.26805 ms; dispatch + combine 0.53610 ms per MoE layer forward, x 3 (forward, recompute,
    backward) x 48 = 77.2 ms a step, against 2 x 7/8 x 134.2 MB / 648 GB/s + latencies from NCCL's efficiency."""
    received = 32768 * 1 * 2048 * 2
    rate = 2.0 / (1.0 / 516.71e9 + 1.0 / 485.75e9)
    assert rate == pytest.approx(500.75e9, rel=1e-4)
    measured = dispatch_time(row(**QWEN3, recompute=2, deepep_nvl_bw=500.75e9))[0]
    assert measured == pytest.approx(2.0 * received / 500.75e9, rel=1e-12)
    assert 3 * 48 * measured == pytest.approx(0.07720, rel=1e-3)
    nccl = dispatch_time(row(**QWEN3, recompute=2))[0]
    assert nccl == pytest.approx(2.0 * (received * 7 / 8 / (900e9 * 0.72) + 3e-6), rel=1e-12)
