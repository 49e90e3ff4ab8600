"""Speculative decoding at every load mode (kernels/serve/speculative.py; docs/model_serving.md §S18), by hand:
the expected accepted tokens, a static batch, max_throughput's stationary step and the disaggregated decode pool."""

import math

import numpy as np
import pytest

from fastmodel.kernels.serve.speculative import accepted_tokens
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import COLUMNS
from fastmodel.serve.api import columns, evaluate

#: Leviathan et al. (2023) Eq. 1 as plain Python (the kernel's, interpreted or compiled alike)
_ACCEPTED = getattr(accepted_tokens, "py_func", accepted_tokens)


def _row(k: float, a: float) -> np.ndarray:
    row = np.zeros(len(COLUMNS))
    row[C["spec_tokens"]], row[C["spec_acceptance"]] = k, a
    return row


def test_the_expected_accepted_tokens_are_leviathans_eq_1():
    """E = (1 - a^(k+1)) / (1 - a): k = 3, a = 0.5: 1.875 / 0.5 = 1 + 0.5 + 0.25 + 0.125 = 1.875; a = 0.7:
    (1 - 0.2401) / 0.3 = 2.533; every draft accepted (a = 1): k + 1 = 4; none (a = 0) or no drafts: 1."""
    assert _ACCEPTED(_row(3, 0.5)) == pytest.approx(1.875, rel=1e-15)
    assert _ACCEPTED(_row(3, 0.7)) == pytest.approx(0.7599 / 0.3, rel=1e-15)
    assert _ACCEPTED(_row(3, 1.0)) == 4.0
    assert _ACCEPTED(_row(3, 0.0)) == 1.0 and _ACCEPTED(_row(0, 0.9)) == 1.0


KW = dict(tp=8, precision="fp8", input_len=1024, output_len=512, spec_tokens=3)


def test_a_static_batch_divides_its_decode_by_the_expected_accepted_tokens():
    """A static batch of 4: each decode step verifies k + 1 = 4 tokens of every request and runs 3 draft steps,
    which do not depend on the acceptance a; the 511 tokens after the first take 511 / E steps, so TPOT(a=0) /
    TPOT(a) = E(a) = 1.875 at a = 0.5 and 4 at a = 1 (the KV read once a step, the host's step overhead once a
    step: every decode term over E). The prefill and its first token are the same with and without drafts, and
    drafts never accepted only cost."""
    none = evaluate("llama3.1-70b", "H200", batch_size=4, spec_acceptance=0.0, **KW)
    half = evaluate("llama3.1-70b", "H200", batch_size=4, spec_acceptance=0.5, **KW)
    full = evaluate("llama3.1-70b", "H200", batch_size=4, spec_acceptance=1.0, **KW)
    plain = evaluate("llama3.1-70b", "H200", batch_size=4, **{**KW, "spec_tokens": 0})
    assert none["tpot"] / half["tpot"] == pytest.approx(1.875, rel=1e-12)
    assert none["tpot"] / full["tpot"] == pytest.approx(4.0, rel=1e-12)
    for part in ("decode_gemm", "decode_attention", "decode_memory_bound", "decode_comm", "decode_overhead"):
        assert none[part] == pytest.approx(1.875 * half[part], rel=1e-12)
    assert none["ttft"] == half["ttft"] == plain["ttft"]
    assert half["e2e_latency"] == pytest.approx(half["ttft"] + 511 * half["tpot"], rel=1e-12)
    assert half["output_tokens_per_s"] == pytest.approx(4 * 512 / half["e2e_latency"], rel=1e-12)
    assert none["tpot"] > plain["tpot"] > half["tpot"]
    assert half["memory_per_device"] == plain["memory_per_device"]      # §S18 holds no KV for the drafts


def test_max_throughput_requests_live_one_prefill_step_and_their_decode_over_e():
    """max_throughput's stationary step (§S6) with drafts: a request spends one step in prefill and (O - 1) / E
    decode steps of E tokens, L = 1 + (O - 1) / E steps in all (O without drafts). Llama 3.1 8B on one H100,
    I = 1024, O = 257, k = 3, a = 0.5: E = 1.875, (O - 1) / E = 136.5333, L = 137.5333. TPOT = step / E, the
    instance emits batch x O tokens per L steps, e2e = TTFT + (O - 1) TPOT. The step's token budget counts the
    verified drafts (vLLM's scheduler: num_tokens_with_spec): a request feeds (I + 4 x 136.5333) / L = 11.4165
    tokens a step, so a budget of 2048 feeds floor(2048 / 11.4165) = 179 requests (without drafts
    floor(2048 x 257 / 1280) = 411, above the KV cache's 344)."""
    kw = dict(tp=1, input_len=1024, output_len=257, max_throughput=True, max_num_tokens=2048)
    spec = evaluate("llama3.1-8b", "H100", spec_tokens=3, spec_acceptance=0.5, **kw)
    plain = evaluate("llama3.1-8b", "H100", **kw)
    e = 1.875
    life = 1.0 + 256 / e
    assert spec["batch_size"] == math.floor(2048 * life / (1024 + 4 * 256 / e)) == 179
    assert plain["batch_size"] == 344 < 411          # the KV cache's bound
    step = spec["tpot"] * e
    assert spec["output_tokens_per_s"] == pytest.approx(179 * 257 / (life * step), rel=1e-12)
    assert spec["e2e_latency"] == pytest.approx(spec["ttft"] + 256 * spec["tpot"], rel=1e-12)
    assert spec["ttft"] == plain["ttft"]                  # one prompt's prefill, no drafts
    assert spec["tpot"] < plain["tpot"]


def test_the_disaggregated_decode_pool_speculates_and_the_prefill_pool_does_not():
    """A disaggregated record with serve.spec_tokens: the decode worker's columns carry the drafts, the prefill
    worker's do not. One request alone (§S30): TTFT = prefill + KV transfer + 2 decode iterations (the emitting
    one and TensorRT-LLM's overlap step), each iteration E TPOTs long (its verify and drafts emit E tokens), so the
    first token does not depend on the acceptance (the iteration's cost does not), while TPOT(a=0) / TPOT(a) = E."""
    import json

    from fastmodel.serve.disagg import evaluate_disagg, lower_disagg
    from fastmodel.serve.record_schema import parse_serve_record
    from tests.serve.test_serve_records import _disagg_record

    def pools(acceptance):
        data = json.loads(json.dumps(_disagg_record()))
        data["serve"].update(spec_tokens=3, spec_acceptance=acceptance)
        return lower_disagg(data, parse_serve_record(data), None)

    half, none = pools(0.5), pools(0.0)
    assert half.decode[C["spec_tokens"]] == 3 and half.prefill[C["spec_tokens"]] == 0
    plain_data = _disagg_record()
    [plain] = evaluate_disagg([lower_disagg(plain_data, parse_serve_record(plain_data), None)])
    a, b = evaluate_disagg([half, none])
    assert b["tpot"] / a["tpot"] == pytest.approx(1.875, rel=1e-12)
    assert a["ttft"] == pytest.approx(a["prefill_s"] + a["kv_transfer_s"] + 2 * 1.875 * a["tpot"], rel=1e-12)
    assert a["ttft"] == pytest.approx(b["ttft"], rel=1e-12)
    assert a["prefill_s"] == plain["prefill_s"] and a["kv_transfer_s"] == plain["kv_transfer_s"]
    assert a["tpot"] < plain["tpot"] < b["tpot"]


def test_the_closed_loops_overlap_iteration_is_a_whole_step_of_e_tpot():
    """Under concurrency an overlap (or batch-waiting) iteration is a decode step, E TPOT, as the disaggregated
    pool prices it, not one TPOT (the loop's TPOT is the step over the E tokens it emits). One request alone
    (concurrency 1: no other prompt, no boundary wait, TPOT = T_d): overlap_step adds exactly one step to the TTFT,
    1 TPOT without drafts and E = (1 - 0.6^4) / 0.4 = 2.176 TPOT with k = 3 at a = 0.6 (it added 1 TPOT before)."""
    kw = dict(tp=4, input_len=1024, output_len=256, precision="fp8", client_rounds=0, concurrency=1)
    for spec, e in ((dict(), 1.0), (dict(spec_tokens=3, spec_acceptance=0.6), 2.176)):
        on = evaluate("llama3.1-70b", "H100", overlap_step=1, **kw, **spec)
        off = evaluate("llama3.1-70b", "H100", overlap_step=0, **kw, **spec)
        assert on["tpot"] == pytest.approx(off["tpot"], rel=1e-12)
        assert on["ttft"] - off["ttft"] == pytest.approx(e * on["tpot"], rel=1e-9)


def test_a_batch_waiting_window_in_tpot_units_holds_e_times_its_iterations():
    """kernels/serve/load.py runs the loop in TPOT units: the waiting window W iterations is W E TPOTs, and with
    the arrivals per TPOT ``held`` returns E times the hold in iterations (the prompts that enter together
    unchanged): W = 20, k = 6, 0.5 arrivals per iteration, E = 2.5: window min(20, 6 / 0.5) = 12 iterations,
    7 prompts join, mean hold 12 (1 + 3) / 7 = 48 / 7 iterations = 120 / 7 TPOTs."""
    from fastmodel.kernels.serve.load import held

    held_ = getattr(held, "py_func", held)
    iterations, together = held_(0.5, 20.0, 6.0)
    tpots, joined = held_(0.5 / 2.5, 20.0 * 2.5, 6.0)
    assert (iterations, together) == (pytest.approx(48.0 / 7.0), pytest.approx(7.0))
    assert (tpots, joined) == (pytest.approx(120.0 / 7.0), pytest.approx(7.0))


def test_the_steady_loop_passes_held_the_waiting_window_in_tpot_units(monkeypatch):
    """review12 #17: the test above pins ``held``'s scale invariance, not the wiring. Here the steady loop itself
    (``load.steady_loop``, run as Python so that its calls resolve to the module's names) with speculative decoding
    (3 draft tokens at 0.6: E = (1 - 0.6^4) / 0.4 = 2.176 tokens a step) hands ``held`` the window of
    ``batch_wait`` (W = 20 iterations, stubbed) as W E = 43.52 TPOTs at every pass (``wait[0] * emitted``,
    kernels/serve/load.py); without speculation it hands W."""
    import fastmodel.kernels.serve.load as load
    from fastmodel.kernels.serve.evaluate import MEMO_WIDTH

    plain_held = getattr(load.held, "py_func", load.held)
    windows = []

    def spy(seen, iters, more):
        windows.append(iters)
        return plain_held(seen, iters, more)

    monkeypatch.setattr(load, "held", spy)
    # loop_state calls held: run it as Python too, so that a compiled kernel neither types the spy nor skips it
    monkeypatch.setattr(load, "loop_state", getattr(load.loop_state, "py_func", load.loop_state))
    monkeypatch.setattr(load, "batch_wait", lambda row, running, decodes: (20.0, 4.0))
    loop = getattr(load.steady_loop, "py_func", load.steady_loop)
    for spec, expected in ((dict(spec_tokens=3, spec_acceptance=0.6), 20.0 * 2.176), (dict(), 20.0)):
        row = columns("llama3.1-8b", "H100", concurrency=16, **spec)
        row = row[:, 0] if row.ndim > 1 else row
        memo, scratch = np.zeros((4, MEMO_WIDTH)), np.zeros((6, 6))
        windows.clear()
        loop(row, 16.0, memo[1], memo[2], memo[3], scratch[2])
        assert windows and all(w == pytest.approx(expected, rel=1e-12) for w in windows)


def test_the_static_and_draft_lm_heads_both_count_one_attention_dp_groups_tokens():
    """review11 #5: each attention-DP group runs its own tokens' LM head (load.py's rule, body_costs' m_rank = -1),
    so a static batch's decode step of n = 8 requests at attention_dp 2 prices the head of 8 / 2 = 4 tokens, as
    the draft step (``draft_costs``) does: the step less the body, the attention launches and the KV upcast is
    head_costs at 4 tokens, not at 8."""
    from fastmodel.kernels.serve.attention import attention_launches
    from fastmodel.kernels.serve.costs import K_ATTN, K_MEM, LAUNCH, body_costs, head_costs
    from fastmodel.kernels.serve.evaluate import decode_fixed_costs
    from fastmodel.kernels.serve.kv_upcast import kv_upcast_time

    def plain(f):
        return getattr(f, "py_func", f)

    row = columns("deepseek-v3", "H200", tp=8, attention_dp=2, batch_size=8, precision="fp8").astype(float)
    row = row[:, 0] if row.ndim > 1 else row
    assert row[C["attention_dp"]] == 2
    step, body, half, full = (np.zeros(4) for _ in range(4))
    plain(decode_fixed_costs)(row, 8.0, step)
    plain(body_costs)(row, 8.0, LAUNCH, body, -1.0)
    plain(head_costs)(row, 4.0, LAUNCH, half)
    plain(head_costs)(row, 8.0, LAUNCH, full)
    rest = body.copy()
    rest[K_ATTN] += plain(attention_launches)(row)
    rest[K_MEM] += plain(kv_upcast_time)(row)
    assert step - rest == pytest.approx(half, rel=1e-12, abs=1e-18)
    assert half[0] < full[0]


def test_the_closed_loops_prompts_enter_per_step_not_per_tpot():
    """h-polish2 leftover (review11 #12): the prompts that enter together at an iteration boundary are those that
    arrive in one iteration, a step of E TPOT under speculation. 1.2 arrivals per TPOT at E = 2.5 are 3 prompts
    a step: 3 x 1024 = 3072 tokens under a chunked budget of 8192 (1.2 x 1024 = 1228.8 per TPOT before); the
    budget caps them (2048), one whole prompt is the least without chunking, one chunk with it."""
    from fastmodel.kernels.serve.load import entering_tokens

    tokens = getattr(entering_tokens, "py_func", entering_tokens)
    assert tokens(1.2 * 2.5, 1.0, 1024.0, 1024.0, 8192.0, True) == pytest.approx(3072.0, rel=1e-15)
    assert tokens(1.2 * 2.5, 1.0, 1024.0, 1024.0, 2048.0, True) == 2048.0
    assert tokens(0.1, 1.0, 1024.0, 1024.0, 512.0, False) == 1024.0
    assert tokens(0.1, 1.0, 1024.0, 512.0, 512.0, True) == 512.0
