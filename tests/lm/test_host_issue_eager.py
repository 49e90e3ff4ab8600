"""Host issue time of the eager PyTorch-native stacks (docs/model.md §11.59): an eager Llama block's dispatcher
calls and the FSDP1/FSDP2 hooks per layer forward, set by the ``torchtitan``, ``pytorch-fsdp`` (2.x) and
``fms-fsdp`` profiles, and what a tiny model on eager FSDP then costs by hand."""

import re
from pathlib import Path

import pytest

from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import megatron_2021 as m21
from fastmodel.lm.stacks import pytorch_fsdp, resolve, torchtitan
from tests.lm.test_host_issue import SMALL
from tests.suite_fixtures import one

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"


def _table(marker: str) -> list[int]:
    """The ops column of the docs table between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    text = DOCS.read_text()
    block = text[text.index(f"<!-- {marker} -->"):text.index(f"<!-- /{marker} -->")]
    return [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]


def test_the_llama_block_count_by_hand():
    # two RMSNorms: float, pow, mean, add, rsqrt, mul, type_as, mul by the weight (8 each); Q, K, V and the output
    # projection: F.linear = t + mm (2 each); 3 head views; rotary: 2 x (float, reshape, view_as_complex), the slice
    # and view of freqs_cis, 2 x (mul, view_as_real, flatten), 2 x type_as; repeat_kv under GQA 2 x (unsqueeze,
    # expand, reshape); 3 transposes; SDPA and its flash op; transpose, contiguous, view; the SwiGLU MLP: 3 x
    # F.linear, silu, mul; 2 residual adds
    norms = 2 * 8
    attention = 3 * 2 + 3 + (3 + 3 + 2 + 3 + 3 + 2) + 6 + 3 + 2 + 3 + 2
    mlp = 3 * 2 + 2
    assert norms + attention + mlp + 2 == torchtitan.HOST_OPS_LLAMA_BLOCK_EAGER == 67
    assert sum(_table("host-ops-llama-block")) == torchtitan.HOST_OPS_LLAMA_BLOCK_EAGER
    # FSDP2, 9 parameters: 9 casts; empty, narrow, split, _foreach_copy_, record; wait, all-gather, record; wait,
    # 9 resizes, 1 + 9 views, split_with_sizes_copy; 9 frees; the post-backward hook's Function
    assert 9 + 5 + 3 + (1 + 9 + 10 + 1) + 9 + 1 == torchtitan.HOST_OPS_FSDP2_BLOCK == 48
    assert sum(_table("host-ops-fsdp2")) == torchtitan.HOST_OPS_FSDP2_BLOCK
    # FSDP1, 9 parameters: mp shard 2, wait 1, limiter 1, all-gather 2, views 3 + 9, mp free 2, wait 1, hook 1,
    # reshard 4
    assert 2 + 1 + 1 + 2 + (3 + 9) + 2 + 1 + 1 + 4 == pytorch_fsdp.HOST_OPS_FSDP1_BLOCK == 26
    assert sum(_table("host-ops-fsdp1")) == pytorch_fsdp.HOST_OPS_FSDP1_BLOCK


def _resolved(framework: str, **fields):
    return resolve(ExecutionSpec(framework=framework, **fields), pp=1, layers=12)


def test_the_profiles_set_the_counts_only_when_eager():
    titan = _resolved("TorchTitan (FSDP2)", sharding="fsdp")
    assert (titan.host_ops_layer, titan.host_op_s) == (67.0 + 48.0, m21.HOST_OP_S_EAGER)
    assert _resolved("TorchTitan (FSDP2)", sharding="ddp").host_ops_layer == 67.0     # no FSDP hooks
    fms = _resolved("fms-fsdp", sharding="hsdp")
    assert (fms.host_ops_layer, fms.host_op_s) == (67.0 + 26.0, 20e-6)
    assert _resolved("PyTorch 2.2 FSDP", sharding="fsdp").host_ops_layer == 93.0
    # compiled: Inductor's code is not this count; PyTorch 1.x (minGPT) and Composer, Accelerate: not counted
    assert _resolved("TorchTitan (FSDP2)", sharding="fsdp", torch_compile=True).host_ops_layer is None
    assert _resolved("OLMo-core (PyTorch FSDP2/HSDP, torch.compile)", torch_compile=True).host_ops_layer is None
    assert _resolved("PyTorch 1.10 FSDP", sharding="fsdp").host_ops_layer is None
    assert _resolved("Composer", sharding="fsdp").host_ops_layer is None
    assert _resolved("TorchTitan", sharding="fsdp", host_ops_layer=10.0).host_ops_layer == 10.0    # a plan's wins


def test_a_tiny_model_on_eager_fsdp2_is_host_bound_by_the_hand_formula():
    # SMALL (12 layers of hidden 1,024, one 1,024-token sequence per micro-batch, A100) without recompute under
    # TorchTitan's FSDP2: forward and backward each issue 115 ops x 20 us = 2.3 ms per layer, far above the GPU's
    # layer pass; 4 micro-batches x 12 layers x 2 x 2.3 ms = 220.8 ms, plus the optimizer step
    titan = _resolved("TorchTitan (FSDP2)", sharding="fsdp", recompute="none")
    kw = {**SMALL, "recompute": "none", "sharding": "fsdp"}
    bound = one(**kw, host_ops_layer=titan.host_ops_layer, host_op_s=titan.host_op_s)
    assert bound["step_time"] - bound["time_optimizer"] == pytest.approx(4 * 12 * 2 * 115 * 20e-6, rel=1e-12)
    gpu = one(**kw)
    assert gpu["step_time"] - gpu["time_optimizer"] < 0.25 * (bound["step_time"] - bound["time_optimizer"])
    assert bound["time_host_wait"] == pytest.approx(bound["step_time"] - gpu["step_time"], rel=1e-12)


def test_compiled_torchtitan_blocks_that_fall_back_to_eager_count_their_operators():
    """EP + activation checkpointing before TorchTitan #1895 run each compiled block eagerly (``eager_blocks``):
    the block's 67 and FSDP2's 48 as an eager run (review 13 finding 5); without EP, or without recompute, the
    compiled blocks fuse and count nothing."""
    compiled = ExecutionSpec(framework="TorchTitan", sharding="fsdp", torch_compile=True, recompute="full")
    for dispatcher in (None, "deepep"):
        e = compiled.model_copy(update={"moe_dispatcher": dispatcher})
        eager = resolve(e, pp=1, layers=48, expert_parallel=True)
        assert (eager.host_ops_layer, eager.host_op_s, eager.fused_kernels) == (115.0, m21.HOST_OP_S_EAGER, False)
    assert resolve(compiled, pp=1, layers=48, expert_parallel=False).host_ops_layer is None
    no_ac = compiled.model_copy(update={"recompute": "none"})
    assert resolve(no_ac, pp=1, layers=48, expert_parallel=True).host_ops_layer is None
