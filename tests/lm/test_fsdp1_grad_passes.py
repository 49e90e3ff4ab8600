"""FSDP1's passes over each unit's unsharded gradient before its reduce-scatter (``fsdp1_grad_passes``, docs/model.md
§11.26, issue 26): autograd's ``cat`` of the views' gradients into the FlatParameter's gradient and the predivide
``div_``, each a read + write of the 16-bit gradient, derived by hand."""

import pytest

from fastmodel.kernels.lm.parallel import fsdp1_grad_pass_time
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve
from fastmodel.lm.table import row
from tests.suite_fixtures import H100, NET, one

# the blog's 800 Gb/s per 8-GPU node (tests/data/runs_dev.jsonl ibm-fsdp-*): the shared network at 12.5 GB/s per
# GPU across nodes
IBM_NET = dict(NET, inter_bw=12.5e9)
# Llama 2 7B as the IBM blog ran it: HSDP, 8-GPU shards, batch 2 of 4,096 tokens, one micro-batch per step
LLAMA7B = dict(layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_dim=128, vocab=32000, seq_len=4096,
               gated_mlp=1, n_gpus=16, micro_batch=2, global_batch=32, tp=1, pp=1, dp=16, sharding="hsdp",
               shard_degree=8, grad_reduce_bytes=2, **H100, **IBM_NET)
FMS = "PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)"


def test_one_units_passes_read_and_write_its_bf16_gradient_twice():
    # a 7B layer: 4 h^2 attention + 3 h ffn MLP + 2 h norms = 202,383,360 elements; cat + div_: 2 x (2 + 2) B each
    params = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert params == 202_383_360
    assert fsdp1_grad_pass_time(row(**H100, fsdp1_grad_passes=2), params) == pytest.approx(
        params * 8 / (3.35e12 * 0.8), rel=1e-12)            # 0.604 ms per layer and micro-batch
    assert fsdp1_grad_pass_time(row(**H100, fsdp1_grad_passes=0), params) == 0.0


def test_a_step_charges_them_once_per_layer_and_micro_batch():
    with_passes = one(**LLAMA7B, fsdp_version=1, fsdp1_grad_passes=2)
    without = one(**LLAMA7B, fsdp_version=0, fsdp1_grad_passes=0)
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    passes = 32 * layer * 8 / (3.35e12 * 0.8)                # 1 micro-batch x 32 layers: 19.3 ms
    # the flag also marks FSDP1 with FP32 flat parameters (master weights, docs/model.md §11.63, second note): per
    # layer two gathers' shard casts (4 + 2 B) and the reduced shard's cast (2 + 4 B) of the 8-GPU shard, 5.4 ms
    casts = 32 * layer / 8 * (2 * 6 + 6) / (3.35e12 * 0.8)
    expected = passes + casts
    assert with_passes["time_memory_bound"] - without["time_memory_bound"] == pytest.approx(expected, rel=1e-3)
    # and FSDP1's root unit (docs/model.md §11.63), exposed data-parallel time: set apart
    root = with_passes["exposed_dp"] - without["exposed_dp"]
    # by hand (tests/lm/test_fsdp1_root.py's rules; review16 #15): the root's (2 x 32,000 x 4,096) gather and
    # reduce-scatter in the node, its shard casts and two gradient passes, and the replica tail over the 2 nodes:
    # 85% of the all-reduces of the first block's and the root's 2-B gradient shards (one ring step a node)
    from tests.lm.test_fsdp1_root import _casts, _intra_ring, _passes  # here: that module imports this one
    head = 2 * 32000 * 4096

    def replicas(nbytes):
        return 1.5 * (8.4e-6 + 2 * 2 * 8e-6) + 2 * 1 / 2 * nbytes / (12.5e9 * 0.85)
    tail = 0.85 * (replicas(2 * (layer - 2 * 4096) / 8) + replicas(2 * head / 8))
    assert root == pytest.approx(2 * _intra_ring(2 * head) + _casts(head, 8) + _passes(head) + tail, rel=1e-6)
    # and the stored gradient shard, FP32 (4 B) where the model kept the reduce dtype's 2: the optimizer reads
    # 2 B more of each of the 6,738,149,376 / 8 local parameters (0.63 ms)
    optimizer = 6_738_149_376 / 8 * 2 / (3.35e12 * 0.8)
    assert with_passes["time_optimizer"] - without["time_optimizer"] == pytest.approx(optimizer, rel=1e-3)
    assert with_passes["step_time"] - without["step_time"] - root == pytest.approx(expected + optimizer, rel=1e-2)
    # two micro-batches per step: FSDP1 reduce-scatters after every backward, so twice the passes
    twice = {**LLAMA7B, "global_batch": 64}
    doubled = one(**twice, fsdp_version=1, fsdp1_grad_passes=2)["time_memory_bound"] - one(**twice)["time_memory_bound"]
    assert doubled == pytest.approx(2 * expected, rel=1e-3)


def test_unsharded_data_parallel_runs_no_fsdp_passes():
    plain = {**LLAMA7B, "sharding": "ddp", "shard_degree": 1}
    assert one(**plain, fsdp_version=1, fsdp1_grad_passes=2)["time_memory_bound"] == pytest.approx(
        one(**plain)["time_memory_bound"], rel=1e-12)


@pytest.mark.parametrize("framework", [FMS, "PyTorch 1.10 FSDP (minGPT)", "PyTorch FSDP", "FSDP1",
                                       "Composer (llm-foundry)", "HF Accelerate (FSDP)"])
def test_every_fsdp1_profile_sets_two_passes(framework):
    # the passes are FSDP1's (flat parameters), not one stack's: every FSDP1 profile sets them
    resolved = resolve(ExecutionSpec(framework=framework, sharding="fsdp"), pp=1, layers=32)
    assert resolved.fsdp1_grad_passes == 2 and resolved.fsdp_version == 1      # and says it runs FSDP1 (mend18)


@pytest.mark.parametrize("framework", ["TorchTitan (FSDP2)", "KempnerForge (PyTorch FSDP2)", "Megatron-LM"])
def test_fsdp2_and_other_stacks_set_none(framework):
    resolved = resolve(ExecutionSpec(framework=framework, sharding="fsdp"), pp=1, layers=32)
    assert not resolved.fsdp1_grad_passes
    assert resolved.fsdp_version == (None if framework == "Megatron-LM" else 2)   # FSDP2 stated; Megatron: none
