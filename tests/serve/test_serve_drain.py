"""The client-side wait of a finite run through a client semaphore of k slots to a server of b slots
(fastmodel/serve/drain.py, docs/model_serving.md §S44), by hand."""

import pytest

from fastmodel.serve.drain import drain_ttft, drain_wait_rounds


def _brute(n, k, b):
    """Request by request: start floor(i/b), sent 0 or floor((i-k)/b) + 1, in units of E."""
    waits = [i // b - (0 if i < k else (i - k) // b + 1) for i in range(n)]
    assert min(waits) >= 0
    return sum(waits) / n


def test_ten_rounds_through_a_wider_client_wait_four_and_a_half_request_times():
    # InferenceX H100 vLLM recipe d22bf9ca9..4e135fd3f: 10 CONC prompts, client 512, server CONC.
    # CONC 4: 40 prompts all sent at t = 0, rounds 0..9 of 4, mean (0 + 1 + ... + 9) / 10 = 4.5.
    assert drain_wait_rounds(40, 512, 4) == pytest.approx(4.5)
    for conc in (8, 16, 32):
        assert drain_wait_rounds(10 * conc, 512, conc) == pytest.approx(4.5)


def test_more_prompts_than_client_slots_wait_less():
    # CONC 64: 640 prompts, 512 sent at 0 (rounds 0..7 of 64: mean 3.5); the other 128 are sent at the end of
    # rounds 0 and 1 (t = E, 2E) and start in rounds 8 and 9, so each waits 7 E.
    # (512 * 3.5 + 128 * 7) / 640 = (1792 + 896) / 640 = 4.2.
    assert drain_wait_rounds(640, 512, 64) == pytest.approx(4.2)
    assert drain_wait_rounds(640, 512, 64) == pytest.approx(_brute(640, 512, 64))


def test_a_long_run_tends_to_the_closed_loop_wait():
    # n -> infinity: every request waits k/b - 1 rounds, Little's (k - b)/lambda with lambda = b/E; the first k
    # requests wait less (rounds 0 .. k/b - 1), an edge of about k (k/b - 1) / 2 / n = 0.0018 at 512 / 64.
    assert drain_wait_rounds(10**6, 512, 64) == pytest.approx(512 / 64 - 1, rel=1e-3)
    assert drain_wait_rounds(10**6, 100, 30) == pytest.approx(100 / 30 - 1, rel=1e-3)


def test_the_closed_form_matches_request_by_request():
    for n, k, b in [(1, 1, 1), (7, 5, 2), (33, 10, 3), (100, 64, 64), (129, 128, 5), (50, 512, 7)]:
        assert drain_wait_rounds(n, k, b) == pytest.approx(_brute(n, k, b))


def test_no_server_queue_when_the_client_is_the_narrower():
    assert drain_wait_rounds(400, 32, 64) == 0.0
    assert drain_wait_rounds(400, 64, 64) == 0.0


def test_ttft_adds_the_wait_in_request_times():
    # server TTFT 0.2 s, request 5 s, 4.5 rounds: 0.2 + 22.5.
    assert drain_ttft(0.2, 5.0, 80, 512, 8) == pytest.approx(22.7)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        drain_wait_rounds(0, 512, 4)
