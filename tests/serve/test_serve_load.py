"""The closed loop's scheduling and benchmark terms (kernels/serve/load.py, docs/model_serving.md §S7, §S31): the
client's start wave, the wait for the next iteration boundary, the token budget shared with the decodes,
TensorRT-LLM's batch waiting."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fastmodel.kernels.serve.load import (
    batch_wait,
    cubic_root,
    decode_iteration,
    held,
    loop_state,
    prefill_iteration,
    solve_rate,
    wave_iterations,
)
from fastmodel.registry.serve import SERVE_RESULT_INDEX
from fastmodel.serve.api import columns, evaluate, evaluate_table, sweep

NO_WAIT = (0.0, 0.0)     # no batch waiting: solve_rate's closed form
CUBIC_ROOT = getattr(cubic_root, "py_func", cubic_root)    # no compile at a new signature
LOOP_STATE = getattr(loop_state, "py_func", loop_state)


def test_wave_iterations_of_whole_prompts_count_k_prompts_per_iteration():
    """No chunking, budget 2048, prompts of 1024: k = 2 prompts per iteration, 10 prompts finish in iterations
    1,1,2,2,3,3,4,4,5,5 (mean 3); budget 4096: 4 per iteration, 1,1,1,1,2,2,2,2,3,3 (mean 1.8); a prompt longer
    than the budget still enters whole, one per iteration."""
    assert wave_iterations(10.0, 1024.0, 2048.0, False) == (pytest.approx(3.0), 2048.0)
    assert wave_iterations(10.0, 1024.0, 4096.0, False) == (pytest.approx(1.8), 4096.0)
    assert wave_iterations(3.0, 8192.0, 2048.0, False) == (pytest.approx(2.0), 8192.0)


def test_wave_iterations_of_a_chunked_token_stream():
    """Chunked, budget 8192, prompts of 1024: 4 prompts fit one iteration (mean 1); 16 prompts finish at
    ceil(i / 8): eight in iteration 1 and eight in 2 (mean 1.5). Prompts of 8192 at budget 2048 take 4
    iterations each: prompt i is done after 4 i, mean 4 (N + 1) / 2 = 6 for N = 2."""
    assert wave_iterations(4.0, 1024.0, 8192.0, True) == (1.0, 4096.0)
    assert wave_iterations(16.0, 1024.0, 8192.0, True) == (pytest.approx(1.5), 8192.0)
    assert wave_iterations(2.0, 8192.0, 2048.0, True) == (pytest.approx(6.0), 2048.0)


KW = dict(tp=4, input_len=1024, output_len=256, precision="fp8", overlap_step=0)


def test_start_wave_is_one_round_of_the_mean_ttft():
    """8 requests of 1024 tokens arrive together under a chunked budget of 8192: one iteration prefills all 8,
    which is the static batch of 8's prefill. With 10 requests per client the wave is a tenth of the mean:
    ttft = 0.9 steady + 0.1 static(8)."""
    kw = dict(KW, chunked_prefill=1, max_num_tokens=8192)
    static = evaluate("llama3.1-70b", "H100", batch_size=8, **kw)
    steady = evaluate("llama3.1-70b", "H100", concurrency=8, client_rounds=0, **kw)
    mean = evaluate("llama3.1-70b", "H100", concurrency=8, client_rounds=10, **kw)
    assert mean["ttft"] == pytest.approx(0.9 * steady["ttft"] + 0.1 * static["ttft"], rel=1e-9)
    assert mean["tpot"] == steady["tpot"] and mean["output_tokens_per_s"] == steady["output_tokens_per_s"]


def test_start_wave_of_whole_prompts_waits_for_earlier_iterations():
    """No chunking, budget 2048: 10 prompts of 1024 go two per iteration, mean 3 iterations of the static
    batch of 2's prefill; with 4 requests per client: ttft = 0.75 steady + 0.25 x 3 x static(2)."""
    kw = dict(KW, chunked_prefill=0, max_num_tokens=2048)
    static = evaluate("llama3.1-70b", "H100", batch_size=2, **kw)
    steady = evaluate("llama3.1-70b", "H100", concurrency=10, client_rounds=0, **kw)
    mean = evaluate("llama3.1-70b", "H100", concurrency=10, client_rounds=4, **kw)
    assert mean["ttft"] == pytest.approx(0.75 * steady["ttft"] + 0.25 * 3.0 * static["ttft"], rel=1e-9)


def test_one_request_has_no_start_wave():
    one = evaluate("llama3.1-70b", "H100", concurrency=1, client_rounds=10, **KW)
    assert one["ttft"] == evaluate("llama3.1-70b", "H100", concurrency=1, client_rounds=0, **KW)["ttft"]


def _row(**kw):
    row = columns("llama3.1-70b", "H100", **kw).astype(float)
    return row[:, 0] if row.ndim > 1 else row


def test_arrival_joins_at_the_next_iteration_boundary():
    """Two requests, long outputs (the prefill station is idle: phi ~ 6e-4): a new prompt arrives while the other
    request's decode iteration runs and starts at the next boundary, so ttft = S + tpot with S the iteration
    that carries its 1024 tokens and the other's decode; one request alone finds the engine idle."""
    kw = dict(tp=4, input_len=1024, output_len=8192, precision="fp8", overlap_step=0, client_rounds=0)
    two = evaluate("llama3.1-70b", "H100", concurrency=2, **kw)
    row = _row(concurrency=2, **kw)
    costs = np.zeros(4)
    _, per_request = decode_iteration(row, 1.0, costs)
    own = prefill_iteration(row, 1.0, 1024.0, per_request, costs)
    assert two["ttft"] == pytest.approx(own + two["tpot"], rel=2e-3)
    one = evaluate("llama3.1-70b", "H100", concurrency=1, **kw)
    assert one["ttft"] == pytest.approx(prefill_iteration(row, 0.0, 1024.0, per_request, costs), rel=1e-12)


def test_token_budget_is_shared_with_the_other_requests_decodes_only():
    """A prompt as long as the budget (8192, chunked): alone it fits one iteration (the static prefill); beside a
    decoding request the free budget is 8191, so it takes a chunk of 8191 and a last chunk of 1 token, each
    iteration priced at its own size (two full iterations would be 0.86 s, not 0.45 s)."""
    kw = dict(tp=4, input_len=8192, output_len=8192, precision="fp8", overlap_step=0, client_rounds=0,
              chunked_prefill=1, max_num_tokens=8192, custom_allreduce_bytes=0, host_op_s=0.0)   # as _row's columns
    one = evaluate("llama3.1-70b", "H100", concurrency=1, **kw)
    assert one["ttft"] == pytest.approx(evaluate("llama3.1-70b", "H100", batch_size=1, **kw)["ttft"], rel=1e-12)
    two = evaluate("llama3.1-70b", "H100", concurrency=2, **kw)
    row = _row(concurrency=2, **kw)
    costs = np.zeros(4)
    _, per_request = decode_iteration(row, 1.0, costs)
    chunks = prefill_iteration(row, 1.0, 8191.0, per_request, costs) + prefill_iteration(row, 1.0, 1.0,
                                                                                          per_request, costs)
    assert two["ttft"] == pytest.approx(chunks + two["tpot"], rel=1e-2)     # the queue: 1 / (1 - phi), phi ~ 5e-3


def test_held_prompts_wait_out_the_window_or_the_token_threshold():
    """W = 20, no token threshold: a prompt alone waits 20 iterations; at 0.1 arrivals per iteration two more
    join the window, the first waits 20 and they 10 on average: (20 + 2 x 10) / 3 = 13.33, 3 enter together.
    One more prompt reaching the threshold (k = 1) at 0.1 per iteration closes the window after 10 iterations:
    (10 + 1 x 5) / 2 = 7.5, 2 enter together."""
    assert held(0.0, 20.0, np.inf) == (20.0, 1.0)
    assert held(0.1, 20.0, np.inf) == (pytest.approx(40.0 / 3.0), pytest.approx(3.0))
    assert held(0.1, 20.0, 1.0) == (pytest.approx(7.5), pytest.approx(2.0))
    assert held(0.1, 0.0, 0.0) == (0.0, 1.0)


def test_batch_wait_takes_the_engine_flags():
    """InferenceX's Llama-3.1-70B 1k/1k recipe: W = 20, ratio 0.9, max_num_tokens 16384, prompts of 1024 beside
    128 decodes: the threshold is 0.9 x 16384 - 128 = 14617.6 tokens, 15 prompts, k = 14 beyond the first. Not
    held: W = 0 or ratio 0 (one of the engine's two stop tests passes at once), a request alone, attention DP, a
    prompt that reaches the threshold by itself. At max_num_tokens 8192 the threshold 0.9 x 8192 - 128 = 7244.8
    needs 8 prompts (k = 7), but whole prompts fit only floor(8064 / 1024) = 7: without chunked prefill the window
    lasts W (k infinite); chunked, k = 7."""
    kw = dict(tp=4, input_len=1024, output_len=1024, precision="fp8", max_num_tokens=16384)
    row = _row(concurrency=8, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, **kw)
    assert batch_wait(row, 8.0, 128.0) == (20.0, 14.0)
    assert batch_wait(row, 1.0, 128.0) == (0.0, 0.0)
    assert batch_wait(_row(concurrency=8, batch_wait_iters=20, **kw), 8.0, 128.0) == (0.0, 0.0)
    assert batch_wait(_row(concurrency=8, batch_wait_tokens_ratio=0.9, **kw), 8.0, 128.0) == (0.0, 0.0)
    assert batch_wait(_row(concurrency=8, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, attention_dp=2,
                           **kw), 8.0, 128.0) == (0.0, 0.0)
    long = _row(concurrency=8, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, **dict(kw, input_len=16384))
    assert batch_wait(long, 8.0, 128.0) == (0.0, 0.0)
    short = dict(kw, max_num_tokens=8192)
    assert batch_wait(_row(concurrency=8, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, chunked_prefill=0,
                           **short), 8.0, 128.0) == (20.0, np.inf)
    assert batch_wait(_row(concurrency=8, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, chunked_prefill=1,
                           **short), 8.0, 128.0) == (20.0, 7.0)


def test_batch_wait_adds_its_iterations_to_the_ttft():
    """Two requests with long outputs: the other's prompt almost never arrives within a window (0.0024 per window
    of 20), so a prompt waits W = 20 decode iterations more, ttft(W) - ttft(0) = 20 TPOT within 0.2 %; TPOT hardly
    moves. A ratio without W, W without a ratio and a request alone change nothing."""
    kw = dict(tp=4, input_len=1024, output_len=8192, precision="fp8", client_rounds=0)
    off = evaluate("llama3.1-70b", "H100", concurrency=2, **kw)
    on = evaluate("llama3.1-70b", "H100", concurrency=2, batch_wait_iters=20, batch_wait_tokens_ratio=0.9, **kw)
    assert evaluate("llama3.1-70b", "H100", concurrency=2, batch_wait_iters=20, **kw)["ttft"] == off["ttft"]
    assert on["ttft"] - off["ttft"] == pytest.approx(20.0 * on["tpot"], rel=2e-3)
    assert on["tpot"] == pytest.approx(off["tpot"], rel=1e-3)
    assert evaluate("llama3.1-70b", "H100", concurrency=2, batch_wait_tokens_ratio=0.9, **kw)["ttft"] == off["ttft"]
    one = dict(concurrency=1, **kw)
    assert evaluate("llama3.1-70b", "H100", batch_wait_iters=20, batch_wait_tokens_ratio=0.9, **one)["ttft"] == \
        evaluate("llama3.1-70b", "H100", **one)["ttft"]


def test_a_serving_record_states_the_batch_waiting_flags():
    """``serve.batch_wait_iters`` / ``serve.batch_wait_tokens_ratio`` of a record reach the columns; absent: 0, the
    engine's default (off)."""
    import json
    from pathlib import Path

    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.records import lower_serve_record

    line = (Path(__file__).parents[1] / "data" / "serve_dev_load.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    plain = lower_serve_record(data).columns
    assert plain[COLUMN_INDEX["batch_wait_iters"]] == 0 and plain[COLUMN_INDEX["batch_wait_tokens_ratio"]] == 0
    data["serve"].update(batch_wait_iters=20, batch_wait_tokens_ratio=0.9)
    stated = lower_serve_record(data).columns
    assert stated[COLUMN_INDEX["batch_wait_iters"]] == 20 and stated[COLUMN_INDEX["batch_wait_tokens_ratio"]] == 0.9


def _balance(lam, running, own, share, t_d, per_token, mixed, steps, overlap):
    """g(lam) = lam x cycle(lam) - N written out from docs/model_serving.md §S7 (not through loop_state)."""
    phi = lam * (running - 1.0) / running * share
    tpot = 1.0 / ((1.0 - phi) / t_d + phi * per_token / share) if mixed else t_d / (1.0 - phi)
    return lam * ((own - 0.5 * phi * share) / (1.0 - phi) + (steps + overlap) * tpot) - running


def test_solve_rate_by_hand_stalling_and_mixing():
    """Stalling (N = 4, own 1 s, share 0.5 s, T_d 0.1 s, c = 9): s = 0.375, e = share / 2 = 0.25, the balance
    lam ((1 - 0.25 phi) + 0.9) / (1 - phi) = 4 with phi = 0.375 lam is 0.09375 lam^2 - 3.4 lam + 4 = 0, smaller root
    lam = (3.4 - sqrt 10.06) / 0.1875 = 1.217332 (4 / 3.4 = 1.176 with MVA's exponential service). Mixing (N = 2,
    own 1, share 1, T_d 1, u = per_token / share = 0.5, c = 1): s = 0.5, e = 0.5, the balance
    phi ((1 - 0.5 phi)^2 + 1 - phi) = (1 - phi)(1 - 0.5 phi), times 4:
    phi^3 - 10 phi^2 + 14 phi - 4 = 0, root phi in (0, hi s = 0.5) 0.390253, lam = 2 phi = 0.780505 (below
    hi = min(N / (own + c T_d), 1 / s) = 1; (7 - sqrt 17) / 4 = 0.7192 with exponential service)."""
    stall = solve_rate(4.0, 1.0, 0.5, 0.1, 1.0, False, 9.0, 0.0, NO_WAIT)
    assert stall == pytest.approx((3.4 - math.sqrt(10.06)) / 0.1875, rel=1e-14)
    assert _balance(stall, 4.0, 1.0, 0.5, 0.1, 1.0, False, 9.0, 0.0) == pytest.approx(0.0, abs=1e-13)
    lam = solve_rate(2.0, 1.0, 1.0, 1.0, 0.5, True, 1.0, 0.0, NO_WAIT)
    phi = [r.real for r in np.roots([1.0, -10.0, 14.0, -4.0]) if abs(r.imag) < 1e-12 and 0.0 < r.real < 0.5]
    assert len(phi) == 1 and lam == pytest.approx(2.0 * phi[0], rel=1e-13)
    assert lam == pytest.approx(0.780505, rel=1e-6)
    assert _balance(lam, 2.0, 1.0, 1.0, 1.0, 0.5, True, 1.0, 0.0) == pytest.approx(0.0, abs=1e-14)
    # one request: nobody else's prompt, lam = N / (own + c T_d)
    assert solve_rate(1.0, 1.0, 0.5, 0.1, 1.0, True, 9.0, 1.0, NO_WAIT) == pytest.approx(1.0 / 2.0, rel=1e-14)


def test_solve_rate_is_the_root_of_the_balance_that_bisection_finds():
    """Random loops (mixing and stalling, mixed iterations shorter or longer than the decode-only one; share up to
    twice the own prefill, as prompts of two or more chunks reach, solve_rate's uniqueness condition own >= share /
    2): the closed form (stalling) and the bracketed Newton root (mixing) are the root of g in (0, hi) that 200
    bisection steps find, to 1e-14 / (1 - phi) relative. Near saturation the root itself is known no better: phi
    is rounded to ~1e-16, so 1 - phi has a relative error of ~1e-16 / (1 - phi), and the response
    (own - e phi) / (1 - phi) that sets lam inherits it (60,000 wider random loops, N up to 2e5: error x (1 - phi)
    at most 1.5e-15; the error alone up to 3.7e-10 at phi = 1 - 4e-7, review8 #5). Where that root is above the
    station's capacity 1 / share the loop takes the capacity (review9 #1)."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        running = float(rng.integers(2, 9000))
        own, t_d = 10 ** rng.uniform(-3, 0), 10 ** rng.uniform(-3, -1)
        share, per_token = own * rng.uniform(0.05, 2.0), 10 ** rng.uniform(-1, 1)
        steps, overlap, mixed = float(rng.integers(0, 4096)), float(rng.integers(0, 3)), bool(rng.integers(0, 2))
        args = (running, own, share, t_d, per_token, mixed, steps, overlap)
        hi = min(running / (own + (steps + overlap) * t_d), running / ((running - 1.0) * share) * (1.0 - 1e-9))
        lam = solve_rate(*args, NO_WAIT)
        if _balance(hi, *args) <= 0.0:
            assert lam == min(hi, 1.0 / share)
            continue
        lo, top = 0.0, hi
        for _ in range(200):
            mid = 0.5 * (lo + top)
            lo, top = (mid, top) if _balance(mid, *args) < 0.0 else (lo, mid)
        phi = lam * (running - 1.0) / running * share
        assert lam == pytest.approx(min(0.5 * (lo + top), 1.0 / share), rel=1e-14 / (1.0 - phi))


def test_the_station_never_serves_above_its_capacity():
    """review9 #1 for the aggregated station: the prefill station serves at most 1 / share prompts a second, so the
    closed loop's R >= N share - Z (Z = (steps + overlap + hold) TPOT). The residual alone breaks it where the
    decode is short beside the prompt: N = 2, own = share = 1 s, T_d = 1 ms, no decode steps, the boundary wait
    (c = 1): the MVA balance phi^2 / 2 - 2.001 phi + 1 = 0 gives lam share = 2 phi = 1.17. The loop takes the
    bound: lam = 1 / share = 1, phi = 1 / 2, TPOT = T_d / (1 - phi) = 2 ms, R = N share - c TPOT = 1.998 s, and
    lam x cycle = N. On random loops lam share <= 1."""
    phi = 2.001 - math.sqrt(2.001**2 - 2.0)
    assert 2.0 * phi > 1.17
    assert solve_rate(2.0, 1.0, 1.0, 1e-3, 1.0, False, 0.0, 1.0, NO_WAIT) == 1.0
    cycle, response, tpot, _ = LOOP_STATE(1.0, 2.0, 1.0, 1.0, 1e-3, 1.0, False, 0.0, 1.0, NO_WAIT)
    assert tpot == pytest.approx(2e-3, rel=1e-14)
    assert response == pytest.approx(1.998, rel=1e-14)
    assert cycle == pytest.approx(2.0, rel=1e-14)
    rng = np.random.default_rng(9)
    for _ in range(400):
        share = 10 ** rng.uniform(-3, 0)
        args = (float(rng.integers(2, 2049)), share * rng.uniform(0.5, 4.0), share, 10 ** rng.uniform(-3.5, -1),
                share * 10 ** rng.uniform(-1, 1), bool(rng.integers(0, 2)), float(rng.choice([0, 1, 15, 1023])),
                float(rng.integers(1, 3)))
        assert solve_rate(*args, NO_WAIT) * share <= 1.0 + 1e-12


def test_cubic_root_stops_when_newton_has_converged():
    """review8 #1: a Newton step below one ulp lands on the bracket's lower end; the stop test came after the
    bracket guard, so it bisected 16 more times back to the same root (20 steps). The mixing loop of N = 2,
    own 3.453e-4 s, share 1.524e-4 s, T_d 0.3026 s, per_token 79.54, c = 0: s = e = share / 2, a = 1 / T_d,
    u = per_token / share, N s = share, and solve_rate's cubic in (phi0, share / own): 5 steps now, the root of 200
    bisection steps of the cubic."""
    own, share, t_d, per_token = 3.453295642271549e-4, 1.5240338958565647e-4, 0.3025921912217561, 79.54373786750358
    s = e = 0.5 * share
    a, u = 1.0 / t_d, per_token / share
    qa, qb, qc = (own + share) * (u - a), own * a - share * (u - 2.0 * a), -share * a
    k = (-e * (u - a), qa - e * a, qb, qc)
    lo = -2.0 * qc / (qb + math.sqrt(qb * qb - 4.0 * qa * qc))     # qb > 0 here
    top = 2.0 / own * s                          # hi s, hi = N / (own + c T_d) below the station's saturation
    root, steps = CUBIC_ROOT(*k, lo, top)
    assert steps <= 10
    cubic = lambda x: ((k[0] * x + k[1]) * x + k[2]) * x + k[3]   # noqa: E731
    left, right = lo, top
    for _ in range(200):
        mid = 0.5 * (left + right)
        left, right = (mid, right) if cubic(mid) < 0.0 else (left, mid)
    assert root == pytest.approx(left, rel=2e-15)
    assert root == pytest.approx(0.32207639525964576, rel=1e-15)


def test_concurrencies_past_the_kv_room_reuse_the_steady_state_exactly():
    """A sweep's concurrency rows that the KV cache and max_batch_size cap at the same ``running`` share the
    steady state (kernels/serve/evaluate.py's memo): the grid, and a table whose rows alternate between two
    configurations and a static batch, give bit for bit what each configuration evaluated alone gives."""
    kw = dict(tp=1, input_len=1024, output_len=8192, precision="fp8", client_rounds=10)
    levels = [1, 2, 30, 41, 42, 43, 44, 300, 3000, 8192]
    ds = sweep("llama3.1-70b", device="H200", precision="fp8", tp=1, batch_size=levels, input_len=1024,
               output_len=8192, load_mode="concurrency", client_rounds=10)
    alone = [evaluate("llama3.1-70b", "H200", concurrency=n, **kw) for n in levels]
    # the KV cache caps the running requests (42 on the H200's CUDA-visible 139.81 GiB)
    assert alone[3]["batch_size"] == 41 and alone[4]["batch_size"] == alone[-1]["batch_size"] == 42
    for name in ("ttft", "tpot", "output_tokens_per_s", "effective_batch_size", "prefill_gemm", "decode_attention"):
        assert ds[name].values.reshape(-1).tolist() == [a[name.replace("effective_", "")] for a in alone]
    other = dict(kw, input_len=2048)       # rows: hit, miss (another column), a static batch, hit after it
    rows = [(3000, kw), (3001, kw), (3000, other), (8, None), (3001, other)]
    table = [columns("llama3.1-70b", "H200", concurrency=n, **k) if k else
             columns("llama3.1-70b", "H200", batch_size=n, **kw) for n, k in rows]
    out, _ = evaluate_table(np.stack(table, axis=1))
    expected = [evaluate("llama3.1-70b", "H200", concurrency=n, **k) if k else
                evaluate("llama3.1-70b", "H200", batch_size=n, **kw) for n, k in rows]
    for name in ("ttft", "tpot", "prefill_gemm"):
        assert out[SERVE_RESULT_INDEX[name]].tolist() == [e[name] for e in expected]


def test_a_load_mode_is_given_and_refused_in_one_wording_by_every_door():
    """``fastmodel.serve.spec.given_loads`` / ``not_one_load``: one configuration (``serve.api``) and a record's
    serve block need exactly one load mode, a serving task at most one (a sweep axis may give it), each saying
    which it got; ``max_throughput = false`` gives none."""
    from fastmodel.errors import SpecError
    from fastmodel.serve.api import load_columns
    from fastmodel.serve.spec import given_loads, load_serve_task, not_one_load

    assert given_loads(8, None, False) == ["batch_size"] and given_loads(None, None, True) == ["max_throughput"]
    assert given_loads(None, None, False) == [] and not_one_load(["concurrency"]) is None
    both = "give exactly one of batch_size, concurrency, max_throughput (got batch_size, max_throughput)"
    assert not_one_load(["batch_size", "max_throughput"]) == both
    with pytest.raises(SpecError, match=r"^load: " + re.escape(both) + "$"):
        load_columns(batch_size=8, max_throughput=True)
    with pytest.raises(SpecError, match=r"load: give exactly one of batch_size, concurrency, max_throughput$"):
        load_columns()
    task = {"name": "t", "kind": "serve", "input_len": 128, "output_len": 64, "batch_size": 8, "concurrency": 8}
    with pytest.raises(SpecError, match=r"give at most one load mode of batch_size, concurrency, max_throughput "
                                        r"\(got batch_size, concurrency\)"):
        load_serve_task(task)
