"""The registry of the MAD-Max engine: result variables, status codes and parameter columns.

Result variables (:class:`~fastmodel.registry.variables.Variable`: name, units, direction, description, long
name, the engines producing it), in the kernels' row order; those other engines produce too (``step_time``,
``time_gemm``, ``weight_memory``, ``memory_per_device``, ``fits_memory``) are declared once in
``registry/variables.py``. Units are SI (seconds, bytes, samples/s). Status codes: name and message, in code
order. ``kernels/madmax/layout.py`` derives the kernels' integer indices (``R_*``, ``STATUS_*``, ``P_*``) from
these tuples; nothing is listed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmodel.registry.variables import (
    FITS_MEMORY,
    MEMORY_PER_DEVICE,
    NOT_COMPUTED,
    STEP_TIME,
    TIME_GEMM,
    WEIGHT_MEMORY,
    Breakdown,
    Status,
    Variable,
    producer,
)

ENGINE = "madmax"
_v = producer(ENGINE)

#: result variables, in kernel row order (``R_<NAME>``)
VARIABLES: tuple[Variable, ...] = (
    STEP_TIME,
    _v("throughput", "samples/s", "max", "Global batch / step time; a sample is one sequence (LLM), one image (ViT) "
       "or one query (DLRM).", "throughput"),
    _v("global_batch", "samples", "", "Samples per step.", "global batch"),
    _v("forward_time", "s", "min", "Time at the forward/backward barrier (the step time for inference).",
       "forward-pass time"),
    TIME_GEMM,
    _v("time_emb", "s", "min", "Sum of embedding-lookup durations.", "embedding time"),
    _v("time_all2all", "s", "min", "Sum of all-to-all durations (not wall time).", "all-to-all time"),
    _v("time_allreduce", "s", "min", "Sum of allreduce durations (not wall time).", "allreduce time"),
    _v("time_allgather", "s", "min", "Sum of allgather durations (not wall time).", "allgather time"),
    _v("time_reducescatter", "s", "min", "Sum of reduce-scatter durations (not wall time).", "reduce-scatter time"),
    _v("time_compute", "s", "min", "time_gemm + time_emb.", "compute time"),
    _v("time_comm", "s", "min", "Sum of all collective durations.", "communication time"),
    _v("exposed_comm", "s", "min", "step_time - time_compute: idle time of the compute stream.",
       "exposed communication"),
    _v("overlapped_comm", "s", "", "time_comm - exposed_comm.", "overlapped communication"),
    _v("weight_memory_dense", "bytes", "min", "Non-embedding weights held per device (weights only).",
       "dense weights per device"),
    _v("weight_memory_emb", "bytes", "min", "Embedding weights held per device (weights only).",
       "embedding weights per device"),
    WEIGHT_MEMORY,
    MEMORY_PER_DEVICE,
    _v("hbm_capacity", "bytes", "", "HBM capacity of one device.", "HBM capacity"),
    FITS_MEMORY,
    _v("eff_flop_per_s", "FLOP/s", "max", "Peak at the model's dense precision x flops_util.", "effective FLOP/s"),
    _v("num_compute_ops", "1", "", "Ops on the compute stream in one step (a repeated phase counts each run).",
       "compute ops"),
    _v("num_comm_ops", "1", "", "Ops on the communication streams in one step (a repeated phase counts each run).",
       "communication ops"),
    _v("train_time", "s", "min", "task.train_samples / throughput (NaN without train_samples).", "time to train"),
    _v("gpu_hours", "GPU h", "min", "train_time x devices / 3600 s.", "GPU-hours"),
    _v("cost", "USD", "min", "gpu_hours x system.price_usd_per_device_hour (NaN without a price).", "cost"),
    _v("energy", "J", "min", "gpu_hours x 3600 s x system.node_tdp_watts / devices per node: node TDP shared by "
       "its devices (NaN without a TDP).", "energy"),
)
#: the MAD-Max variables by name
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
    NOT_COMPUTED,
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

#: the step as stacked bars: every op category's summed durations, or compute + the exposed communication
BREAKDOWN = Breakdown(("time_gemm", "time_emb", "time_all2all", "time_allreduce", "time_allgather",
                       "time_reducescatter"), ("time_gemm", "time_emb", "exposed_comm"))

#: whether ``best`` ranks only points whose ``fits_memory`` is true by default: no, MAD-Max's fits_memory is the
#: paper's 3 x weights rule and its does_not_fit points already carry no result but memory
RANK_ONLY_FITTING = False

#: generic names the engine table (fastmodel/engines.py) and the shared services read
RESULTS = VARIABLES
COORDS: dict[str, tuple[str, ...]] = {}
GROUPED: tuple[tuple[Variable, tuple[str, ...]], ...] = ()
