"""Fine-grained activation offloading's copy time and host memory (kernels/lm/offload_time.py, docs/model.md §11.21).

Hand-derived: a layer's offloaded bytes ``o`` cross the host link one way in ``c = o / (host_link_bw x
host_link_eff)``; the compute stream loses ``max(0, c - F) + max(0, c - B)`` per layer and micro-batch (the D2H
stream runs beside the forward, each reload one layer's backward ahead); the pinned pool holds every offloaded
layer of the micro-batches in flight but the one kept on the GPU. The setting of tests/lm/test_memory_offload.py:
T = 2 x 4,096 tokens, h = 1,024, 16 heads of 64, BF16, flash attention; ``core_attn`` + ``attn_proj`` move Q, K,
V and the output, 4 x 2 T a d bytes per layer.
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import C_HOST_LINK_BW, C_HOST_LINK_EFF
from fastmodel.kernels.lm.memory_offload import host_offload_bytes, offloaded_layer_bytes
from fastmodel.kernels.lm.offload_time import exposed_copy_s, host_copy_s, offload_layer_s
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_INPUT,
    A_BACKWARD_WEIGHT,
    A_EXPOSED_B,
    A_EXPOSED_F,
    A_FORWARD,
    A_RECOMPUTE,
    N_WORK,
    layer_passes_of,
)
from fastmodel.lm.table import row
from fastmodel.registry.lm import OFFLOAD_MODULES
from tests import suite_fixtures

T, H, A, D = 8192, 1024, 16, 64
BYTES = 4 * 2 * T * A * D   # core_attn + attn_proj: Q, K, V and O at 2 bytes
DENSE = dict(layers=8, hidden=H, ffn=4 * H, heads=A, kv_heads=A, head_dim=D, vocab=8, seq_len=4096, gated_mlp=0,
             micro_batch=2, global_batch=2, dp=1, n_gpus=1, sharding="ddp", flash_attention=1, dropout=0,
             recompute="none")
CORE = OFFLOAD_MODULES["core_attn"] + OFFLOAD_MODULES["attn_proj"]
SLOW = dict(host_link_bw=1e9, host_link_eff=1.0)       # 67 ms per layer each way: longer than either pass


def one(**values):
    return suite_fixtures.one(**{**DENSE, **values})


def passes(columns, moe_only=False):
    work = np.zeros(N_WORK)
    layer_passes_of(columns, work, moe_only)
    return (work[A_FORWARD] + work[A_EXPOSED_F],
            work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE] + work[A_EXPOSED_B])


def test_the_default_host_link_is_pcie5_x16_less_its_packet_overhead():
    columns = row(**DENSE)
    # 16 lanes x 32 GT/s, 128b/130b, 8 bits a byte: 63.015 GB/s per direction; 256-byte payloads in 280-byte TLPs
    assert columns[C_HOST_LINK_BW] == pytest.approx(16 * 32e9 * 128 / 130 / 8, rel=1e-15)
    assert columns[C_HOST_LINK_EFF] == pytest.approx(256 / 280, rel=1e-15)
    assert host_copy_s(columns, BYTES) == pytest.approx(BYTES / (63.015384615e9 * 0.9142857142857), rel=1e-10)


def test_a_copy_is_exposed_by_what_each_pass_does_not_hide():
    assert exposed_copy_s(1.0, 3.0, 7.0) == 0.0            # hidden by both passes
    assert exposed_copy_s(5.0, 3.0, 7.0) == 2.0            # the D2H outlasts the forward by 2
    assert exposed_copy_s(10.0, 3.0, 7.0) == 7.0 + 3.0     # both directions outlast their passes


def test_the_layers_exposure_is_copy_minus_forward_plus_copy_minus_backward():
    columns = row(**DENSE, offload_modules=CORE, **SLOW)
    f, b = passes(columns)
    c = BYTES / 1e9
    assert c > f and c > b
    assert offload_layer_s(columns, np.zeros(N_WORK), False) == pytest.approx((c - f) + (c - b), rel=1e-12)
    assert offload_layer_s(row(**DENSE, **SLOW), np.zeros(N_WORK), False) == 0.0    # nothing offloaded


def test_the_step_adds_micro_batches_times_layers_times_the_exposure():
    base = one()
    fast = one(offload_modules=CORE, host_link_bw=1e13)     # 7 us a copy: hidden by both passes
    slow = one(offload_modules=CORE, **SLOW)
    assert fast["time_offload"] == 0.0 and fast["step_time"] == base["step_time"]
    f, b = passes(row(**DENSE, offload_modules=CORE))
    c = BYTES / 1e9
    m, layers = 1, 8
    assert slow["time_offload"] == pytest.approx(m * layers * ((c - f) + (c - b)), rel=1e-12)
    assert slow["step_time"] - base["step_time"] == pytest.approx(slow["time_offload"], rel=1e-9)
    for name in ("time_gemm", "time_attention", "time_memory_bound", "pipeline_bubble", "time_optimizer"):
        assert slow[name] == base[name], name


def test_moe_and_dense_layers_each_take_their_own_bytes_and_passes():
    moe = dict(DENSE, gated_mlp=1, moe_experts=8, moe_topk=2, moe_ffn=512, dense_layers=2, ep=1,
               offload_modules=CORE + OFFLOAD_MODULES["expert_fc1"], **SLOW)
    columns = row(**moe)
    moe_f, moe_b = passes(columns, True)
    avg_f, avg_b = passes(columns)
    # the average layer is 2/8 dense and 6/8 MoE: the dense layer's passes are what the MoE layers leave of it
    dense_f, dense_b = (8 * avg_f - 6 * moe_f) / 2, (8 * avg_b - 6 * moe_b) / 2
    e_moe = exposed_copy_s(offloaded_layer_bytes(columns, True) / 1e9, moe_f, moe_b)
    e_dense = exposed_copy_s(offloaded_layer_bytes(columns, False) / 1e9, dense_f, dense_b)
    assert offloaded_layer_bytes(columns, True) == BYTES + 2 * 2 * T * H                 # expert_fc1: 2 R h, R = 2 T
    assert offload_layer_s(columns, np.zeros(N_WORK), False) == pytest.approx((2 * e_dense + 6 * e_moe) / 8,
                                                                              rel=1e-12)
    assert offload_layer_s(columns, np.zeros(N_WORK), True) == pytest.approx(e_moe, rel=1e-12)


def test_the_step_is_still_the_sum_of_its_parts_with_offloading():
    r = one(**{"n_gpus": 2}, offload_modules=CORE, **SLOW, pp=2, global_batch=8)
    parts = (r["time_gemm"] + r["time_attention"] + r["time_memory_bound"] + r["pipeline_bubble"]
             + r["time_host_wait"] + r["time_optimizer"] + r["time_offload"] + r["time_straggler"]
             + sum(r[f"exposed_{g}"] for g in ("tp", "cp", "ep", "pp", "dp")))
    assert r["time_offload"] > 0.0
    assert r["step_time"] == pytest.approx(parts, rel=1e-12)


def test_host_memory_per_node_holds_every_offloaded_layer_in_flight_but_one():
    # pp = 1: one micro-batch in flight, 8 layers, the last one kept: 7 o per GPU, 8 GPUs a node
    assert host_offload_bytes(row(**DENSE, offload_modules=CORE, gpus_per_node=8)) == 8 * 7 * BYTES
    # pp = 2, 8 micro-batches: rank 0 holds 2 in flight of its 4 layers (2 x 4 - 1 = 7 o), rank 1 one (3 o)
    assert host_offload_bytes(row(**{**DENSE, "n_gpus": 2, "global_batch": 8}, offload_modules=CORE,
                                  gpus_per_node=4, pp=2)) == 4 * 7 * BYTES
    assert host_offload_bytes(row(**DENSE, gpus_per_node=8)) == 0.0
    assert one(offload_modules=CORE, gpus_per_node=8)["host_offload_bytes"] == 8 * 7 * BYTES


def test_device_host_links_are_their_datasheets():
    from fastmodel.spec.devices import device_table

    devices = device_table()
    for name in ("h100", "h200", "b200"):             # PCIe 5.0 x16: the column's default
        assert devices[name].get("host_link_bw", 16 * 32e9 * 128 / 130 / 8) == pytest.approx(63.015e9, rel=1e-4)
    for name in ("a100", "a100-40gb", "l40s"):                        # PCIe 4.0 x16
        assert devices[name]["host_link_bw"] == 31.5e9
    # NVLink-C2C, 900 GB/s both ways: one GPU on GH200, two sharing it on GB200 / GB300
    assert devices["gh200"]["host_link_bw"] == devices["gh200-144gb"]["host_link_bw"] == 900e9 / 2
    assert devices["gb200"]["host_link_bw"] == devices["gb300"]["host_link_bw"] == 900e9 / 2 / 2


def test_the_timeline_draws_the_exposed_copies_and_still_ends_at_the_step():
    from fastmodel.lm.timeline import KINDS, timeline

    columns = row(**DENSE, offload_modules=CORE, **SLOW)
    r = one(offload_modules=CORE, **SLOW)
    tl = timeline(columns)
    offload = tl.kind == KINDS.index("offload")
    assert float(np.sum(tl.end[offload] - tl.start[offload])) == pytest.approx(r["time_offload"], rel=1e-12)
    assert tl.end.max() == pytest.approx(r["step_time"], rel=1e-9)
    overhead = tl.kind == KINDS.index("overhead")
    assert float(np.sum(tl.end[overhead] - tl.start[overhead])) == pytest.approx(0.0, abs=1e-9)
