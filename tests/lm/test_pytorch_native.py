"""PyTorch-native stacks (TorchTitan, OLMo-core, KempnerForge): FSDP2's reduce-scatter copy-in and SDPA's
FlashAttention-2 kernels, derived by hand (docs/model.md §11.3 "Attention through PyTorch SDPA", §11.6 "FSDP2
copies"; issue 26)."""

from pathlib import Path

import pytest
import tomllib

from fastmodel.kernels.lm.parallel import fsdp_copy_out_time, fsdp_reduce_copy_in_time
from fastmodel.kernels.lm.passes import tp_pass_factors
from fastmodel.kernels.nccl import allreduce_time, bus_bandwidth
from fastmodel.kernels.roofline import attention_time
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve
from fastmodel.lm.table import row
from tests.suite_fixtures import H100, NET, one

# a Llama-3-8B-shaped model trained with FSDP over one 8-GPU node, two micro-batches per step
LLAMA8B = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256, seq_len=4096,
               gated_mlp=1, n_gpus=8, micro_batch=2, global_batch=32, tp=1, pp=1, dp=8, sharding="fsdp",
               grad_reduce_bytes=4, **H100, **NET)
DEVICES = Path(__file__).resolve().parents[2] / "specs" / "devices"


def test_fsdp2_copies_each_layers_gradients_into_the_reduce_scatter_buffer_in_the_reduce_dtype():
    # foreach_reduce: chunk_cat of the BF16 gradients into the FP32 reduce-scatter buffer: read 2 B, write 4 B
    params = 218e6
    assert fsdp_reduce_copy_in_time(row(**H100, fsdp_copy_out=1, grad_reduce_bytes=4), params) == pytest.approx(
        params * (2 + 4) / (3.35e12 * 0.8), rel=1e-12)
    # reduced in BF16 it is still a copy: 2 + 2 B
    assert fsdp_reduce_copy_in_time(row(**H100, fsdp_copy_out=1, grad_reduce_bytes=2), params) == pytest.approx(
        params * 4 / (3.35e12 * 0.8), rel=1e-12)
    # FSDP1 (no per-parameter copies): nothing
    assert fsdp_reduce_copy_in_time(row(**H100, fsdp_copy_out=0, grad_reduce_bytes=4), params) == 0.0


def test_a_step_charges_the_copy_in_once_per_layer_and_micro_batch_beside_the_two_copy_outs():
    with_copies, without = one(**LLAMA8B, fsdp_copy_out=1), one(**LLAMA8B, fsdp_copy_out=0)
    layer_params = 4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336
    r = row(**H100, fsdp_copy_out=1, grad_reduce_bytes=4)
    micro_batches = 32 / (2 * 8)
    per_layer = 2 * fsdp_copy_out_time(r, layer_params) + fsdp_reduce_copy_in_time(r, layer_params)
    expected = micro_batches * 32 * per_layer
    assert with_copies["time_memory_bound"] - without["time_memory_bound"] == pytest.approx(expected, rel=1e-3)
    assert with_copies["step_time"] - without["step_time"] == pytest.approx(expected, rel=1e-2)


def test_a_shard_group_of_one_device_copies_nothing():
    # KempnerForge applies no FSDP without a data-parallel dimension: the parameters are the tensors themselves
    alone = {**LLAMA8B, "n_gpus": 1, "dp": 1, "global_batch": 4}
    assert one(**alone, fsdp_copy_out=1)["time_memory_bound"] == pytest.approx(
        one(**alone, fsdp_copy_out=0)["time_memory_bound"], rel=1e-12)


def test_sdpa_flash_attention_runs_at_the_flashattention2_efficiency_where_the_device_states_it():
    flops = 1e15
    fa2 = row(**H100, attn_eff_fa2=0.339, attn_fa2=1)
    assert attention_time(fa2, flops, 1.0) == pytest.approx(flops / (989e12 * 0.339) + 4e-6, rel=1e-12)
    # not FlashAttention-2, a device without the figure, or MLA (unequal head widths: not SDPA's flash kernel)
    for other in (row(**H100, attn_eff_fa2=0.339, attn_fa2=0), row(**H100, attn_eff_fa2=0.0, attn_fa2=1),
                  row(**H100, attn_eff_fa2=0.339, attn_fa2=1, mla=1)):
        assert attention_time(other, flops, 1.0) == pytest.approx(flops / (989e12 * 0.45) + 4e-6, rel=1e-12)


def test_the_hopper_device_files_state_flashattention2_at_335_tflops():
    # Dao 2023 (FlashAttention-2) sec. 4.1: "up to 335 TFLOPs/s" forward + backward on H100 SXM5
    for name in ("h100-sxm.toml", "h200-sxm.toml"):
        spec = tomllib.loads((DEVICES / name).read_text())
        assert spec["attn_eff_fa2"] == pytest.approx(335e12 / spec["peak_flops_16"], abs=5e-4)
        assert spec["attn_eff_fa2"] < spec["attn_eff"]


def test_torchtitan_and_olmo_core_run_sdpa_flash_kernels_and_kempnerforge_keeps_the_device_default():
    def stack_of(framework):
        return resolve(ExecutionSpec(framework=framework, sharding="fsdp"), pp=1, layers=32)

    assert stack_of("TorchTitan (FSDP2), PyTorch nightly 2025-03").attn_fa2 is True
    assert stack_of("OLMo-core (PyTorch FSDP2/HSDP, torch.compile), early 2025").attn_fa2 is True
    # KempnerForge locks torch 2.11 (uv.lock), whose SDPA backend on Hopper was not read: the registry default
    assert stack_of("KempnerForge (PyTorch FSDP2 + DTensor TP, torch.compile)").attn_fa2 is None
    assert stack_of("Megatron-Core 0.9").attn_fa2 is None
    # FSDP1 on PyTorch 2.x calls SDPA too; PyTorch 1.x predates it (unfused attention)
    assert stack_of("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)").attn_fa2 is True
    assert stack_of("PyTorch 1.10 FSDP (minGPT), FP16, SGD").attn_fa2 is False


def test_a_pair_on_a_4_gpu_nvlink_mesh_reaches_only_its_own_links():
    # HGX 4-GPU Hopper board (no NVSwitch): 18 links per GPU, 6 to each of 3 peers -> a pair has 1/3 of 450 GB/s
    mesh = row(**{**NET, "domain_size": 4}, nvlink_mesh_max=4)
    assert bus_bandwidth(mesh, 2.0, 1.0) == pytest.approx(450e9 * 0.8 / 3, rel=1e-12)
    assert bus_bandwidth(mesh, 3.0, 1.0) == pytest.approx(450e9 * 0.8 * 2 / 3, rel=1e-12)
    # all 4 GPUs of the node: every link carries the ring(s), the switched rate
    assert bus_bandwidth(mesh, 4.0, 1.0) == pytest.approx(450e9 * 0.8, rel=1e-12)
    # TP=2 all-reduce of one 4 x 4096 x 4096 BF16 activation: 2 (n-1)/n S at 120 GB/s (+ latency)
    size = 4 * 4096 * 4096 * 2
    switched = allreduce_time(row(**{**NET, "domain_size": 4}), size, 2.0, 1.0)
    paired = allreduce_time(mesh, size, 2.0, 1.0)
    assert paired - switched == pytest.approx(size * (1 / 120e9 - 1 / 360e9), rel=1e-9)
    # FSDP over 8 nodes with tp=4 inside each: one member per node, the NIC bound, untouched by the mesh
    assert bus_bandwidth(mesh, 8.0, 4.0) == pytest.approx(50e9 * 0.85, rel=1e-12)
    # an 8-GPU NVSwitch node (domain above nvlink_mesh_max): every pair at the full rate
    assert bus_bandwidth(row(**NET, nvlink_mesh_max=4), 2.0, 1.0) == pytest.approx(450e9 * 0.8, rel=1e-12)


def test_hopper_device_files_mark_the_4_gpu_baseboard_as_a_mesh():
    for name in ("h100-sxm.toml", "h200-sxm.toml"):
        assert tomllib.loads((DEVICES / name).read_text())["nvlink_mesh_max"] == 4
    for name in ("b200.toml", "gb200.toml", "a100-sxm4.toml"):
        assert "nvlink_mesh_max" not in tomllib.loads((DEVICES / name).read_text())


def test_kempnerforge_redistributes_each_column_parallel_input_on_its_own():
    # units of W_TP, two all-reduces of T h 2 B per forward; n = 3 (q, k, v) + 2 (gate, up) column-parallel inputs
    assert tp_pass_factors(row(tp_per_projection=1, gated_mlp=1)) == (1.0, 2.5)      # no SP: 5 backward all-reduces
    assert tp_pass_factors(row(tp_per_projection=1, gated_mlp=0)) == (1.0, 2.0)      # ungated MLP: up only
    # with SP tp_layer.tp_layer_time prices the 5 AG + 2 RS (and back) itself (tests/lm/test_tp_regathers.py, §11.42)
    assert tp_pass_factors(row(tp_per_projection=1, gated_mlp=1, sequence_parallel=1)) == (1.0, 1.0)
    assert tp_pass_factors(row(tp_per_projection=0, gated_mlp=1)) == (1.0, 1.0)
    # the step, full recompute without SP: 2 + 2 + 5 = 9 all-reduces per layer instead of 2 + 2 + 2 = 6, so
    # 3 more of T h 2 B (T = 2 x 4096) per layer and micro-batch (32 / (2 x 4) = 4); the LM head's unchanged
    base = dict(LLAMA8B, tp=2, dp=4, recompute="full")
    plain, split = one(**base), one(**base, tp_per_projection=1)
    extra = 32 * 4 * 3 * allreduce_time(row(**NET), 2 * 4096 * 4096 * 2, 2.0, 1.0)
    assert split["comm_tp"] - plain["comm_tp"] == pytest.approx(extra, rel=1e-9)
    stack = resolve(ExecutionSpec(framework="KempnerForge (PyTorch FSDP2 + DTensor TP)", sharding="fsdp"),
                    pp=1, layers=32)
    assert stack.tp_per_projection is True
    assert resolve(ExecutionSpec(framework="TorchTitan (FSDP2)", sharding="fsdp"), pp=1,
                   layers=32).tp_per_projection is None
