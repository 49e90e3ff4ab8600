"""The disaggregated prefill pool's queue is the aggregated prefill station's deterministic residual
(fastmodel/serve/disagg.py ``pool_response``, kernels/serve/load.py ``station_response``; docs/model_serving.md
§S30, §S61), by hand. The kernels are called through ``py_func`` (no compile at a new signature)."""

import json
import math
from pathlib import Path

import pytest

from fastmodel.kernels.serve.load import loop_state, station_response
from fastmodel.serve.disagg import pool_response

DISAGG = Path(__file__).resolve().parents[1] / "data" / "serve_dev_disagg.jsonl"
STATION = getattr(station_response, "py_func", station_response)
LOOP_STATE = getattr(loop_state, "py_func", loop_state)


def test_one_server_is_pollaczek_khinchine_for_deterministic_service():
    """S = 1 s, Z = 3 s, N = 2, one server: phi = (5 - sqrt(11)) / 7 = 0.240482 (test_serve_disagg's hand root).
    M/D/1 (Pollaczek-Khinchine, C^2 = 0): the queue is R - S = S phi / (2 (1 - phi)) = 0.158312 s, half the
    exponential service's S phi / (1 - phi) at the same phi."""
    phi = (5.0 - math.sqrt(11.0)) / 7.0
    queue = pool_response(1.0, 1.0, 3.0, 2.0) - 1.0
    assert queue == pytest.approx(phi / (2.0 * (1.0 - phi)), rel=1e-12)
    assert queue == pytest.approx(0.158312, abs=1e-6)
    assert queue == pytest.approx(0.5 * phi / (1.0 - phi), rel=1e-12)


def test_the_pool_and_the_aggregated_station_are_one_function():
    """At the pool's own rate lambda = N / (R + Z), the aggregated loop's ``loop_state`` (a stalling engine, no
    batch waiting, 1,000 decode steps: its capacity floor N share - Z, review9 #1, is far below) gives the same
    prefill response for one server,
    and ``station_response`` of the Seidmann server (D = S / c) plus the delay S - D gives it for c = 4."""
    r = pool_response(1.0, 1.0, 3.0, 2.0)
    lam = 2.0 / (r + 3.0)
    _, response, _, _ = LOOP_STATE(lam, 2.0, 1.0, 1.0, 0.01, 1.0, False, 1000.0, 0.0, (0.0, 0.0))
    assert response == pytest.approx(r, rel=1e-12)
    r4 = pool_response(1.0, 4.0, 3.0, 8.0)
    phi = 8.0 / (r4 + 3.0) * 0.25 * 7.0 / 8.0
    assert r4 == pytest.approx(0.75 + STATION(0.25, 0.25, phi), rel=1e-12)


def test_the_residual_pool_on_arrays_and_its_limits():
    """Arrays equal the scalar calls; one request spends its own service S (phi = 0); many requests saturate the
    pool at c / S; below saturation the queue is at most the exponential one (1.302776 s at N = 2, one server)."""
    import numpy as np

    grid = np.array([1.0, 2.0, 8.0, 64.0])
    np.testing.assert_array_equal(pool_response(1.0, 4.0, 3.0, grid), [pool_response(1.0, 4.0, 3.0, n) for n in grid])
    assert pool_response(1.0, 4.0, 3.0, 1.0) == 1.0
    assert 1e5 / (pool_response(1.0, 4.0, 3.0, 1e5) + 3.0) == pytest.approx(4.0, rel=1e-4)
    assert pool_response(1.0, 1.0, 3.0, 2.0) < (-1.0 + math.sqrt(13.0)) / 2.0


def test_an_unflagged_record_closes_its_loop_with_the_residual():
    """A Kimi-K2.5 record (no ``serve.fixed_lengths``: not §S51's exact bounds) at 128 in flight on vLLM: its
    steady pool response R, own service S and throughput satisfy the Seidmann tandem with the residual,
    R = S - D + station_response(D, D, phi), D = S / c, phi = lambda D (N_r - 1) / N_r."""
    from fastmodel.serve.disagg import evaluate_disagg
    from fastmodel.serve.records import lower_any

    data = next(json.loads(line) for line in DISAGG.read_text().splitlines()
                if "kimik2_5_gb200_vllm_fp4_disagg_8192x1024_c128_cfg698" in line)
    rec = lower_any(data, "t")
    assert rec.fixed_lengths is False
    (out,) = evaluate_disagg([rec])
    own, response, running = out["prefill_s"], out["prefill_response_s"], out["batch_size"]
    lam = running / (response + out["kv_transfer_s"] + out["decode_s"])
    servers = out["prefill_s"] / (out["prefill_busy"] / lam)
    share = own / servers
    phi = lam * share * (running - 1.0) / running
    assert response == pytest.approx(own - share + STATION(share, share, phi), rel=1e-9)
    assert response - own > 0.0


def test_the_pool_never_serves_above_its_capacity():
    """review9 #1: the residual's half-done prompt is discounted even when the server never idles, so at small N
    Schweitzer's estimate alone gives R below the closed loop's bound R >= N S / c - Z (lambda above c / S): two
    requests, one server, no think time, phi = 2 - sqrt(2), R = (1 - phi / 2) / (1 - phi) = 1.707 s where the two
    prompts take turns and each spends 2 s. The pool takes §S51's asymptotic bound as its floor; on a random grid
    lambda = N / (R + Z) never exceeds c / S."""
    import numpy as np

    assert pool_response(1.0, 1.0, 0.0, 2.0) == 2.0
    rng = np.random.default_rng(9)
    own = 10.0 ** rng.uniform(-4.0, 0.0, 4000)
    servers = rng.integers(1, 9, 4000).astype(float)
    think = 10.0 ** rng.uniform(-4.0, 1.0, 4000) * rng.integers(0, 2, 4000)
    running = rng.integers(1, 2049, 4000).astype(float)
    response = pool_response(own, servers, think, running)
    assert np.all(running / (response + think) <= servers / own * (1.0 + 1e-12))
    assert np.all(response >= own)


def test_no_prefill_and_no_think_time_spends_nothing():
    """review9 #10: own = 0 and think = 0 make the root's 0 / 0; the pool returns 0 as the exponential form did,
    without a warning, for floats and arrays."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pool_response(0.0, 1.0, 0.0, 1.0) == 0.0
        assert pool_response(0.0, 4.0, 0.0, 3.0) == 0.0
        np.testing.assert_array_equal(pool_response(np.array([0.0, 1.0]), 1.0, 0.0, 2.0), [0.0, 2.0])
