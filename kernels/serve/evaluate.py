"""LLM serving: prefill, decode, KV cache and the largest batch that fits (docs/model_serving.md).

One configuration is one column vector ``row`` (``fastmodel.registry.lm`` columns,
``SERVE_COLUMNS`` included). Times are whole-model times of one device of the TP
group (every layer, weights sharded over ``tp``); with ``pp`` stages the batch is
cut into ``pp`` micro-batches that keep every stage busy, so a request sees the
whole-model time at ``batch / pp`` requests per token and the instance emits
``batch`` tokens in that time.

- **Prefill** of ``r`` prompts of ``input_len`` tokens, in chunks of at most
  ``max_num_tokens`` tokens: roofline GEMMs at ``m`` = chunk tokens (weights read
  once per chunk), flash attention over the causal prompt, memory-bound kernels,
  two TP allreduces per layer per chunk, the LM head on the last token of each prompt.
- **Decode** step at ``n`` requests: GEMMs with ``m = n`` whose weights are read
  once per step for the whole batch (memory-bound below the roofline crossover),
  attention as a roofline of its own ``max(FLOPs / attention peak, (KV + Q + O bytes)
  / HBM)``, which is affine in the context on each side of its crossover, and small
  allreduces that pay their latency. No launch overhead: engines replay decode as
  CUDA graphs.
- The **sum over output tokens** of a static batch is exact: the step time is
  ``D0 + sum_layers max(p0 + p1 c, q0 + q1 min(c, window))``; each sum is split at
  its roofline crossover (and the window) and summed in closed form.
- **Concurrency** is a closed loop of requests under continuous batching, solved
  by a short fixed point (``kernels/serve/load.py``): decode iterations, prefill
  (or mixed) iterations, the prefill queue, KV-cache admission.
- **max_throughput** is a stationary step: ``n`` slots, each step ``n (O-1)/O``
  decode tokens plus ``n/O`` prompts of prefill (chunked prefill), attention over
  the mean in-flight context.
- **MoE decode**: a step of ``m`` tokens reads ``E (1 - (1 - k/E)^m)`` experts
  per MoE layer (each token picks ``k`` of ``E`` uniformly).
- **max_throughput**: the largest batch whose KV cache at full length
  (``input_len + output_len``) fits ``kv_cache_mem_fraction`` of the HBM left
  after weights, workspace and the framework constant (vLLM profile,
  ``kv_budget_of_total`` 1: f x HBM - the rest; S66), capped by
  ``max_batch_size`` and by what the step token budget can feed.

The terms live by concern: ``serve_costs`` (GEMMs, memory-bound kernels and
collectives of the body and head), ``serve_attention`` (decode and prefill
attention, KV cache per token), ``serve_memory`` (weights, workspace); this
module holds the phases, the legality check and one configuration
(:func:`serve_row`); ``fused`` (``kernels/serve/fused.py``) runs it over a table or a grid.
"""

import math

import numpy as np

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    N_COLUMNS, C_BATCH_SIZE, C_EP, C_FRAMEWORK_MEMORY_BYTES, C_HBM_BYTES, C_HEADS, C_INPUT_LEN, C_INSTANCES,
    C_KV_HEADS, C_LAYERS, C_LOAD_MODE, C_MAX_BATCH_SIZE, C_MAX_NUM_TOKENS, C_MOE_EXPERTS,
    C_OUTPUT_LEN, C_PEAK_FLOPS_8, C_PP, C_SERVE_STEP_OVERHEAD_S, C_TP, C_USABLE_HBM_FRACTION,
    C_ATTENTION_DP, C_KV_ON_DEMAND, C_MOE_TP, LOAD_BATCH, LOAD_CONCURRENCY, LOAD_MAX_THROUGHPUT, C_CONTEXT_LEN,
    C_FP8_WEIGHT_ONLY, C_PRECISION, PRECISION_FP8, C_COMPUTE_CAPABILITY, C_FP4_GEMM, C_PEAK_FLOPS_4,
    C_FP4_WEIGHT_ONLY_CC, C_ENGINE_NVIDIA_ONLY, C_VENDOR, VENDOR_NVIDIA, C_SPEC_TOKENS,
)
from fastmodel.kernels.serve.load import queue_ttft, steady_loop
from fastmodel.kernels.serve.speculative import accepted_tokens, draft_costs, speculate
from fastmodel.registry.serve import SERVE_USABLE_HBM_FRACTION
from fastmodel.kernels.serve.layout import (
    ST_CONTEXT_EXCEEDED, ST_ENGINE_NOT_ON_DEVICE, ST_EP_NOT_DIVIDING, ST_HEADS_NOT_DIVISIBLE_BY_TP, ST_LAYERS_NOT_DIVISIBLE_BY_PP, ST_NO_FP8,
    ST_NO_FP4,
    ST_NO_KV_ROOM, ST_OK, S_ACTIVATION_MEMORY, S_BATCH_SIZE, S_CLUSTER_OUTPUT_TOKENS_PER_S, S_DECODE_ATTENTION,
    S_DECODE_COMM, S_DECODE_GEMM, S_DECODE_MEMORY_BOUND, S_DECODE_OVERHEAD, S_E2E_LATENCY, S_EXPERTS_TOUCHED,
    S_FITS_MEMORY, S_KV_BYTES_PER_TOKEN, S_KV_CACHE_CAPACITY, S_KV_CACHE_MEMORY, S_MEMORY_PER_DEVICE,
    S_OUTPUT_TOKENS_PER_S, S_OUTPUT_TOKENS_PER_S_PER_GPU, S_OUTPUT_TOKENS_PER_S_PER_USER, S_PREFILL_ATTENTION,
    S_PREFILL_COMM, S_PREFILL_GEMM, S_PREFILL_MEMORY_BOUND, S_TPOT, S_TTFT, S_WEIGHT_MEMORY,
)
from fastmodel.kernels.serve.attention import (
    attention_launches, kv_bytes_per_token, kv_held_tokens, decode_attention_sum, prefill_attention_time,
)
from fastmodel.kernels.serve.costs import head_costs, body_costs, K_GEMM, K_ATTN, K_MEM, K_COMM, LAUNCH
from fastmodel.kernels.serve.memory import weight_memory, activation_memory, kv_capacity
from fastmodel.kernels.serve.host import eager_host_s
from fastmodel.kernels.serve.kv_upcast import kv_upcast_time
# building blocks tests and callers use by their old address
from fastmodel.kernels.serve.attention import attention_lines, sum_max_lines, sum_window  # noqa: F401
from fastmodel.kernels.serve.costs import experts_touched  # noqa: F401


# --- phases --------------------------------------------------------------------

@njit
def prefill_costs(row, prompts, costs, part):
    """Prefill of ``prompts`` prompts of input_len tokens in chunks of <= max_num_tokens tokens (into ``costs``);
    returns the seconds. The prompts spread over the attention-DP groups (one group holds one prompt alone): the
    busiest group projects and attends ``prompts / min(attention_dp, prompts)`` of them, in parallel with the
    others (its attention too, not every group's)."""
    groups = max(1.0, min(row[C_ATTENTION_DP], prompts))
    tokens = prompts * row[C_INPUT_LEN]
    chunks = max(1.0, math.ceil(tokens / row[C_MAX_NUM_TOKENS]))
    m = tokens / chunks
    for k in range(4):
        part[k] = 0.0
    body_costs(row, m, LAUNCH, part, m / groups)
    head_costs(row, prompts / chunks, LAUNCH, part)
    part[K_MEM] += kv_upcast_time(row)                # every chunk is a forward (kernels/serve/kv_upcast.py)
    for k in range(4):
        costs[k] += chunks * part[k]
    costs[K_ATTN] += prefill_attention_time(row, prompts / groups, row[C_INPUT_LEN])
    # each chunk is one eager iteration: at least the host's issue time (kernels/serve/host.py)
    return max(costs[K_GEMM] + costs[K_ATTN] + costs[K_MEM] + costs[K_COMM], chunks * eager_host_s(row))


@njit(inline="always")   # into _fixed, its one caller: one library of the evaluation fewer (cold compile)
def decode_fixed_costs(row, n, costs):
    """Context-independent seconds of one decode step of ``n`` requests (weights, norms, comm, head)."""
    touched = body_costs(row, n, LAUNCH, costs, -1.0)
    head_costs(row, n / row[C_ATTENTION_DP], LAUNCH, costs)   # each attention-DP group its own tokens' head (S18)
    costs[K_ATTN] += attention_launches(row)
    costs[K_MEM] += kv_upcast_time(row)
    return touched


# --- one configuration ---------------------------------------------------------------

@njit(inline="always")
def usable_fraction(row):
    """The share of HBM a batch may fill: the device column ``usable_hbm_fraction`` when set (> 0), else the
    serving default ``SERVE_USABLE_HBM_FRACTION`` (fastmodel/registry/serve.py)."""
    fraction = row[C_USABLE_HBM_FRACTION]
    return fraction if fraction > 0.0 else SERVE_USABLE_HBM_FRACTION


@njit(inline="always")
def _divides(d, x):
    """True when the whole number ``d`` divides ``x`` (floor instead of fmod: cheaper in sweeps)."""
    return x == d * math.floor(x / d)


@njit
def no_fp4_path(row):
    """True when FP4 weights (``fp4_gemm``) meet an NVIDIA GPU without FP4 tensor cores whose compute capability is
    below the one the engine's weight-only FP4 starts at (``fp4_weight_only_cc``, docs/model_serving.md S63);
    a device that states none (AMD: 0) is not refused."""
    cc = row[C_COMPUTE_CAPABILITY]
    return (row[C_FP4_GEMM] > 0.0 and row[C_PEAK_FLOPS_4] <= 0.0 and row[C_VENDOR] == VENDOR_NVIDIA and cc > 0.0
            and cc < row[C_FP4_WEIGHT_ONLY_CC])


@njit
def check(row):
    """Status code of a serving configuration (0 legal)."""
    # TensorRT-LLM runs on NVIDIA GPUs only (docs/model_serving.md S56)
    if row[C_ENGINE_NVIDIA_ONLY] > 0.0 and row[C_VENDOR] != VENDOR_NVIDIA:
        return ST_ENGINE_NOT_ON_DEVICE
    t = row[C_TP]
    if not _divides(t, row[C_HEADS]) or (row[C_KV_HEADS] > t and not _divides(t, row[C_KV_HEADS])):
        return ST_HEADS_NOT_DIVISIBLE_BY_TP
    if not _divides(row[C_PP], row[C_LAYERS]):
        return ST_LAYERS_NOT_DIVISIBLE_BY_PP
    group = t * row[C_ATTENTION_DP]
    if row[C_MOE_EXPERTS] > 0.0 and not (_divides(row[C_EP], group) and _divides(row[C_EP], row[C_MOE_EXPERTS])
                                         and (row[C_MOE_TP] <= 0.0 or row[C_MOE_TP] * row[C_EP] == group)):
        return ST_EP_NOT_DIVIDING
    if row[C_MOE_EXPERTS] <= 0.0 and row[C_EP] > 1.0:     # a dense model has no experts to split
        return ST_EP_NOT_DIVIDING
    if row[C_PRECISION] == PRECISION_FP8 and row[C_PEAK_FLOPS_8] <= 0.0 and row[C_FP8_WEIGHT_ONLY] <= 0.0:
        return ST_NO_FP8
    if no_fp4_path(row):
        return ST_NO_FP4
    # the engine refuses a request longer than the model's context (vLLM serving_engine.py, docs S40)
    if row[C_CONTEXT_LEN] > 0.0 and row[C_INPUT_LEN] + row[C_OUTPUT_LEN] > row[C_CONTEXT_LEN]:
        return ST_CONTEXT_EXCEEDED
    return ST_OK


@njit(inline="always")   # into _grid_rows (fused._emit), its one caller: one library of the evaluation fewer (cold compile)
def serve_row(row, out, scratch, memo):
    """Every serving result of one configuration into ``out`` (SERVE_RESULTS indices); returns its status.
    ``scratch``: a (6, 6) work array; ``memo``: the closed loop's memo (``new_memo``), kept from row to row."""
    mode = row[C_LOAD_MODE]
    if mode == LOAD_CONCURRENCY:
        return _concurrency(row, row[C_BATCH_SIZE], out, scratch, memo)
    status = check(row)
    if status != ST_OK:
        return status
    kv_token = kv_bytes_per_token(row)
    weights = weight_memory(row)
    batch = row[C_BATCH_SIZE]
    if mode == LOAD_MAX_THROUGHPUT:
        capacity = kv_capacity(row, weights, activation_memory(row, row[C_MAX_BATCH_SIZE]))
        batch = min(full_length_room(row, kv_token, capacity), row[C_MAX_BATCH_SIZE])
        if batch < 1.0:
            return ST_NO_KV_ROOM
    elif mode == LOAD_BATCH and full_length_room(row, kv_token, kv_capacity(row, weights,
                                                                          activation_memory(row, batch))) < 1.0:
        return ST_NO_KV_ROOM      # a static batch: as the load modes, no room for one request (S9)
    if mode != LOAD_BATCH:
        # the step token budget feeds at most max_num_tokens x L / (I + (O - 1)(k + 1) / E) requests per
        # micro-batch, the verified draft tokens counted (S18); without drafts L = O and (O - 1) x 1.0 is exact,
        # so this is max_num_tokens x O / (I + O - 1) bit for bit
        iters, life = _lifetime(row)
        feed = math.floor(row[C_PP] * row[C_MAX_NUM_TOKENS] * life
                          / (row[C_INPUT_LEN] + iters * (1.0 + row[C_SPEC_TOKENS])))
        batch = max(1.0, min(batch, feed))
    _fixed(row, batch, kv_token, weights, out, scratch)
    return ST_OK


@njit(inline="always")
def full_length_room(row, kv_token, capacity):
    """Whole requests whose KV cache at full length (input_len + output_len, its chunked layers' share: S60) fits
    ``capacity`` (S9); below 1 the status is no_kv_room (max_throughput, and a static batch at its own workspace)."""
    return math.floor(capacity / (kv_token * kv_held_tokens(row, row[C_INPUT_LEN] + row[C_OUTPUT_LEN])))


@njit
def _fixed(row, batch, kv_token, weights, out, scratch):
    """A static batch (load_mode batch) or the stationary engine step of max_throughput (§S6, §S7)."""
    p = row[C_PP]
    inp = row[C_INPUT_LEN]
    outp = row[C_OUTPUT_LEN]
    steps = outp - 1.0                              # decode steps after the prefill's first token
    workspace = activation_memory(row, batch)
    capacity = kv_capacity(row, weights, workspace)
    n = batch / p                                     # requests per pipeline micro-batch
    pre = scratch[0]
    dec = scratch[1]
    for k in range(4):
        pre[k] = 0.0
        dec[k] = 0.0
    host = row[C_SERVE_STEP_OVERHEAD_S]
    spec = row[C_SPEC_TOKENS]
    emitted = accepted_tokens(row)                    # 1 without speculative decoding (S18)
    if row[C_LOAD_MODE] == LOAD_BATCH:
        ttft = prefill_costs(row, batch, pre, scratch[2]) + host
        touched = decode_fixed_costs(row, n * (1.0 + spec), dec)   # a verify step checks the drafts too (S18)
        if spec > 0.0:
            speculate(row, n, spec, dec)              # + the draft steps, per emitted token
        for k in range(4):
            dec[k] *= steps
        dec[K_ATTN] += decode_attention_sum(row, n, inp + 1.0, inp + steps) / emitted   # KV read once a step
        iters = steps / emitted                       # decode steps: E tokens each (S18)
        decode = dec[K_GEMM] + dec[K_ATTN] + dec[K_MEM] + dec[K_COMM] + iters * host
        e2e = ttft + decode
        tpot = decode / steps if steps > 0.0 else 0.0
        throughput = batch * outp / e2e
    else:
        # stationary step of max_throughput: n slots, n (O-1)/O decoding and n/O prompts being prefilled
        # with speculation a request decodes in steps / E steps of k + 1 tokens (S18): it lives 1 + steps / E
        ttft = prefill_costs(row, 1.0, pre, scratch[2]) + host
        iters, life = _lifetime(row)
        decoding = n * iters / life
        m = decoding * (1.0 + spec) + n * inp / life
        touched = body_costs(row, m, LAUNCH, dec, -1.0)
        # the head's tokens, per attention-DP group (S18); the plain case keeps n, which decoding + n / L equals
        # only in exact arithmetic (the branch keeps no-draft results bit-exact)
        head = n if spec <= 0.0 else decoding * (1.0 + spec) + n / life
        head_costs(row, head / row[C_ATTENTION_DP], LAUNCH, dec)
        if spec > 0.0:
            draft_costs(row, decoding, spec, dec)
        dec[K_MEM] += kv_upcast_time(row)
        mean_attention = decode_attention_sum(row, decoding, inp + 1.0, inp + steps) / steps if steps > 0.0 \
            else 0.0
        dec[K_ATTN] = mean_attention + prefill_attention_time(row, n / life, inp) + attention_launches(row)
        step = max(dec[K_GEMM] + dec[K_ATTN] + dec[K_MEM] + dec[K_COMM], eager_host_s(row)) + host   # a mixed step
        for k in range(4):
            dec[k] *= iters
        tpot = step / emitted
        e2e = ttft + iters * step
        throughput = batch / step * (outp / life)
    kv_memory = kv_token * kv_held_tokens(row, inp + outp) * batch
    memory = weights + kv_memory + workspace + row[C_FRAMEWORK_MEMORY_BYTES]
    if row[C_LOAD_MODE] == LOAD_MAX_THROUGHPUT:
        fits = 1.0 if kv_memory <= capacity else 0.0
    else:
        fits = 1.0 if memory <= usable_fraction(row) * row[C_HBM_BYTES] else 0.0
    _write_times(row, out, ttft, tpot, e2e, throughput)
    _write_memory(out, batch, kv_token, kv_memory, capacity, weights, workspace, memory, fits, touched)
    _write_parts(out, pre, dec, iters * host)


@njit(inline="always")
def _lifetime(row):
    """(decode steps, engine steps) of a request at max_throughput's stationary step (S6, S18): one step of
    prefill and ``(O - 1) / E`` decode steps of E emitted tokens each (``accepted_tokens``; O - 1 and O without
    speculative decoding)."""
    if row[C_SPEC_TOKENS] <= 0.0:
        return row[C_OUTPUT_LEN] - 1.0, row[C_OUTPUT_LEN]
    iters = (row[C_OUTPUT_LEN] - 1.0) / accepted_tokens(row)
    return iters, 1.0 + iters


#: the closed loop's memo: row 0 the key (the columns, then ``running``), rows 1 and 2 the decode and prompt
#: iterations' cost parts, row 3 ``steady_loop``'s state (7 floats), then the row's status, KV bytes per token and
#: weight bytes (M_*)
MEMO_WIDTH = N_COLUMNS + 1
MEMO_SIZE = 4 * MEMO_WIDTH
M_STATUS = 7
M_KV_TOKEN = 8
M_WEIGHTS = 9


@njit(inline="always")
def new_memo(memo):
    """Mark the memo (MEMO_SIZE floats, reshaped (4, MEMO_WIDTH)) empty: no column is NaN-equal, so the first
    row never matches its key."""
    memo[0, 0] = np.nan


@njit(inline="always")
def _same_columns(row, key):
    """True when every column of ``row`` but ``batch_size`` equals ``key``'s (all that the status, the weights,
    the KV bytes and, at the same ``running``, the steady state read: kernels/serve/load.py ``steady_loop``);
    else ``key`` becomes the row's columns with no ``running``."""
    for k in range(N_COLUMNS):
        if k != C_BATCH_SIZE and row[k] != key[k]:
            for j in range(N_COLUMNS):
                key[j] = row[j]
            key[N_COLUMNS] = -1.0
            return False
    return True


@njit
def _concurrency(row, requests, out, scratch, memo):
    """A closed loop of ``requests`` in flight under continuous batching (kernels/serve/load.py): the requests
    whose KV cache fits run, the rest wait; returns the status. What does not depend on ``requests`` is the
    memo's when the previous row had the same columns but ``batch_size`` (a concurrency sweep): the status, the
    weights and KV bytes, and the steady state of the ``running`` requests when ``running`` is the same too (past
    the KV room or ``max_batch_size``); only the wait for KV room and the memory terms are then per row."""
    key = memo[0]
    state = memo[3]
    if not _same_columns(row, key):
        state[M_STATUS] = check(row)
        if state[M_STATUS] == ST_OK:
            state[M_KV_TOKEN] = kv_bytes_per_token(row)
            state[M_WEIGHTS] = weight_memory(row)
    if state[M_STATUS] != ST_OK:
        return int(state[M_STATUS])
    kv_token = state[M_KV_TOKEN]
    weights = state[M_WEIGHTS]
    adp = row[C_ATTENTION_DP]
    inp = row[C_INPUT_LEN]
    outp = row[C_OUTPUT_LEN]
    workspace = activation_memory(row, min(requests, row[C_MAX_BATCH_SIZE]))
    capacity = kv_capacity(row, weights, workspace)
    held = inp + (0.5 * outp if row[C_KV_ON_DEMAND] > 0.0 else outp)   # tokens a running request holds
    held = kv_held_tokens(row, held)                                  # of them, in chunked layers (S60)
    room = math.floor(capacity / (kv_token * held)) * adp
    if room < 1.0:
        return ST_NO_KV_ROOM
    running = min(requests, room, row[C_MAX_BATCH_SIZE])
    if key[N_COLUMNS] != running:
        steady_loop(row, running, memo[1], memo[2], state, scratch[2])
        key[N_COLUMNS] = running
    pre = memo[2]                                      # the iterations that carry the prompt (its own service)
    dec = scratch[1]
    host = row[C_SERVE_STEP_OVERHEAD_S]
    ttft = queue_ttft(row, requests, running, state)
    tpot, lam = state[1], state[2]
    steps = outp - 1.0
    for k in range(4):
        dec[k] = memo[1, k] * steps
    kv_memory = kv_token * held * math.ceil(running / adp)
    memory = weights + kv_memory + workspace + row[C_FRAMEWORK_MEMORY_BYTES]
    fits = 1.0 if memory <= usable_fraction(row) * row[C_HBM_BYTES] else 0.0
    _write_times(row, out, ttft, tpot, ttft + steps * tpot, lam * outp)
    _write_memory(out, running, kv_token, kv_memory, capacity, weights, workspace, memory, fits, state[4])
    _write_parts(out, pre, dec, steps * host)
    return ST_OK


@njit(inline="always")
def _write_times(row, out, ttft, tpot, e2e, throughput):
    out[S_TTFT] = ttft
    out[S_TPOT] = tpot
    out[S_E2E_LATENCY] = e2e
    out[S_OUTPUT_TOKENS_PER_S] = throughput
    out[S_OUTPUT_TOKENS_PER_S_PER_GPU] = throughput / (row[C_TP] * row[C_ATTENTION_DP] * row[C_PP])
    out[S_OUTPUT_TOKENS_PER_S_PER_USER] = 1.0 / tpot if tpot > 0.0 else row[C_OUTPUT_LEN] / e2e
    out[S_CLUSTER_OUTPUT_TOKENS_PER_S] = throughput * row[C_INSTANCES]


@njit(inline="always")
def _write_memory(out, batch, kv_token, kv_memory, capacity, weights, workspace, memory, fits, touched):
    out[S_BATCH_SIZE] = batch
    out[S_KV_BYTES_PER_TOKEN] = kv_token
    out[S_KV_CACHE_MEMORY] = kv_memory
    out[S_KV_CACHE_CAPACITY] = capacity
    out[S_WEIGHT_MEMORY] = weights
    out[S_ACTIVATION_MEMORY] = workspace
    out[S_MEMORY_PER_DEVICE] = memory
    out[S_FITS_MEMORY] = fits
    out[S_EXPERTS_TOUCHED] = touched


@njit(inline="always")
def _write_parts(out, pre, dec, overhead):
    out[S_PREFILL_GEMM] = pre[K_GEMM]
    out[S_PREFILL_ATTENTION] = pre[K_ATTN]
    out[S_PREFILL_MEMORY_BOUND] = pre[K_MEM]
    out[S_PREFILL_COMM] = pre[K_COMM]
    out[S_DECODE_GEMM] = dec[K_GEMM]
    out[S_DECODE_ATTENTION] = dec[K_ATTN]
    out[S_DECODE_MEMORY_BOUND] = dec[K_MEM]
    out[S_DECODE_COMM] = dec[K_COMM]
    out[S_DECODE_OVERHEAD] = overhead
