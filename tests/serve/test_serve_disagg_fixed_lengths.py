"""The prefill pool of a fixed-length client (fastmodel/serve/disagg.py ``deterministic_pool_response``;
docs/model_serving.md §S51), by hand."""

import json
from pathlib import Path

import pytest

from fastmodel.serve.disagg import deterministic_pool_response, pool_response, prefill_pool

DISAGG = Path(__file__).resolve().parents[1] / "data" / "serve_dev_disagg.jsonl"


def test_below_the_saturation_population_no_prompt_waits():
    """S = 1 s on c = 4 servers, Z = 3 s: N* = c (S + Z) / S = 16. At N = 10 the start wave's arrivals come back
    spaced as they left, so R = S = 1 s (§S30's MVA, with §S61's deterministic residual, queues: 1.0 < its R); at
    N = 16 still 1 s."""
    assert deterministic_pool_response(1.0, 4.0, 3.0, 10.0) == 1.0
    assert deterministic_pool_response(1.0, 4.0, 3.0, 16.0) == 1.0
    assert pool_response(1.0, 4.0, 3.0, 10.0) > 1.0


def test_above_it_the_servers_never_idle():
    """N = 20 > N* = 16: throughput c / S = 4 per second, cycle N / 4 = 5 s, R = 5 - Z = 2 s; N = 40: 10 - 3 = 7 s.
    Arrays give the same."""
    import numpy as np

    assert deterministic_pool_response(1.0, 4.0, 3.0, 20.0) == 2.0
    assert 20.0 / (deterministic_pool_response(1.0, 4.0, 3.0, 20.0) + 3.0) == 4.0
    np.testing.assert_array_equal(deterministic_pool_response(1.0, 4.0, 3.0, np.array([10.0, 20.0, 40.0])),
                                  [1.0, 2.0, 7.0])


def test_attention_dp_ranks_with_a_fixed_length_client():
    """One request, lone = 0.2 s, full = 0.5 s, 4 ranks, Z = 1.8 s: R = S for both pools, so the busy-rank fixed
    point is §S30's 4 S^2 + 6.1 S - 1.44 = 0, S = (-6.1 + sqrt(60.25)) / 8. Saturated (N = 10^4): every rank busy,
    S = 0.5 s and R = N S / 4 - Z = 1248.2 s."""
    import math

    own, response = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 1.0, fixed=True)
    assert own == pytest.approx((-6.1 + math.sqrt(60.25)) / 8.0, rel=1e-8)
    assert response == pytest.approx(own, rel=1e-12)
    busy, full = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 1e4, fixed=True)
    assert busy == pytest.approx(0.5, rel=1e-9)
    assert full == pytest.approx(1e4 * 0.5 / 4.0 - 1.8, rel=1e-9)


def test_between_the_servers_and_the_saturation_population_only_the_mva_queues():
    """The same pool (lone 0.2 s, full 0.5 s, c = 4 ranks, Z = 1.8 s) at N = 8, so c < N < N*. Fixed lengths:
    R = S, U = N S / (c (S + Z)), S = 0.2 + 0.3 U, i.e. 4 S (S + 1.8) = 0.8 (S + 1.8) + 2.4 S, i.e.
    4 S^2 + 4.0 S - 1.44 = 0, S = (-4 + sqrt(39.04)) / 8 = 0.28102 s; then N* = 4 (S + 1.8) / S = 29.6 > 8 and
    U = 0.270 < 1, so no prompt waits. §S30's MVA (fixed = False; its residual form since §S61, 0.011 s, about half
    the exponential service's 0.021 s) queues the same loop: R - S > 0.01 s."""
    import math

    own, response = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 8.0, fixed=True)
    assert own == pytest.approx((-4.0 + math.sqrt(39.04)) / 8.0, rel=1e-8)
    assert 4.0 < 8.0 < 4.0 * (own + 1.8) / own
    assert response == pytest.approx(own, rel=1e-12)
    mva_own, mva_response = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 8.0, fixed=False)
    assert mva_response - mva_own > 0.01


def _record(name: str) -> dict:
    return next(json.loads(line) for line in DISAGG.read_text().splitlines() if name in line)


def test_a_fixed_length_record_takes_the_deterministic_pool_and_nothing_else_moves():
    """The vLLM Qwen3-32B H100 record (``serve.fixed_lengths``; 448 in flight on 8 TP 1 prefill workers, below its
    N* of ~670): its prompt spends its own service in the pool. Without the flag the same record queues (§S30's
    MVA); the steady TTFT differs by exactly that queue, and the mean (start wave 1 / client_rounds = 1/10 of it,
    unchanged) by 0.9 of it; TPOT and the KV transfer are the same."""
    from fastmodel.serve.disagg import evaluate_disagg
    from fastmodel.serve.records import lower_any

    data = _record("qwen3_32b_h100_sxm_vllm_disagg_4000x1000_c_tp_epnone_2")
    assert data["serve"]["fixed_lengths"] is True
    free = json.loads(json.dumps(data))
    free["serve"].pop("fixed_lengths")
    fixed, mva = evaluate_disagg([lower_any(data, "t"), lower_any(free, "t")])
    assert fixed["prefill_response_s"] == fixed["prefill_s"]
    queue = mva["prefill_response_s"] - mva["prefill_s"]
    assert queue > 0.01
    assert mva["ttft"] - fixed["ttft"] == pytest.approx(0.9 * queue, rel=1e-9)
    assert (fixed["tpot"], fixed["kv_transfer_s"]) == (mva["tpot"], mva["kv_transfer_s"])


def test_the_flag_is_the_validated_schema_field_not_the_raw_record():
    """``DisaggRecord.fixed_lengths`` carries record_schema's ``serve.fixed_lengths``: true when stated, false when
    absent or null. ``evaluate_disagg`` reads that field: the flagged record with the field cleared (its raw block
    still says true) gives the unflagged record's result. A string "false" or a 1 is refused, one line naming the
    file and the field."""
    from dataclasses import replace

    from fastmodel.errors import SpecError
    from fastmodel.serve.disagg import evaluate_disagg
    from fastmodel.serve.records import lower_any

    data = _record("qwen3_32b_h100_sxm_vllm_disagg_4000x1000_c_tp_epnone_2")
    flagged = lower_any(data, "t")
    assert flagged.fixed_lengths is True
    free = json.loads(json.dumps(data))
    free["serve"]["fixed_lengths"] = None
    assert lower_any(free, "t").fixed_lengths is False
    free["serve"].pop("fixed_lengths")
    unflagged = lower_any(free, "t")
    assert unflagged.fixed_lengths is False
    cleared = replace(flagged, fixed_lengths=False)
    assert cleared.raw["serve"]["fixed_lengths"] is True
    assert evaluate_disagg([cleared])[0] == evaluate_disagg([unflagged])[0]
    for bad in ("false", 1):
        free["serve"]["fixed_lengths"] = bad
        with pytest.raises(SpecError) as err:
            lower_any(free, "records.jsonl")
        assert "\n" not in str(err.value)
        assert str(err.value).startswith("records.jsonl: serve.fixed_lengths:")
