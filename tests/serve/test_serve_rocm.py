"""Serving engines on AMD MI300X as their ROCm source runs them (docs/model_serving.md S57;
fastmodel/serve/profiles_vendor.py ``VENDOR_VARIANTS``), derived by hand."""

import pytest

from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.serve.allreduce import serve_allreduce
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.profiles import KNOWN_VERSIONS, PROFILE_COLUMNS, profile_columns, record_engine
from fastmodel.serve.profiles_vendor import CUSTOM_AR_SGLANG_ROCM, VENDOR_VARIANTS, vendor_variant

MIB = 2**20
HBM = 206141652992                 # specs/devices/mi300x.toml: 191.98 GiB
KW = dict(precision="fp8", tp=8, input_len=1024, output_len=128)


def test_vllm_on_rocm_sets_every_column_as_on_cuda():
    # vLLM 0.18.0's ROCm source: TRITON_ATTN with its own triton_reshape_and_cache_flash, 8 MiB custom allreduce,
    # 8192 / 1024 from 70 GiB, async scheduling: the variant is empty, at every version the model knows
    assert VENDOR_VARIANTS[("vllm", "amd")] == {}
    for version in (*KNOWN_VERSIONS["vllm"], None):
        assert profile_columns("vllm", version, HBM, "amd") == profile_columns("vllm", version, HBM)
    profile = profile_columns("vllm", None, HBM, "amd")
    assert (profile["max_num_tokens"], profile["max_batch_size"], profile["kv_write_kernel"],
            profile["custom_allreduce_bytes"]) == (8192, 1024, 1.0, 8 * MIB)


def test_sglang_on_rocm_takes_its_hip_allreduce_and_kv_store():
    assert CUSTOM_AR_SGLANG_ROCM == 2 * 8192 * 1024 == 16 * MIB
    amd, cuda = profile_columns("sglang", None, HBM, "amd"), profile_columns("sglang", None, HBM)
    assert tuple(amd) == PROFILE_COLUMNS
    assert {k for k in amd if amd[k] != cuda[k]} == {"custom_allreduce_bytes", "kv_write_kernel", "kv_pool_upcast"}
    assert amd["custom_allreduce_bytes"] == 16 * MIB and cuda["custom_allreduce_bytes"] == 8 * MIB
    assert amd["kv_write_kernel"] == 2.0 and cuda["kv_write_kernel"] == 0.0
    assert amd["max_num_tokens"] == 16384          # chunked_prefill_size from 160 GiB ("B200, MI300")
    # NVIDIA devices and engines without a variant keep their CUDA profile
    assert vendor_variant("sglang", "nvidia") == {} and vendor_variant("trtllm", "amd") == {}
    assert profile_columns("trtllm", None, HBM, "amd") == profile_columns("trtllm", None, HBM)
    # a record's framework on an AMD device takes the variant too
    engine, version, _ = record_engine("SGLang 0.5.6.post2", "amd")
    assert profile_columns(engine, version, HBM, "amd") == amd


def test_the_mi300x_allreduce_by_hand():
    row = columns("llama3.1-70b", "MI300X", batch_size=64, **KW)
    assert row[COLUMN_INDEX["intra_eff"]] == 0.75 and row[COLUMN_INDEX["intra_bw"]] == 448e9
    bw = 448e9 * 0.75                                # 7 xGMI links x 64 GB/s x 0.75 usable
    hop = 3.4e-6 * 0.47 / 3.4                        # NCCL's LL NVLink hop, applied to xGMI
    # a decode step of 64 requests: 64 x 8192 x 2 B = 1 MiB, above 256 KiB on 8 GPUs: two-shot
    # 4 us + 3 hops + 6 us + 2 x 7/8 x 1 MiB / 336 GB/s = 16.871 us
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = 16 * MIB
    one_mib = 4e-6 + 3 * hop + 6e-6 + 2 * 7 / 8 * MIB / bw
    assert one_mib == pytest.approx(16.871e-6, rel=1e-4)
    assert serve_allreduce(row, MIB, 8.0, 1.0) == pytest.approx(one_mib, rel=1e-12)
    # a 768-token prefill chunk: 768 x 8192 x 2 B = 12 MiB: SGLang's HIP buffer (16 MiB) keeps its own kernel,
    # 4 + 1.41 + 6 + 65.536 us = 76.946 us; vLLM's 8 MiB buffer hands it to RCCL (the NCCL model)
    twelve = 768 * 8192 * 2
    assert serve_allreduce(row, twelve, 8.0, 1.0) == pytest.approx(76.946e-6, rel=1e-4)
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = 8 * MIB
    assert serve_allreduce(row, twelve, 8.0, 1.0) == allreduce_time(row, twelve, 8.0, 1.0)


def test_sglang_decode_on_mi300x_pays_its_two_kv_stores_per_layer():
    # a static batch of 64 requests, Llama 3.1 70B FP8 on 8 MI300X: the decode allreduce (1 MiB) and the prefill
    # chunks' (16384 x 8192 x 2 B = 256 MiB) sit on the same side of 8 and 16 MiB, so only the KV store moves:
    # 80 layers x 2 kernels x 4 us = 640 us per decode step, the prefill (no per-kernel attention launches) not
    # (the FP8 pool's conversion, kv_pool_upcast, is S58's and tests/serve/test_serve_kv_upcast.py's: held here)
    cuda_columns = {"custom_allreduce_bytes": 8 * MIB, "kv_write_kernel": 0.0}
    amd = evaluate("llama3.1-70b", "MI300X", engine="sglang", batch_size=64, kv_pool_upcast=0.0, **KW)
    as_cuda = evaluate("llama3.1-70b", "MI300X", engine="sglang", batch_size=64, kv_pool_upcast=0.0, **KW,
                       **cuda_columns)
    assert amd["tpot"] - as_cuda["tpot"] == pytest.approx(640e-6, rel=1e-9)
    assert amd["ttft"] == as_cuda["ttft"]


def test_the_default_engine_on_mi300x_is_vllm_as_its_rocm_source_runs_it():
    default = evaluate("llama3.1-70b", "MI300X", concurrency=64, **KW)
    vllm = evaluate("llama3.1-70b", "MI300X", engine="vllm 0.18.0", concurrency=64, **KW)
    assert default["tpot"] == vllm["tpot"] and default["ttft"] == vllm["ttft"]
