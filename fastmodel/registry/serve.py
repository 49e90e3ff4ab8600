"""The registry of the serving engine: result variables and status codes (dependency-free).

A serving configuration is a column vector of the real-world model (``registry/lm.py`` columns, its serving
columns included); its results are the rows below, in the kernels' order (``kernels/serve/layout.py``
derives ``S_<NAME>`` and the status codes ``ST_<NAME>`` from them). ``weight_memory``, ``memory_per_device``
and ``fits_memory`` are the variables the other engines produce too (``registry/variables.py``).
"""

from __future__ import annotations

from fastmodel.registry.variables import (
    FITS_MEMORY,
    MEMORY_PER_DEVICE,
    NOT_COMPUTED,
    NOT_FINITE,
    WEIGHT_MEMORY,
    Status,
    Variable,
    producer,
)

ENGINE = "serve"
Result = producer(ENGINE)

#: result rows of the serving kernels, in order
SERVE_RESULTS: tuple[Variable, ...] = (
    Result("ttft", "s", "min", "Time to first token: the prefill of the prompt (its request's share of the batch)."),
    Result("tpot", "s", "min", "Time per output token of one request (mean inter-token latency)."),
    Result("e2e_latency", "s", "min", "ttft + (output_len - 1) x tpot: one request from arrival to last token."),
    Result("output_tokens_per_s", "tokens/s", "max", "Output tokens per second of one instance."),
    Result("output_tokens_per_s_per_gpu", "tokens/s", "max", "output_tokens_per_s / (tp x attention_dp x pp)."),
    Result("output_tokens_per_s_per_user", "tokens/s", "max", "1 / tpot."),
    Result("cluster_output_tokens_per_s", "tokens/s", "max", "output_tokens_per_s x instances."),
    Result("batch_size", "requests", "", "Requests in flight (the chosen one under max_throughput)."),
    Result("kv_bytes_per_token", "bytes", "min", "KV-cache bytes of one token on one device (all its layers)."),
    Result("kv_cache_memory", "bytes", "min", "KV cache of the batch at full length on one device."),
    Result("kv_cache_capacity", "bytes", "", "KV-cache budget per device: kv_cache_mem_fraction x free HBM (vLLM: "
           "of the whole HBM, less the rest; docs/model_serving.md S66)."),
    WEIGHT_MEMORY,
    Result("activation_memory", "bytes", "min", "Activation workspace of one engine step (max_num_tokens)."),
    MEMORY_PER_DEVICE,
    FITS_MEMORY,
    Result("experts_touched", "1", "", "Routed experts read per MoE layer per decode step (0 for dense)."),
    Result("prefill_gemm", "s", "min", "Prefill: GEMM time of one request's ttft."),
    Result("prefill_attention", "s", "min", "Prefill: attention-kernel time."),
    Result("prefill_memory_bound", "s", "min", "Prefill: norms, activations, rotary."),
    Result("prefill_comm", "s", "min", "Prefill: TP/EP/PP communication."),
    Result("decode_gemm", "s", "min", "Decode: GEMM time summed over a request's output tokens."),
    Result("decode_attention", "s", "min", "Decode: attention (KV-cache reads) summed over output tokens."),
    Result("decode_memory_bound", "s", "min", "Decode: norms, activations, rotary summed over output tokens."),
    Result("decode_comm", "s", "min", "Decode: TP/EP/PP communication summed over output tokens."),
    Result("decode_overhead", "s", "min", "Decode: host step overhead summed over output tokens."),
)
SERVE_RESULT_INDEX: dict[str, int] = {r.name: i for i, r in enumerate(SERVE_RESULTS)}

#: status of a serving configuration, in code order (sweeps keep illegal points with these; their results are NaN)
SERVE_STATUSES: tuple[Status, ...] = (
    Status("ok", "evaluated"),
    Status("heads_not_divisible_by_tp", "query heads (or KV heads, when more than tp) do not split over tp"),
    Status("layers_not_divisible_by_pp", "layers not divisible by pp"),
    Status("ep_not_dividing", "ep must divide tp x attention_dp and the routed experts, and moe_tp x ep must equal "
           "tp x attention_dp when moe_tp is set (a dense model has none: ep 1)"),
    Status("no_fp8", "precision is fp8 but the device has no FP8 peak and the engine runs no weight-only FP8 "
           "(fp8_weight_only 0; vLLM's FP8 Marlin runs it, docs/model_serving.md S55)"),
    Status("no_kv_room", "not one request's KV cache fits in the memory the weights, workspace and framework "
           "leave (every load mode, a static batch at its own workspace; docs/model_serving.md S9)"),
    NOT_FINITE,
    Status("attention_dp_not_dividing", "SLO search: attention_dp does not divide the requests in flight (each "
           "attention-DP group holds concurrency / attention_dp of them)"),
    Status("attention_dp_dense", "SLO search: attention_dp > 1 on a dense model (a set of replicas the search "
           "already covers as smaller instances)"),
    Status("pools_over_budget", "SLO search, disaggregated: the prefill and decode pools use more GPUs than --gpus"),
    Status("context_exceeded", "input_len + output_len exceed the model's context (context_len): the engine refuses "
           "the request"),
    Status("engine_not_on_device", "the serving engine does not run on the device's vendor: TensorRT-LLM runs on "
           "NVIDIA GPUs only (docs/model_serving.md S56)"),
    Status("no_fp4", "precision is fp4 or mxfp4 but the device has no FP4 tensor cores and the engine runs no "
           "weight-only FP4 there (compute capability below fp4_weight_only_cc: TensorRT-LLM below Hopper; "
           "docs/model_serving.md S63)"),
    NOT_COMPUTED,
)
SERVE_STATUS_NAMES: tuple[str, ...] = tuple(s.name for s in SERVE_STATUSES)
SERVE_STATUS: dict[str, int] = {name: code for code, name in enumerate(SERVE_STATUS_NAMES)}

#: generic names the engine table (fastmodel/engines.py) and the shared services read
RESULTS = SERVE_RESULTS
STATUSES = SERVE_STATUSES
COORDS: dict[str, tuple[str, ...]] = {}
GROUPED: tuple[tuple[Variable, tuple[str, ...]], ...] = ()
#: serving's share of HBM a batch may fill when the device column usable_hbm_fraction is not set (0): the flat
#: allowance the serving engine has always used beside framework_memory_bytes (docs/model_serving.md S9; an
#: assumption, unchanged by issue 23's training margin)
SERVE_USABLE_HBM_FRACTION = 0.95
RANK_ONLY_FITTING = True   # best ranks only batches whose weights, KV cache and workspace fit usable HBM
BREAKDOWN = None      # a serving step has no breakdown figure (prefill/decode parts are their own variables)
