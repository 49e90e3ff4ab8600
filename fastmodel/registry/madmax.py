"""The registry of the MAD-Max engine: result variables, status codes and parameter columns.

Result variables: name, units, direction (``better``), long name, description.
Every dataset, JSON record and plot label comes from here, so a variable has
one name and one unit everywhere. Units are SI (seconds, bytes, samples/s).
Status codes: name and message, in code order. ``kernels/madmax/layout.py`` derives the
kernels' integer indices (``R_*``, ``STATUS_*``) from these tuples; nothing is
listed twice. (The real-world model's registry is ``fastmodel/registry/lm.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmodel.registry.lm import MEMORY_RESULTS as LM_MEMORY_RESULTS
from fastmodel.registry.lm import RESULTS as LM_RESULTS
from fastmodel.registry.lm import SERVE_RESULTS, Status


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

@dataclass(frozen=True)
class Column:
    """One column of the MAD-Max parameter table (one row per configuration).

    ``path`` is the dotted spec field the column is read from (its bounds are the
    pydantic field's), or ``""`` when the column is derived (plan degrees, local
    batches, the peak at the model's precision). ``needs`` says which families
    fill it: ``"all"``, or a trait a family module lists in ``Family.traits``
    (``fastmodel/madmax/families/``). Families without the trait write ``fill`` into
    the column, or leave it unset when ``fill`` is None (their kernels never read it).
    """

    name: str
    units: str
    path: str
    needs: str
    doc: str
    fill: float | None = None


_M, _S, _D = "model.", "system.", ""
#: the parameter-table columns, in kernel order (``kernels/madmax/layout.py`` derives ``COLUMNS`` and ``N_COLUMNS``)
COLUMNS: tuple[Column, ...] = (
    Column("num_layers", "1", _M + "num_layers", "transformer", "L transformer layers"),
    Column("hidden", "elements", _M + "hidden", "transformer", "model width d"),
    Column("ffn_hidden", "elements", _M + "ffn_hidden", "transformer", "FC hidden width f"),
    Column("seq_len", "tokens", _M + "seq_len", "sequence", "s tokens per sample (vit: ceil(image / patch)^2)"),
    Column("vocab_size", "rows", _M + "vocab_size", "vocabulary", "V word-embedding rows (vit: 3 p^2)"),
    Column("bytes_per_dense_param", "bytes", _M + "bytes_per_dense_param", "all",
           "bytes per non-embedding parameter (one value per table: it selects the peak)"),
    Column("bytes_per_emb_param", "bytes", _M + "bytes_per_emb_param", "all", "bytes per embedding parameter"),
    Column("peak_flop_per_s", "FLOP/s", _D, "all", "device peak at the dense precision (system.device.peak_flop_per_s.*)"),
    Column("flops_util", "1", _S + "device.flops_util", "all", "achieved fraction of peak for every GEMM"),
    Column("hbm_bandwidth_bytes_per_s", "bytes/s", _S + "device.hbm_bandwidth_bytes_per_s", "all", "HBM bandwidth"),
    Column("hbm_bandwidth_util", "1", _S + "device.hbm_bandwidth_util", "all", "achieved fraction of HBM bandwidth"),
    Column("num_nodes", "1", _D, "all", "nodes (system.num_nodes, or a num_devices axis / devices per node)"),
    Column("devices_per_node", "1", _S + "devices_per_node", "all", "devices per node"),
    Column("num_links", "1", _S + "node.num_links", "all", "intra-node links per device"),
    Column("link_bandwidth_bytes_per_s", "bytes/s", _S + "node.link_bandwidth_bytes_per_s", "all",
           "bidirectional bandwidth of one link"),
    Column("link_util", "1", _S + "node.link_util", "all", "achieved fraction of link bandwidth"),
    Column("num_ports", "1", _S + "network.num_ports", "all", "network ports per node"),
    Column("port_bandwidth_bytes_per_s", "bytes/s", _S + "network.port_bandwidth_bytes_per_s", "all",
           "bidirectional bandwidth of one port"),
    Column("port_util", "1", _S + "network.port_util", "all", "achieved fraction of port bandwidth"),
    Column("allreduce_intra_fraction", "1", _S + "network.allreduce_intra_fraction", "all",
           "share of a multi-node allreduce on intra-node links"),
    Column("dense_degree0", "devices", _D, "all", "degree of dense plan level 0"),
    Column("dense_degree1", "devices", _D, "all", "degree of dense plan level 1 (1 with one level)"),
    Column("emb_degree0", "devices", _D, "all", "degree of embedding plan level 0"),
    Column("emb_degree1", "devices", _D, "all", "degree of embedding plan level 1 (1 with one level)"),
    Column("local_dense_batch", "samples", _D, "all", "samples per device of the dense part"),
    Column("local_emb_batch", "samples", _D, "all", "samples per device of the embeddings"),
    Column("hbm_capacity_bytes", "bytes", _S + "device.hbm_capacity_bytes", "all", "HBM capacity (memory check only)"),
    Column("num_experts", "1", _M + "num_experts", "experts", "X experts per MoE layer", fill=1.0),
    Column("num_active_experts", "1", _M + "num_active_experts", "experts", "k experts per sample", fill=1.0),
    Column("num_bottom_layers", "1", _M + "num_bottom_layers", "recommendation", "Lb bottom-MLP layers"),
    Column("num_top_layers", "1", _M + "num_top_layers", "recommendation", "Lt top-MLP layers"),
    Column("mlp_dim", "elements", _M + "mlp_dim", "recommendation", "m, width of every MLP layer"),
    Column("num_tables", "1", _M + "num_tables", "recommendation", "T embedding tables"),
    Column("rows_per_table", "rows", _M + "rows_per_table", "recommendation", "E rows per table"),
    Column("emb_dim", "elements", _M + "emb_dim", "recommendation", "e, embedding dimension"),
    Column("pooling", "lookups", _M + "pooling", "recommendation", "lookups per table per sample"),
    Column("transformer_degree0", "devices", _D, "all", "degree of transformer plan level 0 (dlrm-transformer)"),
    Column("transformer_degree1", "devices", _D, "all", "degree of transformer plan level 1"),
    Column("local_transformer_batch", "samples", _D, "all", "samples per device of the transformer layers"),
    Column("price_usd_per_device_hour", "USD/h", _S + "price_usd_per_device_hour", "all", "price (NaN: none)"),
    Column("node_tdp_watts", "W", _S + "node_tdp_watts", "all", "node TDP (NaN: none)"),
    Column("train_samples", "samples", "task.train_samples", "all", "samples to train (NaN: none)"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

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
    real-world and serving registries (``fastmodel.registry.lm``) and the real-world memory kinds."""
    if attrs and attrs.get("better") in ("min", "max"):
        return str(attrs["better"])
    if name in REGISTRY:
        return REGISTRY[name].better
    for result in (*LM_RESULTS, *SERVE_RESULTS):
        if result.name == name:
            return result.better
    return "min" if name in LM_MEMORY_RESULTS or name == "memory" else ""
