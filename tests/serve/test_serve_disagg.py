"""The disaggregated prefill pool and first token (fastmodel/serve/disagg.py; docs/model_serving.md §S30), by hand;
the limiting pool (§S40) and serve/batch of disaggregated records."""

import json
import math
from pathlib import Path

import pytest

from fastmodel.serve.disagg import first_token_steps, pool_response, prefill_pool


def test_one_server_is_the_single_server_station_with_deterministic_service():
    """S = 1 s, Z = 3 s, N = 2 (§S30, §S61): R = (S - phi S / 2) / (1 - phi), phi = lambda S (N - 1)/N,
    lambda = N / (R + Z). phi (R + Z) = S (N - 1) gives (Z + S/2) phi^2 - (S + Z + S (N - 1)) phi + S (N - 1) = 0:
    3.5 phi^2 - 5 phi + 1 = 0, phi = (5 - sqrt(11)) / 7 = 0.240482, R = (1 - phi/2) / (1 - phi) = 1.158312
    (Schweitzer's exponential service, R = S / (1 - phi): 1.302776; the queue 0.158 s against 0.303 s)."""
    r = pool_response(1.0, 1.0, 3.0, 2.0)
    phi = (5.0 - math.sqrt(11.0)) / 7.0
    assert r == pytest.approx((1.0 - phi / 2.0) / (1.0 - phi), rel=1e-12)
    assert r == pytest.approx(1.158312, abs=1e-6)
    lam = 2.0 / (r + 3.0)
    assert lam * 1.0 * 0.5 == pytest.approx(phi, rel=1e-12)


def test_four_servers_are_a_quarter_server_in_tandem_with_a_delay():
    """Seidmann: S = 1 s on c = 4 servers is a server of D = 0.25 s plus a delay of 0.75 s; X = Z + 0.75 = 3.75.
    Z = 3, N = 2: (3.75 + 0.125) phi^2 - (0.25 + 3.75 + 0.25) phi + 0.25 = 0, phi = (4.25 - sqrt(14.1875)) / 7.75
    = 0.062370, R_q = 0.25 (1 - phi/2) / (1 - phi) = 0.258315, R = 0.75 + R_q = 1.008315 (against 1.158312 for one
    server four times slower)."""
    r = pool_response(1.0, 4.0, 3.0, 2.0)
    phi = (4.25 - math.sqrt(4.25**2 - 4.0 * 3.875 * 0.25)) / 7.75
    queue = 0.25 * (1.0 - phi / 2.0) / (1.0 - phi)
    assert r == pytest.approx(0.75 + queue, rel=1e-12)
    assert r == pytest.approx(1.008315, abs=1e-6)
    lam = 2.0 / (r + 3.0)
    assert lam * 0.25 * 0.5 == pytest.approx(phi, rel=1e-12)                 # phi = lambda D (N - 1) / N


def test_the_pool_saturates_at_servers_over_service():
    """Many requests: throughput N / (R + Z) tends to the pool's capacity c / S = 4 / s, and a request alone
    spends exactly its own service (no queue)."""
    n = 1e5
    r = pool_response(1.0, 4.0, 3.0, n)
    assert n / (r + 3.0) == pytest.approx(4.0, rel=1e-4)
    assert pool_response(1.0, 4.0, 3.0, 1.0) == pytest.approx(1.0, rel=1e-12)
    assert pool_response(0.5, 40.0, 6.0, 400.0) < 0.55    # 40 servers at 60 % load: almost no queue


def test_attention_dp_service_rises_from_the_lone_prompt_with_the_ranks_utilization():
    """lone = 0.2 s, full (4 prompts) = 0.5 s, one worker of 4 ranks, one request (no queue: R = S), Z = 1.8 s:
    S = 0.2 + 0.3 U, U = S / (4 (S + 1.8)), i.e. 4 S^2 + 6.1 S - 1.44 = 0, S = (-6.1 + sqrt(60.25)) / 8 = 0.207763."""
    own, response = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 1.0)
    assert own == pytest.approx((-6.1 + math.sqrt(60.25)) / 8.0, rel=1e-8)
    assert response == pytest.approx(own, rel=1e-9)
    busy, _ = prefill_pool(0.2, 0.5, 4.0, 1.0, 1.8, 1e4)          # saturated: every rank busy
    assert busy == pytest.approx(0.5, rel=1e-6)
    plain, r = prefill_pool(0.2, 0.5, 1.0, 3.0, 1.8, 10.0)       # no attention DP: the full iteration
    assert plain == 0.5 and r == pool_response(0.5, 3.0, 1.8, 10.0)


def test_first_token_waits_for_the_boundary_emits_and_pays_the_overlap_step():
    from types import SimpleNamespace

    import numpy as np

    from fastmodel.registry.lm import COLUMN_INDEX as C

    decode = np.zeros(max(C.values()) + 1)
    decode[C["overlap_step"]] = 1.0
    rec = SimpleNamespace(decode=decode, decode_workers=4)
    assert first_token_steps(rec, 1.0) == 2.0      # alone: the emitting iteration + the overlap step
    assert first_token_steps(rec, 4.0) == 2.0      # one request per decode worker: still alone on its worker
    assert first_token_steps(rec, 8.0) == 3.0      # others running on it: + the wait for the iteration boundary
    decode[C["overlap_step"]] = 0.0
    assert first_token_steps(rec, 8.0) == 2.0


def test_vllm_decode_worker_adds_the_load_step_and_the_step_scheduled_ahead():
    """docs/model_serving.md S43, by hand. vLLM 0.18 (async scheduling, o = 1), others running on the decode worker
    (w = 1): the load is issued in step k and reported at its end; step k + 1 was scheduled before that report;
    the last prompt token is recomputed in step k + 2, which emits the first token: w + 1 + o + w (1 + o) = 5
    steps against TensorRT-LLM's 3. vLLM 0.12 (o = 0): 1 + 1 + 0 + 1 = 3. An idle decode worker (w = 0): no
    handoff iteration is priced, 1 + o."""
    from types import SimpleNamespace

    import numpy as np

    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.disagg import handoff_steps

    decode = np.zeros(max(C.values()) + 1)
    decode[C["overlap_step"]] = 1.0
    vllm = SimpleNamespace(decode=decode, decode_workers=4, raw={"framework": "vLLM 0.18.0, disaggregated"})
    trt = SimpleNamespace(decode=decode, decode_workers=4, raw={"framework": "TensorRT-LLM 1.3.0rc5"})
    assert first_token_steps(vllm, 8.0) == 5.0
    assert first_token_steps(trt, 8.0) == 3.0
    assert first_token_steps(vllm, 4.0) == 2.0            # alone on its decode worker
    assert first_token_steps(SimpleNamespace(decode=decode, decode_workers=4, raw={}), 8.0) == 3.0   # unknown
    decode[C["overlap_step"]] = 0.0
    assert first_token_steps(vllm, 8.0) == 3.0
    assert handoff_steps("sglang", 1.0, 1.0) == 0.0
    assert list(handoff_steps("vllm", 1.0, np.array([0.0, 1.0]))) == [0.0, 2.0]


def test_a_failed_lone_prompt_prefill_fails_the_record(monkeypatch):
    """The lone-prompt prefill (one prompt in the iteration, the prefill pool's lower service time) is the second
    table evaluate_disagg reads: a configuration that fails there takes that status, not "ok" with a NaN ttft."""
    from pathlib import Path

    import numpy as np

    import fastmodel.serve.api as api
    from fastmodel.registry.serve import SERVE_STATUS_NAMES
    from fastmodel.serve.disagg import DisaggRecord, evaluate_disagg
    from fastmodel.serve.records import read_serve_records

    data = Path(__file__).resolve().parents[1] / "data" / "serve_dev_disagg.jsonl"
    record = next(r for r in read_serve_records(data, refused=[]) if isinstance(r, DisaggRecord))
    assert evaluate_disagg([record])[0]["status"] == "ok"
    failed = next(code for code, name in enumerate(SERVE_STATUS_NAMES) if code and name != "ok")
    calls, table = [], api.evaluate_table

    def lone_fails(params):
        out, status = table(params)
        calls.append(len(calls))
        if len(calls) == 2:
            out, status = np.full_like(out, np.nan), np.full_like(status, failed)
        return out, status

    monkeypatch.setattr(api, "evaluate_table", lone_fails)
    assert evaluate_disagg([record]) == [{"status": SERVE_STATUS_NAMES[failed]}]


def test_limiting_pool_is_the_prefill_pool_beyond_its_saturation_population():
    """docs/model_serving.md S43, by hand: S = 0.275 s on c = 5 prefill servers, t_kv = 0.012 s, O x TPOT = 25.7 s:
    N* = 5 x (0.275 + 0.012 + 25.7) / 0.275 = 472.5. At 528 in flight the pool's capacity c / S = 18.2 req/s is
    below the cycle's N / (S + Z) = 20.3 req/s: ``prefill``, though decode is the largest share of the cycle; at
    400 in flight (below N*) the cycle sets the throughput: ``decode``. KV room short of N: ``decode`` first."""
    from fastmodel.serve.disagg import limiting_pool

    assert 5 * (0.275 + 0.012 + 25.7) / 0.275 == pytest.approx(472.5, abs=0.1)
    assert limiting_pool(3.75, 0.012, 25.7, 528, 704, 0.275, 5) == "prefill"
    assert limiting_pool(0.40, 0.012, 25.7, 400, 704, 0.275, 5) == "decode"
    assert limiting_pool(3.75, 0.012, 25.7, 528, 500, 0.275, 5) == "decode"


def test_limiting_pool_is_the_largest_share_of_the_cycle_unless_the_decode_kv_room_is_full():
    """§S40: with N <= room, the stage with the largest term of R + t_kv + O x TPOT; with N > room, decode."""
    from fastmodel.serve.disagg import limiting_pool

    assert limiting_pool(0.30, 0.01, 0.20, 16, 100) == "prefill"
    assert limiting_pool(0.05, 0.01, 5.85, 16, 100) == "decode"
    assert limiting_pool(0.05, 0.10, 0.08, 16, 100) == "kv transfer"
    assert limiting_pool(0.30, 0.01, 0.20, 101, 100) == "decode"


DISAGG = Path(__file__).resolve().parents[1] / "data" / "serve_dev_disagg.jsonl"


def _first_disagg(n: int) -> list[str]:
    return DISAGG.read_text().splitlines()[:n]


def test_cli_serve_on_disaggregated_records_equals_validates_prediction(tmp_path):
    """``serve RECORDS`` evaluates a disaggregated record through its two pools: the TTFT, TPOT and throughput
    validate scores (``fastmodel.serve.validate.rows``), per GPU over the deployment's GPUs, and its limiting pool."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.serve.records import read_serve_records
    from fastmodel.serve.validate import rows

    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(_first_disagg(3)) + "\n")
    result = CliRunner().invoke(main, ["serve", str(path), "--json"])
    assert result.exit_code == 0, result.output
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    scored = rows(read_serve_records(path, []))
    assert len(printed) == len(scored) == 3
    for line, row in zip(printed, scored):
        assert line["id"] == row["id"] and line["mode"] == "disagg" and line["status"] == "ok"
        assert line["ttft"] == pytest.approx(row["predicted_ttft_s"], rel=1e-12)
        assert line["tpot"] == pytest.approx(row["predicted_tpot_s"], rel=1e-12)
        gpus = json.loads(next(x for x in _first_disagg(3) if row["id"] in x))["disagg"]["total_gpus"]
        assert line["output_tokens_per_s_per_gpu"] == pytest.approx(line["output_tokens_per_s"] / gpus, rel=1e-12)
        assert line["limiting_pool"] in ("prefill", "kv transfer", "decode")
    text = CliRunner().invoke(main, ["serve", str(path)]).stdout
    assert text.count("limiting pool: ") == 3 and "disaggregated, 1 prefill x 4 GPUs + 4 decode x 8 GPUs" in text


def test_cli_batch_writes_a_row_per_disaggregated_record_and_a_status_row_for_a_bad_block(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    lines = _first_disagg(2)
    bad = json.loads(lines[0])
    bad["id"] = "bad"
    bad["disagg"]["total_gpus"] = 35
    bad["system"]["n_gpus"] = 35
    path, out = tmp_path / "d.jsonl", tmp_path / "d.csv"
    path.write_text("\n".join([*lines, json.dumps(bad)]) + "\n")
    result = CliRunner().invoke(main, ["batch", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    import csv

    table = list(csv.DictReader(out.open()))
    assert [r["status"] for r in table[:2]] == ["ok", "ok"] and all(float(r["ttft"]) > 0 for r in table[:2])
    assert table[0]["limiting_pool"] and float(table[0]["tpot"]) > 0
    assert table[2]["status"].startswith("error: ") and "disagg.total_gpus: 35 but the pools use 36 GPUs" in \
        table[2]["status"]
    one = CliRunner().invoke(main, ["serve", str(path)])      # serve: the bad block is one line, exit 2
    assert one.exit_code == 2 and len(one.output.strip().splitlines()) == 1
    assert ":3: disagg.total_gpus: 35" in one.output


def test_the_closed_loop_pieces_take_floats_and_arrays_alike():
    """decode_room, closed_loop, token_steps and pool_response on arrays equal their scalar calls (by hand: 10 GB of
    KV room, 1 MB per token x 2048 tokens: 4 requests a rank, x 2 ranks; R = 1, Z = 3, 4 of 6 requests running:
    lambda = 1 per second, TTFT = 1 + 0.5 + 3 x 0.01 + 2 / 1 = 3.53 s)."""
    import numpy as np

    from fastmodel.serve.disagg import closed_loop, decode_room, token_steps

    assert decode_room(10e9, 1e6, 2048, 2) == 8.0
    lam, ttft = closed_loop(1.0, 3.0, 0.5, 3.0, 0.01, 6.0, 4.0)
    assert (lam, ttft) == (pytest.approx(1.0), pytest.approx(3.53, rel=1e-12))
    assert token_steps("vllm", 1.0, 1.0) == 5.0 and token_steps("trtllm", 1.0, 1.0) == 3.0
    grid = np.array([1.0, 2.0, 4.0])
    np.testing.assert_array_equal(pool_response(1.0, grid, 3.0, 2.0), [pool_response(1.0, c, 3.0, 2.0) for c in grid])


def test_the_search_pools_use_the_records_closed_loop(monkeypatch):
    """Review: search_disagg duplicated evaluate_disagg's math; both now call one closed loop (disagg.py)."""
    import numpy as np

    import fastmodel.serve.disagg as disagg
    from fastmodel.serve.search_disagg import disagg_grid

    calls = []
    for name in ("closed_loop", "pool_response", "decode_room", "kv_transfer_seconds", "token_steps"):
        real = getattr(disagg, name)
        monkeypatch.setattr(disagg, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    _, arrays = disagg_grid("llama3.1-8b", "H100", engines=["trtllm"], precisions=["fp8"], gpus=4,
                            concurrency=[8], input_len=1024, output_len=256, hbm=80 * 2**30)
    assert set(calls) == {"closed_loop", "pool_response", "decode_room", "kv_transfer_seconds", "token_steps"}
    assert np.isfinite(arrays["ttft"]).any()


def test_run_and_evaluate_record_answer_a_disaggregated_record(tmp_path):
    """Coverage walk (issue 26, "every run answered"): ``fastmodel run -m`` and ``fastmodel.evaluate_record`` of a
    disaggregated record refused it (``serve.mode``: "not one kernel configuration") while ``serve`` and ``batch``
    answered it. Both now give the two-pool answer ``serve RECORDS --json`` prints, value for value, with its
    limiting pool; a disaggregated record with a calibration is still refused."""
    from click.testing import CliRunner

    import fastmodel
    from fastmodel.cli import main
    from fastmodel.errors import SpecError

    line = _first_disagg(1)[0]
    record = json.loads(line)
    path = tmp_path / "d.jsonl"
    path.write_text(line + "\n")
    served = json.loads(CliRunner().invoke(main, ["serve", str(path), "--json"]).stdout)
    one = tmp_path / "d.json"
    one.write_text(line)
    result = CliRunner().invoke(main, ["run", "-m", str(one), "--json"])
    assert result.exit_code == 0, result.output
    ran = json.loads(result.stdout)
    ds = fastmodel.evaluate_record(record)
    assert ran["status"] == served["status"] == ds.attrs["status"] == "ok"
    assert ran["mode"] == ds.attrs["mode"] == "disagg"
    assert ran["limiting_pool"] == served["limiting_pool"] == ds.attrs["limiting_pool"]
    for key in ("ttft", "tpot", "e2e_latency", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "batch_size"):
        assert ran[key] == served[key] == float(ds[key]), key
    assert ds.ttft.attrs["units"] == "s" and ds.decode_room.attrs["units"] == "requests"
    text = CliRunner().invoke(main, ["run", "-m", str(one)]).stdout
    assert "disaggregated, 1 prefill x 4 GPUs + 4 decode x 8 GPUs" in text and "limiting pool: " in text
    with pytest.raises(SpecError, match="calibration: applies to training runs"):
        fastmodel.evaluate_record(record, calibration={"x": 1})


def test_a_disaggregated_deployment_whose_pools_cannot_hold_one_request_is_no_kv_room():
    """Coverage walk (docs/model_serving.md S55): a disaggregated record whose decode pool has KV room for no
    request (here Kimi-K2.5 in BF16 on L40S: about 1 T parameters x 2 bytes over 8 GPUs of 48 GB, weights alone
    over the HBM) was answered "ok" with a TTFT and TPOT, since both pools run at a static batch, whose kernel
    reports fits_memory rather than a status. It is now ``no_kv_room``, as the same load on one aggregated instance
    (a closed loop, concurrency) is; the dev record it is built from stays ok."""
    import fastmodel

    record = json.loads(_first_disagg(1)[0])
    assert fastmodel.evaluate_record(record).attrs["status"] == "ok"
    record["system"] = {"gpu": "L40S", "n_gpus": record["system"]["n_gpus"]}
    record["serve"]["precision"] = "bf16"
    ds = fastmodel.evaluate_record(record)
    assert ds.attrs["status"] == "no_kv_room" and math.isnan(float(ds.ttft)) and ds.attrs["limiting_pool"] == ""
    from fastmodel.serve.api import evaluate

    layout = record["disagg"]["decode"]
    alone = evaluate("kimi-k2", "L40S", tp=layout["tp"], ep=layout["ep"], concurrency=1, precision="bf16")
    assert alone["status"] == "no_kv_room"
