"""TorchTitan's default expert-parallel path (``ExpertParallel``, NCCL all-to-all) at pytorch/torchtitan 022f885f34
against what the model charges (docs/model.md §11.61), derived by hand: the stack's counted permutation bytes, small
kernels and host sync, and the seconds they add to a MoE layer of the Qwen3-30B-A3B row on 8 B200s."""

import re
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.moe import moe_compute, stack_permute_time
from fastmodel.kernels.lm.passes import A_BACKWARD_INPUT, A_FORWARD, A_MEM, A_RECOMPUTE, N_WORK, layer_passes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve, torchtitan
from fastmodel.lm.table import row
from tests.lm.test_moe_torchtitan_deepep import QWEN3 as DEEPEP_QWEN3

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"

#: the TorchTitan default-EP row: the DeepEP rows' Qwen3-30B-A3B on one 8-GPU B200 node (EP 8, local batch 8 x 4096,
#: forced round robin, HBM 8 TB/s at efficiency 0.8: 6.4 TB/s) with TorchTitan's default all-to-all dispatcher
QWEN3 = {**DEEPEP_QWEN3, "moe_dispatcher": "alltoall"}
#: routed rows x hidden of one rank and micro-batch: 8 x 4096 tokens x top-8 rows x 2048
ELEMENTS = 8 * 4096 * 8 * 2048


def _resolved(**fields):
    spec = ExecutionSpec(framework="TorchTitan (FSDP2 + EP, torch.compile, default all-to-all dispatcher)", **fields)
    out = resolve(spec, pp=1, layers=48, expert_parallel=True)
    return (out.moe_mem_kernels, out.moe_sync_issue_ops, out.moe_permute_fwd_bytes, out.moe_permute_bwd_bytes,
            out.host_op_s)


def _table(marker):
    text = DOCS.read_text()
    block = text[text.index(f"<!-- {marker} -->"):text.index(f"<!-- /{marker} -->")]
    return [float(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*([\d.]+)\s*\|\s*$", block, flags=re.M)]


def test_the_forward_and_backward_bytes_per_routed_element_add_up_by_hand_and_match_the_docs_tables():
    """Forward, per routed row and hidden element (BF16 2 B, FP32 4 B): gather 2 + 2, vstack 2 + 2, row gather
    2 + 2, index_put 2 + 2, FP32 cast 2 + 4, score multiply 4 + 4, BF16 cast 4 + 2, scatter_add read 2 = 38.
    Backward: scatter_add's gather 2 + 2, the casts' 2 + 4 and 4 + 2, the product's gradient by the score 4 + 4 and
    for the score 4 + 4 + 4 and its row sum 4, the slice's zero-padded copy 2 + 2 + 2, index_put's gather 2 + 2,
    index's accumulate into zeros 2 + 2 + 2 + 2, gather's scatter_add_ read 2 = 60."""
    forward = (2 + 2) + (2 + 2) + (2 + 2) + (2 + 2) + (2 + 4) + (4 + 4) + (4 + 2) + 2
    backward = (2 + 2) + (2 + 4) + (4 + 2) + (4 + 4) + (4 + 4 + 4 + 4) + (2 + 2 + 2) + (2 + 2) + (2 + 2 + 2 + 2) + 2
    assert (forward, backward) == (38, 60)
    assert torchtitan.PERMUTE_FWD_BYTES_TORCHTITAN_A2A == forward
    assert torchtitan.PERMUTE_BWD_BYTES_TORCHTITAN_A2A == backward
    fwd_rows, bwd_rows = _table("permute-bytes-torchtitan-a2a-fwd"), _table("permute-bytes-torchtitan-a2a-bwd")
    assert (len(fwd_rows), sum(fwd_rows)) == (8, forward)
    assert (len(bwd_rows), sum(bwd_rows)) == (9, backward)
    kernels = _table("moe-kernels-torchtitan-a2a")
    assert (len(kernels), sum(kernels)) == (9, torchtitan.MOE_MEM_KERNELS_TORCHTITAN_A2A) == (9, 48.0)


def test_torchtitan_sets_its_all_to_all_paths_counts_only_when_that_path_runs_eager():
    """Compiled + full AC + EP (the row: blocks eager, §11.14.1) or not compiled: 48 kernels, 3 operators after the
    sync, 38 / 60 B, the eager 20 us per operator; compiled without AC (Inductor fuses the block) nothing; DeepEP
    keeps its own counts (§11.14.3) and the generic permutation bytes; a plan's own value wins."""
    counted = (48.0, 3.0, 38.0, 60.0, 20e-6)
    assert _resolved(torch_compile=True, recompute="full", moe_dispatcher="alltoall") == counted
    assert _resolved(torch_compile=False, recompute="none", moe_dispatcher="alltoall") == counted
    assert _resolved(torch_compile=True, recompute="none", moe_dispatcher="alltoall")[:4] == (None,) * 4
    assert _resolved(torch_compile=True, recompute="full", moe_dispatcher="deepep")[:4] == (33.0, 13.0, None, None)
    assert _resolved(torch_compile=True, recompute="full", moe_dispatcher="alltoall",
                     moe_permute_fwd_bytes=10.0, moe_permute_bwd_bytes=20.0)[2:4] == (10.0, 20.0)


def test_the_stack_count_replaces_the_generic_permutation_bytes_by_hand():
    """Per MoE layer forward: 38 B x 536,870,912 elements / 6.4 TB/s = 3.18767 ms forward, 60 B -> 5.03316 ms backward;
    the generic 8 B x 2 permutation pairs (all-to-all, 16 local experts) = 1.34218 ms leaves ``moe_compute``."""
    generic = moe_compute(row(**QWEN3), False)[1]
    own = row(**QWEN3, moe_permute_fwd_bytes=38.0, moe_permute_bwd_bytes=60.0)
    assert generic - moe_compute(own, False)[1] == pytest.approx(16.0 * ELEMENTS / 6.4e12, rel=1e-9)
    forward, backward = stack_permute_time(own)
    assert forward == pytest.approx(38.0 * ELEMENTS / 6.4e12, rel=1e-9) == pytest.approx(3.18767e-3, rel=1e-5)
    assert backward == pytest.approx(60.0 * ELEMENTS / 6.4e12, rel=1e-9) == pytest.approx(5.03316e-3, rel=1e-5)
    assert stack_permute_time(row(**QWEN3)) == (0.0, 0.0)


def test_a_recomputed_step_moves_136_bytes_per_routed_element_against_the_generic_64_by_hand():
    """Full AC runs the forward twice and the backward once: 2 x 38 + 60 = 136 B per routed element and MoE layer,
    against the generic 16 B forward x (1 + 1 recompute + 2 backward, the memory-bound convention) = 64 B:
    72 x 536,870,912 / 6.4 TB/s = 6.0398 ms more per MoE layer and micro-batch, 0.28991 s over 48 layers. The
    forward pass holds 38 - 16 = 22 B more, the recompute as much, the backward 60 - 32 = 28 B more."""
    plain, counted = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_passes(row(**QWEN3, recompute=2), plain)
    layer_passes(row(**QWEN3, recompute=2, moe_permute_fwd_bytes=38.0, moe_permute_bwd_bytes=60.0), counted)
    per_byte = ELEMENTS / 6.4e12
    assert counted[A_MEM] - plain[A_MEM] == pytest.approx(72.0 * per_byte, rel=1e-9)
    assert 48 * (counted[A_MEM] - plain[A_MEM]) == pytest.approx(0.28991, rel=1e-4)
    assert counted[A_FORWARD] - plain[A_FORWARD] == pytest.approx(22.0 * per_byte, rel=1e-9)
    assert counted[A_RECOMPUTE] - plain[A_RECOMPUTE] == pytest.approx(22.0 * per_byte, rel=1e-9)
    assert counted[A_BACKWARD_INPUT] - plain[A_BACKWARD_INPUT] == pytest.approx(28.0 * per_byte, rel=1e-9)


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep"])
@pytest.mark.parametrize("compiled", [False, True])
def test_an_fsdp2_run_that_is_not_torchtitan_keeps_the_generic_moe_counts(dispatcher, compiled):
    """review15 #3: the FSDP2 profile matches a framework that names FSDP2 alone, but TorchTitan's all-to-all and
    DeepEP counts (§11.61, §11.14.6) are its source's: another FSDP2 trainer keeps the generic permutation count
    (no stated bytes), the generic kernel and sync counts, and no expandable segments; TorchTitan gets them, eager
    or compiled with EP + full AC (blocks eager before #1895)."""
    def resolved(framework):
        spec = ExecutionSpec(framework=framework, moe_dispatcher=dispatcher, torch_compile=compiled, recompute="full")
        out = resolve(spec, pp=1, layers=48, expert_parallel=True)
        return (out.moe_permute_fwd_bytes, out.moe_permute_bwd_bytes, out.moe_mem_kernels, out.moe_sync_issue_ops,
                out.allocator_expandable_segments)

    assert resolved("HF Transformers + FSDP2") == (None, None, None, None, None)
    titan = resolved("TorchTitan (FSDP2 + EP)")
    if dispatcher == "alltoall":
        assert titan == (38.0, 60.0, 48.0, 3.0, True)
    else:
        assert titan == (None, None, torchtitan.MOE_MEM_KERNELS_TORCHTITAN_DEEPEP,
                         torchtitan.MOE_SYNC_ISSUE_OPS_TORCHTITAN_DEEPEP, True)


@pytest.mark.parametrize("fields, missing", [
    ({"moe_permute_fwd_bytes": 38.0}, "moe_permute_bwd_bytes"),
    ({"moe_permute_fwd_bytes": 38.0, "moe_permute_bwd_bytes": 0.0}, "moe_permute_bwd_bytes"),
    ({"moe_permute_bwd_bytes": 60.0}, "moe_permute_fwd_bytes"),
    ({"moe_permute_fwd_bytes": 0.0, "moe_permute_bwd_bytes": 60.0}, "moe_permute_fwd_bytes"),
])
def test_the_permutation_bytes_are_stated_for_both_passes_or_neither(fields, missing):
    """review15 #4: fwd alone would charge no backward permutation (not the generic 2x), bwd alone would be
    ignored (the kernel reads it only with fwd > 0); both are refused, naming the field that is missing."""
    with pytest.raises(ValueError, match=f"{missing} > 0 too"):
        ExecutionSpec(framework="TorchTitan", **fields)
    ExecutionSpec(framework="TorchTitan", moe_permute_fwd_bytes=38.0, moe_permute_bwd_bytes=60.0)
    ExecutionSpec(framework="TorchTitan", moe_permute_fwd_bytes=0.0)          # 0: the generic count, stated


def test_the_eager_all_to_all_path_keeps_the_fp32_routed_output_for_the_score_gradient():
    """review15 #6: ``routed_output.to(float32) * top_scores`` (moe.py lines 539-543) saves its FP32 operand for the
    score's gradient, 4 B per routed element where the generic count keeps the BF16 expert output, 2 B: per MoE
    layer whose activations are live, (4 - 2) x R h = 2 x 262,144 x 2,048 B = 1 GiB more on the default-EP row."""
    from fastmodel.kernels.lm.memory_activations import moe_activation_bytes

    assert _resolved(torch_compile=False, recompute="full", moe_dispatcher="alltoall")[:4] == (48.0, 3.0, 38.0, 60.0)
    spec = ExecutionSpec(framework="TorchTitan (FSDP2 + EP)", moe_dispatcher="alltoall", torch_compile=False)
    assert resolve(spec, pp=1, layers=48, expert_parallel=True).moe_combine_saved_bytes == 4.0
    generic = moe_activation_bytes(row(**QWEN3, recompute="none"))
    titan = moe_activation_bytes(row(**QWEN3, recompute="none", moe_combine_saved_bytes=4.0))
    assert titan - generic == (4 - 2) * (8 * 4096 * 8) * 2048 == 2**30
    assert moe_activation_bytes(row(**QWEN3, recompute="none", moe_combine_saved_bytes=2.0)) == generic
