"""FSDP1's root unit (the embedding, final norm and output layer no block holds) and the last replica all-reduces of
an HSDP backward (``kernels/lm/fsdp1_root.py``, docs/model.md §11.63), derived by hand: NCCL's Simple ring (base
8.4 us, a step of ``intra_latency`` per member inside the node, of ``inter_latency`` per node across nodes, x1.5
for an allreduce across nodes: the ring plateau) at the bus bandwidth of the group."""

import pytest

from fastmodel.kernels.lm.fsdp1_root import fsdp1_root_step
from fastmodel.lm.table import row
from tests.lm.test_fsdp1_grad_passes import IBM_NET, LLAMA7B
from tests.suite_fixtures import H100, one

# Llama 2 7B's root unit: word embedding and output layer (untied, 32,000 x 4,096 each) and the final norm
ROOT = 2 * 32000 * 4096 + 4096
# a 7B block: 4 h^2 attention + 3 h ffn MLP + 2 h norms
LAYER = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
# the whole model as one HSDP stage: 32 blocks and the root
STAGE = 32 * LAYER + ROOT


def _row(**values):
    base = dict(**H100, **IBM_NET, sharding="hsdp", shard_degree=8, dp=96, n_gpus=96, tp=1, pp=1,
                grad_reduce_bytes=2, fsdp_version=1, fsdp1_grad_passes=2)
    return row(**{**base, **values})


def _intra_ring(nbytes):
    """One Simple ring pass over the 8 GPUs of a node (NVSwitch: 450 GB/s x intra_eff 0.8 per GPU)."""
    return 8.4e-6 + 7 * 3e-6 + 7 / 8 * nbytes / (450e9 * 0.8)


def _replica_allreduce(nbytes):
    """Allreduce over 12 nodes, one GPU each (12.5 GB/s x inter_eff 0.85): two ring passes of 12 network steps,
    the plateau's x1.5 on the latency."""
    return 1.5 * (8.4e-6 + 2 * 12 * 8e-6) + 2 * 11 / 12 * nbytes / (12.5e9 * 0.85)


def _casts(params, shard):
    """FSDP1 with FP32 flat parameters (master weights): the root's shard cast to BF16 before its gather (4 + 2 B)
    and its reduced BF16 shard's cast to FP32 (2 + 4 B), memory-bound at 3.35 TB/s x 0.8 (docs/model.md §11.63,
    second note)."""
    return params / shard * (6 + 6) / (3.35e12 * 0.8)


def _passes(params):
    """The root unit's two flat-gradient passes (cat, predivide div_), each a read + write of its 2-B unsharded
    gradient, memory-bound at 3.35 TB/s x 0.8 (docs/model.md §11.26; review16 #5): 0.78 ms for the 7B root."""
    return 2 * 2 * 2 * params / (3.35e12 * 0.8)


def test_hsdp_root_gather_reduce_and_replica_tail_by_hand():
    r = _row()
    comm, exposed = fsdp1_root_step(r, 0.0, 0.0, ROOT, LAYER, STAGE, 10.0, 8.0, 96.0, 1.0, 1.0, 0.0)
    gather = reduce = _intra_ring(2 * ROOT)                 # 524 MB of BF16 weights, then of BF16 gradients
    assert comm == pytest.approx(gather + reduce, rel=1e-9)  # 2 x 1.30 ms
    # the first block's shard (50.6 MB) and the root's (65.5 MB), after the backward's compute, 85% not yet charged
    tail = 0.85 * (_replica_allreduce(2 * LAYER / 8) + _replica_allreduce(2 * ROOT / 8))
    assert exposed == pytest.approx(gather + reduce + _casts(ROOT, 8) + _passes(ROOT) + tail, rel=1e-9)   # casts 0.147 ms
    assert 1e3 * _passes(ROOT) == pytest.approx(0.78, abs=0.01)
    assert tail == pytest.approx(0.01754, abs=1e-5)            # (9.0 + 11.6 ms) x 0.85


def test_the_tail_already_exposed_by_a_short_backward_is_not_charged_twice():
    r = _row()
    whole = _replica_allreduce(2 * STAGE / 8)                 # 0.291 s over the whole stage
    last = _replica_allreduce(2 * LAYER / 8) + _replica_allreduce(2 * ROOT / 8)
    gather = _intra_ring(2 * ROOT)
    # a backward of 0.28 s: data_parallel exposed whole - 0.28 s (11 ms) of it; the tail adds the rest
    _, exposed = fsdp1_root_step(r, 0.0, 0.0, ROOT, LAYER, STAGE, 0.28, 8.0, 96.0, 1.0, 1.0, 0.0)
    assert exposed == pytest.approx(2 * gather + _casts(ROOT, 8) + _passes(ROOT) + 0.85 * last - (whole - 0.28),
                                    rel=1e-9)
    # a backward shorter than the whole all-reduce less its tail: nothing more
    _, exposed = fsdp1_root_step(r, 0.0, 0.0, ROOT, LAYER, STAGE, 0.1, 8.0, 96.0, 1.0, 1.0, 0.0)
    assert exposed == pytest.approx(2 * gather + _casts(ROOT, 8) + _passes(ROOT), rel=1e-9)


def test_full_shard_over_twelve_nodes_exposes_the_gather_and_reduce_per_micro_batch():
    r = _row(sharding="fsdp", shard_degree=96)
    # 96 GPUs on 12 nodes: the ring's bus is the node's 8 NICs (8 x 12.5 GB/s x 0.85), 84 NVLink steps, 12 network
    ring = 8.4e-6 + 84 * 3e-6 + 12 * 8e-6 + 95 / 96 * 2 * ROOT / (8 * 12.5e9 * 0.85)
    comm, exposed = fsdp1_root_step(r, 1.0, 2.0, ROOT, LAYER, STAGE, 10.0, 96.0, 96.0, 1.0, 2.0, 0.0)
    assert comm - 1.0 == pytest.approx(2 * 2 * ring, rel=1e-9)      # two micro-batches, each gathers and reduces
    assert exposed - 2.0 == pytest.approx(2 * (2 * ring + _casts(ROOT, 96) + _passes(ROOT)), rel=1e-9)   # no replicas, no tail


def test_module_wrapped_embedding_head_and_norm_leave_only_the_embedding_unit_exposed():
    # review16 #4: ptd_benchmark's ShardedGPT wraps the embedding, the final norm and the head as their own units
    # (fsdp_module_wrap); the root holds nothing and the embedding unit (32,000 x 4,096 here) is gathered first
    # and reduced last, exposed; full shard over 12 nodes as above, one micro-batch, no casts (no master weights)
    emb = 32000 * 4096
    r = _row(sharding="fsdp", shard_degree=96, fsdp_module_wrap=1, master_weights=0)
    ring = 8.4e-6 + 84 * 3e-6 + 12 * 8e-6 + 95 / 96 * 2 * emb / (8 * 12.5e9 * 0.85)
    comm, exposed = fsdp1_root_step(r, 0.0, 0.0, ROOT, LAYER, STAGE, 10.0, 96.0, 96.0, 1.0, 1.0, float(emb))
    assert comm == pytest.approx(2 * ring, rel=1e-9)
    assert exposed == pytest.approx(2 * ring + _passes(emb), rel=1e-9)


@pytest.mark.parametrize("values", [dict(fsdp_version=2), dict(sharding="ddp", shard_degree=0),
                                    dict(pp=2)])
def test_fsdp2_ddp_and_pipelined_fsdp_are_unchanged(values):
    assert fsdp1_root_step(_row(**values), 1.0, 2.0, ROOT, LAYER, STAGE, 10.0, 8.0, 96.0, 1.0, 1.0, 0.0) == (1.0, 2.0)


def test_a_step_exposes_it_once_in_the_data_parallel_time():
    # the IBM 7B run's plan at 96 GPUs: FSDP1 on (2 gradient passes) against off, everything else equal; the
    # passes lengthen the backward, which hides the rest of the replica all-reduce either way
    plan = {**LLAMA7B, "n_gpus": 96, "dp": 96, "global_batch": 192}
    on = one(**plan, fsdp_version=1, fsdp1_grad_passes=2)
    off = one(**plan, fsdp_version=0, fsdp1_grad_passes=0)
    # the kernel's counts leave out the norms: the final one of the root (4,096) and a block's two (8,192)
    root, layer = 2 * 32000 * 4096, 4 * 4096**2 + 3 * 4096 * 11008
    tail = 0.85 * (_replica_allreduce(2 * layer / 8) + _replica_allreduce(2 * root / 8))
    assert on["exposed_dp"] - off["exposed_dp"] == pytest.approx(
        2 * _intra_ring(2 * root) + _casts(root, 8) + _passes(root) + tail, rel=1e-9)
