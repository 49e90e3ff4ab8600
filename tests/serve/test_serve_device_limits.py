"""The engines' scheduler defaults by device (docs/model_serving.md S58; ``fastmodel/serve/profiles_device.py``),
derived by hand from each engine's source rule and the device files' CUDA-visible memory."""

import pytest

from fastmodel.serve.profiles import KNOWN_VERSIONS, profile_columns
from fastmodel.serve.profiles_device import (
    VLLM_RULE_LINES,
    device_limits,
    reported_name,
    sglang_chunk,
    vllm_batch_defaults,
)
from fastmodel.spec.devices import device_table, device_vendor

GIB = 2**30
#: device -> (the name its driver reports as the rule reads it, hbm GiB from its device file)
DEVICES = {
    "A100-40GB": ("A100-SXM4-40GB", 39.50),
    "A100": ("A100-SXM4-80GB", 79.25),
    "H100": ("H100-SXM-80GB", 79.11),
    "B200": ("B200", 178.35),
    "MI300X": ("MI300X", 191.98),
}
#: vLLM OpenAI server, by hand: >= 70 GiB and no "a100" in the name -> (8192, 1024), else (2048, 256).
#: A100 80 GB has 79.25 GiB but its name holds "a100": the small pair (vLLM PR #17885)
VLLM_SERVER = {
    "A100-40GB": (2048, 256),
    "A100": (2048, 256),
    "H100": (8192, 1024),
    "B200": (8192, 1024),
    "MI300X": (8192, 1024),
}
#: SGLang chunked_prefill_size, by hand: 39.5 GiB < 60 -> 4096; 79 GiB < 90 -> 8192; >= 160 GiB -> 16384
SGLANG_CHUNK = {"A100-40GB": 4096, "A100": 8192, "H100": 8192, "B200": 16384, "MI300X": 16384}


def _hbm(device: str) -> float:
    return float(device_table()[device.lower()]["hbm_bytes"])


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_device_files_name_and_memory(device):
    name, gib = DEVICES[device]
    assert reported_name(device) == name
    assert _hbm(device) / GIB == pytest.approx(gib, abs=0.01)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_vllm_limits_at_every_known_version(device):
    tokens, seqs = VLLM_SERVER[device]
    for version in KNOWN_VERSIONS["vllm"]:
        profile = profile_columns("vllm", version, _hbm(device), device_vendor(device), reported_name(device))
        assert (profile["max_num_tokens"], profile["max_batch_size"]) == (tokens, seqs), (device, version)
        assert version in VLLM_RULE_LINES  # the rule was read at this version


def test_vllm_rule_edges_and_usage_context():
    assert vllm_batch_defaults(70 * GIB, "NVIDIA H100") == (8192, 1024)  # ">= 70 GiB"
    assert vllm_batch_defaults(70 * GIB - 1, "NVIDIA H100") == (2048, 256)
    assert vllm_batch_defaults(79.25 * GIB, "NVIDIA A100-SXM4-80GB") == (2048, 256)
    assert vllm_batch_defaults(79.11 * GIB, "", "offline") == (16384, 1024)  # LLM class: 16384 tokens
    assert vllm_batch_defaults(39.5 * GIB, "", "offline") == (8192, 256)
    assert reported_name("a100-80gb") == "A100-SXM4-80GB" and reported_name("my-gpu") == "my-gpu"
    assert reported_name(None) == ""


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_sglang_and_trtllm_limits(device):
    hbm, name = _hbm(device), reported_name(device)
    sglang = profile_columns("sglang", (0, 5, 6), hbm, device_vendor(device), name)
    assert (sglang["max_num_tokens"], sglang["max_batch_size"]) == (SGLANG_CHUNK[device], 4096)
    assert device_limits("trtllm", hbm, name) == {"max_num_tokens": 8192, "max_batch_size": 2048}


def test_sglang_memory_steps():
    # server_args.py: gpu_mem (MiB) < 20*1024 -> 2048, < 35*1024 -> 2048, < 60*1024 -> 4096, < 160*1024 -> 8192
    assert [sglang_chunk(g * GIB) for g in (16, 24, 34.9, 35, 59.9, 60, 90, 159.9, 160)] == [
        2048,
        2048,
        2048,
        4096,
        4096,
        8192,
        8192,
        8192,
        16384,
    ]


def test_every_path_reads_the_device_name():
    from fastmodel.serve.api import engine_columns

    assert engine_columns("vllm", "A100", ())[0]["max_num_tokens"] == 2048
    assert engine_columns("vLLM 0.10.2", "H100", ())[0]["max_batch_size"] == 1024
    assert engine_columns("sglang", "L40S", ())[0]["max_num_tokens"] == 4096  # 44.52 GiB < 60


def test_a_record_reads_its_gpu_name():
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.records import lower_serve_record

    record = {
        "id": "r1",
        "source": "hand",
        "framework": "vLLM 0.18.0",
        "model": {
            "name": "llama-3.1-8b",
            "layers": 32,
            "hidden": 4096,
            "ffn": 14336,
            "heads": 32,
            "kv_heads": 8,
            "head_dim": 128,
            "vocab": 128256,
            "ffn_kind": "swiglu3",
        },
        "system": {"gpu": "A100-SXM4-80GB", "n_gpus": 1, "gpus_per_node": 8},
        "serve": {"tp": 1, "precision": "bf16", "input_len": 1024, "output_len": 256, "concurrency": 16},
        "measured": {"ttft_s": 0.1, "tpot_s": 0.01},
    }
    columns = lower_serve_record(record).columns
    assert (columns[COLUMN_INDEX["max_num_tokens"]], columns[COLUMN_INDEX["max_batch_size"]]) == (2048, 256)
    record["system"]["gpu"] = "H100-SXM-80GB"  # 79.11 GiB, no "a100": the large pair
    columns = lower_serve_record(record).columns
    assert (columns[COLUMN_INDEX["max_num_tokens"]], columns[COLUMN_INDEX["max_batch_size"]]) == (8192, 1024)
