"""Collective times over network tiers (docs/model.md §11.5): latency + bandwidth per algorithm.

A process group is ``size`` devices laid out with ``stride`` devices between
neighbours in the device mesh (Megatron order: tp innermost, then cp, then dp,
pp outermost). Tier 0 (a cluster's ``.tiers[0]``) is an NVLink domain of
``domain_size`` devices; tier 1 is the scale-out network, one NIC per device.

- members per domain ``g_in = min(size, max(1, domain_size / stride))``,
  domains spanned ``g_out = size / g_in``;
- bus bandwidth: ``intra_bw x intra_eff`` inside one domain; across domains
  the ring's inter-domain hops run as ``g_in`` parallel channels, one NIC each,
  so ``min(intra_bw x intra_eff, g_in x inter_bw x inter_eff)`` (NCCL rings; the
  same bound holds for the hierarchical algorithm);
- ring latency: one step per member, ``(size - g_out) x intra_latency +
  g_out x inter_latency`` (reduce-scatter and all-gather are ring-only in NCCL);
  allreduce takes the better of ring (2 passes) and tree, as NCCL's tuner does,
  unless the ``collective_algorithm`` column fixes one. The tree's latency is
  NCCL's: base + 2 ((members per node - 1) x tree NVLink hop + floor(log2 nodes)
  x tree network hop), its bandwidth 0.92 of the bus bandwidth for 2 S bytes
  (the ``TREE_*`` tables below).
- protocol: NCCL times every ring under its three protocols (Simple, LL128, LL)
  as base latency + steps x per-hop latency + bytes / bandwidth and runs the
  fastest (the ``PROTO_*`` tables below); the device's ``intra_latency`` and
  ``inter_latency`` are the Simple per-hop latencies, the other protocols scale
  them by NCCL's own ratios. Large buffers run Simple; small buckets over
  thousands of ranks run LL128 or LL, whose hops are 2-4x faster.

Sizes are the bytes of the whole (unsharded) buffer; times are seconds.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    ALGO_RING, ALGO_TREE, C_ALLTOALL_EFF, C_ALLTOALL_LATENCY, C_COLLECTIVE_ALGORITHM, C_COMPUTE_CAPABILITY, C_DOMAIN_SIZE,
    C_INTER_BW, C_INTER_EFF, C_INTER_LATENCY, C_INTRA_BW, C_INTRA_EFF, C_INTRA_LATENCY, C_NVLINK_MESH_MAX,
)


# NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel, 2.8-2.18): per protocol, the base
# latency (s) of a ring collective, its per-hop latency on NVLink and on the network relative to Simple's
# (NVLink ring hwLat .47 / 1.9 / 3.4 us, network 2.7 / 4.0 / 9.6 us; LL's NVLink hop x1.8 across nodes) and
# its bandwidth relative to Simple's (LL128 x0.92; LL x1/4 across nodes, x1/3 for gathers inside one).
SIMPLE, LL128, LL = 0, 1, 2
PROTO_BASE_LATENCY = (8.4e-6, 10.0e-6, 3.6e-6)
PROTO_INTRA_HOP = (1.0, 1.9 / 3.4, 0.47 / 3.4)
PROTO_INTER_HOP = (1.0, 4.0 / 9.6, 2.7 / 9.6)
LL_INTRA_HOP_MULTI_NODE = 1.8
PROTO_BANDWIDTH = (1.0, 0.92, 0.25)
LL_BANDWIDTH_ONE_DOMAIN_GATHER = 1.0 / 3.0

# The Tree rows of the same tables (v2.17.1-1; the hwLat rows unchanged from v2.8.3-1, baseLat from v2.5.6-1), in
# the order Simple, LL128, LL: baseLat Tree {4.4, 4.4, 0} us (LL, LL128, Simple; line 56); per-hop latency relative to the Ring Simple hop that the device's
# intra_latency / inter_latency hold: hwLat NVLINK Tree {.52, 1.25, 28} us over 3.4 (line 65), NET Tree {5.0, 8.5, 28}
# us over 9.6 (line 73); LL's NVLink hop x1.8 across nodes as the ring's (line 181). Latency (lines 195-196):
# baseLat + 2 ((nRanks/nNodes - 1) intraLat + log2i(nNodes) interLat). Bandwidth (lines 157-159, 174): busBw x .92,
# LL x 1/3.8 more, LL128 x 120/128 across nodes (7/9 on one); the algorithm bandwidth is busBw x .5, 2 S / busBw.
TREE_BASE_LATENCY = (0.0, 4.4e-6, 4.4e-6)
TREE_INTRA_HOP = (28.0 / 3.4, 1.25 / 3.4, 0.52 / 3.4)
TREE_INTER_HOP = (28.0 / 9.6, 8.5 / 9.6, 5.0 / 9.6)
TREE_BANDWIDTH = 0.92
TREE_PROTO_BANDWIDTH = (1.0, 120.0 / 128.0, 1.0 / 3.8)
TREE_LL128_BANDWIDTH_ONE_NODE = 7.0 / 9.0

# ncclTopoGetAlgoTime's per-size corrections (v2.17.1-1 tuning.cc lines 325-345). treeCorrectionFactor (lines
# 327-331, "Powers of two, 64 B to 256MB"): the tree's bandwidth x the entry log2i(nBytes >> 6) of the protocol's row
# while that is < 23 (line 339-340: buffers below 512 MiB; log2i(0) = 0), here in the order Simple, LL128, LL (the
# file's rows are NCCL_PROTO_LL 0, LL128 1, SIMPLE 2: src/include/devcomm.h lines 27-29).
TREE_CORRECTION = (
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
)
# "Plateau effect of ring" (lines 342-345): a Simple ring allreduce across nodes (nNodes > 1) of nBytes >=
# nRanks / 16 x 65,536 has its latency (base and hops) x1.9 below compute capability 9.0 (minCompCap < 90), x1.5
# from it; a device that states no compute capability (0) takes Hopper's, as the FP8 recipes do.
RING_PLATEAU_MIN_BYTES_PER_RANK = 65536.0 / 16.0
RING_PLATEAU = (1.9, 1.5)


@njit(inline="always")
def members_per_domain(row, size, stride):
    per_domain = max(1.0, math.floor(row[C_DOMAIN_SIZE] / stride))
    return min(size, per_domain)


@njit(inline="always")
def mesh_link_share(row, g_in):
    """Share of a device's NVLink bandwidth a group with ``g_in`` members in the domain can use: 1 behind an
    NVSwitch; in a direct mesh of n devices (``nvlink_mesh_max`` >= n) only the links to the g_in - 1 group
    peers, (g_in - 1) / (n - 1) (docs/model.md §11.5 "Direct NVLink mesh")."""
    domain = row[C_DOMAIN_SIZE]
    if g_in < 2.0 or domain < 3.0 or row[C_NVLINK_MESH_MAX] < domain:
        return 1.0
    return (g_in - 1.0) / (domain - 1.0)


@njit
def bus_bandwidth(row, size, stride):
    """Bytes/s a ring collective of the group moves per device (NCCL bus bandwidth)."""
    return _bus_bandwidth_at(row, size, members_per_domain(row, size, stride))


@njit(inline="always")
def _bus_bandwidth_at(row, size, g_in):
    """:func:`bus_bandwidth` of a group with ``g_in`` members per domain (:func:`members_per_domain`)."""
    intra = row[C_INTRA_BW] * row[C_INTRA_EFF] * mesh_link_share(row, g_in)
    if g_in >= size:
        return intra
    return min(intra, g_in * row[C_INTER_BW] * row[C_INTER_EFF])


@njit(inline="always")
def _ring_latency_at(row, size, g_in, protocol):
    """Latency of one ring pass under ``protocol`` of a group with ``g_in`` members per domain
    (:func:`members_per_domain`): a step per member, inter-domain steps at the scale-out (tier 1) latency."""
    g_out = size / g_in
    intra = row[C_INTRA_LATENCY] * PROTO_INTRA_HOP[protocol]
    if g_out <= 1.0:
        return (size - 1.0) * intra
    if protocol == LL:
        intra *= LL_INTRA_HOP_MULTI_NODE
    return (size - g_out) * intra + g_out * row[C_INTER_LATENCY] * PROTO_INTER_HOP[protocol]


@njit(inline="always")
def _protocol_bandwidth_at(bus, size, g_in, protocol, gather):
    """Bus bandwidth of a ring under ``protocol`` (LL moves 8-byte words of 4 data bytes plus flags) of a group with
    ``g_in`` members per domain and bus bandwidth ``bus``."""
    factor = PROTO_BANDWIDTH[protocol]
    if protocol == LL and gather and g_in >= size:
        factor = LL_BANDWIDTH_ONE_DOMAIN_GATHER
    return bus * factor


@njit
def ring_time(row, volume, size, stride, passes, gather):
    """Fastest protocol for ``passes`` ring passes moving ``volume`` bytes per device (NCCL's tuner)."""
    g_in = members_per_domain(row, size, stride)
    return _ring_time_at(row, volume, size, g_in, _bus_bandwidth_at(row, size, g_in), passes, gather, 1.0)


@njit(inline="always")
def _ring_time_at(row, volume, size, g_in, bus, passes, gather, plateau):
    """:func:`ring_time` of a group with ``g_in`` members per domain and bus bandwidth ``bus``, which every
    protocol's latency and bandwidth share: taken once, not once per protocol (the same values, so the same
    bits). ``plateau``: the factor on Simple's latency (:func:`ring_plateau`; 1 but for an allreduce)."""
    best = math.inf
    for protocol in range(3):
        latency = PROTO_BASE_LATENCY[protocol] + passes * _ring_latency_at(row, size, g_in, protocol)
        if protocol == SIMPLE:
            latency *= plateau
        best = min(best, latency + volume / _protocol_bandwidth_at(bus, size, g_in, protocol, gather))
    return best


@njit(inline="always")
def ring_plateau(row, nbytes, size, g_in):
    """NCCL's factor on a Simple ring allreduce's latency (``RING_PLATEAU``): across domains (``size > g_in``) and
    from ``size x RING_PLATEAU_MIN_BYTES_PER_RANK`` bytes on, 1.9 below compute capability 9.0 and 1.5 from it (or
    unstated); else 1. A device with no compute capability (mi300x.toml) takes 1.5, an assumption [A]: it runs
    RCCL, whose tuning (``rcclTuningModel`` ``ringCorrectionFactor``) has no such plateau (docs/model.md B.5
    ``RING_PLATEAU``; review14 #9)."""
    if size <= g_in or nbytes < size * RING_PLATEAU_MIN_BYTES_PER_RANK:
        return 1.0
    capability = row[C_COMPUTE_CAPABILITY]
    return RING_PLATEAU[0] if 0.0 < capability < 9.0 else RING_PLATEAU[1]


@njit
def allgather_time(row, nbytes, size, stride):
    """All-gather (or reduce-scatter) of an ``nbytes`` buffer over ``size`` devices: ring, fastest protocol."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    return ring_time(row, (size - 1.0) / size * nbytes, size, stride, 1.0, True)


@njit
def allreduce_time(row, nbytes, size, stride):
    """Allreduce of ``nbytes``: ring (2 (n-1)/n bytes per device) or tree (:func:`tree_allreduce_time`), each at
    its fastest protocol, whichever is faster, unless ``collective_algorithm`` fixes one."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    volume = 2.0 * (size - 1.0) / size * nbytes
    g_in = members_per_domain(row, size, stride)
    bus = _bus_bandwidth_at(row, size, g_in)       # the ring's and the tree's
    ring = _ring_time_at(row, volume, size, g_in, bus, 2.0, False, ring_plateau(row, nbytes, size, g_in))
    tree = _tree_time_at(row, nbytes, size, g_in, bus)
    algorithm = row[C_COLLECTIVE_ALGORITHM]
    if algorithm == ALGO_RING:
        return ring
    if algorithm == ALGO_TREE:
        return tree
    return min(ring, tree)


@njit
def tree_allreduce_time(row, nbytes, size, stride):
    """NCCL's tree allreduce of an ``nbytes`` buffer over ``size`` devices at its fastest protocol
    (:func:`_tree_time_at`)."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    g_in = members_per_domain(row, size, stride)
    return _tree_time_at(row, nbytes, size, g_in, _bus_bandwidth_at(row, size, g_in))


@njit(inline="always")
def _tree_time_at(row, nbytes, size, g_in, bus):
    """NCCL's tuning model of a tree allreduce, fastest protocol: the group spans ``nodes = ceil(size / g_in)``
    domains of ``size // nodes`` members each; latency base + 2 ((per_node - 1) x NVLink hop + floor(log2 nodes)
    x network hop), time 2 ``nbytes`` / (bus x 0.92 x the protocol's share x its ``TREE_CORRECTION`` at this
    size) (``TREE_*`` above)."""
    nodes = float(math.ceil(size / g_in))
    per_node = float(math.floor(size / nodes))
    depth = math.frexp(nodes)[1] - 1.0            # log2i(nNodes): floor(log2), exact
    size_index = max(0, math.frexp(math.floor(nbytes / 64.0))[1] - 1)    # log2i(nBytes >> 6); log2i(0) = 0
    best = math.inf
    for protocol in range(3):
        intra = row[C_INTRA_LATENCY] * TREE_INTRA_HOP[protocol]
        share = TREE_PROTO_BANDWIDTH[protocol]
        if nodes > 1.0:
            if protocol == LL:
                intra *= LL_INTRA_HOP_MULTI_NODE
        elif protocol == LL128:
            share = TREE_LL128_BANDWIDTH_ONE_NODE
        if size_index < 23:
            share *= TREE_CORRECTION[protocol][size_index]
        latency = TREE_BASE_LATENCY[protocol] + 2.0 * (
            (per_node - 1.0) * intra + depth * row[C_INTER_LATENCY] * TREE_INTER_HOP[protocol])
        best = min(best, latency + 2.0 * nbytes / (bus * TREE_BANDWIDTH * share))
    return best


@njit
def alltoall_time(row, nbytes, size, stride):
    """NCCL all-to-all where each device sends ``nbytes`` spread evenly over the group; inside a domain at
    ``intra_bw x alltoall_eff`` plus ``alltoall_latency`` per peer, the device's own all-to-all fit (where it
    gives none: ``intra_eff`` and one ``intra_latency``; docs/model.md §11.14.7). Across domains the latency is
    the larger of ``inter_latency`` and the domain's per-peer latencies [A]."""
    return _alltoall(row, nbytes, size, stride, True)


@njit
def engine_alltoall_time(row, nbytes, size, stride):
    """A serving engine's expert-parallel all-to-all (every engine's path other than ``deepep_ll``): the rings'
    ``intra_eff`` and one ``intra_latency``, since no engine's all-to-all is measured (the NCCL all-to-all fit of
    :func:`alltoall_time` is not applied)."""
    return _alltoall(row, nbytes, size, stride, False)


@njit(inline="always")
def _alltoall(row, nbytes, size, stride, nccl):
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    g_in = members_per_domain(row, size, stride)
    # NCCL's all-to-all (grouped send/recv to every peer) runs below the rings' bus bandwidth where measured
    eff = row[C_ALLTOALL_EFF] if nccl and row[C_ALLTOALL_EFF] > 0.0 else row[C_INTRA_EFF]
    local = nbytes * (g_in - 1.0) / size / (row[C_INTRA_BW] * eff)
    peers = row[C_ALLTOALL_LATENCY] * (g_in - 1.0) if nccl else 0.0
    if g_in >= size:
        return local + (peers if peers > 0.0 else row[C_INTRA_LATENCY])
    remote = nbytes * (size - g_in) / size / (row[C_INTER_BW] * row[C_INTER_EFF])
    # the sends to the domain's own peers are still posted one by one: never below their measured latency [A]
    return max(local, remote) + max(row[C_INTER_LATENCY], peers)


@njit
def p2p_time(row, nbytes, stride):
    """One point-to-point send between devices ``stride`` apart in the mesh."""
    if nbytes <= 0.0:
        return 0.0
    if stride < row[C_DOMAIN_SIZE]:
        return nbytes / (row[C_INTRA_BW] * row[C_INTRA_EFF]) + row[C_INTRA_LATENCY]
    return nbytes / (row[C_INTER_BW] * row[C_INTER_EFF]) + row[C_INTER_LATENCY]


@njit
def bucketed_allgather_time(row, nbytes, size, stride, bucket):
    """All-gather (or reduce-scatter) of ``nbytes`` issued as ``ceil(nbytes / bucket)`` equal collectives,
    each paying the ring latency (``bucket`` <= 0: one collective)."""
    if bucket <= 0.0 or nbytes <= bucket:
        return allgather_time(row, nbytes, size, stride)
    buckets = math.ceil(nbytes / bucket)
    return buckets * allgather_time(row, nbytes / buckets, size, stride)
