"""Host issue time (docs/model.md §11.7, "Host issue time"): the operators a stack dispatches per layer times
its seconds per operator, a micro-batch lasting max(GPU, issue) and the pipeline bubble waiting on host-bound
stages. Golden values are derived by hand below."""

import re
from pathlib import Path

import pytest

from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import megatron_2021 as m21
from fastmodel.lm.stacks import resolve
from tests.suite_fixtures import NET, one

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"
A100 = dict(peak_flops_16=312e12, gemm_eff_16=0.75, sm_count=108, gemm_tile_m=128, gemm_tile_n=256,
            gemm_k_half=128, kernel_overhead_s=4e-6, hbm_bw=2.039e12, hbm_eff=0.8)
# an A100 node: the shared network at NVLink 3's 300 GB/s inside and a 200 Gb/s NIC per GPU across nodes
A100_NET = dict(NET, intra_bw=300e9, inter_bw=25e9)
# a 12-layer GPT of hidden 1,024 at one sequence per micro-batch: its GPU layer pass is far below 1 ms on an A100
SMALL = dict(layers=12, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=50257, seq_len=1024,
             gated_mlp=0, n_gpus=1, tp=1, pp=1, dp=1, micro_batch=1, global_batch=4, recompute="full", **A100,
             **A100_NET)


def test_issue_time_is_operators_times_seconds_per_operator():
    # 60 operators x 20 us = 1.2 ms per layer forward; full recompute: forward, recomputed forward, backward
    # = 3 x 1.2 ms per layer; 4 micro-batches x 12 layers x 3.6 ms = 172.8 ms, plus the optimizer step
    counted = one(**SMALL, host_ops_layer=60, host_op_s=20e-6)
    assert counted["step_time"] - counted["time_optimizer"] == pytest.approx(4 * 12 * 3 * 60 * 20e-6, rel=1e-12)
    gpu = one(**SMALL)
    assert counted["time_host_wait"] == pytest.approx(counted["step_time"] - gpu["step_time"], rel=1e-12)
    # host_layer_s (a calibration) overrides the count: the same 1.2 ms per layer pass gives the same step
    assert one(**SMALL, host_layer_s=1.2e-3, host_ops_layer=5, host_op_s=1e-6)["step_time"] == \
        pytest.approx(counted["step_time"], rel=1e-12)
    # no operator cost: the CPU runs ahead (CUDA graphs, large kernels)
    assert one(**SMALL, host_ops_layer=60)["time_host_wait"] == 0.0


def test_a_host_bound_pipeline_bubble_is_the_stages_issue_time():
    # pp 2, 1F1B: each stage issues 6 layers x 3 passes x 1.2 ms = 21.6 ms per micro-batch; m = 4 micro-batches
    # and a bubble of (p - 1) = 1 micro-batch: 5 x 21.6 ms = 108 ms of pipeline plus optimizer and sends
    piped = one(**{**SMALL, "n_gpus": 2, "pp": 2}, host_ops_layer=60, host_op_s=20e-6)
    assert piped["pipeline_bubble"] == pytest.approx(6 * 3 * 1.2e-3, rel=1e-12)
    outside = piped["time_optimizer"] + piped["exposed_pp"] + piped["exposed_dp"]
    assert piped["step_time"] - outside == pytest.approx(5 * 6 * 3 * 1.2e-3, rel=1e-12)
    # the GPU slower than the host: the bubble is the GPU's, as before
    gpu = one(**{**SMALL, "n_gpus": 2, "pp": 2})
    assert one(**{**SMALL, "n_gpus": 2, "pp": 2}, host_ops_layer=1, host_op_s=1e-9)["pipeline_bubble"] == \
        gpu["pipeline_bubble"]


def test_megatron_2021_profile_sets_its_counted_operators():
    fork = resolve(ExecutionSpec(framework="Megatron-DeepSpeed (3D)"), pp=1, layers=24)
    assert (fork.host_ops_layer, fork.host_op_s) == (60.0, 20e-6)
    lm2021 = resolve(ExecutionSpec(stack="megatron-2021", framework="Megatron-LM 2021"), pp=1, layers=24)
    assert lm2021.host_ops_layer == 56.0                        # no MoE scalar tensors in Megatron-LM's layer
    core = resolve(ExecutionSpec(framework="NeMo 24.04"), pp=1, layers=24)
    assert core.host_ops_layer is None                          # not counted: the registry's 0 (CPU ahead)
    given = resolve(ExecutionSpec(framework="Megatron-DeepSpeed", host_op_s=5e-6), pp=1, layers=24)
    assert given.host_op_s == 5e-6                              # a plan's own value wins over the stack's


def test_the_documented_operator_count_sums_to_the_profiles_constant():
    text = DOCS.read_text()
    block = text[text.index("<!-- host-ops-megatron-deepspeed -->"):text.index("<!-- /host-ops-megatron-deepspeed -->")]
    counts = [int(n) for n in re.findall(r"^\|[^|\n]+\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]
    assert len(counts) >= 10
    assert sum(counts) == m21.HOST_OPS_LAYER_MEGATRON_DEEPSPEED
    moe = [int(n) for n in re.findall(r"^\|[^|\n]*MoE[^|\n]*\|[^|\n]+\|\s*(\d+)\s*\|\s*$", block, flags=re.M)]
    assert sum(counts) - sum(moe) == m21.HOST_OPS_LAYER_MEGATRON_2021
