"""vLLM V1's own KV-cache write kernel (``kv_write_kernel``, kernels/serve/attention.py ``attention_launches``;
docs/model_serving.md S45), derived by hand."""

from __future__ import annotations

import pytest

from fastmodel.kernels.serve.attention import attention_launches
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.profiles import KV_WRITE_KERNEL_VLLM, profile_columns

GIB = 2**30


def test_attention_launches_by_hand():
    row = columns("llama3.1-70b", "B200", precision="fp8", tp=2, batch_size=1)
    assert row[COLUMN_INDEX["kernel_overhead_s"]] == 4e-6      # specs/devices/b200.toml
    # one attention kernel per layer: 80 x 4 us
    assert attention_launches(row) == pytest.approx(80 * 4e-6, rel=1e-12)
    # vLLM: reshape_and_cache_flash before the attention kernel, two launches per layer: 80 x 2 x 4 us
    row[COLUMN_INDEX["kv_write_kernel"]] = 1.0
    assert attention_launches(row) == pytest.approx(640e-6, rel=1e-12)
    # a pipeline stage launches its own layers' kernels: 40 x 2 x 4 us
    row[COLUMN_INDEX["pp"]] = 2.0
    assert attention_launches(row) == pytest.approx(320e-6, rel=1e-12)


def test_only_the_vllm_profile_launches_its_own_kv_write_at_every_version():
    assert COLUMNS[COLUMN_INDEX["kv_write_kernel"]].default == 0    # sweeps without --engine: the model's count
    assert KV_WRITE_KERNEL_VLLM == 1.0
    for version in ((0, 10, 2), (0, 11, 2), (0, 15, 1), (0, 18, 0), None):
        assert profile_columns("vllm", version, 180 * GIB)["kv_write_kernel"] == 1.0
    for engine in ("trtllm", "sglang"):
        assert profile_columns(engine, None, 180 * GIB)["kv_write_kernel"] == 0.0


def test_one_request_pays_one_more_launch_per_layer_per_step():
    # a static batch of one 64-token prompt and two output tokens on one B200: the one decode step launches 80 more
    # kernels, 80 x 4 us = 320 us; a prompt-only iteration is priced without per-kernel attention launches (S5, S7),
    # so the lone prefill does not move
    kw = dict(precision="fp8", tp=1, input_len=64, output_len=2, batch_size=1)
    base = evaluate("llama3.1-70b", "B200", **kw)
    vllm = evaluate("llama3.1-70b", "B200", kv_write_kernel=1.0, **kw)
    assert vllm["tpot"] - base["tpot"] == pytest.approx(320e-6, rel=1e-9)
    assert vllm["ttft"] == base["ttft"]
