"""Human-readable one-configuration report (``fastmodel run``) and its JSON twin."""

from __future__ import annotations

import math
from typing import Mapping

from fastmodel.madmax.families import family_of
from fastmodel.madmax.lowering.config import Config
from fastmodel.registry.madmax import NAMES, REGISTRY

_PRECISION = {8: "fp64", 4: "fp32", 2: "fp16/bf16", 1: "int8"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:,.2f} GB"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def summary(config: Config, ds: Mapping) -> dict:
    """Everything the report shows, as plain JSON-ready values.

    ``ds``: the results by variable name -- a 0-d Dataset or a plain mapping of
    numbers (``fastmodel run`` passes the latter and never imports xarray).
    """
    m, s = config.model, config.system
    out = {
        "model": m.name,
        "system": s.name,
        "task": config.task.name,
        "kind": config.task.kind,
        "plan": config.plan.label,
        "semantics": config.semantics.name,
        "num_nodes": s.num_nodes,
        "devices_per_node": s.devices_per_node,
        "num_devices": s.num_devices,
        "local_dense_batch": config.local_dense_batch,
        "local_emb_batch": config.local_emb_batch,
        "local_transformer_batch": config.local_transformer_batch,
        "model_params": m.total_params,
        "model_dense_params": m.dense_params,
        "model_emb_params": m.emb_params,
        "flops_per_sample": m.flops_per_sample,
        "intra_bandwidth": s.intra_bandwidth,
        "inter_bandwidth": s.inter_bandwidth,
        "allreduce_bandwidth": s.allreduce_bandwidth,
        "eff_hbm_bandwidth": s.device.hbm_bandwidth_bytes_per_s * s.device.hbm_bandwidth_util,
    }
    for name in NAMES:
        value = float(ds[name])
        out[name] = value if math.isfinite(value) else None
    for name in NAMES:   # a variable's older name (registry aliases: iteration_time for step_time) repeats it
        for alias in REGISTRY[name].aliases:
            out[alias] = out[name]
    return out


def render(config: Config, ds: Mapping) -> str:
    """A report a person reads in ten seconds."""
    r = summary(config, ds)
    m = config.model
    precision = _PRECISION[m.bytes_per_dense_param]
    T = r["step_time"]
    comm = r["time_comm"]
    seq_len = m.seq_len if family_of(m).sample_is_sequence else None
    per_token = f" ({r['throughput'] * seq_len:,.0f} tokens/s)" if seq_len and r["throughput"] else ""
    flops = r["flops_per_sample"]
    flops_text = f"{flops / 1e12:,.1f} TFLOP" if flops >= 1e11 else f"{flops / 1e9:,.3f} GFLOP"
    lines = [
        f"{r['model']} on {r['system']} ({r['num_nodes']} node{'s' if r['num_nodes'] != 1 else ''} x "
        f"{r['devices_per_node']} = {r['num_devices']} device{'s' if r['num_devices'] != 1 else ''})",
        f"task {r['task']} ({r['kind']}), plan {r['plan']}, semantics {r['semantics']}",
        "",
        f"  model       {r['model_params'] / 1e9:,.2f} B params ({r['model_dense_params'] / 1e9:,.2f} B dense, "
        f"{r['model_emb_params'] / 1e9:,.2f} B embedding); {flops_text}/sample forward",
        f"  system      {r['eff_flop_per_s'] / 1e12:,.1f} TFLOP/s effective ({precision}), HBM {r['eff_hbm_bandwidth'] / 1e9:,.0f} GB/s; "
        f"intra-node {r['intra_bandwidth'] / 1e9:,.1f} GB/s, inter-node {r['inter_bandwidth'] / 1e9:,.2f} GB/s, "
        f"allreduce {r['allreduce_bandwidth'] / 1e9:,.1f} GB/s per device",
        f"  batch       {r['global_batch']:,.0f} samples/step; per device {r['local_dense_batch']} dense, {r['local_emb_batch']} embedding"
        + (f", {r['local_transformer_batch']} transformer" if r["local_transformer_batch"] is not None else ""),
        f"  weights     {_gb(r['weight_memory'])} per device ({_gb(r['weight_memory_dense'])} dense + {_gb(r['weight_memory_emb'])} embedding; weights only)",
        f"  memory      {_gb(r['memory_per_device'])} per device ({config.semantics.memory_weight_factor:g} x weights) of "
        f"{_gb(r['hbm_capacity'])} HBM: {'fits' if r['fits_memory'] else 'DOES NOT FIT'}",
        "",
        f"  compute     GEMM {_ms(r['time_gemm'])}   embedding {_ms(r['time_emb'])}",
        f"  comm        all-to-all {_ms(r['time_all2all'])}   allreduce {_ms(r['time_allreduce'])}   "
        f"allgather {_ms(r['time_allgather'])}   reduce-scatter {_ms(r['time_reducescatter'])}",
        f"  overlap     exposed {_ms(r['exposed_comm'])} ({_pct(r['exposed_comm'], comm)} of comm), "
        f"overlapped {_ms(r['overlapped_comm'])} ({_pct(r['overlapped_comm'], comm)})",
        "",
        f"  step        {_ms(T)}" + (f"   (forward {_ms(r['forward_time'])})" if config.task.kind != "inference" else ""),
        f"  throughput  {r['throughput']:,.2f} samples/s{per_token}",
    ]
    if r["train_time"] is not None:
        samples = config.task.train_samples
        extra = []
        if r["cost"] is not None:
            extra.append(f"${r['cost']:,.0f}")
        if r["energy"] is not None:
            extra.append(f"{r['energy'] / 3.6e9:,.2f} MWh")
        lines.append(f"  to train    {samples:,.3g} samples: {r['train_time'] / 3600:,.2f} h, "
                     f"{r['gpu_hours']:,.0f} GPU-hours" + "".join(f", {e}" for e in extra))
    return "\n".join(lines)


def run_one(model, system, task, *, semantics="default", plan=None, num_nodes=None, calibration=None):
    """``fastmodel run`` of one MAD-Max configuration: a :class:`~fastmodel.analysis.run_report.RunReport`
    (the results are read without xarray: start-up time)."""
    from fastmodel.analysis.run_report import RunReport
    from fastmodel.madmax.api import make_config
    from fastmodel.madmax.engine import evaluate_configs

    if calibration is not None:
        from fastmodel.errors import SpecError

        raise SpecError(None, "calibration", "applies to the real-world model (family = \"lm\" specs and run "
                        "records); the MAD-Max model has no fitted efficiencies")
    config = make_config(model, system, task, semantics, plan, num_nodes)
    ds = {name: values[0] for name, values in evaluate_configs([config]).items()}
    return RunReport(render(config, ds), summary(config, ds))
