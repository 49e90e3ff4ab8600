"""Column layouts and integer codes shared by the kernels and the Python side.

Numba treats module-level integers as compile-time constants, so kernels index
rows by these names at no cost. Result indices (``R_<NAME>``) and status codes
(``STATUS_<NAME>``) are derived from the registry, ``fastmodel/registry/madmax.py``.
"""

from fastmodel.kernels.streams import (  # noqa: F401 - the scheduler's codes, used by the MAD-Max lowering
    CAT_ALL2ALL, CAT_ALLGATHER, CAT_ALLREDUCE, CAT_EMB, CAT_GEMM, CAT_REDUCESCATTER, CATEGORY_NAMES, MAX_STREAMS,
    N_CATEGORIES, N_SCHEDULE_OUTPUTS, N_WORK, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME, SCHEDULE_OUTPUTS,
    STREAM_COMM, STREAM_COMPUTE,
)
from fastmodel.registry import madmax as _results

# --- strategy codes ---------------------------------------------------------
STRAT_NONE = -1
STRAT_DDP = 0
STRAT_FSDP = 1
STRAT_TP = 2
STRAT_PP = 3
STRAT_MP = 4
STRATEGY_CODES = {"ddp": STRAT_DDP, "fsdp": STRAT_FSDP, "tp": STRAT_TP, "pp": STRAT_PP, "mp": STRAT_MP}

# --- family codes (which cost formulas a Program's configs use) -----------
FAMILY_TRANSFORMER = 0        # llm, llm-moe, vit: transformer layers + embedding
FAMILY_DLRM = 1               # dlrm, dlrm-moe: bottom/top MLPs + embedding tables
FAMILY_DLRM_TRANSFORMER = 2   # dlrm-transformer: both parts, three plan components
# each family module (fastmodel/madmax/families/) names its code: Family.kernel_code

# --- parameter-table columns (one row per configuration, every family) -----
#: derived from the registry (fastmodel/registry/madmax.py COLUMNS: spec path, units, which families fill it)
COLUMNS = _results.COLUMN_NAMES
#: the kernels' short names of the columns (``P_LAYERS`` = the index of ``num_layers``), looked up by name
_COLUMN_SHORT_NAMES = {
    "P_LAYERS": "num_layers", "P_HIDDEN": "hidden", "P_FFN": "ffn_hidden", "P_SEQ": "seq_len",
    "P_VOCAB": "vocab_size", "P_BYTES_DENSE": "bytes_per_dense_param", "P_BYTES_EMB": "bytes_per_emb_param",
    "P_PEAK_FLOPS": "peak_flop_per_s", "P_FLOPS_UTIL": "flops_util", "P_HBM_BW": "hbm_bandwidth_bytes_per_s",
    "P_HBM_BW_UTIL": "hbm_bandwidth_util", "P_NODES": "num_nodes", "P_DEVICES_PER_NODE": "devices_per_node",
    "P_LINKS": "num_links", "P_LINK_BW": "link_bandwidth_bytes_per_s", "P_LINK_UTIL": "link_util",
    "P_PORTS": "num_ports", "P_PORT_BW": "port_bandwidth_bytes_per_s", "P_PORT_UTIL": "port_util",
    "P_AR_INTRA": "allreduce_intra_fraction", "P_DENSE_DEG0": "dense_degree0", "P_DENSE_DEG1": "dense_degree1",
    "P_EMB_DEG0": "emb_degree0", "P_EMB_DEG1": "emb_degree1", "P_LOCAL_DENSE_BS": "local_dense_batch",
    "P_LOCAL_EMB_BS": "local_emb_batch", "P_HBM_CAPACITY": "hbm_capacity_bytes", "P_EXPERTS": "num_experts",
    "P_ACTIVE_EXPERTS": "num_active_experts", "P_BOT_LAYERS": "num_bottom_layers", "P_TOP_LAYERS": "num_top_layers",
    "P_MLP_DIM": "mlp_dim", "P_TABLES": "num_tables", "P_ROWS": "rows_per_table", "P_EMB_DIM": "emb_dim",
    "P_POOLING": "pooling", "P_TR_DEG0": "transformer_degree0", "P_TR_DEG1": "transformer_degree1",
    "P_LOCAL_TR_BS": "local_transformer_batch", "P_PRICE": "price_usd_per_device_hour",
    "P_NODE_TDP": "node_tdp_watts", "P_TRAIN_SAMPLES": "train_samples",
}
globals().update({_short: COLUMNS.index(_name) for _short, _name in _COLUMN_SHORT_NAMES.items()})
N_COLUMNS = len(COLUMNS)

# --- cost slots (durations in seconds), shared by every family --------------
SLOTS = (
    "emb_lookup",         # lookup bytes per device / effective HBM bandwidth
    "emb_all2all",        # 2 x lookup bytes / mp degree / all-to-all bandwidth
    "emb_grad_allreduce", # lookup bytes / allreduce bandwidth (ddp embeddings)
    # transformer blocks: attention (a) and FC (b); the group's layout is the PAIR_* one below
    "attn_fwd", "fc_fwd",
    "attn_bwd", "fc_bwd",                       # 2 x forward
    "attn_allgather", "fc_allgather",           # FSDP weight gather
    "attn_grad_allreduce", "fc_grad_allreduce",
    "attn_reducescatter", "fc_reducescatter",
    "tp_allreduce",       # activations local_bs x s x d x B
    "moe_all2all",        # transformer MoE: local_bs x s x d x B / X
    # DLRM MLP layers: bottom (a) and top (b, x k active experts for MoE), same layout
    "bot_fwd", "top_fwd",
    "bot_bwd", "top_bwd",
    "bot_allgather", "top_allgather",
    "bot_grad_allreduce", "top_grad_allreduce",
    "bot_reducescatter", "top_reducescatter",
    "mlp_tp_allreduce",   # dlrm activations local_bs x m x B
    "mlp_moe_all2all",    # dlrm MoE: local_bs x m x B / X
)
(
    S_EMB_LOOKUP, S_EMB_ALL2ALL, S_EMB_GRAD_AR,
    S_ATTN_FWD, S_FC_FWD, S_ATTN_BWD, S_FC_BWD, S_ATTN_AG, S_FC_AG, S_ATTN_GRAD_AR, S_FC_GRAD_AR,
    S_ATTN_RS, S_FC_RS, S_TP_AR, S_MOE_A2A,
    S_BOT_FWD, S_TOP_FWD, S_BOT_BWD, S_TOP_BWD, S_BOT_AG, S_TOP_AG, S_BOT_GRAD_AR, S_TOP_GRAD_AR,
    S_BOT_RS, S_TOP_RS, S_MLP_TP_AR, S_MLP_MOE_A2A,
) = range(len(SLOTS))
#: offsets inside a pair group (two kinds of layer block sharing one plan component)
PAIR_FWD, PAIR_BWD, PAIR_AG, PAIR_GRAD_AR, PAIR_RS, PAIR_TP_AR, PAIR_MOE_A2A = 0, 2, 4, 6, 8, 10, 11
assert S_MOE_A2A - S_ATTN_FWD == S_MLP_MOE_A2A - S_BOT_FWD == PAIR_MOE_A2A
N_SLOTS = len(SLOTS)

# --- per-config terms the cost kernel computes besides durations ------------
TERMS = ("global_batch", "weight_memory_dense", "weight_memory_emb", "eff_flop_per_s")
T_GLOBAL_BATCH, T_WMEM_DENSE, T_WMEM_EMB, T_EFF_FLOPS = range(len(TERMS))
N_TERMS = len(TERMS)

# --- cost-only semantics flags (int array passed to cost kernels) -----------
FLAGS = ("ddp_grad_sharded_layer",)
F_DDP_GRAD_SHARDED = 0
N_FLAGS = len(FLAGS)

# --- result variables and status codes: derived from the registry (fastmodel/registry/madmax.py) ----
RESULTS = _results.NAMES
N_RESULTS = len(RESULTS)
globals().update({"R_" + _name.upper(): _index for _index, _name in enumerate(RESULTS)})
globals().update({"STATUS_" + _name.upper(): _code for _code, _name in enumerate(_results.STATUS_NAMES)})
#: results kept for points that are legal but do not fit in memory
MEMORY_RESULTS = tuple(RESULTS.index(n) for n in ("weight_memory_dense", "weight_memory_emb", "weight_memory",
                                                  "memory_per_device", "hbm_capacity", "fits_memory"))
