"""The disaggregated points of the SLO search (``fastmodel serve --search --mode disagg``; docs/model_serving.md
§S17): prefill and decode worker pools of one GPU type, the steady state of §S16/§S30 on whole arrays.

The pools' grid is bounded: each worker is TP only (``pp = 1``, ``attention_dp = 1``, its experts split by TP),
``prefill_tp``, ``prefill_workers``, ``decode_tp`` and ``decode_workers`` are powers of two up to the GPU budget,
and a point whose pools use more GPUs than the budget (``prefill_workers x prefill_tp + decode_workers x
decode_tp > gpus``) keeps its place with status ``pools_over_budget``. The workers are a handful of kernel
configurations (a prefill worker per ``prefill_tp``, a decode worker per ``decode_tp`` and requests per worker);
the closed loop is ``fastmodel.serve.disagg.evaluate_disagg``'s in the steady state (no start wave,
``client_rounds = 0``) with one attention group per worker: the prefill pool's ``prefill_workers`` servers by
Seidmann's approximation (``pool_response``), the KV transfer over NVLink when both pools fit the device's
NVLink domain (``gpus_per_node``) else over the NIC, TTFT = R + t_kv + (w + 1 + o + h) TPOT + (N - N_r) / lambda
(``h``: the engine's handoff iterations, §S43). Each of those terms is ``fastmodel.serve.disagg``'s own function
(``kv_transfer_seconds``, ``decode_room``, ``pool_response``, ``token_steps``, ``closed_loop``) called on whole arrays.
``tests/serve/test_serve_search_axes.py`` checks a point against ``evaluate_disagg`` of the same deployment.
"""

from __future__ import annotations

import numpy as np

from fastmodel.registry.lm import COLUMN_INDEX as C

POOL_DIMS = ("prefill_tp", "prefill_workers", "decode_tp", "decode_workers")
#: result arrays of a disaggregated point (dataset variables ``disagg_<name>``)
RESULTS = ("ttft", "tpot", "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu", "memory_per_device")


def _workers(base: np.ndarray, tps, batches, output_len: int):
    """(results, status) of static-batch workers: one configuration per (tp, batch) pair."""
    from fastmodel.serve.api import evaluate_table

    table = np.repeat(base[:, None], len(tps), axis=1)
    table[C["tp"]] = tps
    table[C["n_gpus"]] = tps
    table[C["batch_size"]] = batches
    table[C["output_len"]] = output_len
    table[C["seq_len"]] = base[C["input_len"]] + output_len
    return evaluate_table(table)


def disagg_point_arrays(base: np.ndarray, powers: np.ndarray, concurrency: np.ndarray, gpus: int,
                        engine: str | None = None) -> dict:
    """The arrays (``prefill_tp``, ``prefill_workers``, ``decode_tp``, ``decode_workers``, concurrency) of one
    engine and precision: ``base`` a static-batch column vector (engine profile, precision, lengths); ``engine``
    its key, for the decode worker's handoff iterations (``disagg.handoff_steps``, §S43)."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX as R
    from fastmodel.registry.serve import SERVE_STATUS
    from fastmodel.serve import disagg

    p = powers.astype(float)
    n = concurrency.astype(float)
    inp, out = base[C["input_len"]], base[C["output_len"]]
    prefill = base.copy()
    prefill[C["spec_tokens"]] = 0.0                   # the prefill pool does not speculate (S18)
    pre, pre_status = _workers(prefill, p, np.ones_like(p), 2)
    # decode workers: tp x per-worker batch (requests per worker: max(1, round(N / workers)))
    per = np.maximum(1.0, np.round(n[None, :] / p[:, None]))                  # (workers, N)
    batches, inverse = np.unique(per, return_inverse=True)
    tps = np.repeat(p, batches.size)
    dec, dec_status = _workers(base, tps, np.tile(batches, p.size), int(out))
    k = batches.size
    pick = (np.arange(p.size)[:, None, None] * k + inverse.reshape(per.shape)[None, :, :])   # (dtp, dw, N)
    tpot = dec[R["tpot"]][pick]
    sl = (slice(None), None, None, None, None)
    full = pre[R["ttft"]][sl]                                                  # prefill of one prompt, by prefill_tp
    workers = p[None, :, None, None, None]
    dworkers = p[None, None, None, :, None]
    used = p[:, None, None, None, None] * workers + p[None, None, :, None, None] * dworkers
    t_kv = disagg.kv_transfer_seconds(base, p[sl], used <= base[C["gpus_per_node"]])
    tpot = tpot[None, None]
    think = t_kv + out * tpot
    room = disagg.decode_room(dec[R["kv_cache_capacity"]][pick], dec[R["kv_bytes_per_token"]][pick], inp + out,
                              dworkers)
    running = np.maximum(1.0, np.minimum(n, room))
    response = disagg.pool_response(full, workers, think, running)            # one attention group per worker
    wait = (running / dworkers > 1.0).astype(float)
    # the first token's decode iterations, in TPOTs (a speculating iteration lasts step_tokens TPOTs, S18)
    steps = disagg.token_steps(engine, base[C["overlap_step"]], wait) * disagg.step_tokens(base)
    lam, ttft = disagg.closed_loop(response, think, t_kv, steps, tpot, n, running)
    status = np.maximum(pre_status[sl], dec_status[pick][None, None]).astype(np.int8)
    status = np.where(used > gpus, np.int8(SERVE_STATUS["pools_over_budget"]), status)
    fits = (pre[R["fits_memory"]][sl] > 0.5) & (dec[R["fits_memory"]][pick][None, None] > 0.5)
    memory = np.maximum(pre[R["memory_per_device"]][sl], dec[R["memory_per_device"]][pick][None, None])
    shape = status.shape
    values = {"ttft": ttft, "tpot": tpot, "output_tokens_per_s_per_user": 1.0 / tpot,
              "output_tokens_per_s_per_gpu": lam * out / used, "memory_per_device": memory}
    values = {k: np.broadcast_to(v, shape) for k, v in values.items()}
    bad = status != 0
    values = {k: np.where(bad, np.nan, v) for k, v in values.items()}
    return {**values, "status": status, "fits_memory": np.broadcast_to(fits, shape) & ~bad}


def disagg_grid(model, device: str, *, engines, precisions, gpus: int, concurrency, input_len: int,
                output_len: int, hbm: float, spec_tokens=(0,), spec_acceptance: float = 0.0) -> tuple[dict, dict]:
    """(coords, arrays) of the disaggregated grid: dims engine, precision, spec_tokens (the decode pool's draft
    tokens at ``spec_acceptance``, docs/model_serving.md S18), the four pool dims, batch_size (the concurrency of
    the deployment)."""
    from fastmodel.serve.api import columns
    from fastmodel.serve.profiles import engine_choice, profile_columns
    from fastmodel.serve.profiles_device import reported_name
    from fastmodel.spec.devices import device_vendor

    powers = np.array([2**k for k in range(12) if 2**k <= gpus], dtype=np.int64)
    conc = np.asarray(concurrency, dtype=np.int64)
    parts = []
    for label in engines:
        engine, version, _ = engine_choice(label)
        row = []
        for precision in precisions:
            drafts = []
            for k in spec_tokens:
                base = columns(model, device, precision=precision, batch_size=1, input_len=input_len,
                               output_len=output_len, client_rounds=0, spec_tokens=int(k),
                               spec_acceptance=spec_acceptance if k else 0.0,
                               **profile_columns(engine, version, hbm, device_vendor(device), reported_name(device)))
                with np.errstate(all="ignore"):
                    drafts.append(disagg_point_arrays(base, powers, conc, gpus, engine))
            row.append(drafts)
        parts.append(row)
    arrays = {name: np.stack([np.stack([np.stack([part[name] for part in drafts]) for drafts in row])
                              for row in parts])
              for name in (*RESULTS, "status", "fits_memory")}
    coords = {"engine": list(engines), "precision": list(precisions),
              "spec_tokens": np.asarray(spec_tokens, dtype=np.int64), **{d: powers for d in POOL_DIMS},
              "batch_size": conc}
    return coords, arrays
