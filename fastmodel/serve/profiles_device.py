"""Engine scheduler defaults that depend on the device: the token budget and batch cap each engine's source sets
from the GPU's memory and name (docs/model_serving.md S58).

``device_limits`` is the one rule: ``profiles.profile_columns`` takes its ``max_num_tokens`` and
``max_batch_size`` from it, for every engine, on every path (records, ``fastmodel serve``, ``serve --search``,
the API). The sources, at the versions the profiles name (PyPI sdists):

- **vLLM** (``EngineArgs``: ``_set_default_args_v1`` in 0.10.2, ``get_batch_defaults`` from 0.11.2): a GPU whose
  total memory (``current_platform.get_device_total_memory()``) is at least 70 GiB and whose name
  (``get_device_name().lower()``) does not contain ``"a100"`` ("Setting large ``max_num_batched_tokens`` for
  A100 reduces throughput, see PR #17885") takes ``max_num_batched_tokens`` 8192 under the OpenAI server and
  16384 under the offline ``LLM`` class, ``max_num_seqs`` 1024 under both; every other GPU 2048 / 8192 and 256
  (``VLLM_RULE_LINES``). ``max_num_seqs`` is then capped at ``max_num_batched_tokens`` (no effect on these
  pairs). The rule is the same at every version read; 0.18.0 adds ``--performance-mode throughput``, which
  doubles both (``arg_utils.py:2162-2166``; the default ``balanced``, ``vllm/config/vllm.py:320``, leaves them).
  ROCm's device name is ``AMD_Instinct_MI300X`` (``vllm/platforms/rocm.py:56-66,604-611``), its memory
  ``torch.cuda.get_device_properties().total_memory`` (:614-616). If the query fails (a driver with no GPU)
  vLLM takes the small pair; the model always knows its device.
- **SGLang** 0.5.6.post2 (``srt/server_args.py`` ``_handle_gpu_memory_settings``, 728-835): ``chunked_prefill_size``
  2048 below 35 GiB (``gpu_mem`` in MiB: < 20 x 1024 and < 35 x 1024), 4096 below 60 GiB ("A100 (40GB), L40"),
  8192 below 160 GiB ("H100, A100", "H20, H200"), 16384 from 160 GiB ("B200, MI300"); the NPU branches do not
  apply to a GPU. Its batch cap stays the request pool's ceiling, 4096 (``model_executor/model_runner.py:1673-1681``:
  ``min(max(pool tokens / context_len x 512, 2048), 4096)``, the pool's floor 2048 not modelled).
- **TensorRT-LLM**: ``trtllm-serve`` passes ``BuildConfig``'s defaults, ``max_batch_size`` 2048 and
  ``max_num_tokens`` 8192, for every device (``tensorrt_llm/commands/serve.py`` ``get_llm_args`` @00209af); no
  device test.
"""

from __future__ import annotations

#: vLLM's ``UsageContext`` of the deployment: ``"server"`` (``OPENAI_API_SERVER``, ``vllm serve``, what every
#: serving record and path here runs) or ``"offline"`` (``LLM_CLASS``, ``vllm bench throughput``)
VLLM_USAGE = "server"
#: the memory from which vLLM takes its large defaults (``device_memory >= 70 * GiB_bytes``)
VLLM_LARGE_BYTES = 70 * 2**30
#: the device-name substring that keeps a large GPU on vLLM's small defaults
VLLM_SMALL_NAME = "a100"
#: usage -> ((max_num_batched_tokens, max_num_seqs) on a large GPU, (the same) on any other)
VLLM_BATCH_DEFAULTS = {"server": ((8192, 1024), (2048, 256)), "offline": ((16384, 1024), (8192, 256))}
#: vLLM version -> the lines of ``vllm/engine/arg_utils.py`` holding the rule (memory query, test, the two pairs)
#: in its sdist; 0.15.1 publishes none and lies between 0.14.1 and 0.16.0, whose rules are identical [A]
VLLM_RULE_LINES = {
    (0, 10, 2): "1658-1688",
    (0, 11, 2): "1882-1911",
    (0, 12, 0): "1817-1846",
    (0, 14, 1): "1835-1865",
    (0, 15, 1): "0.14.1 1835-1865 = 0.16.0 1866-1896",
    (0, 16, 0): "1866-1896",
    (0, 18, 0): "1997-2027",
}
#: SGLang ``chunked_prefill_size`` by GPU memory: (below this many GiB, tokens), then ``SGLANG_CHUNK_LARGEST``;
#: its < 20 and < 35 GiB tiers (and its < 90 and < 160 GiB tiers) share a chunk size, one entry each here
SGLANG_CHUNK_BY_MEMORY = ((35, 2048), (60, 4096), (160, 8192))
SGLANG_CHUNK_LARGEST = 16384
#: SGLang's request-pool ceiling (``max_num_reqs``), the batch cap of its profile
SGLANG_MAX_BATCH = 4096
#: TensorRT-LLM ``BuildConfig`` defaults: (``max_num_tokens``, ``max_batch_size``)
TRTLLM_LIMITS = (8192, 2048)


def reported_name(device) -> str:
    """The name a driver reports for ``device`` as far as the rules read it: the first name its built-in device
    file lists (``A100`` -> ``A100-SXM4-80GB``, the product name ``torch.cuda.get_device_name`` carries after
    "NVIDIA "), else the name as given; "" for none."""
    if not device:
        return ""
    from fastmodel.spec.devices import device_file_names, device_files

    stem = device_files().get(str(device).lower())
    names = device_file_names().get(stem) if stem else None
    return str(names[0]) if names else str(device)


def vllm_batch_defaults(hbm_bytes: float, device_name: str, usage: str = VLLM_USAGE) -> tuple[int, int]:
    """(``max_num_batched_tokens``, ``max_num_seqs``) vLLM defaults to on a GPU of ``hbm_bytes`` named
    ``device_name`` under ``usage`` (module docstring): the large pair from 70 GiB unless the name holds "a100",
    ``max_num_seqs`` capped at the token budget."""
    large = hbm_bytes >= VLLM_LARGE_BYTES and VLLM_SMALL_NAME not in str(device_name).lower()
    tokens, seqs = VLLM_BATCH_DEFAULTS[usage][0 if large else 1]
    return tokens, min(seqs, tokens)


def sglang_chunk(hbm_bytes: float) -> int:
    """SGLang's ``chunked_prefill_size`` on a GPU of ``hbm_bytes`` (module docstring)."""
    return next((tokens for below, tokens in SGLANG_CHUNK_BY_MEMORY if hbm_bytes < below * 2**30), SGLANG_CHUNK_LARGEST)


def device_limits(engine: str, hbm_bytes: float, device_name: str = "", usage: str = VLLM_USAGE) -> dict[str, float]:
    """``max_num_tokens`` and ``max_batch_size`` of ``engine``'s defaults on a GPU of ``hbm_bytes`` whose reported
    name is ``device_name`` (:func:`reported_name`): the one device-keyed rule of the profiles (S58)."""
    if engine == "vllm":
        tokens, batch = vllm_batch_defaults(hbm_bytes, device_name, usage)
    elif engine == "sglang":
        tokens, batch = sglang_chunk(hbm_bytes), SGLANG_MAX_BATCH
    else:
        tokens, batch = TRTLLM_LIMITS
    return {"max_num_tokens": float(tokens), "max_batch_size": float(batch)}
