"""Continuous batching under a closed loop of ``concurrency`` requests (docs/model_serving.md §S7).

A benchmark client keeps N requests in flight: a finished request is replaced at once. The engine's scheduler
re-forms the batch at every iteration (Orca): running requests decode one token per iteration, and new
prompts are prefilled either inside the decode iterations (``mixed_prefill``: vLLM V1, TensorRT-LLM in-flight
batching, with a token budget ``max_num_tokens`` shared with the decodes, Sarathi-Serve) or in prefill
iterations of their own that stall the decodes (SGLang's default). The steady state is solved per
configuration by a short fixed point, not a simulation:

- decode-only iteration ``T_d`` at the running decode batch ``b`` and the iteration ``T_m`` that also carries
  ``q`` prefill tokens; every kernel of both pays the device's per-kernel overhead (CUDA graphs remove the host's
  launch calls, not a kernel's ramp and tail on the GPU);
- the prefill station (one prompt's share of mixed iterations ``D = T_m I / q``; its own chunks
  ``S = ceil(I / c) T_m``) in a closed network with the decode delay ``Z = (O - 1) TPOT``: mean-value analysis
  with Schweitzer's approximation (Reiser & Lavenberg 1980; Schweitzer 1979), an arriving prompt waiting for the
  ``D Q (N - 1) / N`` queued ahead of it less half a share for the one in service, whose service is deterministic
  (every prompt has I tokens: ``D / 2`` left of it, not MVA's exponential ``D``; docs/model_serving.md §S61):
  ``R = S + D (Q - U / 2)``, ``Q = lambda' R``, ``U = lambda' D = phi``, i.e. ``R = (S - phi D / 2) / (1 - phi)``;
- TPOT from the iteration mix a decoding request sees: the other requests' prompts arrive at
  ``lambda' = lambda (N - 1) / N`` and take a share ``phi = lambda' D`` of time, so
  ``TPOT = 1 / ((1 - phi) / T_d + lambda' I / q)`` when every iteration emits a token (mixing engines) and
  ``T_d / (1 - phi)`` when prefill iterations stall the decodes (one request alone decodes at ``T_d``);
- TTFT = R (+ one iteration when the scheduler overlaps CPU work with the GPU, ``overlap_step``; + one when
  other requests run: a prompt joins at the next iteration boundary) + the wait
  for KV-cache room when fewer than N requests fit (Little's law over the waiting requests);
- TensorRT-LLM's batch waiting (``batch_wait_iters``, ``batch_wait_tokens_ratio``, off by default): a prompt is
  held up to that many iterations while others decode, so that prompts enter together (``batch_wait``, §S31);
- the client's start wave: the first N requests arrive together and queue for the token budget, and they are
  1 / ``client_rounds`` of the requests a benchmark measures (``start_wave``).
"""

import math

import numpy as np

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    C_ATTENTION_DP, C_BATCH_WAIT_ITERS, C_BATCH_WAIT_TOKENS_RATIO, C_CHUNKED_PREFILL, C_CLIENT_ROUNDS, C_INPUT_LEN,
    C_MAX_NUM_TOKENS, C_MIXED_PREFILL, C_OUTPUT_LEN, C_OVERLAP_STEP, C_PP, C_SPEC_TOKENS,
)
from fastmodel.kernels.serve.attention import attention_launches, decode_attention_sum, prefill_attention_time
from fastmodel.kernels.serve.costs import K_ATTN, K_COMM, K_GEMM, K_MEM, LAUNCH, body_costs, head_costs
from fastmodel.kernels.serve.host import eager_host_s, iteration_s, rank_requests
from fastmodel.kernels.serve.kv_upcast import kv_upcast_time
from fastmodel.kernels.serve.speculative import accepted_tokens, speculate

#: fixed-point passes over the batch composition (decode batch, prompts per prefill iteration); a pass stops the
#: loop when neither moved by more than REFRESH (relative), and an iteration time is recomputed only when its
#: argument moved by more than that
PASSES = 2
REFRESH = 0.15


@njit
def decode_iteration(row, n, costs):
    """Seconds of a decode-only iteration of ``n`` requests at the mean context of their output tokens
    (into ``costs``, zeroed first); returns (experts touched per MoE layer, decode attention of one request)."""
    for k in range(4):
        costs[k] = 0.0
    if n <= 0.0:
        return 0.0, 0.0
    k = row[C_SPEC_TOKENS]
    queries = n * (1.0 + k)                           # a verify step checks k draft tokens of every request
    touched = body_costs(row, queries, LAUNCH, costs, -1.0)
    head_costs(row, queries / row[C_ATTENTION_DP], LAUNCH, costs)
    costs[K_MEM] += kv_upcast_time(row)               # once per forward (kernels/serve/kv_upcast.py)
    inp = row[C_INPUT_LEN]
    steps = row[C_OUTPUT_LEN] - 1.0
    costs[K_ATTN] += attention_launches(row)
    per_request = 0.0
    if steps > 0.0:
        attention = decode_attention_sum(row, n, inp + 1.0, inp + steps) / steps
        costs[K_ATTN] += attention
        per_request = attention / n
    if k > 0.0:
        speculate(row, n, k, costs)
    return touched, per_request


@njit
def prefill_iteration(row, n, q, per_request, costs):
    """Seconds of an iteration carrying ``q`` prompt tokens and, when ``mixed_prefill``, the ``n`` decodes
    (into ``costs``, zeroed first); ``per_request``: the decode attention of one request at the mean context
    (attention is linear in the requests). The prompt's tokens sit on one attention-DP group; its attention
    is its share ``q / I`` of the causal prompt's. It lasts at least the host's issue time when the engine runs
    it eagerly (``eager_host_s``) plus its scheduler loop's per-iteration work over the busiest rank's requests
    (the decodes of its attention-DP group and the prompts, §S36: ``iteration_s``); the cost parts stay the GPU's."""
    for k in range(4):
        costs[k] = 0.0
    inp = row[C_INPUT_LEN]
    dec = n if row[C_MIXED_PREFILL] > 0.0 else 0.0
    mine = dec / row[C_ATTENTION_DP] + q
    body_costs(row, dec + q, LAUNCH, costs, mine)
    head_costs(row, dec / row[C_ATTENTION_DP] + q / inp, LAUNCH, costs)
    costs[K_MEM] += kv_upcast_time(row)
    if dec > 0.0:
        costs[K_ATTN] += dec * per_request + attention_launches(row)
    costs[K_ATTN] += prefill_attention_time(row, q / inp, inp)
    # an eager iteration lasts as long as the host takes to issue it and run its loop when that is longer
    # (kernels/serve/host.py)
    prompts = max(1.0, q / inp) if q > 0.0 else 0.0
    return iteration_s(row, costs[K_GEMM] + costs[K_ATTN] + costs[K_MEM] + costs[K_COMM], eager_host_s(row),
                       rank_requests(row, dec) + prompts)


@njit
def wave_iterations(prompts, inp, budget, chunked):
    """(mean iterations until a prompt's first token, prompt tokens per iteration) when ``prompts`` prompts of
    ``inp`` tokens arrive together and are prefilled first come first served under the token budget. Whole
    prompts (no chunking): k = max(1, floor(budget / inp)) per iteration, prompt i in iteration ceil(i / k).
    Chunked: a stream of budget tokens per iteration, prompt i done in iteration ceil(i inp / budget); with
    x = inp / budget = p / q in lowest terms, the mean of ceil(i x) over whole cycles of q prompts is
    x (P + 1) / 2 + (q - 1) / (2 q) (the fractional parts of i x run over j / q)."""
    if not chunked:
        k = max(1.0, math.floor(budget / inp))
        waves = math.ceil(prompts / k)
        return (k * waves * (waves + 1.0) / 2.0 - waves * (waves * k - prompts)) / prompts, min(k, prompts) * inp
    if prompts * inp <= budget:
        return 1.0, prompts * inp
    g = float(math.gcd(int(inp), int(budget)))
    q = budget / g
    return max(1.0, inp / budget * (prompts + 1.0) / 2.0 + (q - 1.0) / (2.0 * q)), budget


@njit(inline="always")   # into steady_loop, its one caller: one library of the evaluation fewer (cold compile)
def start_wave(row, running, per_request, t_d, work):
    """Mean TTFT of the client's start wave: ``running`` requests arrive together (a closed-loop client opens
    all its slots at once), ``running / attention_dp`` per attention-DP group, and are prefilled first come
    first served at the token budget (``wave_iterations``), each iteration a prefill of the budget's tokens
    alone (the decodes of the wave's first prompts ride along unpriced), + the overlap step; ``work``: 4 floats."""
    prompts = math.ceil(running / row[C_ATTENTION_DP])
    mean, q = wave_iterations(prompts, row[C_INPUT_LEN], row[C_MAX_NUM_TOKENS], row[C_CHUNKED_PREFILL] > 0.0)
    t_q = prefill_iteration(row, 0.0, q, per_request, work)     # its loop time (serve_step_overhead_s) included
    overlap = t_d if row[C_OVERLAP_STEP] > 0.0 else 0.0
    return mean * t_q + overlap


@njit
def batch_wait(row, running, decodes):
    """(W, k) of TensorRT-LLM's batch waiting (``PyExecutor._waiting_requests``, PR #7416; docs/model_serving.md
    S31): while other requests decode, the scheduled prompts are held and a counter counts the holding iterations;
    they all enter when the counter reaches ``W = batch_wait_iters`` or when their prompt tokens plus one token per
    decode (``decodes``) reach ``batch_wait_tokens_ratio x max_num_tokens``, i.e. with ``k`` more prompts than the
    first. The engine stops waiting when ``count >= W or tokens >= ratio x max_num_tokens``, so with ``W = 0`` or
    ``ratio = 0`` one test passes at once and nothing is held; neither is a request alone (no decode), a prompt that
    reaches the threshold by itself, or attention DP. (0, 0): no hold. Without chunked prefill the scheduler takes
    whole prompts within the budget, at most ``floor((max_num_tokens - decodes) / input_len)``; a threshold that
    needs more is never reached and the window lasts ``W`` (``k`` infinite)."""
    iters = row[C_BATCH_WAIT_ITERS]
    ratio = row[C_BATCH_WAIT_TOKENS_RATIO]
    if iters <= 0.0 or ratio <= 0.0 or running <= 1.0 or row[C_ATTENTION_DP] > 1.0:
        return 0.0, 0.0
    inp = row[C_INPUT_LEN]
    more = math.ceil((ratio * row[C_MAX_NUM_TOKENS] - decodes) / inp) - 1.0
    if more <= 0.0:
        return 0.0, 0.0
    if row[C_CHUNKED_PREFILL] <= 0.0 and more + 1.0 > math.floor((row[C_MAX_NUM_TOKENS] - decodes) / inp):
        return iters, math.inf
    return iters, more


@njit(inline="always")
def held(seen, iters, more):
    """(mean iterations a prompt is held, prompts that enter together) when the other requests' prompts arrive at
    ``seen`` per iteration: a window opens with the first held prompt and lasts ``L = min(W, k / seen)``
    iterations; the ``seen L`` prompts that arrive inside it wait ``L / 2`` on average, the first ``L``, so the
    mean hold is ``L (1 + seen L / 2) / (1 + seen L)`` and ``1 + seen L`` prompts enter together."""
    if iters <= 0.0:
        return 0.0, 1.0
    window = min(iters, more / seen) if seen > 0.0 else iters
    joined = seen * window
    return window * (1.0 + 0.5 * joined) / (1.0 + joined), 1.0 + joined


#: most regula-falsi (Illinois) steps for the loop's request rate under batch waiting (``held_rate``; it stops at
#: |g| <= 1e-9 N, usually in < 10)
ROOT_STEPS = 40


@njit(inline="always")
def station_response(own, share, phi):
    """Mean response of a prompt at the prefill station whose service is deterministic (every prompt has the same
    tokens), by Schweitzer's MVA with the prompt in service half done (docs/model_serving.md §S61): an arrival
    waits a share ``share`` for each prompt ahead of it, less half a share for the one in service, at the station's
    busy share ``phi`` = the other requests' arrival rate x ``share``: R = (own - phi share / 2) / (1 - phi).
    ``own``: the prompt's own service. The one form of the residual: ``loop_state`` calls it in the kernels and
    the disaggregated prefill pool (``fastmodel.serve.disagg.pool_response``, §S30) its ``py_func`` on floats or
    arrays."""
    return (own - 0.5 * phi * share) / np.maximum(1e-12, 1.0 - phi)


@njit(inline="always")
def loop_state(lam, running, own, share, t_d, per_token, mixed, steps, overlap, wait):
    """(cycle seconds of one request, prefill response R, TPOT, iterations held) at request rate ``lam``:
    Schweitzer's MVA for the prefill station with the prompt in service half done (deterministic service, §S61:
    ``station_response``), phi = lam share (N - 1) / N, the iteration mix a decoding request sees
    (the other requests' prompts arrive at lam (N - 1) / N) and the batch-waiting hold of ``wait`` = (W, k)
    (``held``). R is at least the closed loop's bound N share - Z (Z = (steps + overlap + hold) TPOT: the station
    serves at most 1 / share prompts a second), as the disaggregated pool's (§S61, review9 #1)."""
    seen = lam * (running - 1.0) / running
    phi = seen * share
    if mixed:
        tpot = 1.0 / ((1.0 - phi) / t_d + seen * per_token)
    else:
        tpot = t_d / max(1e-12, 1.0 - phi)
    hold, _ = held(seen * tpot, wait[0], wait[1])
    think = (steps + overlap + hold) * tpot
    response = max(station_response(own, share, phi), running * share - think)
    return response + think, response, tpot, hold


#: most safeguarded Newton steps for the mixing balance's cubic (``solve_rate``; it stops at a step of 1e-15 phi:
#: on serve_dev_load's 1,770 loops mean 3.4 steps from the exponential-service root, at most 8; on 43,413 random
#: mixing loops mean 4.6, at most 17, docs/model_serving.md §S61)
CUBIC_STEPS = 60


@njit
def solve_rate(running, own, share, t_d, per_token, mixed, steps, overlap, wait):
    """The closed loop's request rate: the root of g(lam) = lam x cycle(lam) - N between 0 (g = -N) and the
    smaller of N / (own + c T_d) (c = O - 1 + overlap) and the prefill station's saturation
    1 / (share (N - 1) / N) (``hi``; returned when g(hi) <= 0; docs/model_serving.md §S7, §S61). In the prefill
    station's busy share phi = lam s (s = share (N - 1) / N, e = share / 2) the balance is
    lam ((own - e phi) / (1 - phi) + c TPOT(phi)) = N. Stalling engines: TPOT = T_d / (1 - phi), so
    (s e) lam^2 - (own + c T_d + N s) lam + N = 0, whose smaller root is taken without cancellation. Mixing
    engines: 1 / TPOT = (1 - phi) a + phi u (a = 1 / T_d, u = per_token / share); multiplied by
    s (1 - phi) / TPOT > 0 the balance is the cubic -e (u - a) phi^3 + (A - e a) phi^2 + B phi + C = 0 with
    A = (own + N s)(u - a) - c, B = own a + c - N s (u - 2 a), C = -N s a, whose sign is g's; its root lies
    above the root phi0 of the quadratic A phi^2 + B phi + C (the exponential service's, where the cubic is
    -e phi0^2 (a (1 - phi0) + u phi0) < 0) and below hi s: safeguarded Newton in that bracket. Batch waiting
    (``wait`` = (W, k), W > 0) adds a hold that is not polynomial in phi: ``held_rate`` finds that root by
    regula falsi (the hold only lengthens the cycle, so g(hi) >= 0 still). The root is unique and R > 0 when
    own >= share / 2: d/dphi [phi (own - e phi) / (1 - phi)] is proportional to own - e phi (2 - phi) >= own - e,
    and phi TPOT(phi) grows with phi, so g grows with lam. ``steady_loop`` always has it: q >= chunk, so
    share = t_m I / q <= chunks t_m, and own = (chunks - 1) t_m + t(last) is t_m >= share for one chunk and
    >= chunks t_m / 2 for two or more (review8 #5). ``loop_state``'s floor R >= N share - Z adds
    g >= N (lam share - 1), so the loop's root is the smaller of this balance's and 1 / share (review9 #1)."""
    return min(mva_rate(running, own, share, t_d, per_token, mixed, steps, overlap, wait), 1.0 / share)


@njit
def mva_rate(running, own, share, t_d, per_token, mixed, steps, overlap, wait):
    """``solve_rate``'s balance without the station's capacity (its docstring)."""
    hi = running / (own + (steps + overlap) * t_d)
    if running <= 1.0:
        return hi                                     # nobody else's prompt: g(hi) = 0
    hi = min(hi, running / ((running - 1.0) * share) * (1.0 - 1e-9))
    cycle, _, _, _ = loop_state(hi, running, own, share, t_d, per_token, mixed, steps, overlap, wait)
    g_hi = hi * cycle - running
    if g_hi <= 0.0:
        return hi
    if wait[0] > 0.0:
        return held_rate(running, own, share, t_d, per_token, mixed, steps, overlap, wait, hi, g_hi)
    c = steps + overlap
    s = share * (running - 1.0) / running
    e = 0.5 * share
    if not mixed:
        b = own + c * t_d + running * s
        return 2.0 * running / (b + math.sqrt(max(0.0, b * b - 4.0 * s * e * running)))
    a = 1.0 / t_d
    u = per_token / share
    ns = running * s
    qa = (own + ns) * (u - a) - c
    qb = own * a + c - ns * (u - 2.0 * a)
    qc = -ns * a
    root = math.sqrt(max(0.0, qb * qb - 4.0 * qa * qc))
    lo = -2.0 * qc / (qb + root) if qb >= 0.0 else (root - qb) / (2.0 * qa)
    phi, _ = cubic_root(-e * (u - a), qa - e * a, qb, qc, lo, hi * s)
    return min(phi / s, hi)


@njit(inline="always")
def cubic_root(k3, k2, k1, k0, lo, top):
    """(the root of k3 x^3 + k2 x^2 + k1 x + k0 in [lo, top], the steps taken), where the cubic is <= 0 at ``lo``
    and >= 0 at ``top`` (one root there when ``solve_rate``'s own >= share / 2 holds): Newton's step from the
    bracket's lower end, bisection where the step leaves the open bracket or the slope is not positive; stops when
    a Newton step is below 1e-15 x (tested before the bracket: a converged step lands on the bracket's end, which
    must not start a bisection, review8 #1), when a bisection step is (the bracket has closed on x while rounding
    keeps the Newton step above it), or after CUBIC_STEPS."""
    x = lo
    for i in range(CUBIC_STEPS):
        f = ((k3 * x + k2) * x + k1) * x + k0
        if f == 0.0:
            return x, i + 1
        if f < 0.0:
            lo = x
        else:
            top = x
        slope = (3.0 * k3 * x + 2.0 * k2) * x + k1
        nxt = top
        if slope > 0.0:
            step = f / slope
            if abs(step) <= 1e-15 * x:
                return x - step, i + 1
            nxt = x - step
        if not (lo < nxt < top):
            nxt = 0.5 * (lo + top)
            if abs(nxt - x) <= 1e-15 * x:         # the bracket has closed on x (the cubic's rounding)
                return nxt, i + 1
        x = nxt
    return x, CUBIC_STEPS


@njit
def held_rate(running, own, share, t_d, per_token, mixed, steps, overlap, wait, hi, g_hi):
    """``solve_rate``'s root under batch waiting: regula falsi with the Illinois step on (0, ``hi``] (g(0) = -N,
    g(hi) = ``g_hi`` > 0; g grows with lam, so the root is unique), stopped at |g| <= 1e-9 N or after
    ROOT_STEPS steps."""
    lo = 0.0
    g_lo = -running
    side = 0
    lam = hi
    for _ in range(ROOT_STEPS):
        lam = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        cycle, _, _, _ = loop_state(lam, running, own, share, t_d, per_token, mixed, steps, overlap, wait)
        g = lam * cycle - running
        if abs(g) <= 1e-9 * running:
            return lam
        if g < 0.0:
            lo, g_lo = lam, g
            if side == -1:
                g_hi *= 0.5
            side = -1
        else:
            hi, g_hi = lam, g
            if side == 1:
                g_lo *= 0.5
            side = 1
    return lam


@njit(inline="always")
def entering_tokens(per_step, together, inp, chunk, free, chunked):
    """Prompt tokens of the iteration that carries a prompt: the prompts that arrive in one iteration
    (``per_step``: an iteration is a step, E TPOT under speculation, §S18, not one TPOT) or the batch-waiting
    group ``together``, whichever is more, up to the budget ``free`` (whole prompts: at least one), at least one
    chunk."""
    return max(chunk, min(max(per_step, together) * inp, free if chunked else max(free, inp)))


@njit
def steady_loop(row, running, dec, pre, out, work):
    """Steady state of a closed loop whose ``running`` requests fit the KV cache, less what depends on the
    requests beyond them (``queue_ttft`` adds it): a function of the row (its ``batch_size`` aside) and
    ``running`` only, so a concurrency sweep computes it once for every concurrency the KV cache or
    ``max_batch_size`` caps at the same ``running`` (kernels/serve/evaluate.py). ``out`` receives (ttft of a
    running request, tpot, requests per s, decode batch, experts touched, decode-iteration seconds, mean TTFT of
    the client's start wave or 0); ``dec`` the decode iteration's cost parts, ``pre`` those of the iterations that
    carry one prompt (its own service S, the decodes riding with it included); ``work``: 4 floats of scratch."""
    inp = row[C_INPUT_LEN]
    steps = row[C_OUTPUT_LEN] - 1.0
    p = row[C_PP]
    mixed = row[C_MIXED_PREFILL] > 0.0
    overlap = 1.0 if row[C_OVERLAP_STEP] > 0.0 else 0.0
    if running > 1.0:      # the arrival finds the others' iteration under way and joins at the next boundary
        overlap += 1.0
    # the loop runs in TPOT units (a decode step's time over the E tokens it emits, ``speculate``); an overlap or
    # batch-waiting iteration is a whole step, E TPOT, as the disaggregated pool prices it (§S18): overlap and
    # the waiting window W in TPOT units, so that the hold ``held`` returns is E times its iterations
    emitted = accepted_tokens(row)
    overlap *= emitted
    b = max(1.0, running * steps / (steps + 1.0))
    others = (running - 1.0) / running               # a request sees the other requests' prompts and decodes
    tpot = 0.0
    ttft = 0.0
    lam = 0.0
    touched = 0.0
    t_d = 0.0
    q = inp
    b_done = -1.0
    q_done = -1.0
    chunks = 1.0
    t_m = 0.0
    per_request = 0.0
    hold = 0.0
    for _ in range(PASSES):
        n = b / p
        fresh = abs(b - b_done) > REFRESH * b
        if fresh:
            touched, per_request = decode_iteration(row, n, dec)
            t_d = iteration_s(row, dec[K_GEMM] + dec[K_ATTN] + dec[K_MEM] + dec[K_COMM], 0.0,
                              rank_requests(row, n))       # a graphed decode: the loop's host time, §S36
            b_done = b
        free = max(1.0, row[C_MAX_NUM_TOKENS] - (n * others if mixed else 0.0))   # the others' decodes
        chunked = row[C_CHUNKED_PREFILL] > 0.0
        chunk = min(inp, free) if chunked else inp
        # prompts waiting at an iteration boundary enter together, up to the budget; batch waiting holds them
        period = max(tpot, t_d)
        wait = batch_wait(row, running, n * others)
        wait = (wait[0] * emitted, wait[1])
        _, together = held(lam * others * period, wait[0], wait[1])     # in TPOT units, as the window
        q = entering_tokens(lam * period * emitted, together, inp, chunk, free, chunked)
        if fresh or abs(q - q_done) > REFRESH * q:
            t_m = prefill_iteration(row, n * others, q, per_request, pre)
            q_done = q
        chunks = math.ceil(inp / chunk)
        own = chunks * t_m
        last = inp - (chunks - 1.0) * chunk           # the last chunk is what is left of the prompt
        if last < chunk:
            own += prefill_iteration(row, n * others, last, per_request, work) - t_m
        share = t_m * inp / q
        lam = solve_rate(running, own, share, t_d, inp / q, mixed, steps, overlap, wait)
        _, ttft, tpot, hold = loop_state(lam, running, own, share, t_d, inp / q, mixed, steps, overlap, wait)
        b = max(1.0, running * steps * tpot / (ttft + (steps + overlap + hold) * tpot))
        if abs(b - b_done) <= REFRESH * b and abs(q - q_done) <= REFRESH * q:
            break
    for k in range(4):
        pre[k] *= chunks                              # the iterations that carry the prompt: its own service
    ttft += (overlap + hold) * tpot
    wave = 0.0
    if row[C_CLIENT_ROUNDS] > 0.0 and running > 1.0:
        wave = start_wave(row, running, per_request, t_d, work)
    out[0] = ttft
    out[1] = tpot
    out[2] = lam
    out[3] = b
    out[4] = touched
    out[5] = t_d
    out[6] = wave


@njit(inline="always")
def queue_ttft(row, requests, running, state):
    """Mean TTFT of ``requests`` in flight from the steady state ``state`` of the ``running`` that fit
    (``steady_loop``): the others wait for KV room (Little's law over the waiting requests), and the client's
    start wave is 1 / client_rounds of the measured requests."""
    ttft = state[0]
    if requests > running:
        ttft += (requests - running) / state[2]
    rounds = row[C_CLIENT_ROUNDS]
    if rounds > 0.0 and running > 1.0:
        share = 1.0 / max(1.0, rounds)
        ttft = (1.0 - share) * ttft + share * state[6]
    return ttft
