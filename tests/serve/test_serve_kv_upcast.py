"""SGLang's FP8 KV pool converted to BF16 at every forward on ROCm (``kv_pool_upcast``; docs/model_serving.md S58;
``kernels/serve/kv_upcast.py``), derived by hand for Llama 3.1 70B FP8 on 8 MI300X."""

import pytest

from fastmodel.kernels.serve.kv_upcast import kv_pool_bytes, kv_upcast_time
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns, engine_columns, evaluate
from fastmodel.serve.profiles_vendor import VENDOR_VARIANTS

HBM = 206141652992  # specs/devices/mi300x.toml: 191.98 GiB
BW = 5.3e12 * 0.80  # hbm_bw x hbm_eff
KW = dict(precision="fp8", tp=8, input_len=1024, output_len=128)
#: Llama 3.1 70B on one of 8 GPUs at 1 byte per weight: per layer attention (2 x 8192^2 + 2 x 8192 x 1024) / 8,
#: two norms 2 x 8192, SwiGLU 3 x 8192 x 28672 / 8; 80 layers; the 16-bit embedding and LM head, 128256 x 8192 / 8
#: x 2 B each
LAYER = (2 * 8192**2 + 2 * 8192 * 1024) / 8 + 2 * 8192 + 3 * 8192 * 28672 / 8
WEIGHTS = 80 * LAYER + 2 * 128256 * 8192 / 8 * 2
#: the workspace of SGLang's 4096-request cap: min(16384 (its MI300X chunk), 4096 x 1024) tokens x 2 B x
#: (3 x 8192 + (64 + 2 x 8) x 128 / 8 + 3 x 28672 / 8), plus 4096 FP32 logits of 128256 / 8
WORKSPACE = 16384 * 2 * (3 * 8192 + 80 * 128 / 8 + 3 * 28672 / 8) + 4096 * 128256 / 8 * 4
FRAMEWORK = 3 * 2**30  # the device's framework_memory_bytes
POOL = 0.9 * (HBM - WEIGHTS - WORKSPACE - FRAMEWORK)
UPCAST = 3 * POOL / BW  # read 1 B, write 2 B per element of the whole pool, every forward


def _sglang(**kw):
    profile, _ = engine_columns("sglang", "MI300X")
    return {**profile, **kw}


def test_the_pool_and_its_conversion_by_hand():
    assert WEIGHTS == 9083027456 and WORKSPACE == 1462239232
    assert POOL == pytest.approx(173.1376e9, rel=1e-6)  # 161.2 GiB of FP8 K and V per GPU
    assert UPCAST == pytest.approx(0.122503, rel=1e-5)  # 519.4 GB at 4.24 TB/s per forward
    row = columns("llama3.1-70b", "MI300X", batch_size=64, **KW, **_sglang())
    assert row[COLUMN_INDEX["kv_pool_upcast"]] == 1.0 and row[COLUMN_INDEX["kv_bytes"]] == 1.0
    assert kv_pool_bytes(row) == pytest.approx(POOL, rel=1e-12)
    assert kv_upcast_time(row) == pytest.approx(UPCAST, rel=1e-12)
    # pp 2: each device holds half the layers and converts its own pool; the whole-model time sums both stages
    row2 = columns("llama3.1-70b", "MI300X", batch_size=64, pp=2, **KW, **_sglang())
    assert kv_upcast_time(row2) == pytest.approx(3 * 2 * kv_pool_bytes(row2) / BW, rel=1e-12)
    # an MLA model: the MLA branch reads the cache as stored (aiter_backend.py:1043-1053 converts selected rows only)
    row[COLUMN_INDEX["mla"]] = 1.0
    assert kv_upcast_time(row) == 0.0


def test_every_forward_pays_it_once():
    # a static batch of 64: each decode step +U; the prefill, 64 x 1024 = 65536 tokens in 16384-token chunks,
    # 4 forwards: +4U
    amd = evaluate("llama3.1-70b", "MI300X", batch_size=64, **KW, **_sglang())
    off = evaluate("llama3.1-70b", "MI300X", batch_size=64, **KW, **_sglang(kv_pool_upcast=0.0))
    assert amd["tpot"] - off["tpot"] == pytest.approx(UPCAST, rel=1e-9)
    assert amd["ttft"] - off["ttft"] == pytest.approx(4 * UPCAST, rel=1e-9)
    # a closed loop: every decode iteration carries it, (O - 1) of them in a request's decode memory-bound part
    loop = evaluate("llama3.1-70b", "MI300X", concurrency=16, **KW, **_sglang())
    loop_off = evaluate("llama3.1-70b", "MI300X", concurrency=16, **KW, **_sglang(kv_pool_upcast=0.0))
    assert loop["decode_memory_bound"] - loop_off["decode_memory_bound"] == pytest.approx(127 * UPCAST, rel=1e-9)
    assert loop["tpot"] > loop_off["tpot"] + UPCAST


def test_only_an_fp8_cache_under_the_variant():
    bf16 = evaluate("llama3.1-70b", "MI300X", batch_size=64, kv_precision="bf16", **KW, **_sglang())
    bf16_off = evaluate(
        "llama3.1-70b", "MI300X", batch_size=64, kv_precision="bf16", **KW, **_sglang(kv_pool_upcast=0.0)
    )
    assert bf16["tpot"] == bf16_off["tpot"]  # a 16-bit cache is read as stored
    assert VENDOR_VARIANTS[("sglang", "amd")]["kv_pool_upcast"] == 1.0
    for engine, device in (("sglang", "H100"), ("sglang", "B200"), ("vllm", "MI300X"), ("trtllm", "H100")):
        assert engine_columns(engine, device)[0]["kv_pool_upcast"] == 0.0


def test_serve_says_so_and_how_to_avoid_it():
    from click.testing import CliRunner

    from fastmodel.cli import main

    base = ["serve", "-m", "llama3.1-70b", "-d", "MI300X", "--tp", "8", "--precision", "fp8", "--engine", "sglang",
            "--batch-size", "8"]
    said = CliRunner().invoke(main, base)
    assert said.exit_code == 0 and "whole FP8 KV pool to BF16" in said.output and "--kv-precision bf16" in said.output
    for other in (["--kv-precision", "bf16"], ["--engine", "vllm"]):
        quiet = CliRunner().invoke(main, base + other)
        assert quiet.exit_code == 0 and "FP8 KV pool" not in quiet.output


def test_the_upcast_condition_is_one_function_for_the_kernel_and_the_note():
    """kv_pool_upcast set, a 1-byte KV cache, no MLA: all three, or no conversion (hand truth table)."""
    from fastmodel.kernels.serve.kv_upcast import upcasts_kv_pool

    assert upcasts_kv_pool(1.0, 1.0, 0.0)
    assert not upcasts_kv_pool(0.0, 1.0, 0.0)   # the engine reads FP8 as stored
    assert not upcasts_kv_pool(1.0, 2.0, 0.0)   # a 16-bit cache
    assert not upcasts_kv_pool(1.0, 1.0, 1.0)   # MLA


def test_the_slo_search_says_so_too():
    """``serve --search`` printed no upcast note although its FP8 points pay the conversion; it prints plain
    serve's line once, and none for an engine that reads FP8 as stored."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    base = ["serve", "-m", "llama3.1-70b", "-d", "MI300X", "--search", "--ttft", "2s", "--tpot", "50ms", "--gpus", "8"]
    said = CliRunner().invoke(main, [*base, "--engine", "sglang"])
    assert said.exit_code == 0 and said.output.count("whole FP8 KV pool to BF16") == 1, said.output
    quiet = CliRunner().invoke(main, [*base, "--engine", "vllm"])
    assert quiet.exit_code == 0 and "FP8 KV pool" not in quiet.output
