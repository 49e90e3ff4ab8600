"""The real-world LM model: hand-derived terms and the run-record path (docs/model.md §11)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.roofline import gemm_time, grouped_gemm_time, memory_bound_time
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import lower_record, read_records
from fastmodel.lm.table import row, table
from tests import suite_fixtures
from tests.suite_fixtures import NET, one

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = DATA / "runs_dev.jsonl"

# the shared H100 less its flash-attention efficiency: these tests run at the table's default attn_eff (0.55)
H100 = {k: v for k, v in suite_fixtures.H100.items() if k != "attn_eff"}


def test_flops_per_token_match_the_mfu_std_convention_on_every_dev_row():
    records = read_records(RUNS)
    results = evaluate_table(np.stack([r.columns for r in records], axis=1))
    expected = np.array([r.measured["flops_per_token_std"] for r in records])
    assert np.max(np.abs(results["flops_per_token"] / expected - 1)) < 1e-3


def test_large_gemm_time_is_peak_times_efficiency_quantization_and_depth():
    r = row(**H100)
    n = 8192.0
    tiles = (n / 128) * (n / 256)                   # 2048 output tiles
    waves = math.ceil(tiles / 132)                  # 16 waves on 132 SMs
    quantization = tiles / (waves * 132)
    depth = n / (n + 128)
    expected = 2 * n**3 / (989e12 * 0.72 * quantization * depth) + 4e-6
    assert gemm_time(r, n, n, n, False) == pytest.approx(expected, rel=1e-12)


def test_skinny_gemm_is_memory_bound():
    r = row(**H100)
    m, n, k = 1.0, 8192.0, 8192.0                   # one token: a matrix-vector product
    weights = 2 * (m * k + k * n) + 2 * m * n
    assert gemm_time(r, m, n, k, False) == pytest.approx(weights / (3.35e12 * 0.8) + 4e-6, rel=1e-12)


def test_batched_gemms_quantize_over_all_their_tiles():
    r = row(**H100)
    # 264 GEMMs of one 128x256 tile each: exactly two full waves, no quantization loss
    one = grouped_gemm_time(r, 264.0, 128.0, 256.0, 4096.0, False)
    flops = 2 * 264 * 128 * 256 * 4096
    wave = 1.0
    expected = max(flops / (989e12 * 0.72 * wave * 4096 / (4096 + 128)),
                   264 * (2 * (128 * 4096 + 4096 * 256) + 2 * 128 * 256) / (3.35e12 * 0.8)) + 4e-6
    assert one == pytest.approx(expected, rel=1e-12)


def test_memory_bound_time_is_bytes_over_effective_bandwidth():
    assert memory_bound_time(row(**H100), 2.68e9) == pytest.approx(2.68e9 / (3.35e12 * 0.8), rel=1e-12)


def test_stack_compute_eff_divides_every_kernel_time():
    from fastmodel.kernels.roofline import attention_time

    base, slow = row(**H100), row(**H100, stack_compute_eff=0.8)    # a stack at 80% of the modelled speed
    n = 8192.0
    assert gemm_time(slow, n, n, n, False) == pytest.approx(gemm_time(base, n, n, n, False) / 0.8, rel=1e-12)
    assert memory_bound_time(slow, 2.68e9) == pytest.approx(2.68e9 / (3.35e12 * 0.8) / 0.8, rel=1e-12)
    flops = 1e15
    assert attention_time(slow, flops, 1.0) == pytest.approx(attention_time(base, flops, 1.0) / 0.8, rel=1e-12)
    assert gemm_time(row(**H100, stack_compute_eff=1.0), n, n, n, False) == gemm_time(base, n, n, n, False)


LLAMA70B = dict(layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=128256, seq_len=8192,
                gated_mlp=1, n_gpus=256, micro_batch=1, global_batch=512, tp=8, pp=4, dp=8, sequence_parallel=1,
                **H100, **NET)


def test_interleaving_divides_the_bubble_by_the_virtual_stages():
    """The bubble divides by v = 4, but for the first rank's word-embedding wait (docs/model.md §11.44 item 1d):
    interleaved, rank 0 runs its p chunk-0 forwards (backwards) with the embedding's SP reduce-scatter (all-gather)
    before (after) the chunk the last rank waits for, (p - 1/v) e more than the divided bubble. e by hand: two ring
    collectives of b s h x 2 B = 134 MB over 8 NVLink ranks, 7/8 of it at 450 GB/s x 0.8 each, 0.65 ms, plus
    7 latencies of 3 us each: 0.69 ms (the NCCL model's protocol terms add a little)."""
    from fastmodel.kernels.lm.first_rank import embedding_stage

    plain = one(**LLAMA70B)
    interleaved = one(**{**LLAMA70B, "vp": 4})
    e = sum(embedding_stage(row(**LLAMA70B, vp=4)))
    assert e == pytest.approx(2 * (7 / 8 * 8192 * 8192 * 2 / (450e9 * 0.8) + 7 * 3e-6), rel=0.05)
    assert plain["pipeline_bubble"] > 0
    assert interleaved["pipeline_bubble"] == pytest.approx(plain["pipeline_bubble"] / 4 + (4 - 1 / 4) * e, rel=1e-12)


def test_no_pipeline_no_bubble():
    assert one(**{**LLAMA70B, "pp": 1, "dp": 32})["pipeline_bubble"] == 0.0


def test_full_recompute_repeats_the_forward_pass_and_selective_only_the_attention_core():
    base = one(**LLAMA70B, recompute="none")
    full = one(**LLAMA70B, recompute="full")
    selective = one(**LLAMA70B, recompute="selective")
    assert base["time_recompute"] == 0.0
    # full recompute adds each layer's forward pass (GEMMs, attention, memory-bound) once more
    added = sum(full[k] - base[k] for k in ("time_gemm", "time_attention", "time_memory_bound"))
    assert added == pytest.approx(full["time_recompute"], rel=1e-9)
    assert full["time_gemm"] - base["time_gemm"] < base["time_gemm"] / 3        # the LM head is not recomputed
    assert 0 < selective["time_recompute"] < 0.2 * full["time_recompute"]
    assert base["step_time"] < selective["step_time"] < full["step_time"]


def test_fp8_speeds_up_gemms_but_not_memory_bound_work():
    bf16 = one(**LLAMA70B, peak_flops_8=1979e12, gemm_eff_8=0.65)
    fp8 = one(**LLAMA70B, peak_flops_8=1979e12, gemm_eff_8=0.65, precision="fp8")
    assert fp8["time_gemm"] < 0.75 * bf16["time_gemm"]
    assert fp8["time_memory_bound"] > bf16["time_memory_bound"]     # casts
    assert fp8["time_attention"] == pytest.approx(bf16["time_attention"], rel=1e-12)
    assert fp8["step_time"] > 0.5 * bf16["step_time"]


def test_throughput_and_mfu_follow_from_step_time():
    r = one(**LLAMA70B)
    tokens = 512 * 8192
    assert r["tokens_per_s"] * r["step_time"] == pytest.approx(tokens, rel=1e-12)
    assert r["mfu"] == pytest.approx(r["flops_per_token"] * tokens / (r["step_time"] * 256 * 989e12), rel=1e-12)
    assert 0 < r["mfu"] < 0.75


def test_zero3_stops_scaling_when_gathers_dominate():
    gpt175 = dict(layers=96, hidden=12288, ffn=49152, heads=96, kv_heads=96, head_dim=128, vocab=51200,
                  seq_len=2048, gated_mlp=0, tp=1, pp=1, sharding="fsdp", micro_batch=1, recompute="full",
                  peak_flops_16=312e12, hbm_bw=2.039e12, intra_bw=300e9, inter_bw=25e9, sm_count=108)
    # DeepSpeed ZeRO-3 moves parameters in 100 MB buckets, each paying the ring latency over all ranks
    gpt175["collective_bucket_bytes"] = 1e8
    t768 = one(**gpt175, n_gpus=768, dp=768, shard_degree=768, global_batch=1536)["step_time"]
    t1536 = one(**gpt175, n_gpus=1536, dp=1536, shard_degree=1536, global_batch=1536)["step_time"]
    assert t1536 > 0.6 * t768            # twice the GPUs, far less than twice as fast


def test_run_record_errors_name_the_field():
    record = json.loads(RUNS.read_text().splitlines()[0])
    del record["model"]["hidden"]
    with pytest.raises(SpecError, match="model.hidden"):
        lower_record(record, "x.jsonl:1")
    record = json.loads(RUNS.read_text().splitlines()[0])
    record["plan"]["tp"] = 3
    with pytest.raises(SpecError, match="plan.dp"):
        lower_record(record, "x.jsonl:1")
    record = json.loads(RUNS.read_text().splitlines()[0])
    record["plan"]["sharding"] = "fdsp"
    with pytest.raises(SpecError, match="did you mean 'fsdp'"):
        lower_record(record, "x.jsonl:1")


def test_measured_values_are_never_read_for_prediction():
    record = json.loads(RUNS.read_text().splitlines()[0])
    a = lower_record(record).columns
    record["measured"] = {"step_time_s": 1e9}
    assert np.array_equal(a, lower_record(record).columns)


def test_collective_algorithm_can_be_fixed_to_ring_or_tree():
    size = 1e6
    transfer = 2 * 7 / 8 * size / (450e9 * 0.8)
    ring = row(**NET, collective_algorithm="ring")
    tree = row(**NET, collective_algorithm="tree")
    # a 1 MB ring allreduce inside one node runs NCCL's LL (3.6 us base, NVLink hop 3 us x .47/3.4, a quarter
    # of the bandwidth), faster than LL128 (10 us, hop x 1.9/3.4, 92%) or Simple (8.4 us, 3 us hops)
    simple = 8.4e-6 + transfer + 2 * 7 * 3e-6
    ll128 = 10.0e-6 + transfer / 0.92 + 2 * 7 * 3e-6 * 1.9 / 3.4
    ll = 3.6e-6 + transfer / 0.25 + 2 * 7 * 3e-6 * 0.47 / 3.4
    assert ll < ll128 < simple
    assert allreduce_time(ring, size, 8.0, 1.0) == pytest.approx(ll, rel=1e-12)
    # NCCL's tree on one node, fastest protocol LL128: 4.4 us base + 2 x 7 hops of 3 us x 1.25/3.4, 2 x the buffer at
    # 0.92 x 7/9 of the bus x treeCorrectionFactor's LL128 entry log2i(1e6 >> 6) = 13, 0.6 (v2.17.1-1 tuning.cc)
    tree_ll128 = 4.4e-6 + 2 * 7 * 3e-6 * 1.25 / 3.4 + 2 * size / (450e9 * 0.8 * 0.92 * 7 / 9 * 0.6)
    assert allreduce_time(tree, size, 8.0, 1.0) == pytest.approx(tree_ll128, rel=1e-12)


def test_ulysses_context_parallelism_is_exposed_and_needs_heads_divisible_by_tp_cp():
    from fastmodel.lm.rules import plan_status
    from fastmodel.registry.lm import STATUS_CODES

    long = {**LLAMA70B, "seq_len": 131072, "cp": 4, "tp": 8, "pp": 1, "dp": 8, "global_batch": 64}
    ring = one(**long)
    ulysses = one(**long, cp_algorithm="alltoall")
    assert ulysses["exposed_cp"] == pytest.approx(ulysses["comm_cp"], rel=1e-12)
    assert ring["exposed_cp"] < ring["comm_cp"]
    bad = table(1, **{**long, "cp": 16, "dp": 2}, cp_algorithm="alltoall")     # 64 heads over tp8 x cp16
    assert plan_status(bad)[0] == STATUS_CODES["heads_not_divisible"]


def test_allgather_context_parallelism_gathers_k_and_v_and_is_exposed():
    """Llama 3 sec. 3.3.2: K and V all-gathered over the cp group before attention, the latency exposed. Hand
    derivation: 131,072 tokens over cp 4 -> T = 32,768 per rank; K and V of 8 KV heads x 128 over tp 8, BF16:
    a block of 2 x 2 B x T x 8 x 128 / 8; the gather's output is cp blocks (group cp, ranks tp apart); per layer
    and micro-batch 1 forward + 2 backward passes (gathered again, dK and dV reduce-scattered); 80 layers,
    64 / 8 = 8 micro-batches."""
    from fastmodel.kernels.nccl import allgather_time

    long = {**LLAMA70B, "seq_len": 131072, "cp": 4, "tp": 8, "pp": 1, "dp": 8, "global_batch": 64}
    gathered = one(**long, cp_algorithm="allgather")
    block = 2 * 2.0 * 32768 * 8 * 128 / 8
    per_layer = allgather_time(row(**long, cp_algorithm="allgather"), 4 * block, 4.0, 8.0)
    assert gathered["comm_cp"] == pytest.approx(8 * 80 * 3 * per_layer, rel=1e-9)
    assert gathered["exposed_cp"] == pytest.approx(gathered["comm_cp"], rel=1e-12)
    ring = one(**long)                                  # the ring hides its exchanges behind attention
    assert ring["exposed_cp"] < ring["comm_cp"] and ring["step_time"] < gathered["step_time"]


@pytest.mark.parametrize("variant", [
    {}, {"sharding": "fsdp", "tp": 1, "pp": 1, "dp": 256, "shard_degree": 256},
    {"sharding": "fsdp", "shard_degree": 8}, {"recompute": "full"}, {"recompute": "selective", "fused_kernels": 0},
    {"tp_comm_overlap": 1}, {"vp": 2}, {"cp": 2, "dp": 4, "seq_len": 65536}, {"sharding": "ddp", "pp": 1, "dp": 32},
    # a communication-bound FSDP step: every collective is exposed, none may be counted twice
    {"sharding": "fsdp", "tp": 1, "pp": 1, "dp": 256, "shard_degree": 256, "global_batch": 256, "seq_len": 128,
     "inter_bw": 5e9},
    {"sharding": "fsdp", "tp": 1, "pp": 1, "dp": 256, "shard_degree": 256, "recompute": "full",
     "param_fetch_bw": 2e10, "overlap_param_gather": 0},
    {"host_layer_s": 0.05},                       # host-bound: every micro-batch waits on the CPU
    {"offload_modules": 12, "host_link_bw": 1e9},  # fine-grained offloading over a slow host link (§11.21)
    {"sharding": "fsdp", "shard_degree": 8, "reduce_every_microbatch": 1},   # Llama 3: FP32 reduce-scatter per mb
    {"pp_engine_deepspeed": 1},      # DeepSpeed's blocking partitioned sends and TP gathers (§11.31): all exposed
])
def test_step_time_is_the_sum_of_its_parts(variant):
    r = one(**{**LLAMA70B, **variant})
    parts = sum(r[k] for k in ("time_gemm", "time_attention", "time_memory_bound", "pipeline_bubble", "time_host_wait", "time_optimizer",
                               "time_offload", "time_straggler", *(f"exposed_{g}" for g in ("tp", "cp", "ep", "pp", "dp"))))
    assert r["step_time"] == pytest.approx(parts, rel=1e-12)
    for group in ("tp", "cp", "ep", "pp", "dp"):
        assert 0.0 <= r[f"exposed_{group}"] <= r[f"comm_{group}"] * (1 + 1e-12) + 1e-15, group


def test_fsdp_with_stages_reduces_every_microbatch_beside_the_next_one():
    """Llama 3 (sec. 3.3.2; docs/model.md §11.20): sharded gradients accumulated over m micro-batches are
    reduce-scattered m times. Hand derivation: 1e9 stage parameters in FP32 (4 B) over a shard group of 8 ranks
    8 apart; the first m - 1 = 15 reductions each run beside a 0.5 s micro-batch: exposed max(0, r - 0.5) plus
    the comm_sm_share (0.15) of the compute slowed while they overlap; the 16th is the once-per-step reduction."""
    from fastmodel.kernels.lm.parallel import microbatch_reduce
    from fastmodel.kernels.nccl import allgather_time

    on = row(**LLAMA70B, sharding="fsdp", shard_degree=8, reduce_every_microbatch=1, comm_sm_share=0.15)
    r = allgather_time(on, 4e9, 8.0, 8.0)
    comm, exposed = microbatch_reduce(on, 1e9, 8.0, 8.0, 16.0, 0.5)
    assert comm == pytest.approx(15 * r, rel=1e-12)
    assert exposed == pytest.approx(15 * (max(0.0, r - 0.5) + 0.15 * min(r, 0.5)), rel=1e-12)
    assert microbatch_reduce(on, 1e9, 8.0, 8.0, 1.0, 0.5) == (0.0, 0.0)              # one micro-batch
    off = row(**LLAMA70B, sharding="fsdp", shard_degree=8, comm_sm_share=0.15)
    assert microbatch_reduce(off, 1e9, 8.0, 8.0, 16.0, 0.5) == (0.0, 0.0)
    no_stages = row(**{**LLAMA70B, "pp": 1, "dp": 32}, sharding="fsdp", reduce_every_microbatch=1)
    assert microbatch_reduce(no_stages, 1e9, 8.0, 8.0, 16.0, 0.5) == (0.0, 0.0)    # per-layer FSDP does it
    base = {**LLAMA70B, "sharding": "fsdp", "shard_degree": 8}
    assert one(**base, reduce_every_microbatch=1)["comm_dp"] > one(**base)["comm_dp"]


def test_a_framework_fetch_is_the_slower_of_nccl_and_its_own_throughput():
    from fastmodel.kernels.lm.parallel import hook_fetch_time
    fetch = row(**NET, param_fetch_bw=20e9)
    # 1e9 bf16 parameters over 8 ranks: each receives 7/8 of 2e9 bytes at 20 GB/s
    assert hook_fetch_time(fetch, 0.01, 1e9, 8.0) == pytest.approx(7 / 8 * 2e9 / 20e9, rel=1e-12)
    assert hook_fetch_time(fetch, 0.5, 1e9, 8.0) == 0.5                 # NCCL slower: NCCL's time
    assert hook_fetch_time(row(**NET), 0.01, 1e9, 8.0) == 0.01           # 0: no framework fetch


def test_a_hooked_fetch_gathers_each_layer_again_for_the_recomputed_forward():
    # DeepSpeed <= 0.4.1: serial fetches; full recompute re-runs the forward hooks, one more gather per layer
    base = {**LLAMA70B, "sharding": "fsdp", "tp": 1, "pp": 1, "dp": 256, "shard_degree": 256, "micro_batch": 2,
            "overlap_param_gather": 0, "overlap_grad_reduce": 0, "param_fetch_bw": 1e9}
    full, none = one(**base, recompute="full"), one(**base, recompute="none")
    layer_params = 8192 * (8192 + 2 * 8 * 128) + 8192 * 8192 + 3 * 8192 * 28672      # attention + gated MLP
    gather = 255 / 256 * layer_params * 2 / 1e9
    micro_batches = 512 / (2 * 256)
    assert full["exposed_dp"] - none["exposed_dp"] == pytest.approx(micro_batches * 80 * gather, rel=1e-4)
    assert full["comm_dp"] - none["comm_dp"] == pytest.approx(micro_batches * 80 * gather, rel=1e-4)


def test_a_host_bound_micro_batch_lasts_its_issue_time():
    small = dict(layers=12, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=50257, seq_len=1024,
                 gated_mlp=0, n_gpus=1, tp=1, pp=1, dp=1, micro_batch=1, global_batch=4, **H100, **NET)
    gpu = one(**small, recompute="full")
    assert gpu["time_host_wait"] == 0.0                               # host_layer_s 0: the CPU runs ahead
    host = 3e-3                                                       # far slower than the GPU's layer
    bound = one(**small, recompute="full", host_layer_s=host)
    # each of 4 micro-batches: 12 layers x (forward + backward + recomputed forward) issued at 3 ms each
    assert bound["step_time"] - bound["time_optimizer"] == pytest.approx(4 * 12 * host * 3, rel=1e-12)
    assert bound["time_host_wait"] == pytest.approx(bound["step_time"] - gpu["step_time"], rel=1e-12)
    plain = one(**small, recompute="none", host_layer_s=host)            # no recomputed forward to issue
    assert plain["step_time"] - plain["time_optimizer"] == pytest.approx(4 * 12 * host * 2, rel=1e-12)
    fast = one(**small, recompute="full", host_layer_s=1e-7)          # the GPU slower: no wait
    assert fast["step_time"] == gpu["step_time"] and fast["time_host_wait"] == 0.0


def test_fsdp_first_layer_exposes_its_forward_gather_and_last_reduce_scatter_once():
    from fastmodel.kernels.lm.parallel import fsdp_first_layer_exposed
    gather, reduce, backward = 0.010, 0.020, 0.100
    overlapped = row(**NET, overlap_param_gather=1, overlap_grad_reduce=1, comm_sm_share=0.15)
    # forward gather and reduce-scatter in full; the backward gather hides behind the next layer's backward
    assert fsdp_first_layer_exposed(overlapped, gather, reduce, backward) == pytest.approx(
        gather + 0.15 * gather + reduce, rel=1e-12)
    serial = row(**NET, overlap_param_gather=0, overlap_grad_reduce=0, comm_sm_share=0.15)
    assert fsdp_first_layer_exposed(serial, gather, reduce, backward) == pytest.approx(2 * gather + reduce)


def test_zero3_layer_collectives_are_exposed_where_the_framework_does_not_overlap_them():
    from fastmodel.kernels.lm.parallel import fsdp_layer_exposed
    gather, reduce, forward, backward = 0.010, 0.020, 0.050, 0.100
    overlapped = row(**NET, overlap_param_gather=1, overlap_grad_reduce=1, comm_sm_share=0.15)
    # each collective hides behind its pass and slows it by 15% of the overlapped time
    assert fsdp_layer_exposed(overlapped, gather, reduce, forward, backward) == pytest.approx(
        0.15 * gather + 0.15 * (gather + reduce), rel=1e-12)
    # DeepSpeed's overlap_comm off (legacy frameworks): the reduce-scatter runs between the layers' kernels
    gathers_only = row(**NET, overlap_param_gather=1, overlap_grad_reduce=0, comm_sm_share=0.15)
    assert fsdp_layer_exposed(gathers_only, gather, reduce, forward, backward) == pytest.approx(
        reduce + 0.15 * gather + 0.15 * gather, rel=1e-12)
    serial = row(**NET, overlap_param_gather=0, overlap_grad_reduce=0, comm_sm_share=0.15)
    assert fsdp_layer_exposed(serial, gather, reduce, forward, backward) == pytest.approx(2 * gather + reduce)
    # a collective longer than its window shows the remainder
    assert fsdp_layer_exposed(overlapped, 0.080, reduce, forward, backward) == pytest.approx(
        (0.080 - forward) + 0.15 * forward + 0.15 * (0.080 + reduce), rel=1e-12)


def test_fsdp2_copies_each_gathered_layer_out_on_the_compute_stream():
    from fastmodel.kernels.lm.parallel import fsdp_copy_out_time, fsdp_reduce_copy_in_time
    # a 218M-parameter layer in BF16: read and write 436 MB at 3.35 TB/s x 0.8
    params = 218e6
    assert fsdp_copy_out_time(row(**H100, fsdp_copy_out=1), params) == pytest.approx(
        2 * params * 2 / (3.35e12 * 0.8), rel=1e-12)
    assert fsdp_copy_out_time(row(**H100, fsdp_copy_out=0), params) == 0.0
    # in a step: two copies per layer and micro-batch (forward and backward gathers) on the memory-bound line
    base = {**LLAMA70B, "tp": 1, "pp": 1, "dp": 256, "sharding": "fsdp", "shard_degree": 256}
    with_copy, without = one(**base, fsdp_copy_out=1), one(**base, fsdp_copy_out=0)
    layer_params = (8192 * (64 + 2 * 8) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28672)
    micro_batches = 512 / 256
    # ... and the gradients copied into the FP32 reduce-scatter buffer once (fsdp_reduce_copy_in_time)
    copies = micro_batches * 80 * (2 * fsdp_copy_out_time(row(**H100, fsdp_copy_out=1), layer_params)
                                   + fsdp_reduce_copy_in_time(row(**H100, fsdp_copy_out=1), layer_params))
    assert with_copy["time_memory_bound"] - without["time_memory_bound"] == pytest.approx(copies, rel=1e-3)
    assert with_copy["step_time"] > without["step_time"]


def test_uneven_pipeline_stages_put_a_layer_more_on_the_busiest_rank():
    from fastmodel.kernels.lm.memory import layers_per_stage
    from fastmodel.lm.rules import plan_status
    from fastmodel.registry.lm import STATUS_CODES

    # Llama 3 405B: 126 layers over 16 stages; the busiest ranks hold ceil(126/16) = 8 layers
    uneven = {**LLAMA70B, "layers": 126, "pp": 16, "tp": 8, "dp": 2}
    assert layers_per_stage(row(**uneven, uneven_stages=1)) == 8.0
    assert layers_per_stage(row(**uneven, uneven_stages=1, vp=2)) == 2 * math.ceil(126 / 32)
    assert layers_per_stage(row(**{**uneven, "layers": 128}, uneven_stages=0)) == 8.0
    # sweeps keep the divisibility rule unless uneven stages are asked for
    assert plan_status(table(1, **uneven, uneven_stages=0))[0] == STATUS_CODES["layers_not_divisible"]
    assert plan_status(table(1, **uneven, uneven_stages=1))[0] == 0
    # 126 layers on 16 uneven stages take as long per micro-batch as 128 on 16 even ones
    a = one(**uneven, uneven_stages=1)
    b = one(**{**uneven, "layers": 128})
    assert a["time_gemm"] == pytest.approx(b["time_gemm"], rel=1e-12)


def test_a_run_record_with_uneven_stages_runs(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.registry.lm import COLUMN_INDEX

    line = next(line for line in RUNS.read_text().splitlines() if "llama3-paper-405b-s8192-n8192" in line)
    lowered = next(r for r in read_records(RUNS) if r.id == "llama3-paper-405b-s8192-n8192")
    assert lowered.columns[COLUMN_INDEX["uneven_stages"]] == 1.0        # 126 layers, pp 16
    path = tmp_path / "llama3.json"
    path.write_text(line)
    result = CliRunner().invoke(main, ["run", "-m", str(path)])
    assert result.exit_code == 0, result.output
    assert "step time" in result.output


def test_an_execution_spec_allows_uneven_stages():
    from fastmodel.errors import PlanError
    from fastmodel.lm.api import evaluate_lm

    # DeepSeek-V3 has 61 layers: 16 pipeline stages cannot hold them evenly
    with pytest.raises(PlanError, match="uneven_stages"):
        evaluate_lm("deepseek-v3", "dgx-h100", "llm-pretrain", plan="tp1.pp16.ep64", num_nodes=128)
    ds = evaluate_lm("deepseek-v3", "dgx-h100", "llm-pretrain", plan="tp1.pp16.ep64", num_nodes=128,
                     execution={"uneven_stages": True})
    assert int(ds.status) == 0 and 0 < float(ds.step_time) < float("inf")


def test_sliding_window_at_or_above_the_sequence_is_full_attention():
    """Issue 25 item 10: a window w >= s masks nothing a causal mask does not: the step equals full attention's."""
    full = one(**LLAMA70B)
    for window in (8192, 8193, 1 << 20):
        windowed = one(**LLAMA70B, sliding_window=window, sliding_window_layers=80)
        for name in ("time_attention", "time_recompute", "step_time", "memory_per_device"):
            assert windowed[name] == full[name], (window, name)

    none = one(**LLAMA70B, sliding_window=1024, sliding_window_layers=0)   # a window on no layer: share 0 / 80
    assert {k: none[k] for k in ("time_attention", "step_time")} == {k: full[k] for k in ("time_attention", "step_time")}


def test_windowed_attention_cost_is_the_band_of_the_score_matrix():
    """A causal window of w keys over s queries: query i sees min(i + 1, w) keys; in the continuous limit the
    band is a w x w triangle plus (s - w) rows of w, w s - w^2 / 2 pairs, w - w^2 / (2 s) keys per query.
    s = 8192: w = 4096 -> 4096 - 2048 = 3072 keys (3/4 of full causal's 4096), w = 1024 -> 1024 - 64 = 960;
    without a causal mask a window covers w keys. The attention core scales with these key counts."""
    from fastmodel.kernels.lm.layer import attention_context

    base = row(**LLAMA70B)
    assert attention_context(base, False) == 4096.0                        # full causal: s / 2
    assert attention_context(row(**LLAMA70B, sliding_window=4096), True) == 3072.0
    assert attention_context(row(**LLAMA70B, sliding_window=1024), True) == 960.0
    assert attention_context(row(**LLAMA70B, sliding_window=1024), False) == 4096.0   # a full layer of the mix
    assert attention_context(row(**LLAMA70B, sliding_window=1024, causal=0), True) == 1024.0
    assert attention_context(row(**LLAMA70B, sliding_window=1024, flash_attention=0), True) == 8192.0
    s, w = 8192, 1024   # the exact discrete count is within w / (2 s) of a key of the continuous one
    assert sum(min(i + 1, w) for i in range(s)) / s == pytest.approx(960.0 + w / (2 * s), rel=1e-12)
    # every layer windowed at s / 2: the attention core's FLOPs are 3/4 of full causal's, the GEMMs unchanged
    # (no per-kernel launch overhead, so that attention time is proportional to its FLOPs)
    no_overhead = {**LLAMA70B, "kernel_overhead_s": 0.0}
    full, half = one(**no_overhead), one(**no_overhead, sliding_window=4096, sliding_window_layers=80)
    assert half["time_gemm"] == full["time_gemm"]
    assert half["time_attention"] == pytest.approx(0.75 * full["time_attention"], rel=1e-12)
    assert half["step_time"] < full["step_time"]
    # half the layers windowed: half the saving
    mixed = one(**no_overhead, sliding_window=4096, sliding_window_layers=40)
    assert mixed["time_attention"] == pytest.approx(0.875 * full["time_attention"], rel=1e-12)


def test_an_unfused_fp32_gradient_accumulation_streams_the_stage_parameters_every_micro_batch():
    """grad_accum_bytes (Llama 3's FP32 accumulation as PyTorch FSDP2 runs it: read the BF16 gradient 2 B, read
    and write the FP32 accumulator 4 + 4 B) is a memory-bound kernel in every micro-batch's weight-gradient pass:
    the busiest stage's 20 layers each stream their TP-local parameters once per micro-batch, and the 1F1B
    bubble, (p - 1) times the average stage's micro-batch, grows with it."""
    base = one(**LLAMA70B)
    accumulated = one(**LLAMA70B, grad_accum_bytes=10.0)
    layer_params = (8192 * (8192 + 2 * 8 * 128) + 8192 * 8192 + 3 * 8192 * 28672) / 8     # attention + gated MLP
    per_micro_batch = 20 * layer_params * 10.0 / (3.35e12 * 0.8)                      # 80 layers / pp 4
    micro_batches = 512 / 8
    assert accumulated["time_memory_bound"] - base["time_memory_bound"] == pytest.approx(
        micro_batches * per_micro_batch, rel=1e-9)
    assert accumulated["pipeline_bubble"] - base["pipeline_bubble"] == pytest.approx(3 * per_micro_batch, rel=1e-9)
    # the longer last backward pass hides more of the data-parallel gradient reduction behind it
    hidden = base["exposed_dp"] - accumulated["exposed_dp"]
    assert 0.0 <= hidden < per_micro_batch
    assert accumulated["step_time"] - base["step_time"] == pytest.approx(
        (micro_batches + 3) * per_micro_batch - hidden, rel=1e-9)

