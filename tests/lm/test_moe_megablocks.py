"""MegaBlocks' expert-parallel MoE layer at stanford-futuredata/megablocks 1647a0e (docs/model.md §11.14.8),
derived by hand: the ``megatron-2021`` stack counts its small kernels and the operators the host issues onto an
idle GPU after its four blocking syncs per MoE layer forward, and the MoE-Medium dMoE row's step grows by
exactly their launch, tail and issue time."""

import re
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.moe import moe_compute
from fastmodel.kernels.lm.passes import A_BACKWARD_INPUT, A_FORWARD, N_WORK, layer_passes, layer_time
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import megatron_2021, resolve
from fastmodel.lm.table import row

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"
DMOE = "MegaBlocks dMoE (block-sparse, dropless) on Megatron-LM (stanford-futuredata fork 0bdc8181), fp16"
TUTEL = "Megatron-LM (stanford-futuredata fork 0bdc8181) + Tutel v0.2 MoE layer, capacity factor 1, fp16"

#: MegaBlocks dMoE-Medium as its row runs it (exp/dmoe/dmoe_356m_8gpu.sh at 1647a0e): 24 layers, h 1024, 64
#: experts top-1 over EP 8 on one 8-GPU A100 node, micro-batch 8 x 1024, 8 micro-batches, no recompute
MEDIUM = dict(layers=24, hidden=1024, ffn=4096, heads=16, vocab=51200, seq_len=1024, moe_experts=64, moe_topk=1,
              moe_ffn=4096, ep=8, etp=1, dp=8, micro_batch=8, global_batch=512, moe_dispatcher="alltoall",
              recompute=0, kernel_overhead_s=4e-6)


def _table_counts(marker):
    text = DOCS.read_text()
    block = text[text.index(f"<!-- {marker} -->"):text.index(f"<!-- /{marker} -->")]
    return [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]


def _resolved(framework, **fields):
    spec = ExecutionSpec(framework=framework, stack="megatron-2021", **fields)
    out = resolve(spec, pp=1, layers=24, expert_parallel=True)
    return out.moe_mem_kernels, out.moe_sync_issue_ops, out.host_op_s


def test_megablocks_text_sets_its_counted_kernels_and_sync_ops_and_the_docs_tables_sum_to_them():
    """42 small kernels (2 + 5 + 3 + 2 + 8 + 7 + 12 + 2 + 1) and 31 issue operators after the syncs
    (3 + 2 + 12 + 14) per MoE layer forward, at the stack's eager 20 us per operator; a Tutel or plain Megatron-LM
    text counts none, and a stated value wins."""
    kernels, ops = megatron_2021.MOE_MEM_KERNELS_MEGABLOCKS, megatron_2021.MOE_SYNC_ISSUE_OPS_MEGABLOCKS
    assert kernels == 2 + 5 + 3 + 2 + 8 + 7 + 12 + 2 + 1 == 42.0
    assert ops == 3 + 2 + 12 + 14 == 31.0
    assert _resolved(DMOE) == (kernels, ops, 20e-6)
    assert _resolved(TUTEL)[:2] == (None, None)
    assert _resolved("Megatron-LM (stanford-futuredata fork 0bdc8181, 2022), fp16")[:2] == (None, None)
    assert _resolved(DMOE, moe_mem_kernels=5, moe_sync_issue_ops=0)[:2] == (5, 0)
    kernel_rows, op_rows = _table_counts("moe-kernels-megablocks"), _table_counts("moe-sync-ops-megablocks")
    assert len(kernel_rows) == 9 and sum(kernel_rows) == kernels
    assert len(op_rows) == 4 and sum(op_rows) == ops


def _passes(**fields):
    work = np.zeros(N_WORK)
    layer_passes(row(**MEDIUM, **fields), work)
    return work


def test_the_medium_rows_moe_layer_pays_launches_and_sync_idle_by_hand():
    """Per MoE layer forward: 42 x 4 us = 0.168 ms of launches and tails (the backward twice that, the memory-bound
    convention) and 31 x 20 us = 0.62 ms of GPU idle after the syncs (forward only: the backward's two syncs,
    in ``padded_gather`` as ``padded_scatter``'s gradient, are not charged). No recompute, so per MoE layer and
    micro-batch 3 x 0.168 + 0.62 = 1.124 ms; 24 layers x 8 micro-batches = 0.2158 s a step."""
    plain = moe_compute(row(**MEDIUM), False)[1]
    counted = moe_compute(row(**MEDIUM, moe_mem_kernels=42), False)[1]
    assert counted - plain == pytest.approx(42 * 4e-6, rel=1e-9)
    base = _passes(host_op_s=20e-6)
    full = _passes(host_op_s=20e-6, moe_mem_kernels=42, moe_sync_issue_ops=31)
    assert full[A_FORWARD] - base[A_FORWARD] == pytest.approx(42 * 4e-6 + 31 * 20e-6, rel=1e-9)
    assert full[A_BACKWARD_INPUT] - base[A_BACKWARD_INPUT] == pytest.approx(2 * 42 * 4e-6, rel=1e-9)
    per_layer = layer_time(full) - layer_time(base)
    assert per_layer == pytest.approx(3 * 42 * 4e-6 + 31 * 20e-6, rel=1e-9)
    assert 24 * 8 * per_layer == pytest.approx(0.215808, rel=1e-9)


DEEPSPEED = "Megatron-DeepSpeed + DeepSpeed-MoE (DeepSpeed >= 0.5.8), ZeRO stage 0 (FP16_Optimizer), fp16, 2021-22"


def test_deepspeed_moes_einsum_path_counts_the_ops_issued_after_its_gating_sync_and_the_docs_table_sums_to_it():
    """DeepSpeed v0.5.8 ``top1gating`` copies ``exp_counts`` to the host once per MoE layer forward; then
    6 + 5 + 1 + 3 + 4 + 2 + 2 + 1 = 24 operators up to the combine-weight einsum. Only the ``einsum`` dispatcher."""
    count = megatron_2021.MOE_SYNC_ISSUE_OPS_DEEPSPEED_MOE
    assert count == 6 + 5 + 1 + 3 + 4 + 2 + 2 + 1 == 24.0
    assert _resolved(DEEPSPEED, moe_dispatcher="einsum")[1:] == (count, 20e-6)
    assert _resolved(DEEPSPEED, moe_dispatcher="alltoall")[1] is None
    assert _resolved(DEEPSPEED)[1] is None
    rows = _table_counts("moe-sync-ops-deepspeed")
    assert len(rows) == 8 and sum(rows) == count


def test_the_deepspeed_moe_rows_sync_idle_runs_in_forward_and_recompute_by_hand():
    """1.3B+MoE-128 (12 MoE layers of 24, one micro-batch of 4 x 2048, full recompute): 24 x 20 us = 0.48 ms per
    MoE layer forward, twice (forward + recomputed forward): 12 x 2 x 0.48 ms = 11.52 ms a step."""
    fields = dict(layers=24, hidden=2048, ffn=8192, heads=16, vocab=50304, seq_len=2048, moe_experts=128,
                  moe_topk=1, moe_ffn=8192, ep=128, etp=1, dp=128, micro_batch=4, global_batch=512,
                  moe_dispatcher="einsum", moe_capacity_factor=1.0, moe_pad_to_capacity=1, recompute=2,
                  host_op_s=20e-6)
    base, synced = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_passes(row(**fields), base)
    layer_passes(row(**fields, moe_sync_issue_ops=24), synced)
    assert 12 * (layer_time(synced) - layer_time(base)) == pytest.approx(0.01152, rel=1e-9)
