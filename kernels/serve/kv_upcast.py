"""An FP8 KV pool converted to 16 bits at every forward (``kv_pool_upcast``; docs/model_serving.md S58).

SGLang 0.5.6.post2's ``aiter`` attention backend, the default of an MHA model on ROCm, cannot read an FP8 KV
cache: before ``paged_attention_ragged`` (decode) and ``mha_batch_prefill_func`` (extend) it converts the layer's
K and V buffers to the query's dtype, ``k_cache.to(dtype)`` and ``v_cache.to(dtype)`` ("TODO kkhuang-amd need to
remove it when paged_attention_ragged support fp8-kv", ``srt/layers/attention/aiter_backend.py:1237-1241,
1344-1349``). The buffers are what ``MHATokenToKVPool.get_kv_buffer`` returns: each layer's whole allocation,
``(size + page_size, head_num, head_dim)`` (``srt/mem_cache/memory_pool.py:609-631,737-757``), not the part the
batch uses. Each element is read at ``kv_bytes`` and written at 2 bytes, so one forward moves, on one device,

    U = (1 + 2 / kv_bytes) x pool bytes,    t = U / (hbm_bw x hbm_eff)

with the pool the KV budget the model allocates (``kv_cache_mem_fraction`` x the HBM left after the weights, the
workspace of ``max_batch_size`` requests and the framework constant, or with ``kv_budget_of_total`` 1 (vLLM profile)
f x HBM - the rest, S66: ``kv_cache_capacity`` of max_throughput).
With ``pp`` stages a device holds the pool of its layers only; the kernels' whole-model time sums the stages,
``pp`` pools. A 1-byte (FP8) KV cache only: a 16-bit cache is read as it is (no conversion). MHA and GQA models
only: the backend's MLA branch converts just the rows it selects for a prefix (``aiter_backend.py:1043-1053``), and
its MLA decode reads the cache as stored.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    C_HBM_BW,
    C_HBM_EFF,
    C_KV_BYTES,
    C_KV_POOL_UPCAST,
    C_MAX_BATCH_SIZE,
    C_MLA,
    C_PP,
)
from fastmodel.kernels.serve.costs import ACT_BYTES
from fastmodel.kernels.serve.memory import activation_memory, kv_capacity, weight_memory


@njit(inline="always")
def kv_pool_bytes(row):
    """KV-pool bytes one device allocates: ``kv_cache_mem_fraction`` x (HBM - weights - the workspace of
    ``max_batch_size`` requests - framework), at least 0 (vLLM profile, ``kv_budget_of_total`` 1: f x HBM - the
    rest; S66, ``memory.kv_capacity``)."""
    return kv_capacity(row, weight_memory(row), activation_memory(row, row[C_MAX_BATCH_SIZE]))


def upcasts_kv_pool(kv_pool_upcast, kv_bytes, mla) -> bool:
    """Whether a configuration converts its KV pool to 16 bits at every forward: ``kv_pool_upcast`` set, a 1-byte
    (FP8) KV cache and no MLA (module docstring). Plain Python, for callers outside the kernels
    (``serve.profiles_vendor.kv_upcast_note``); the kernels call its compiled copy."""
    return kv_pool_upcast > 0.0 and kv_bytes == 1.0 and mla <= 0.0


_upcasts_kv_pool = njit(inline="always")(upcasts_kv_pool)


@njit
def kv_upcast_time(row):
    """Seconds one forward (a decode step, a prefill chunk, a mixed iteration) spends converting the FP8 KV pool
    to 16 bits (module docstring); 0 unless :func:`upcasts_kv_pool`."""
    if not _upcasts_kv_pool(row[C_KV_POOL_UPCAST], row[C_KV_BYTES], row[C_MLA]):
        return 0.0
    moved = (1.0 + ACT_BYTES / row[C_KV_BYTES]) * row[C_PP] * kv_pool_bytes(row)
    return moved / (row[C_HBM_BW] * row[C_HBM_EFF])
