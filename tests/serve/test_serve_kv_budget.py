"""How each engine sizes its KV cache from its memory fraction (``kv_budget_of_total``; docs/model_serving.md S66;
``kernels/serve/memory.py`` ``kv_capacity``), derived by hand for Llama 3.1 70B FP8 on 2 H100 at max throughput."""

import math

import pytest

from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, engine_columns, evaluate

HBM = 84943715697  # specs/devices/h100-sxm.toml: 79.11 GiB, the CUDA-visible total
FRAMEWORK = 3 * 2**30  # the device's framework_memory_bytes
KW = dict(precision="fp8", tp=2, input_len=8192, output_len=1024, max_throughput=True)
#: one of 2 GPUs at 1 byte per weight: per layer attention (2 x 8192^2 + 2 x 8192 x 1024) / 2, two norms 2 x 8192,
#: SwiGLU 3 x 8192 x 28672 / 2; 80 layers; the 16-bit embedding and LM head, 128256 x 8192 / 2 x 2 B each
LAYER = (2 * 8192**2 + 2 * 8192 * 1024) / 2 + 2 * 8192 + 3 * 8192 * 28672 / 2
WEIGHTS = 80 * LAYER + 2 * 128256 * 8192 / 2 * 2
#: both profiles' token budget on an H100 is 8192; max throughput sizes the workspace at the batch cap B (vLLM
#: max_num_seqs 1024, TensorRT-LLM max_batch_size 2048): min(8192, B x 8192) tokens x 2 B x (3 x 8192 + (64 + 2 x 8)
#: x 128 / 2 + 3 x 28672 / 2), plus B FP32 logits of 128256 / 2
ACT = 8192 * 2 * (3 * 8192 + 80 * 128 / 2 + 3 * 28672 / 2)
#: FP8 K and V of 80 layers, 8 KV heads over TP 2, head_dim 128, 1 B each
KV_TOKEN = 80 * 2 * 4 * 128 * 1
#: what vLLM's start-up snapshot holds at TP 2 (S66): the lazy CUDA context (cuda_context_bytes, 287,047,680 B) and
#: CustomAllreduce's 8 MiB rank_data; from 0.11.0 also the TP communicator's 16 NCCL ring connections of LL 8 x 512
#: x 8 x 16 + LL128 120 x 640 x 8 x 8 + Simple 4 MiB bytes, and CustomAllreduce's two 8 MiB IPC buffers
SEEN_0_10 = 287047680 + 8 * 2**20
SEEN = SEEN_0_10 + 16 * (8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + 4 * 2**20) + 2 * 8 * 2**20


def _capacity(engine):
    profile, _ = engine_columns(engine, "H100")
    row = columns("llama3.1-70b", "H100", **profile, **KW)
    return row, evaluate("llama3.1-70b", "H100", engine=engine, **KW)


def test_vllm_takes_its_share_of_the_whole_device():
    # vLLM: requested_memory = 0.9 x total, less weights, the profile run's peak and the non-torch memory added
    # after the start-up snapshot (the framework constant less what the snapshot holds)
    assert WEIGHTS == 36328177664  # 33.83 GiB
    assert SEEN == 466354176  # 0.43 GiB
    workspace = ACT + 1024 * 128256 / 2 * 4
    kv = 0.9 * HBM - WEIGHTS - workspace - (FRAMEWORK - SEEN)
    assert kv / 2**30 == pytest.approx(33.45, abs=0.01)
    row, r = _capacity("vllm")
    assert row[COLUMN_INDEX["kv_budget_of_total"]] == 1.0 and row[COLUMN_INDEX["max_batch_size"]] == 1024
    assert row[COLUMN_INDEX["kv_snapshot_after_nccl"]] == 1.0
    # 449 k FP8 tokens: 47 requests at their full 9,216 tokens (max throughput reserves the whole request); the
    # capacity reported is the one at that batch's workspace (47 logits rows, not 1024)
    assert r["batch_size"] == math.floor(kv / (KV_TOKEN * 9216)) == 47
    assert r["kv_cache_capacity"] == pytest.approx(
        0.9 * HBM - WEIGHTS - ACT - 47 * 128256 / 2 * 4 - (FRAMEWORK - SEEN), rel=1e-12)


def test_vllm_0_10_2_subtracts_the_nccl_buffers_set_up_after_its_snapshot():
    # 0.10.2 takes the snapshot before init_worker_distributed_environment: only the context and rank_data are
    # outside the subtraction; the pool is the NCCL rings and the two IPC buffers (0.16 GiB) smaller than 0.11.2's
    kw = dict(precision="fp8", tp=2, input_len=8192, output_len=1024, batch_size=64)
    old = evaluate("llama3.1-70b", "H100", engine="vllm 0.10.2", **kw)["kv_cache_capacity"]
    new = evaluate("llama3.1-70b", "H100", engine="vllm 0.11.2", **kw)["kv_cache_capacity"]
    m = WEIGHTS + ACT + 64 * 128256 / 2 * 4 + FRAMEWORK
    assert old == pytest.approx(0.9 * HBM - m + SEEN_0_10, rel=1e-12)
    assert new - old == pytest.approx(SEEN - SEEN_0_10, rel=1e-9)
    assert (new - old) / 2**30 == pytest.approx(0.159, abs=0.001)
    # at TP 1 there is no communicator: both versions leave out the context only
    one = dict(kw, tp=1)
    a = evaluate("llama3.1-8b", "H100", engine="vllm 0.10.2", **one)["kv_cache_capacity"]
    b = evaluate("llama3.1-8b", "H100", engine="vllm 0.11.2", **one)["kv_cache_capacity"]
    assert a == b


def test_tensorrt_llm_takes_its_share_of_what_the_warm_up_left():
    # TensorRT-LLM: free_gpu_memory_fraction x (total - peak of the estimation run, weights included)
    workspace = ACT + 2048 * 128256 / 2 * 4
    kv = 0.9 * (HBM - WEIGHTS - workspace - FRAMEWORK)
    assert kv / 2**30 == pytest.approx(36.61, abs=0.01)
    row, r = _capacity("trtllm")
    assert row[COLUMN_INDEX["kv_budget_of_total"]] == 0.0 and row[COLUMN_INDEX["max_batch_size"]] == 2048
    assert r["batch_size"] == math.floor(kv / (KV_TOKEN * 9216)) == 52
    assert r["kv_cache_capacity"] == pytest.approx(0.9 * (HBM - WEIGHTS - ACT - 52 * 128256 / 2 * 4 - FRAMEWORK),
                                                   rel=1e-12)


def test_the_two_rules_differ_by_a_tenth_of_the_non_kv_memory():
    # a static batch of 64 under both profiles: the same weights, workspace (8192 tokens, 64 logits rows) and
    # framework m; f H - (m - seen) against f (H - m) leaves vLLM (1 - f) m - seen less
    kw = dict(precision="fp8", tp=2, input_len=8192, output_len=1024, batch_size=64)
    vllm = evaluate("llama3.1-70b", "H100", engine="vllm", **kw)["kv_cache_capacity"]
    trt = evaluate("llama3.1-70b", "H100", engine="trtllm", **kw)["kv_cache_capacity"]
    m = WEIGHTS + ACT + 64 * 128256 / 2 * 4 + FRAMEWORK
    assert vllm == pytest.approx(0.9 * HBM - m + SEEN, rel=1e-12)
    assert trt - vllm == pytest.approx(0.1 * m - SEEN, rel=1e-9)
    assert (trt - vllm) / 2**30 == pytest.approx(3.37, abs=0.01)


def test_vllm_clamps_at_zero_where_its_share_of_the_device_is_below_the_rest():
    # review15 #11: BF16 weights at TP 2 (2 B each: 70,555,009,024 B) and f = 0.85, max throughput: f HBM =
    # 72.2 GB < m = weights + workspace (8192 tokens, 1024 logits rows) + framework - snapshot = 74.8 GB < HBM, so
    # vLLM has no room for one request while TensorRT-LLM's f (HBM - m) is positive
    w16 = 2 * (WEIGHTS - 2 * 128256 * 8192 / 2 * 2) + 2 * 128256 * 8192 / 2 * 2
    assert w16 == 70555009024
    kw = dict(precision="bf16", tp=2, input_len=1024, output_len=1024, max_throughput=True, kv_cache_mem_fraction=0.85)
    m = w16 + ACT + 1024 * 128256 / 2 * 4 + FRAMEWORK - SEEN
    assert 0.85 * HBM < m < HBM
    assert evaluate("llama3.1-70b", "H100", engine="vllm", **kw)["status"] == "no_kv_room"
    trt = evaluate("llama3.1-70b", "H100", engine="trtllm", **kw)
    pool = 0.85 * (HBM - w16 - ACT - 2048 * 128256 / 2 * 4 - FRAMEWORK)      # at the 2048-request batch cap
    assert trt["status"] == "ok" and trt["batch_size"] == math.floor(pool / (2 * KV_TOKEN * 2048)) == 23
    # the kernel itself: max(0, f HBM - (weights + workspace + framework - snapshot)) is 0, not negative
    from fastmodel.kernels.serve.memory import kv_capacity

    row = columns("llama3.1-70b", "H100", **engine_columns("vllm", "H100")[0], **kw)
    assert kv_capacity(row, w16, ACT + 1024 * 128256 / 2 * 4) == 0.0
