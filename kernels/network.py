"""Collective times over network tiers (docs/model.md §11.5): latency + bandwidth per algorithm.

A process group is ``size`` devices laid out with ``stride`` devices between
neighbours in the device mesh (Megatron order: tp innermost, then cp, then dp,
pp outermost). Tier 1 is an NVLink domain of ``domain_size`` devices; tier 2 is
the scale-out network, one NIC per device.

- members per domain ``g_in = min(size, max(1, domain_size / stride))``,
  domains spanned ``g_out = size / g_in``;
- bus bandwidth: ``intra_bw x intra_eff`` inside one domain; across domains
  the ring's inter-domain hops run as ``g_in`` parallel channels, one NIC each,
  so ``min(intra_bw x intra_eff, g_in x inter_bw x inter_eff)`` (NCCL rings; the
  same bound holds for the hierarchical algorithm);
- ring latency: one step per member, ``(size - g_out) x intra_latency +
  g_out x inter_latency`` (reduce-scatter and all-gather are ring-only in NCCL);
  allreduce takes the better of ring (2 passes) and tree (``2 log2(size)`` steps
  at the slowest tier's latency), as NCCL's tuner does, unless the
  ``collective_algorithm`` column fixes one.

Sizes are the bytes of the whole (unsharded) buffer; times are seconds.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm_layout import (
    ALGO_RING, ALGO_TREE, C_COLLECTIVE_ALGORITHM, C_DOMAIN_SIZE, C_INTER_BW, C_INTER_EFF, C_INTER_LATENCY, C_INTRA_BW, C_INTRA_EFF, C_INTRA_LATENCY,
)


@njit(inline="always")
def members_per_domain(row, size, stride):
    per_domain = max(1.0, math.floor(row[C_DOMAIN_SIZE] / stride))
    return min(size, per_domain)


@njit
def bus_bandwidth(row, size, stride):
    """Bytes/s a ring collective of the group moves per device (NCCL bus bandwidth)."""
    intra = row[C_INTRA_BW] * row[C_INTRA_EFF]
    g_in = members_per_domain(row, size, stride)
    if g_in >= size:
        return intra
    return min(intra, g_in * row[C_INTER_BW] * row[C_INTER_EFF])


@njit
def ring_latency(row, size, stride):
    """Latency of one ring pass: a step per member, inter-domain steps at tier-2 latency."""
    g_in = members_per_domain(row, size, stride)
    g_out = size / g_in
    if g_out <= 1.0:
        return (size - 1.0) * row[C_INTRA_LATENCY]
    return (size - g_out) * row[C_INTRA_LATENCY] + g_out * row[C_INTER_LATENCY]


@njit
def allgather_time(row, nbytes, size, stride):
    """All-gather (or reduce-scatter) of an ``nbytes`` buffer over ``size`` devices: ring."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    return (size - 1.0) / size * nbytes / bus_bandwidth(row, size, stride) + ring_latency(row, size, stride)


@njit
def allreduce_time(row, nbytes, size, stride):
    """Allreduce of ``nbytes``: 2 (n-1)/n bytes per device; ring or tree latency, whichever is less."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    transfer = 2.0 * (size - 1.0) / size * nbytes / bus_bandwidth(row, size, stride)
    ring = 2.0 * ring_latency(row, size, stride)
    g_in = members_per_domain(row, size, stride)
    slowest = row[C_INTRA_LATENCY] if g_in >= size else row[C_INTER_LATENCY]
    tree = 2.0 * math.ceil(math.log2(size)) * slowest
    algorithm = row[C_COLLECTIVE_ALGORITHM]
    if algorithm == ALGO_RING:
        return transfer + ring
    if algorithm == ALGO_TREE:
        return transfer + tree
    return transfer + min(ring, tree)


@njit
def alltoall_time(row, nbytes, size, stride):
    """All-to-all where each device sends ``nbytes`` spread evenly over the group."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    g_in = members_per_domain(row, size, stride)
    local = nbytes * (g_in - 1.0) / size / (row[C_INTRA_BW] * row[C_INTRA_EFF])
    if g_in >= size:
        return local + row[C_INTRA_LATENCY]
    remote = nbytes * (size - g_in) / size / (row[C_INTER_BW] * row[C_INTER_EFF])
    return max(local, remote) + row[C_INTER_LATENCY]


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
