"""Engine profiles by device vendor: the profile columns an engine's own source sets otherwise on another platform
(docs/model_serving.md S57).

``profiles.profile_columns`` reads an engine's defaults from its CUDA source; ``VENDOR_VARIANTS[(engine, vendor)]``
replaces the columns that its ROCm source sets to another value on an AMD Instinct MI300X (gfx942). Each entry
names the source it was read from; an engine with no entry keeps its CUDA profile on that vendor.

vLLM 0.18.0 on ROCm (the sdist of PyPI's ``vllm==0.18.0``, the source of every file cited here): no profile column
differs. With no ``VLLM_ROCM_*`` variable set (``vllm/envs.py:101-118,913-992``: ``VLLM_ROCM_USE_AITER`` False, the
upstream ``docker/Dockerfile.rocm`` sets none) ``_get_backend_priorities`` (``vllm/platforms/rocm.py:309-352``) picks
``TRITON_ATTN`` (AITER FA and unified attention need ``VLLM_ROCM_USE_AITER``; ``ROCM_ATTN`` needs
``use_prefill_decode_attention``, default False, ``vllm/config/attention.py:23``), which writes the step's keys and
values with its own ``triton_reshape_and_cache_flash`` before the attention kernel
(``vllm/v1/attention/backends/triton_attn.py:283,575-597``: ``kv_write_kernel`` 1, as on CUDA) and supports full
graphs (``AttentionCGSupport.ALWAYS``, :118; ``cudagraph_mode`` FULL_AND_PIECEWISE, ``vllm/config/vllm.py:211,230``,
no ROCm override). ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 from 70 GiB ("For GPUs like H100 and
MI300x", ``vllm/engine/arg_utils.py:2008-2017``); async scheduling on (``vllm/config/vllm.py:718-752``, no platform
test); ``CustomAllreduce(max_size=8192 * 1024)`` (``custom_all_reduce.py:59``; the symmetric-memory size table is
CUDA-only, :123-132; ``RocmPlatform.use_custom_allreduce`` gfx94/gfx95, ``rocm.py:782``) with QuickReduce off
(``VLLM_ROCM_QUICK_REDUCE_QUANTIZATION`` "NONE", ``envs.py:1001-1005``).

SGLang 0.5.6.post2 on ROCm (PyPI's ``sglang==0.5.6.post2`` sdist): ``CustomAllreduce._MAX_CAR_SIZE = 2 * 8192 *
1024`` on HIP, "crossover is at 16MB buffer size for ROCm" (``python/sglang/srt/distributed/device_communicators/
custom_all_reduce.py:46-49``); the default attention backend of an MHA model is ``aiter``
(``srt/server_args.py:1384-1385``), whose decode stores the step's keys and values with
``token_to_kv_pool.set_kv_buffer`` before ``paged_attention_ragged`` (``srt/layers/attention/aiter_backend.py:
1281-1284,1355``); ``MHATokenToKVPool.set_kv_buffer`` writes K and V as two index-put kernels, overlapped on a second
stream only on CUDA (``srt/mem_cache/memory_pool.py:555-556,787-797``), so two launches per layer in sequence.
With an FP8 KV cache the same backend converts each layer's whole K and V pool to BF16 before its decode and extend
kernels (``aiter_backend.py:1237-1241,1344-1349``; ``kv_pool_upcast``, docs/model_serving.md S58).
"""

from __future__ import annotations

#: SGLang's custom allreduce on HIP: up to 16 MiB (``_MAX_CAR_SIZE = 2 * 8192 * 1024``, above)
CUSTOM_AR_SGLANG_ROCM = 2 * 8192 * 1024
#: SGLang's KV-cache store on HIP: K and V index-put kernels, in sequence (no second stream off CUDA), above
KV_WRITE_KERNEL_SGLANG_ROCM = 2.0
#: SGLang's aiter attention on HIP converts each layer's whole FP8 KV pool to BF16 at every forward
#: (``srt/layers/attention/aiter_backend.py:1237-1241,1344-1349``, "TODO kkhuang-amd need to remove it when
#: paged_attention_ragged support fp8-kv"; ``kernels/serve/kv_upcast.py``, docs/model_serving.md S58)
KV_POOL_UPCAST_SGLANG_ROCM = 1.0
#: (engine, vendor) -> the profile columns its source on that vendor's platform sets otherwise; an empty entry:
#: read, and every column is the CUDA profile's
VENDOR_VARIANTS: dict[tuple[str, str], dict[str, float]] = {
    ("vllm", "amd"): {},
    ("sglang", "amd"): {"custom_allreduce_bytes": float(CUSTOM_AR_SGLANG_ROCM),
                        "kv_write_kernel": KV_WRITE_KERNEL_SGLANG_ROCM, "kv_pool_upcast": KV_POOL_UPCAST_SGLANG_ROCM},
}


def vendor_variant(engine: str, vendor: str) -> dict[str, float]:
    """The columns ``engine``'s profile takes on a ``vendor`` device over its CUDA profile (empty: none differ or
    none read; NVIDIA: always empty)."""
    return dict(VENDOR_VARIANTS.get((engine, vendor), {}))


def kv_upcast_note(columns) -> str | None:
    """One line for a configuration whose engine converts its FP8 KV pool to 16 bits at every forward
    (``kv_pool_upcast`` on a 1-byte, non-MLA KV cache; ``kernels/serve/kv_upcast.py``), else None: the cost is
    large (a whole pool's traffic per forward) and avoidable, so the user is told how."""
    from fastmodel.kernels.serve.kv_upcast import upcasts_kv_pool
    from fastmodel.registry.lm import COLUMN_INDEX

    if not upcasts_kv_pool(*(float(columns[COLUMN_INDEX[name]]) for name in ("kv_pool_upcast", "kv_bytes", "mla"))):
        return None
    return ("SGLang's aiter attention on ROCm converts each layer's whole FP8 KV pool to BF16 at every forward "
            "(docs/model_serving.md S58), charged to every step's memory-bound time; a 16-bit KV cache (--kv-precision bf16) avoids it")
