"""The client-side wait of a finite benchmark run whose client holds more requests than the server runs
(docs/model_serving.md §S44).

A client sends ``n`` requests at once (``--request-rate inf``) through a semaphore of ``k`` slots
(``--max-concurrency k``); the server runs at most ``b`` of them (vLLM ``--max-num-seqs b``) and queues the rest
first come, first served. Every request takes the same time ``E`` on the server (its TTFT at ``b`` in flight plus
its decode). Request ``i`` (0-based) is sent at ``s_i = 0`` when ``i < k``, else when request ``i - k`` finishes,
and starts on the server when request ``i - b`` finishes, so in units of ``E``

    start_i = floor(i / b),    sent_i = 0 (i < k) or floor((i - k) / b) + 1 (i >= k),
    wait_i  = start_i - sent_i

and the client's TTFT clock (started just before the POST, after the semaphore) carries ``wait_i · E`` on top of
the server's TTFT. With ``F(m) = sum_{i < m} floor(i / b) = b q (q - 1) / 2 + q r`` (``q = floor(m / b)``,
``r = m - q b``) the mean over the run is

    W(n, k, b) = [F(n) - (F(n - k) + (n - k))⁺] / n

(the bracket only when ``n > k``). Limits: ``n ≤ k`` gives ``(n/b - 1)/2`` when ``b`` divides ``n`` (a drain:
ten rounds of ``b`` wait 4.5 E on average); ``n → ∞`` gives the closed loop's ``k/b - 1``, i.e. Little's
``(k - b) / λ`` with ``λ = b / E`` (§S7's ``(N - N_r)/λ``). A client with ``k ≤ b`` never queues at the server.
"""

from __future__ import annotations


def _floor_sum(m: int, b: int) -> int:
    """``sum_{i=0}^{m-1} floor(i / b)`` in closed form."""
    q, r = divmod(m, b)
    return b * q * (q - 1) // 2 + q * r


def drain_wait_rounds(n: int, k: int, b: int) -> float:
    """Mean client-side wait, in server request times ``E``, of ``n`` requests sent at once through ``k`` client
    slots to a server that runs ``b`` at a time (first come, first served, equal service times)."""
    if min(n, k, b) < 1:
        raise ValueError(f"requests {n}, client slots {k} and server slots {b} must all be at least 1")
    if k <= b:
        return 0.0
    waited = _floor_sum(n, b)
    if n > k:
        waited -= _floor_sum(n - k, b) + (n - k)
    return waited / n


def drain_ttft(server_ttft_s: float, request_s: float, n: int, k: int, b: int) -> float:
    """Mean client TTFT of the run: the server's TTFT at ``b`` in flight plus ``drain_wait_rounds`` request times
    ``request_s`` (``E`` = server TTFT + decode of one request)."""
    return server_ttft_s + drain_wait_rounds(n, k, b) * request_s
