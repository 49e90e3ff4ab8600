"""The long-prompt TTFT split of bench/serve_ttft_parts.py (docs/model_serving.md §S61), by hand."""

import pytest

from tests.bench_scripts import load_bench

serve_ttft_parts = load_bench("serve_ttft_parts")

#: two requests in flight, TTFT 1 s and TPOT 10 ms over 101 output tokens: a cycle of 1 + 100 x 0.01 = 2 s, so
#: lambda = 2 / 2 = 1 request per second by Little's law; the overlap step and the boundary wait (o = 2); one
#: request in ten in the start wave, whose two prompts take one iteration each (mean 1.5 iterations)
POINT = {"n": 2, "ttft": 1.0, "tpot": 0.01, "out": 101, "o": 2.0, "rounds": 10, "wave": 1.5}


def test_waiting_time_of_the_three_queue_forms():
    """At a busy share of 1/2: Schweitzer's MVA waits phi / (1 - phi) = 1 service, the deterministic prompt half of
    it (the prompt in service has S / 2 left), no queue 0."""
    assert serve_ttft_parts.waiting("mva", 0.5) == pytest.approx(1.0)
    assert serve_ttft_parts.waiting("md1", 0.5) == pytest.approx(0.5)
    assert serve_ttft_parts.waiting("none", 0.5) == 0.0


def test_built_ttft_by_hand():
    """S = 0.5 s: phi = lambda (N - 1)/N S = 1 x 1/2 x 0.5 = 0.25; the steady TTFT is S (1 + w) + 2 x 10 ms with
    w = 1/3 (MVA), 1/6 (deterministic), 0: 0.686667, 0.603333, 0.52 s; the start wave 1.5 x 0.5 = 0.75 s weighs 1/10:
    0.9 x 0.686667 + 0.075 = 0.693, 0.9 x 0.603333 + 0.075 = 0.618, 0.9 x 0.52 + 0.075 = 0.543 s."""
    assert serve_ttft_parts.built_ttft(0.5, POINT, "mva") == pytest.approx(0.693)
    assert serve_ttft_parts.built_ttft(0.5, POINT, "md1") == pytest.approx(0.618)
    assert serve_ttft_parts.built_ttft(0.5, POINT, "none") == pytest.approx(0.543)
    assert serve_ttft_parts.built_ttft(2.0, POINT, "mva") == float("inf")         # phi = 1: saturated
    steady = dict(POINT, rounds=0)                                                   # no start wave
    assert serve_ttft_parts.built_ttft(0.5, steady, "md1") == pytest.approx(0.603333, rel=1e-6)


def _consistent(s, form, n, tpot):
    """A load whose measured TTFT is what ``built_ttft`` makes of lone prefill ``s`` under ``form`` (its own
    Little's law read from that TTFT: iterated to the fixed point)."""
    point = {"n": n, "ttft": 1.0, "tpot": tpot, "out": 1024, "o": 2.0, "rounds": 10, "wave": (n + 1) / 2}
    for _ in range(200):
        point["ttft"] = serve_ttft_parts.built_ttft(s, point, form)
    return point


@pytest.mark.parametrize("form", serve_ttft_parts.FORMS)
def test_implied_lone_prefill_recovers_the_prefill_that_built_the_loads(form):
    """Loads of 4, 16 and 64 requests built from S = 0.3 s under one queue form give back S = 0.3 s (to the grid's
    step) with no residual under that form; a form with more queue implies a shorter prefill for the same loads."""
    points = [_consistent(0.3, form, n, t) for n, t in ((4, 0.015), (16, 0.025), (64, 0.06))]
    s, err = serve_ttft_parts.implied_s(points, form)
    assert s == pytest.approx(0.3, abs=points[0]["ttft"] / 4000)
    assert err < 2e-3
    implied = [serve_ttft_parts.implied_s(points, f)[0] for f in serve_ttft_parts.FORMS]
    assert implied[0] < implied[1] < implied[2]                  # mva < md1 < none


def test_rows_with_a_measured_kv_wait_are_left_out():
    """64 in flight: 61.7 decoding by the record's own Little's law passes (>= 0.95 x 64 = 60.8), 57.8 does not (a
    measured wait for KV room), nor a row whose modelled KV cache holds only 60."""
    assert serve_ttft_parts.fits_all({"batch_size": "64.0", "implied_running": "61.7"}, 64)
    assert not serve_ttft_parts.fits_all({"batch_size": "64.0", "implied_running": "57.8"}, 64)
    assert not serve_ttft_parts.fits_all({"batch_size": "60.0", "implied_running": "61.7"}, 64)


def test_model_parts_read_the_waits_the_model_uses():
    """review8 #11: ``model_parts`` rewrote ``steady_loop``'s ``o`` (overlap step + boundary wait) and would drift
    from it; it now reads the ``overlap`` that ``steady_loop`` hands ``loop_state``. On dev records without batch
    waiting the steady TTFT is R + o TPOT exactly, and o is §S7's: 1 for the overlap step, 1 for the boundary when
    others run (both kinds of engine met: o = 1 and 2). The script spies on the interpreted loop (it refuses
    compiled kernels), so under compiled kernels, as CI runs, this test runs itself in a child pytest with
    FASTMODEL_JIT=0, which compiles nothing (review9 #3: it used to skip there, so it could not fail in CI)."""
    from fastmodel.kernels import jit

    if not jit.INTERPRETED:
        _in_interpreted_child("test_model_parts_read_the_waits_the_model_uses")
        return
    import json
    from pathlib import Path

    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.records import lower_any

    path = Path(__file__).parents[1] / "data" / "serve_dev_load.jsonl"
    held = serve_ttft_parts.heldout_ids(str(path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records = [r for r in records if r["id"] not in held and "concurrency" in r["serve"]
               and not r["serve"].get("batch_wait_iters")]
    seen = set()
    for record in records:
        parts = serve_ttft_parts.model_parts(record)
        assert parts["steady"] == pytest.approx(parts["R"] + parts["o"] * parts["tpot"], rel=1e-12)
        flag = lower_any(record).columns[COLUMN_INDEX["overlap_step"]] > 0
        assert parts["o"] == float(flag) + float(record["serve"]["concurrency"] > 1) == parts["point"]["o"]
        seen.add(parts["o"])
    assert seen == {1.0, 2.0}


def _in_interpreted_child(test: str) -> None:
    """Run this file's ``test`` in a child pytest with FASTMODEL_JIT=0 (interpreted kernels), from the repository
    root; its failure is this test's, with the child's output."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "FASTMODEL_JIT": "0"}
    env.pop("PYTEST_XDIST_WORKER", None)
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                            f"{Path(__file__).resolve()}::{test}"], cwd=root, env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert "1 passed" in child.stdout, child.stdout[-2000:]
