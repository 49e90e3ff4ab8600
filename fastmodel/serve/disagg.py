"""Disaggregated prefill/decode (``serve.mode = "disagg"``, SERVE_RUNS.md ``disagg`` block): two worker pools,
the KV cache moved between them, a closed loop of ``concurrency`` requests (docs/model_serving.md §S16).

Each pool is one of the serving kernels' configurations (its own layout, on the record's GPU):

- a **prefill worker** runs prompts alone in their attention-DP group, up to ``attention_dp`` prompts per
  iteration: its prefill time runs from ``T_1`` (one prompt) to ``T_p`` (``attention_dp`` prompts) with the
  ranks' utilization (``prefill_pool``). The pool is ``workers x attention_dp`` parallel servers (§S30);
- the **KV transfer** of the prompt's cache, whole-model bytes per token x ``input_len``, sent by every GPU of
  the prefill worker at once over NVLink when the deployment fits one NVLink domain, else over each GPU's NIC,
  fully exposed (a conservative choice: Splitwise overlaps it layer by layer, serving_facts §4.3);
- a **decode worker** holds ``concurrency / workers`` requests and decodes them without prefills (the point of
  disaggregation): TPOT is the static decode step at that batch, averaged over the output tokens.

The loop closes by Little's law with Schweitzer's MVA, the pool's ``c`` servers by Seidmann's approximation (a
single server of ``D = S / c`` in tandem with a delay ``S - D``; ``pool_response``, §S30) whose service is
deterministic, as the aggregated prefill station's (every prompt has ``I`` tokens; ``kernels/serve/load.py``
``station_response``, §S61): ``R = S - D + R_q``, ``R_q = (D - phi D / 2) / (1 - phi)``,
``phi = lambda D (N - 1) / N``, ``lambda = N / (R + Z)`` with ``Z = t_kv + O x TPOT``, a quadratic in ``phi``
whose smaller root is closed-form, floored at the loop's asymptotic bound ``R >= max(S, N S / c - Z)`` (the residual
alone serves above ``c / S`` at small N; §S61 "The floor"). A fixed-length client (``serve.fixed_lengths``) makes service and delay constant: its
loop sits on its asymptotic bounds, ``R = max(S, N S / c - Z)`` (``deterministic_pool_response``, §S51).
TTFT = R + t_kv + the decode worker's first-token iterations (``first_token_steps``: the decode worker streams
the first token after the KV arrives, serving_facts §4.3; vLLM's pull-and-recompute handoff adds iterations,
``handoff_steps``, §S43); requests beyond the decode pool's KV room wait by Little's law; the client's start wave
is 1 / ``client_rounds`` of the mean (``with_start_wave``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fastmodel.kernels.serve.load import station_response
from fastmodel.kernels.serve.speculative import accepted_tokens
from fastmodel.registry.lm import COLUMN_INDEX as C

#: the prefill station's residual form as plain Python (floats or arrays; the kernels compile the same function)
_STATION = getattr(station_response, "py_func", station_response)
#: the tokens a speculative decode step emits (docs/model_serving.md S18), the kernels' function as plain Python
_ACCEPTED = getattr(accepted_tokens, "py_func", accepted_tokens)


def step_tokens(decode) -> float:
    """Tokens a decode worker's iteration emits per request (``decode``: its columns): ``accepted_tokens``, 1
    without speculative decoding (docs/model_serving.md S18). TPOT is the iteration over them, so an iteration
    lasts ``step_tokens x TPOT``: what the first token's iterations on the decode worker cost."""
    return float(_ACCEPTED(decode))


@dataclass(frozen=True)
class DisaggRecord:
    """A disaggregated record, lowered: the prefill and decode workers' column vectors and the pools.
    ``fixed_lengths``: the validated ``serve.fixed_lengths`` (record_schema ``ServeBlock``; a JSON boolean, absent
    false), the client that gives every request exactly its lengths (S32, S51)."""
    id: str
    prefill: np.ndarray
    decode: np.ndarray
    prefill_workers: int
    decode_workers: int
    concurrency: int
    domain_gpus: int
    total_gpus: int
    measured: dict
    source: str
    gpu: str
    notes: tuple[str, ...]
    raw: dict
    fixed_lengths: bool = False


def pool_record(data: dict, pool: str, batch: int, output_len: int) -> dict:
    """The aggregated record of one worker of ``pool`` (``prefill``/``decode``) at a static ``batch``."""
    layout = data["disagg"][pool]
    serve = data["serve"]
    one = {k: v for k, v in data.items() if k not in ("disagg", "serve", "measured", "deployment")}
    one["system"] = dict(data["system"], n_gpus=layout["tp"] * layout.get("attention_dp", 1) * layout.get("pp", 1))
    one["serve"] = {"tp": layout["tp"], "pp": layout.get("pp", 1), "ep": layout.get("ep") or 1,
                    "attention_dp": layout.get("attention_dp", 1), "precision": serve.get("precision", "bf16"),
                    "input_len": serve["input_len"], "output_len": output_len, "batch_size": batch}
    for key in ("moe_tp",):
        if layout.get(key):
            one["serve"][key] = layout[key]
    if serve.get("kv_precision"):
        one["serve"]["kv_precision"] = serve["kv_precision"]
    if pool == "decode" and serve.get("moe_a2a"):     # low-latency kernels are the decode pool's (S39)
        one["serve"]["moe_a2a"] = serve["moe_a2a"]
    if pool == "decode" and serve.get("spec_tokens"):   # the decode pool speculates, the prefill pool does not (S18)
        one["serve"].update({k: serve[k] for k in ("spec_tokens", "spec_acceptance") if k in serve})
    return one


def lower_disagg(data: dict, record, source: str | None) -> DisaggRecord:
    """Both workers of a validated disaggregated record (``record``: its ``ServeRecordSchema``)."""
    from fastmodel.serve.records import lower_serve_record

    pools = record.disagg
    n = record.serve.concurrency
    adp = pools.decode.attention_dp
    per_worker = max(adp, round(n / pools.decode.workers / adp) * adp)
    prefill = lower_serve_record(pool_record(data, "prefill", pools.prefill.attention_dp, 2), source)
    decode = lower_serve_record(pool_record(data, "decode", per_worker, record.serve.output_len), source)
    system = data["system"]
    domain = system.get("nvlink_domain_size") or system.get("gpus_per_node") or 8
    notes = tuple(dict.fromkeys(prefill.notes + decode.notes))
    measured = data.get("measured") if isinstance(data.get("measured"), dict) else {}
    return DisaggRecord(str(data.get("id", "")), prefill.columns, decode.columns, pools.prefill.workers,
                        pools.decode.workers, n, int(domain), pools.total_gpus, dict(measured),
                        str(data.get("source", "")), prefill.gpu, notes, data,
                        bool(record.serve.fixed_lengths))


def kv_bytes_per_prompt_token(col: np.ndarray) -> float:
    """Whole-model KV bytes of one token: 2 L g d (GQA) or L (kv_lora_rank + rope) (MLA), x bytes per element."""
    if col[C["mla"]] > 0:
        return col[C["layers"]] * (col[C["kv_lora_rank"]] + col[C["qk_rope_head_dim"]]) * col[C["kv_bytes"]]
    return 2.0 * col[C["layers"]] * col[C["kv_heads"]] * col[C["head_dim"]] * col[C["kv_bytes"]]


def kv_transfer_seconds(col: np.ndarray, senders, nvlink):
    """Seconds to move one prompt's KV cache (floats or arrays): ``senders`` GPUs each send their share at once,
    over NVLink where ``nvlink`` (the deployment fits the NVLink domain), else over each GPU's NIC. The one form
    :func:`kv_transfer_time` and the SLO search's pools (``search_disagg``) use."""
    bw = np.where(nvlink, col[C["intra_bw"]] * col[C["intra_eff"]], col[C["inter_bw"]] * col[C["inter_eff"]])
    return kv_bytes_per_prompt_token(col) * col[C["input_len"]] / (bw * senders)


def kv_transfer_time(rec: DisaggRecord) -> float:
    """Seconds to move one prompt's KV cache from its prefill worker (every GPU sends its share at once)."""
    col = rec.prefill
    gpus = col[C["tp"]] * col[C["attention_dp"]] * col[C["pp"]]
    senders = gpus / col[C["attention_dp"]]          # a prompt lives in one attention-DP group
    return float(kv_transfer_seconds(col, senders, rec.total_gpus <= rec.domain_gpus))


def wave_batches(records: list[DisaggRecord], running: list[float]) -> tuple[list[float], np.ndarray]:
    """(mean iterations, prefill-worker columns at the wave's static batch) of each record's start wave: the first
    N_r requests arrive together, P = ceil(N_r / (workers x attention_dp)) prompts per attention group, which the
    worker prefills first come first served under its token budget (``kernels/serve/load.wave_iterations``)."""
    from fastmodel.kernels.serve.load import wave_iterations

    means, columns = [], []
    for rec, n in zip(records, running):
        col = rec.prefill.copy()
        adp = col[C["attention_dp"]]
        prompts = math.ceil(n / (rec.prefill_workers * adp))
        mean, tokens = wave_iterations(float(prompts), col[C["input_len"]], col[C["max_num_tokens"]],
                                       col[C["chunked_prefill"]] > 0)
        col[C["batch_size"]] = max(1.0, round(tokens / col[C["input_len"]])) * adp
        means.append(mean)
        columns.append(col)
    return means, np.stack(columns, axis=1)


def with_start_wave(steady: float, rec: DisaggRecord, running: float, wave: float) -> float:
    """Mean TTFT with the client's start wave (docs/model_serving.md §S7 and §S16): ``wave`` (its mean first-token
    time) is 1 / ``client_rounds`` of the requests measured; one request alone has none."""
    rounds = float(rec.decode[C["client_rounds"]])
    if rounds <= 0.0 or running <= 1.0:
        return steady
    share = 1.0 / max(1.0, rounds)
    return (1.0 - share) * steady + share * wave


def pool_response(own: float, servers: float, think: float, running: float) -> float:
    """Mean time a prompt spends in the prefill pool (waiting + its own prefill ``own``) when ``running`` requests
    cycle between the pool and a delay ``think`` (KV transfer + decode) (docs/model_serving.md §S30, §S61):
    Seidmann's approximation of the ``servers`` parallel prefill servers, a single server of service
    ``D = own / servers`` in tandem with a pure delay ``own - D``, whose queue is the aggregated prefill station's
    (``kernels/serve/load.py`` ``station_response``: Schweitzer's MVA with deterministic service, the prompt in
    service half done): ``R_q = (D - phi D / 2) / (1 - phi)``, ``phi = lambda D (N - 1) / N``,
    ``lambda = N / (R_q + X)``, ``X = own - D + think``. With ``m = N - 1`` the balance ``phi (R_q + X) = m D`` is
    ``(X + D / 2) phi^2 - (D + X + m D) phi + m D = 0``, whose smaller root (in [0, 1): the quadratic is ``m D``
    >= 0 at 0 and ``-D / 2`` at 1) is taken without cancellation. One server (``servers = 1``) is the plain
    station; one request spends ``own``. The residual discounts the prompt in service even when the servers never
    idle, so at small N it alone falls below the closed loop's bound ``R >= N own / servers - think`` (throughput
    above ``servers / own``; N = 2, one server, no think: 1.707 against 2 service times, review9 #1): the response
    is at least §S51's asymptotic bound, ``deterministic_pool_response``. Floats or arrays (the SLO search's pools,
    ``search_disagg``, call it on whole grids). No prefill and no think time spend 0."""
    share = own / servers
    delay = own - share
    outside = think + delay
    ahead = share * (running - 1.0)
    b = share + outside + ahead
    root = b + np.sqrt(b * b - 4.0 * (outside + 0.5 * share) * ahead)
    phi = 2.0 * ahead / np.where(root > 0.0, root, 1.0)      # root 0: no prefill, no think time, nobody ahead
    return np.maximum(delay + _STATION(share, share, phi), deterministic_pool_response(own, servers, think, running))


def deterministic_pool_response(own: float, servers: float, think: float, running: float):
    """Mean time a prompt spends in the prefill pool when every request has the same lengths
    (``serve.fixed_lengths``): ``servers`` parallel servers of constant service ``own`` and a constant delay
    ``think`` in a closed loop of ``running`` requests (docs/model_serving.md §S51). Once the client's start wave
    has passed, the loop sits on its asymptotic bounds (Lazowska et al. 1984, "Quantitative System Performance"
    §5.2: X = min(N / (S + Z), c / S)): below ``N* = c (S + Z) / S`` no prompt waits (``R = S``), above it the
    servers never idle and ``R = N S / c - Z``. Floats or arrays."""
    return np.maximum(own, running * own / servers - think)


def lone_prompt(col: np.ndarray) -> np.ndarray:
    """The prefill worker's columns with one prompt in its iteration (the other attention-DP ranks idle)."""
    one = col.copy()
    one[C["batch_size"]] = 1.0
    return one


#: fixed-point passes over the prefill worker's busy attention-DP ranks (they stop when the service moves < 1e-9 s)
BUSY_PASSES = 50


def prefill_pool(lone: float, full: float, adp: float, workers: float, think: float, running: float,
                 fixed: bool = False):
    """(own service, pool response) of a prompt at a prefill pool of ``workers`` workers of ``adp`` attention-DP
    ranks (docs/model_serving.md §S30). Every rank runs every iteration, an idle one a dummy request (TensorRT-LLM
    ``PyExecutor._pad_attention_dp_dummy_request``), so an iteration carries the prompts of the busy ranks: its time
    runs from ``lone`` (one prompt) to ``full`` (``adp`` prompts), linear in the prompts. A prompt finds on average
    ``(adp - 1) U`` of the other ranks busy, ``U = lambda S / (workers adp)`` the ranks' utilization, so
    ``S = lone + U (full - lone)``, solved with the pool's response by a fixed point in ``S``. ``fixed``: a
    fixed-length client, whose pool is the deterministic one (``deterministic_pool_response``, §S51)."""
    respond = deterministic_pool_response if fixed else pool_response
    servers = workers * adp
    own = lone if adp > 1.0 else full
    response = respond(own, servers, think, running)
    for _ in range(BUSY_PASSES if adp > 1.0 else 0):
        busy = min(1.0, running / (response + think) * own / servers)
        new = lone + busy * (full - lone)
        response = respond(new, servers, think, running)
        moved = abs(new - own)
        own = new
        if moved < 1e-9:
            break
    return own, response


#: engines whose decode worker pulls the prompt's KV in an iteration of its own and then recomputes the last prompt
#: token to emit the first one (docs/model_serving.md §S43): vLLM's NixlConnector (``vllm@v0.18.0``
#: ``v1/core/sched/scheduler.py:2012-2048``, ``v1/worker/kv_connector_model_runner_mixin.py:95-120``)
PULL_RECOMPUTE_ENGINES = ("vllm",)


def handoff_steps(engine: str | None, overlap, wait):
    """Decode iterations a pulled KV handoff adds before the first token (docs/model_serving.md §S43; floats or
    arrays): on a pull-and-recompute engine (``PULL_RECOMPUTE_ENGINES``) whose decode worker runs other requests
    (``wait`` = 1), the iteration that issues the load and reports it done at its end, plus, under a scheduler
    that runs one step ahead (``overlap`` = 1: vLLM's batch queue), the iteration already scheduled when that
    report is read: ``wait (1 + overlap)``. An idle decode worker (``wait`` = 0) runs those steps without a
    forward pass (not priced). Other engines: 0 (TensorRT-LLM answers with the context phase's
    ``first_gen_tokens``; SGLang's decode batch takes the prefill's ``transferred_output_id``)."""
    return wait * (1.0 + overlap) if engine in PULL_RECOMPUTE_ENGINES else 0.0 * wait


def record_engine(rec) -> str | None:
    """The engine key of a disaggregated record's ``framework`` (``profiles.parse_framework``), None if unknown."""
    from fastmodel.serve.profiles import parse_framework

    raw = getattr(rec, "raw", None) or {}
    return parse_framework(raw.get("framework"))[0]


def token_steps(engine: str | None, overlap, wait):
    """Decode iterations from the KV's arrival to the first token (floats or arrays): ``wait`` (1 when other
    requests run on the decode worker), the emitting iteration, ``overlap`` and the engine's handoff iterations.
    The one form :func:`first_token_steps` and the SLO search's pools use."""
    return wait + 1.0 + overlap + handoff_steps(engine, overlap, wait)


def decode_room(capacity, kv_per_token, tokens, groups):
    """Requests a decode pool holds (floats or arrays): whole requests of ``tokens`` (input + output, the KV the
    decode kernel reserves) in one group's ``capacity``, times the ``groups`` (attention-DP ranks x workers)."""
    return np.floor(capacity / (kv_per_token * tokens)) * groups


def closed_loop(response, think, t_kv, steps, tpot, n, running):
    """(throughput lambda, mean TTFT) of the steady closed loop (floats or arrays; module docstring): Little's law
    ``lambda = N_r / (R + Z)``, ``TTFT = R + t_kv + steps x TPOT + (N - N_r) / lambda`` (the requests beyond the
    decode room wait by Little's law). The one form ``evaluate_disagg`` and the SLO search's pools use."""
    lam = running / (response + think)
    return lam, response + t_kv + steps * tpot + (n - running) / lam


def first_token_steps(rec: DisaggRecord, running: float) -> float:
    """Decode iterations from the KV's arrival to the first token the client sees (docs/model_serving.md §S30,
    §S43): the wait for the decode worker's next iteration boundary when other requests run on it (``running``
    over the decode workers above 1, else 0; §S7's ``w``), the iteration that emits the token, one more when its
    scheduler overlaps (``overlap_step``, §S7's ``o``), and the engine's handoff iterations (``handoff_steps``)."""
    wait = 1.0 if running / rec.decode_workers > 1.0 else 0.0
    overlap = float(rec.decode[C["overlap_step"]])
    return token_steps(record_engine(rec), overlap, wait)


def first_token_tpots(rec: DisaggRecord, running: float) -> float:
    """The first token's decode-worker iterations (``first_token_steps``) in TPOTs: each iteration lasts
    ``step_tokens`` TPOTs when the decode pool speculates (S18; the same count of iterations as without it)."""
    return first_token_steps(rec, running) * step_tokens(rec.decode)


def limiting_pool(prefill: float, transfer: float, decode: float, running: float, room: float,
                  own: float = 0.0, servers: float = 1.0) -> str:
    """The stage that bounds a disaggregated deployment's closed loop (docs/model_serving.md §S40, §S43): ``decode``
    when the decode pool's KV room holds fewer requests than are in flight (the rest wait for a slot); ``prefill``
    when the requests in flight exceed the prefill pool's saturation population ``N* = c (S + Z) / S`` (asymptotic
    bounds, Lazowska et al. 1984, "Quantitative System Performance" §5.2: X <= min(N / (S + Z), c / S); ``own`` the
    prompt's service ``S``, ``servers`` the pool's ``c``, ``Z = t_kv + O x TPOT``), where the pool's capacity, not
    the cycle, sets the throughput; else the stage where a request spends the largest share of its cycle
    ``R + t_kv + O x TPOT`` (Little's law: the throughput is ``N`` over that cycle, so shortening the largest term
    raises it most): ``prefill`` (the pool's response, queueing included), ``kv transfer`` or ``decode``."""
    if running > room:
        return "decode"
    if own > 0.0 and running * own > servers * (own + transfer + decode):
        return "prefill"
    return max((prefill, "prefill"), (transfer, "kv transfer"), (decode, "decode"))[1]


def evaluate_disagg(records: list[DisaggRecord]) -> list[dict]:
    """ttft, tpot, throughput, status of each disaggregated record."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX as R
    from fastmodel.registry.serve import SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table

    if not records:
        return []
    pre, pre_status = evaluate_table(np.stack([r.prefill for r in records], axis=1))
    lone, lone_status = evaluate_table(np.stack([lone_prompt(r.prefill) for r in records], axis=1))
    dec, dec_status = evaluate_table(np.stack([r.decode for r in records], axis=1))
    results = []
    for i, rec in enumerate(records):
        status = int(pre_status[i]) or int(lone_status[i]) or int(dec_status[i])
        if status:
            results.append({"status": SERVE_STATUS_NAMES[status]})
            continue
        full = float(pre[R["ttft"], i])
        tpot = float(dec[R["tpot"], i])
        t_kv = kv_transfer_time(rec)
        out = rec.decode[C["output_len"]]
        think = t_kv + out * tpot
        n = float(rec.concurrency)
        # requests the decode pool can hold (KV at full length, as the decode kernel reserves it)
        room = float(decode_room(dec[R["kv_cache_capacity"], i], dec[R["kv_bytes_per_token"], i],
                                 rec.decode[C["input_len"]] + out, rec.decode[C["attention_dp"]] * rec.decode_workers))
        if room < 1.0 or pre[R["fits_memory"], i] < 0.5:     # a pool that cannot hold one request: as a closed loop
            results.append({"status": "no_kv_room"})          # of the aggregated kernels says it (§S55)
            continue
        running = max(1.0, min(n, room))
        own, response = prefill_pool(float(lone[R["ttft"], i]), full, rec.prefill[C["attention_dp"]],
                                     rec.prefill_workers, think, running, rec.fixed_lengths)
        response = float(response)
        lam, ttft = closed_loop(response, think, t_kv, first_token_tpots(rec, running), tpot, n, running)
        results.append({"status": "ok", "ttft": ttft, "tpot": tpot, "output_tokens_per_s": lam * out,
                        "output_tokens_per_s_per_gpu": lam * out / rec.total_gpus,
                        "kv_transfer_s": t_kv, "prefill_s": own, "prefill_response_s": response,
                        "decode_s": out * tpot, "batch_size": running, "decode_room": room,
                        "prefill_busy": lam * own / (rec.prefill_workers * rec.prefill[C["attention_dp"]]),
                        "limiting_pool": limiting_pool(response, t_kv, out * tpot, n, room, own,
                                                       rec.prefill_workers * rec.prefill[C["attention_dp"]]),
                        "naive_ttft": full, "naive_tpot": tpot})
    ok = [i for i, r in enumerate(results) if r["status"] == "ok"]
    if ok:
        means, table = wave_batches([records[i] for i in ok], [results[i]["batch_size"] for i in ok])
        waves, _ = evaluate_table(table)
        for j, i in enumerate(ok):
            r = results[i]
            first = first_token_tpots(records[i], 1.0) * r["tpot"]     # the wave finds no iteration to wait for
            wave = means[j] * float(waves[R["ttft"], j]) + r["kv_transfer_s"] + first
            r["ttft"] = with_start_wave(r["ttft"], records[i], r["batch_size"], wave)
    return results


def evaluate_records(records: list) -> list[tuple[str, dict, dict | None]]:
    """(status, results, pool) of each lowered serving record (``records.lower_any``), in order: an aggregated
    one through the serving kernels in one call (its ``SERVE_RESULTS`` by name; pool None), a disaggregated one
    through :func:`evaluate_disagg` (results: ``report.disagg_result``; pool: that function's dict, with
    ``limiting_pool``). What ``serve RECORDS`` and ``batch`` print and write."""
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table
    from fastmodel.serve.report import disagg_result

    single = [i for i, r in enumerate(records) if not isinstance(r, DisaggRecord)]
    pooled = [i for i, r in enumerate(records) if isinstance(r, DisaggRecord)]
    found: list = [None] * len(records)
    if single:
        out, status = evaluate_table(np.stack([records[i].columns for i in single], axis=1))
        for k, i in enumerate(single):
            found[i] = (SERVE_STATUS_NAMES[int(status[k])],
                        {r.name: float(out[v, k]) for v, r in enumerate(SERVE_RESULTS)}, None)
    for i, pool in zip(pooled, evaluate_disagg([records[i] for i in pooled])):
        found[i] = (pool["status"], disagg_result(records[i], pool), pool)
    return found
