"""The NCCL collective times of the shared kernels (kernels/nccl.py): the ring or NCCL's tree for an allreduce,
one NIC per group member in a node across nodes, the protocol NCCL picks by buffer size, all-to-all through the
NIC, derived by hand on an 8-GPU-node network (NET of tests/suite_fixtures.py, which tests/lm/test_lm_model.py runs in
step times)."""


import pytest

from fastmodel.kernels.nccl import (
    allgather_time,
    allreduce_time,
    alltoall_time,
    bus_bandwidth,
    engine_alltoall_time,
    ring_plateau,
    tree_allreduce_time,
)
from fastmodel.lm.table import row
from tests.suite_fixtures import NET


def test_a_large_allreduce_inside_a_node_runs_the_ring_since_nccls_tree_hops_cost_28us():
    r = row(**NET)
    size = 64e6
    # ring, Simple: 8.4 us base + 2 x 7 NVLink steps of 3 us, 2 x 7/8 of the buffer at 450 GB/s x 0.8
    ring = 8.4e-6 + 2 * 7 * 3e-6 + 2 * 7 / 8 * size / (450e9 * 0.8)
    # NCCL's tree on one node is a chain of 8: 2 x 7 hops at the Tree NVLink hwLat, Simple 28 us where the ring's is
    # 3.4 (v2.17.1-1 tuning.cc line 65), and 2 x the buffer at 0.92 of the bus bandwidth (lines 157, 174); LL128
    # (4.4 us base, 1.25 us hops, x 7/9 of that bandwidth on one node, line 159) is the tree's faster protocol here.
    # treeCorrectionFactor (lines 327-331) at log2i(64e6 >> 6) = log2i(1,000,000) = 19: Simple .7, LL128 .9
    simple = 2 * 7 * 3e-6 * 28 / 3.4 + 2 * size / (450e9 * 0.8 * 0.92 * 0.7)
    ll128 = 4.4e-6 + 2 * 7 * 3e-6 * 1.25 / 3.4 + 2 * size / (450e9 * 0.8 * 0.92 * 7 / 9 * 0.9)
    tree = tree_allreduce_time(r, size, 8.0, 1.0)
    assert tree == pytest.approx(ll128, rel=1e-12)
    assert tree < simple
    assert allreduce_time(r, size, 8.0, 1.0) == pytest.approx(ring, rel=1e-12)
    assert ring < tree


def test_tree_allreduce_over_4_nodes_of_8_is_nccls_latency_linear_in_the_node_logarithmic_across():
    """NCCL's tuning model (NVIDIA/nccl v2.17.1-1 src/graph/tuning.cc lines 195-196) prices a tree allreduce at
    baseLat + 2 ((nRanks/nNodes - 1) intraLat + log2i(nNodes) interLat), here 32 ranks on 4 nodes: 7 NVLink hops
    (3 us on NET, the Ring/Simple hop that stands for NCCL's 3.4) and 2 network hops (8 us for NCCL's 9.6), per
    protocol. A 64 KiB buffer runs LL, whose base is 4.4 us and NVLink hop 0.52/3.4 x 1.8 across nodes."""
    r = row(**NET)
    nbytes = 65536.0
    bus = min(450e9 * 0.8, 8 * 50e9 * 0.85)                 # 340 GB/s: the node's 8 NICs
    simple = 0.0 + 2 * (7 * 3e-6 * 28 / 3.4 + 2 * 8e-6 * 28 / 9.6)                    # 439.22 us
    ll128 = 4.4e-6 + 2 * (7 * 3e-6 * 1.25 / 3.4 + 2 * 8e-6 * 8.5 / 9.6)               # 48.17 us
    ll = 4.4e-6 + 2 * (7 * 3e-6 * 0.52 / 3.4 * 1.8 + 2 * 8e-6 * 5.0 / 9.6)            # 32.63 us
    assert (simple, ll128, ll) == pytest.approx((439.22e-6, 48.17e-6, 32.63e-6), abs=0.01e-6)
    # LL moves 2 x 64 KiB at 0.92 / 3.8 of the bus x treeCorrectionFactor's LL entry log2i(65,536 >> 6) =
    # log2i(1,024) = 10, 0.6: 2.65 us; 35.28 us in all
    assert tree_allreduce_time(r, nbytes, 32.0, 1.0) == pytest.approx(
        ll + 2 * nbytes / (bus * 0.92 / 3.8 * 0.6), rel=1e-12)
    assert tree_allreduce_time(r, nbytes, 32.0, 1.0) == pytest.approx(35.28e-6, abs=0.01e-6)
    # the ring's LL over the same 32 ranks: 3.6 us + 2 x (28 NVLink steps at 3 x .47/3.4 x 1.8 + 4 network steps at
    # 8 x 2.7/9.6) = 63.4 us before its bytes (the model's ring): the tree is NCCL's pick, and the model's
    ring_ll = 3.6e-6 + 2 * (28 * 3e-6 * 0.47 / 3.4 * 1.8 + 4 * 8e-6 * 2.7 / 9.6) + 2 * 31 / 32 * nbytes / (bus / 4)
    assert allreduce_time(r, nbytes, 32.0, 1.0) == pytest.approx(35.28e-6, abs=0.01e-6)
    assert 35.29e-6 < ring_ll
    # 100 MB: LL128's bandwidth (x 0.92 x 120/128, x .9 at log2i(1,562,500) = 20) beats Simple's 439 us of latency;
    # 1 GB: Simple, past the correction's last entry (512 MiB on: none)
    assert tree_allreduce_time(r, 1e8, 32.0, 1.0) == pytest.approx(
        ll128 + 2e8 / (bus * 0.92 * 120 / 128 * 0.9), rel=1e-12)
    assert tree_allreduce_time(r, 1e9, 32.0, 1.0) == pytest.approx(simple + 2e9 / (bus * 0.92), rel=1e-12)


def test_tree_correction_is_nccls_table_by_log2i_of_the_buffer_over_64_bytes():
    """treeCorrectionFactor (NVIDIA/nccl v2.17.1-1 src/graph/tuning.cc lines 327-331) is indexed by protocol (its
    rows LL, LL128, Simple: src/include/devcomm.h lines 27-29) and log2i(nBytes >> 6), applied below 23 (line 340).
    16 nodes x 1: at 64 MiB - 1 (entry 19) Simple .7, LL128 .9; at 64 MiB (entry 20) .8 and .9; at 511 MiB (entry
    22) .9 and 1.0; at 512 MiB none. LL128 (4.4 us + 2 x 4 x 8 x 8.5/9.6 us, x 120/128) is the pick below 512 MiB,
    4.129 / 4.129 / 29.296 ms against Simple's 5.090 / 4.478 / 30.640; at 512 MiB Simple, 27.648 ms."""
    r = row(**NET)
    bus = 50e9 * 0.85 * 0.92
    for nbytes, simple, ll128, expected in ((2.0 ** 26 - 1, 0.7, 0.9, 4.129e-3), (2.0 ** 26, 0.8, 0.9, 4.129e-3),
                                            (511 * 2.0 ** 20, 0.9, 1.0, 29.296e-3), (2.0 ** 29, 1.0, 1.0, 27.648e-3)):
        simple_t = 2 * 4 * 8e-6 * 28 / 9.6 + 2 * nbytes / (bus * simple)
        ll128_t = 4.4e-6 + 2 * 4 * 8e-6 * 8.5 / 9.6 + 2 * nbytes / (bus * 120 / 128 * ll128)
        assert tree_allreduce_time(r, nbytes, 16.0, 8.0) == pytest.approx(min(simple_t, ll128_t), rel=1e-12)
        assert min(simple_t, ll128_t) == pytest.approx(expected, abs=0.001e-3)


def test_a_simple_ring_allreduce_across_nodes_has_nccls_plateau_latency():
    """NCCL's "plateau effect of ring" (v2.17.1-1 tuning.cc lines 342-345): a Simple ring allreduce over more than
    one node of nBytes >= nRanks / 16 x 65,536 has its latency x1.5 from compute capability 9.0 (and where the
    device states none), x1.9 below. 32 ranks on 4 nodes, 1 GB: 8.4 us + 2 x (28 x 3 + 4 x 8) us = 240.4 us of
    latency, x1.5 = 360.6 us, plus 2 x 31/32 GB at 340 GB/s; the tree's Simple (439.22 us + 2 GB / (340 GB/s x .92),
    no correction from 512 MiB) is slower. Below 32 / 16 x 64 KiB = 128 KiB and on one node: no factor."""
    latency = 8.4e-6 + 2 * (28 * 3e-6 + 4 * 8e-6)
    bandwidth = 2 * 31 / 32 * 1e9 / 340e9
    assert allreduce_time(row(**NET), 1e9, 32.0, 1.0) == pytest.approx(1.5 * latency + bandwidth, rel=1e-12)
    assert allreduce_time(row(**NET, compute_capability=9.0), 1e9, 32.0, 1.0) == pytest.approx(
        1.5 * latency + bandwidth, rel=1e-12)
    assert allreduce_time(row(**NET, compute_capability=8.0), 1e9, 32.0, 1.0) == pytest.approx(
        1.9 * latency + bandwidth, rel=1e-12)
    assert ring_plateau(row(**NET), 2.0 ** 17 - 1, 32.0, 8.0) == 1.0 == ring_plateau(row(**NET), 1e9, 8.0, 8.0)
    assert ring_plateau(row(**NET), 2.0 ** 17, 32.0, 8.0) == 1.5
    one_node = 8.4e-6 + 2 * 7 * 3e-6 + 2 * 7 / 8 * 1e9 / (450e9 * 0.8)
    assert allreduce_time(row(**NET), 1e9, 8.0, 1.0) == pytest.approx(one_node, rel=1e-12)


def test_tree_depth_is_nccls_log2i_of_the_nodes_and_a_member_per_node_has_no_nvlink_hop():
    r = row(**NET)
    # 16 nodes x 1 (a dp group with tp = 8 inside each node): log2i(16) = 4 network hops, 0 NVLink hops; one NIC
    simple_16 = 2 * 4 * 8e-6 * 28 / 9.6 + 2 * 1e9 / (50e9 * 0.85 * 0.92)
    assert tree_allreduce_time(r, 1e9, 16.0, 8.0) == pytest.approx(simple_16, rel=1e-12)
    # 12 nodes: log2i(12) = 3, the floor, as NCCL's integer log2i (src/include/utils.h)
    simple_12 = 2 * 3 * 8e-6 * 28 / 9.6 + 2 * 1e9 / (50e9 * 0.85 * 0.92)
    assert tree_allreduce_time(r, 1e9, 12.0, 8.0) == pytest.approx(simple_12, rel=1e-12)


def test_cross_node_ring_uses_one_nic_per_member_in_the_node():
    r = row(**NET)
    # data-parallel group of 16 with tp=8 inside each node: one member per node, one NIC
    assert bus_bandwidth(r, 16.0, 8.0) == pytest.approx(50e9 * 0.85)
    # group of 64 contiguous devices: 8 members per node, 8 NICs, capped by NVLink
    assert bus_bandwidth(r, 64.0, 1.0) == pytest.approx(min(450e9 * 0.8, 8 * 50e9 * 0.85))
    # reduce-scatter over 16 nodes x 1: 15/16 of the buffer at one NIC, 16 inter-node ring steps, Simple
    # protocol (8.4 us base latency) for a buffer this large
    size = 1e9
    expected = 8.4e-6 + 15 / 16 * size / (50e9 * 0.85) + 16 * 8e-6
    assert allgather_time(r, size, 16.0, 8.0) == pytest.approx(expected, rel=1e-12)


def test_ring_latency_grows_with_the_group_so_large_groups_stop_scaling():
    r = row(**NET)
    small = allgather_time(r, 1e6, 64.0, 1.0)
    large = allgather_time(r, 1e6, 1536.0, 1.0)
    # 1536 members over 192 nodes: 1344 NVLink steps + 192 InfiniBand steps. A 1 MB buffer over so many
    # ranks is latency-bound, so NCCL runs LL: 3.6 us base, NVLink hop 3 us x .47/3.4 x 1.8, network hop
    # 8 us x 2.7/9.6, a quarter of the bus bandwidth
    bus = min(360e9, 8 * 42.5e9)
    ll = 3.6e-6 + 1344 * 3e-6 * 0.47 / 3.4 * 1.8 + 192 * 8e-6 * 2.7 / 9.6 + 1535 / 1536 * 1e6 / (bus / 4)
    simple = 8.4e-6 + 1344 * 3e-6 + 192 * 8e-6 + 1535 / 1536 * 1e6 / bus
    assert ll < simple
    assert large == pytest.approx(ll, rel=1e-9)
    assert large > 10 * small


def test_nccl_runs_the_fastest_protocol_simple_for_large_buffers_ll128_in_between():
    r = row(**NET)
    bus = min(360e9, 8 * 42.5e9)

    def protocol(base, intra_hop, inter_hop, bandwidth, nbytes):
        return base + 1344 * 3e-6 * intra_hop + 192 * 8e-6 * inter_hop + 1535 / 1536 * nbytes / (bus * bandwidth)

    for nbytes in (1e5, 1e7, 1e8, 1e10, 1e11):
        times = [protocol(8.4e-6, 1.0, 1.0, 1.0, nbytes),                           # Simple
                 protocol(10.0e-6, 1.9 / 3.4, 4.0 / 9.6, 0.92, nbytes),             # LL128
                 protocol(3.6e-6, 0.47 / 3.4 * 1.8, 2.7 / 9.6, 0.25, nbytes)]        # LL
        assert allgather_time(r, nbytes, 1536.0, 1.0) == pytest.approx(min(times), rel=1e-9)
    assert allgather_time(r, 1e11, 1536.0, 1.0) == pytest.approx(protocol(8.4e-6, 1, 1, 1, 1e11), rel=1e-9)
    assert allgather_time(r, 1e10, 1536.0, 1.0) == pytest.approx(protocol(10.0e-6, 1.9 / 3.4, 4.0 / 9.6, 0.92, 1e10), rel=1e-9)


def test_alltoall_across_nodes_is_limited_by_the_remote_share_through_the_nic():
    r = row(**NET)
    nbytes = 1e8
    # 16 experts groups over 2 nodes (8 + 8): half the data leaves the node
    expected = max(nbytes * 7 / 16 / (450e9 * 0.8), nbytes * 8 / 16 / (50e9 * 0.85)) + 8e-6
    assert alltoall_time(r, nbytes, 16.0, 1.0) == pytest.approx(expected, rel=1e-12)


def test_alltoall_inside_a_domain_runs_at_its_own_measured_rate_and_per_peer_latency():
    """B200 (specs/devices/b200.toml): nccl-tests on the 8 GPUs fit all-to-all as 7 x 7.30 us + bytes x 7/8 /
    (0.5968 x 900 GiB/s = 576.7 GB/s), 0.641 of NVLink 5's 900 GB/s, against the rings' 0.723 (docs/model.md
    §11.14.7). DeepSeek-V2's dispatch at EP 8 (4,096 tokens x top-6 x 5,120 x 2 B = 251,658,240 B per rank, 7/8
    of it to peers): 220,200,960 B / (900e9 x 0.64) = 382.29 us + 51.1 us, where intra_eff 0.72 and one 8.6 us
    latency gave 339.82 + 8.6 us."""
    net = dict(domain_size=8, intra_bw=900e9, intra_eff=0.72, intra_latency=8.6e-6, inter_bw=50e9, inter_eff=0.85,
               inter_latency=9.6e-6)
    nbytes = 4096 * 6 * 5120 * 2.0
    measured = row(**net, alltoall_eff=0.64, alltoall_latency=7.3e-6)
    assert alltoall_time(measured, nbytes, 8.0, 1.0) == pytest.approx(220_200_960 / (900e9 * 0.64) + 7 * 7.3e-6,
                                                                      rel=1e-12)
    # over 4 peers (EP 4): 3/4 of the bytes, 3 latencies
    assert alltoall_time(measured, nbytes, 4.0, 1.0) == pytest.approx(188_743_680 / (900e9 * 0.64) + 3 * 7.3e-6,
                                                                      rel=1e-12)
    # 0 (every device file but B200's): the rings' intra_eff and one intra_latency, as before
    assert alltoall_time(row(**net), nbytes, 8.0, 1.0) == pytest.approx(220_200_960 / (900e9 * 0.72) + 8.6e-6, rel=1e-12)
    # a serving engine's own all-to-all kernels: the rings' rate and one latency whatever the NCCL fit says
    assert engine_alltoall_time(measured, nbytes, 8.0, 1.0) == pytest.approx(220_200_960 / (900e9 * 0.72) + 8.6e-6,
                                                                             rel=1e-12)
    # the device file's values come from the fit: tests/shared/test_devices.py


def test_alltoall_across_domains_never_pays_less_latency_than_inside_one():
    """EP 16 over two 8-GPU domains with B200's per-peer fit: NCCL still posts a send to each of the 7 domain peers,
    so the latency is max(inter_latency 9.6 us, 7 x 7.3 us = 51.1 us) (docs/model.md §11.14.7 [A]); bandwidth: the
    NIC share 8/16 of 1e8 B at 50e9 x 0.85 = 1176.47 us against the NVLink share 7/16 at 900e9 x 0.64 = 75.95 us."""
    net = dict(domain_size=8, intra_bw=900e9, intra_eff=0.72, intra_latency=8.6e-6, inter_bw=50e9, inter_eff=0.85,
               inter_latency=9.6e-6)
    nbytes = 1e8
    measured = row(**net, alltoall_eff=0.64, alltoall_latency=7.3e-6)
    remote = nbytes * 8 / 16 / (50e9 * 0.85)
    assert alltoall_time(measured, nbytes, 16.0, 1.0) == pytest.approx(remote + 7 * 7.3e-6, rel=1e-12)
    # without a fit (every other device): one inter_latency, as before
    assert alltoall_time(row(**net), nbytes, 16.0, 1.0) == pytest.approx(remote + 9.6e-6, rel=1e-12)
    # the group of two domains pays at least the one domain's latency
    assert alltoall_time(measured, 1.0, 16.0, 1.0) >= alltoall_time(measured, 1.0, 8.0, 1.0)
