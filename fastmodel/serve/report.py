"""Serving reports: one configuration's latency, throughput, memory and prefill/decode breakdown, as
``fastmodel serve`` and ``fastmodel run`` (of a serving record) print them."""

from __future__ import annotations

import math
from typing import Any

from fastmodel.analysis.run_report import RunReport

TIME_KEYS = ("ttft", "tpot", "e2e_latency")
RATE_KEYS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user")
MEMORY_KEYS = ("weight_memory", "kv_cache_memory", "activation_memory", "memory_per_device", "kv_cache_capacity")
BREAKDOWN = ("gemm", "attention", "memory_bound", "comm")


def json_record(label: str, status: str, result: dict) -> dict:
    """The JSON twin of :func:`render` (non-finite values as null)."""
    return {"id": label, "status": status, **{k: (v if math.isfinite(v) else None) for k, v in result.items()}}


def load_mode(columns) -> str:
    """The load mode of one configuration's serving columns, as the user names it: 'batch B', 'concurrency C'
    or 'max_throughput' (what a status's text names, e.g. no_kv_room under the actual load)."""
    from fastmodel.registry.lm import COLUMN_INDEX, LOAD_MODES

    code = int(columns[COLUMN_INDEX["load_mode"]])
    name = next(name for name, value in LOAD_MODES.items() if value == code)
    if name == "max_throughput":
        return name
    return f"{name} {columns[COLUMN_INDEX['batch_size']]:g}"   # batch_size: the batch, or the requests in flight


def status_message(status: str, columns=None) -> str:
    """The text of a serving status; with the configuration's ``columns``, ``ep_not_dividing`` and
    ``heads_not_divisible_by_tp`` name the field and the values that break it (kernels/serve/evaluate.py
    ``check``), else the registry's text."""
    from fastmodel.registry.serve import SERVE_STATUS, SERVE_STATUSES

    message = SERVE_STATUSES[SERVE_STATUS[status]].message
    if status not in ("ep_not_dividing", "heads_not_divisible_by_tp") or columns is None:
        return message
    from fastmodel.registry.lm import COLUMN_INDEX as C

    if status == "heads_not_divisible_by_tp":     # the kernel's rule: tp divides the query heads, and the KV heads
        tp, heads, kv = (float(columns[C[k]]) for k in ("tp", "heads", "kv_heads"))   # when there are more than tp
        which = f"{heads:g} query heads (model.heads)" if heads % tp else f"{kv:g} KV heads (model.kv_heads)"
        return f"serve.tp = {tp:g} does not divide the model's {which}, so its heads do not split over tp"

    ep, experts, tp, adp, moe_tp = (float(columns[C[k]]) for k in ("ep", "moe_experts", "tp", "attention_dp",
                                                                    "moe_tp"))
    field = f"serve.ep = {ep:g}"
    if experts <= 0.0:
        return f"{field} on a dense model (model.moe_experts = 0): a dense model has none to split; set ep 1"
    if experts % ep:
        return f"{field} does not divide the model's {experts:g} routed experts (model.moe_experts)"
    group = tp * adp
    if group % ep:
        return (f"{field} does not divide the instance's tp x attention_dp = {tp:g} x {adp:g} = {group:g} GPUs "
                "(serve.tp, serve.attention_dp)")
    return (f"serve.moe_tp x serve.ep = {moe_tp:g} x {ep:g} = {moe_tp * ep:g} must equal tp x attention_dp = "
            f"{tp:g} x {adp:g} = {group:g}")


def render(label: str, status: str, r: dict, mode: str | None = None, columns=None) -> str:
    """A serving report a person reads in ten seconds; ``mode`` (:func:`load_mode`) names the load in a status,
    ``columns`` (the configuration) lets a status name its values (:func:`status_message`)."""
    if status != "ok":
        under = f"{mode}: " if mode else ""
        return f"{label}: not evaluated ({status}: {under}{status_message(status, columns)})"
    lines = [f"{label}: batch {r['batch_size']:g} requests, {'fits' if r['fits_memory'] else 'does NOT fit'} "
             f"in memory"]
    lines.append(f"  ttft {1e3 * r['ttft']:,.2f} ms   tpot {1e3 * r['tpot']:,.3f} ms   "
                 f"e2e {r['e2e_latency']:,.3f} s")
    lines.append(f"  output tokens/s {r['output_tokens_per_s']:,.1f} per instance, "
                 f"{r['output_tokens_per_s_per_gpu']:,.1f} per GPU, {r['output_tokens_per_s_per_user']:,.1f} per user")
    lines.append("  memory per device: " + ", ".join(
        f"{k.replace('_memory', '').replace('memory_per_device', 'total')} {r[k] / 2**30:,.2f} GiB"
        for k in MEMORY_KEYS[:4]) + f"  (KV budget {r['kv_cache_capacity'] / 2**30:,.2f} GiB, "
        f"{r['kv_bytes_per_token'] / 1024:,.1f} KiB/token)")
    for phase, total in (("prefill", r["ttft"]), ("decode", r["e2e_latency"] - r["ttft"])):
        parts = [(k, r[f"{phase}_{k}"]) for k in BREAKDOWN]
        text = ", ".join(f"{k} {1e3 * v:,.2f} ms ({100 * v / total:.0f}%)" if total > 0 else f"{k} 0"
                         for k, v in parts)
        lines.append(f"  {phase}: {text}")
    if r["experts_touched"] > 0:
        lines.append(f"  experts read per MoE layer per decode step: {r['experts_touched']:.2f}")
    return "\n".join(lines)


#: the serving results a disaggregated deployment has (fastmodel.serve.disagg), then its own quantities
DISAGG_KEYS = ("ttft", "tpot", "e2e_latency", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
               "output_tokens_per_s_per_user", "batch_size", "kv_transfer_s", "prefill_s", "prefill_response_s",
               "prefill_busy", "decode_s", "decode_room")


#: units and meaning of a disaggregated deployment's own quantities (the others are serving results, SERVE_RESULTS)
DISAGG_ONLY = {"kv_transfer_s": ("s", "KV cache transfer of one prompt from the prefill to the decode pool"),
               "prefill_s": ("s", "a prompt's own prefill time in its prefill worker"),
               "prefill_response_s": ("s", "the prefill pool's response time, queueing included"),
               "prefill_busy": ("1", "share of the prefill pool's servers busy"),
               "decode_s": ("s", "decode time of one request's output tokens"),
               "decode_room": ("requests", "requests the decode pool has KV room for")}


def disagg_attrs(name: str) -> dict[str, str]:
    """xarray attrs of one result of a disaggregated record: a serving result's own (SERVE_RESULTS), else
    :data:`DISAGG_ONLY`'s units and description."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX, SERVE_RESULTS

    if name in SERVE_RESULT_INDEX:
        return SERVE_RESULTS[SERVE_RESULT_INDEX[name]].attrs()
    units, description = DISAGG_ONLY[name]
    return {"units": units, "long_name": name.replace("_", " "), "description": description}


def disagg_result(rec, pooled: dict) -> dict:
    """The row of one evaluated disaggregated record (``evaluate_disagg``): its TTFT, TPOT, end-to-end latency
    (TTFT + (O - 1) TPOT), throughput of the deployment, per GPU and per user (1 / TPOT while streaming), the
    requests its decode pool runs, the stage times and the limiting pool; NaN where it was not evaluated."""
    from fastmodel.registry.lm import COLUMN_INDEX

    r = {k: float(pooled.get(k, math.nan)) for k in DISAGG_KEYS}
    r["e2e_latency"] = r["ttft"] + (float(rec.decode[COLUMN_INDEX["output_len"]]) - 1.0) * r["tpot"]
    r["output_tokens_per_s_per_user"] = 1.0 / r["tpot"] if r["tpot"] > 0 else math.nan
    return r


def disagg_json(label: str, status: str, result: dict, limiting: str | None) -> dict:
    """:func:`json_record` of a disaggregated record, with ``mode`` and its ``limiting_pool``."""
    return {**json_record(label, status, result), "mode": "disagg", "limiting_pool": limiting}


def render_disagg(label: str, rec, status: str, r: dict, limiting: str | None) -> str:
    """A disaggregated deployment's report: its pools, TTFT, TPOT, throughput and the pool that limits it."""
    if status != "ok":
        return render(label, status, r)
    from fastmodel.registry.lm import COLUMN_INDEX as C

    pools = " + ".join(f"{workers} {name} x {int(col[C['tp']] * col[C['attention_dp']] * col[C['pp']])} GPUs"
                       for name, workers, col in (("prefill", rec.prefill_workers, rec.prefill),
                                                  ("decode", rec.decode_workers, rec.decode)))
    return "\n".join((
        f"{label}: disaggregated, {pools} ({rec.total_gpus} GPUs), concurrency {rec.concurrency}",
        f"  ttft {1e3 * r['ttft']:,.2f} ms   tpot {1e3 * r['tpot']:,.3f} ms   e2e {r['e2e_latency']:,.3f} s",
        f"  output tokens/s {r['output_tokens_per_s']:,.1f} per deployment, {r['output_tokens_per_s_per_gpu']:,.1f} "
        f"per GPU, {r['output_tokens_per_s_per_user']:,.1f} per user",
        f"  cycle: prefill pool {1e3 * r['prefill_response_s']:,.2f} ms (own prefill {1e3 * r['prefill_s']:,.2f} ms, "
        f"servers {100 * r['prefill_busy']:.0f}% busy), "
        f"kv transfer {1e3 * r['kv_transfer_s']:,.3f} ms, decode {r['decode_s']:,.3f} s; decode pool runs "
        f"{r['batch_size']:g} of {r['decode_room']:g} requests it has KV room for",
        f"  limiting pool: {limiting}"))


def run_record(data: dict, source: str | None = None, calibration: Any = None) -> RunReport:
    """``fastmodel run`` of one serving record (SERVE_RUNS.md), aggregated or disaggregated (its two worker
    pools, as ``serve RECORDS`` prints it); ``measured`` is not read."""
    from fastmodel.serve.api_records import evaluate_any_record

    record, state, result, pool = evaluate_any_record(data, source, calibration)
    label = f"{record.id or source} (serving record; measured values ignored)"
    if pool is not None:
        limiting = pool.get("limiting_pool")
        return RunReport(render_disagg(label, record, state, result, limiting),
                         disagg_json(label, state, result, limiting), ok=state == "ok")
    return RunReport(render(label, state, result, load_mode(record.columns), record.columns),
                     json_record(label, state, result),
                     ok=state == "ok")
