"""The registry of the MAD-Max engine: result variables and status codes.

Result variables: name, units, direction (``better``), long name, description.
Every dataset, JSON record and plot label comes from here, so a variable has
one name and one unit everywhere. Units are SI (seconds, bytes, samples/s).
Status codes: name and message, in code order. ``kernels/layout.py`` derives the
kernels' integer indices (``R_*``, ``STATUS_*``) from these tuples; nothing is
listed twice. (The real-world model's registry is ``fastmodel/variables.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmodel.variables import MEMORY_RESULTS as LM_MEMORY_RESULTS
from fastmodel.variables import RESULTS as LM_RESULTS
from fastmodel.variables import SERVE_RESULTS, Status


@dataclass(frozen=True)
class Variable:
    name: str
    units: str
    better: str          # "min" | "max" | "" (no direction: a batch size, a capacity, a count)
    long_name: str
    description: str


VARIABLES: tuple[Variable, ...] = (
    Variable("iteration_time", "s", "min", "iteration time", "End of the last op on either stream (forward only for inference)."),
    Variable("throughput", "samples/s", "max", "throughput",
             "Global batch / iteration time; a sample is one sequence (LLM), one image (ViT) or one query (DLRM)."),
    Variable("global_batch", "samples", "", "global batch", "Samples per iteration."),
    Variable("forward_time", "s", "min", "forward-pass time", "Time at the forward/backward barrier (iteration time for inference)."),
    Variable("time_gemm", "s", "min", "GEMM time", "Sum of GEMM compute durations."),
    Variable("time_emb", "s", "min", "embedding time", "Sum of embedding-lookup durations."),
    Variable("time_all2all", "s", "min", "all-to-all time", "Sum of all-to-all durations (not wall time)."),
    Variable("time_allreduce", "s", "min", "allreduce time", "Sum of allreduce durations (not wall time)."),
    Variable("time_allgather", "s", "min", "allgather time", "Sum of allgather durations (not wall time)."),
    Variable("time_reducescatter", "s", "min", "reduce-scatter time", "Sum of reduce-scatter durations (not wall time)."),
    Variable("time_compute", "s", "min", "compute time", "time_gemm + time_emb."),
    Variable("time_comm", "s", "min", "communication time", "Sum of all collective durations."),
    Variable("exposed_comm", "s", "min", "exposed communication", "iteration_time - time_compute: idle time of the compute stream."),
    Variable("overlapped_comm", "s", "", "overlapped communication", "time_comm - exposed_comm."),
    Variable("weight_memory_dense", "bytes", "min", "dense weights per device", "Non-embedding weights held per device (weights only)."),
    Variable("weight_memory_emb", "bytes", "min", "embedding weights per device", "Embedding weights held per device (weights only)."),
    Variable("weight_memory", "bytes", "min", "weights per device", "weight_memory_dense + weight_memory_emb."),
    Variable("memory_per_device", "bytes", "min", "memory per device",
             "memory_weight_factor x weight_memory (3 x weights, the paper's cloud-study feasibility rule)."),
    Variable("hbm_capacity", "bytes", "", "HBM capacity", "HBM capacity of one device."),
    Variable("fits_memory", "1", "max", "fits in HBM", "1 if memory_per_device <= hbm_capacity, else 0."),
    Variable("eff_flop_per_s", "FLOP/s", "max", "effective FLOP/s", "Peak at the model's dense precision x flops_util."),
    Variable("num_compute_ops", "1", "", "compute ops", "Ops on the compute stream in one iteration (a repeated phase counts each run)."),
    Variable("num_comm_ops", "1", "", "communication ops", "Ops on the communication streams in one iteration (a repeated phase counts each run)."),
    Variable("train_time", "s", "min", "time to train", "task.train_samples / throughput (NaN without train_samples)."),
    Variable("gpu_hours", "GPU h", "min", "GPU-hours", "train_time x devices / 3600 s."),
    Variable("cost", "USD", "min", "cost", "gpu_hours x system.price_usd_per_device_hour (NaN without a price)."),
    Variable("energy", "J", "min", "energy",
             "gpu_hours x 3600 s x system.node_tdp_watts / devices per node: node TDP shared by its devices "
             "(NaN without a TDP)."),
)

REGISTRY: dict[str, Variable] = {v.name: v for v in VARIABLES}


#: status codes of a configuration, in code order (sweep grids keep illegal points with these)
STATUSES: tuple[Status, ...] = (
    Status("ok", "legal, and fits in memory"),
    Status("degree_le_1", "a plan level with degree <= 1 on this cluster"),
    Status("product_ne_devices", "degrees do not multiply to the device count"),
    Status("first_degree", "level 0 neither one node nor all devices"),
    Status("batch_not_divisible", "global batch does not divide over the replicas"),
    Status("global_batch_mismatch", "local batches give different global batches"),
    Status("does_not_fit", "legal, but memory per device exceeds HBM"),
    Status("illegal_plan", "strategies break a rule on every cluster"),
    Status("tp_odd_layers", "DLRM MLP tensor parallelism with an odd layer count"),
    Status("devices_not_divisible", "num_devices axis not a multiple of the system's devices per node"),
    Status("not_computed", "zarr store: the point's unit of work has not been written (yet)"),
    Status("pp_gt_layers", "default semantics: pipeline degree above the model's layer count"),
    Status("tp_gt_heads", "default semantics: tensor-parallel degree above the model's head count"),
)
STATUS_NAMES: tuple[str, ...] = tuple(s.name for s in STATUSES)
STATUS: dict[str, int] = {name: code for code, name in enumerate(STATUS_NAMES)}
NAMES: tuple[str, ...] = tuple(v.name for v in VARIABLES)


def attrs(name: str) -> dict[str, str]:
    """xarray attrs (units, long_name, description, and ``better`` where the variable has a direction) of
    variable ``name``."""
    var = REGISTRY[name]
    out = {"units": var.units, "long_name": var.long_name, "description": var.description}
    if var.better:
        out["better"] = var.better
    return out


def better(name: str, attrs: dict | None = None) -> str:
    """Which way variable ``name`` improves: ``"min"``, ``"max"`` or ``""`` (no direction, or not a registry
    variable). A dataset variable's own ``better`` attr wins; then the MAD-Max registry (this module), the
    real-world and serving registries (``fastmodel.variables``) and the real-world memory kinds."""
    if attrs and attrs.get("better") in ("min", "max"):
        return str(attrs["better"])
    if name in REGISTRY:
        return REGISTRY[name].better
    for result in (*LM_RESULTS, *SERVE_RESULTS):
        if result.name == name:
            return result.better
    return "min" if name in LM_MEMORY_RESULTS or name == "memory" else ""
