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


def render(label: str, status: str, r: dict, mode: str | None = None) -> str:
    """A serving report a person reads in ten seconds; ``mode`` (:func:`load_mode`) names the load in a status."""
    if status != "ok":
        from fastmodel.registry.serve import SERVE_STATUS, SERVE_STATUSES

        under = f"{mode}: " if mode else ""
        return f"{label}: not evaluated ({status}: {under}{SERVE_STATUSES[SERVE_STATUS[status]].message})"
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


def run_record(data: dict, source: str | None = None, calibration: Any = None) -> RunReport:
    """``fastmodel run`` of one serving record (SERVE_RUNS.md); ``measured`` is not read."""
    from fastmodel.errors import SpecError
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table
    from fastmodel.serve.records import lower_serve_record

    if calibration is not None:
        raise SpecError(source, "calibration", "applies to training runs (the real-world training model), "
                        "not to serving records")
    record = lower_serve_record(data, source)
    out, status = evaluate_table(record.columns[:, None])
    result = {r.name: float(out[k, 0]) for k, r in enumerate(SERVE_RESULTS)}
    state = SERVE_STATUS_NAMES[int(status[0])]
    label = f"{record.id or source} (serving record; measured values ignored)"
    return RunReport(render(label, state, result, load_mode(record.columns)), json_record(label, state, result),
                     ok=state == "ok")
