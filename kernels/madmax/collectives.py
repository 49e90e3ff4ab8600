"""Effective link bandwidths and the per-level bandwidth of each collective.

MAD-Max (docs/model.md §5.3): a multi-node system has two bandwidth entries
per collective, ``[level 0 (intra-node), level 1]``; a single node has one. A
collective at level ``lvl`` of a component with ``n`` levels uses entry
``[-n + lvl]``: the intra-node entry only for level 0 of a 2-level plan.
Collective time is bytes / bandwidth (no latency, no group-size factor).
"""

from fastmodel.kernels.jit import njit

from fastmodel.kernels.madmax.layout import (
    P_AR_INTRA, P_DEVICES_PER_NODE, P_LINK_BW, P_LINK_UTIL, P_LINKS, P_NODES,
    P_PORT_BW, P_PORT_UTIL, P_PORTS,
)

KIND_ALL2ALL = 0
KIND_ALLREDUCE = 1
KIND_ALLGATHER = 2      # also reduce-scatter: 2 x the allreduce bandwidth


@njit(cache=True, inline="always")
def intra_bandwidth(row):
    """Unidirectional intra-node bandwidth per device: links x (bw / 2) x util."""
    return row[P_LINKS] * (row[P_LINK_BW] / 2.0) * row[P_LINK_UTIL]


@njit(cache=True, inline="always")
def inter_bandwidth(row):
    """Unidirectional inter-node bandwidth per device: ports x (bw / 2) x util / devices."""
    return row[P_PORTS] * (row[P_PORT_BW] / 2.0) * row[P_PORT_UTIL] / row[P_DEVICES_PER_NODE]


@njit(cache=True)
def collective_bandwidth(row, kind, num_levels, level):
    """Bandwidth (bytes/s) of a ``kind`` collective at ``level`` of ``num_levels``."""
    intra = intra_bandwidth(row)
    if num_levels == 2 and level == 0:
        bw = intra
    elif row[P_NODES] > 1.0:
        if kind == KIND_ALL2ALL:
            bw = inter_bandwidth(row)
        else:
            frac = row[P_AR_INTRA]
            bw = (1.0 - frac) * inter_bandwidth(row) + frac * intra
    else:
        bw = intra
    if kind == KIND_ALLGATHER:
        bw = 2.0 * bw
    return bw
