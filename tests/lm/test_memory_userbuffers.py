"""Transformer Engine's Userbuffers under ``tp_comm_overlap`` in the overhead kind (kernels/lm/memory.py
``userbuffer_bytes``), derived by hand from the sources docs/model_memory.md "Overhead" cites: TE@d64bc14d
``initialize_ub`` (transformer_engine/pytorch/module/base.py lines 274-298, 405-408, 467-477: 12 communicators, one
buffer of ``[T, h]`` each, uint8 for the 8 all-gather overlaps under FP8), TE 09ba842 / v1.6rc1 (10 communicators,
the MLPerf v3.1 / v4.0 GPT-3 images), ``CommOverlapP2PBase::initialize`` (comm_gemm_overlap.cpp lines 688-696: a
ring-exchange reduce-scatter holds 2 tp - 1 chunks of T / tp rows) and Megatron-Bridge@b7b4e11b initialize.py lines
356-359 (``T = seq x micro-batch / cp``). The buffers are allocated outside PyTorch's caching allocator, so they
are in ``memory_per_device`` and not in ``memory_allocated``; the TP all-gather the model charged in ``buffers``
is the ring-exchange buffer itself and leaves that kind."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import M_BUFFERS, M_OVERHEAD, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row, userbuffer_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import read_records
from fastmodel.lm.stacks import resolve
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C

MIB = 2**20
GIB = 2**30
DATA = "tests/data/"

#: Llama 3.1 405B at TP 4, PP 16, SP, micro-batch 1 of 8192 tokens: T h = 8192 x 16384 = 128 Mi elements
LLAMA405 = dict(layers=126, hidden=16384, ffn=53248, heads=128, kv_heads=8, head_dim=128, vocab=128256,
                seq_len=8192, micro_batch=1, global_batch=1536, tp=4, pp=16, dp=4, sequence_parallel=1,
                tp_comm_overlap=1)
#: GPT-3 175B as the MLPerf GPT-3 benchmark runs it: TP 4, PP 8, sequence 2048, FP8
GPT3 = dict(layers=96, hidden=12288, ffn=49152, heads=96, kv_heads=96, head_dim=128, vocab=50257, seq_len=2048,
            micro_batch=1, global_batch=1536, tp=4, pp=8, dp=8, sequence_parallel=1, tp_comm_overlap=1, precision=1)


def _kinds(columns) -> np.ndarray:
    kinds = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(columns, kinds)
    return kinds


def test_llama31_405b_bf16_twelve_buffers_of_256_mib():
    """BF16, TE 2.7+: 12 communicators x 8192 x 16384 x 2 B = 12 x 256 MiB = 3 GiB in overhead; the TP all-gather
    (2 T h = 256 MiB) leaves buffers, so the device holds 11 x 256 MiB = 2.75 GiB more than without them."""
    on = row(**LLAMA405, ub_communicators=12)
    assert userbuffer_bytes(on) == 12 * 256 * MIB == 3 * GIB
    with_ub, without = _kinds(on), _kinds(row(**LLAMA405, ub_communicators=0))
    assert with_ub[M_OVERHEAD] - without[M_OVERHEAD] == 3 * GIB
    assert with_ub[M_BUFFERS] - without[M_BUFFERS] == -256 * MIB
    assert with_ub.sum() - without.sum() == 11 * 256 * MIB == 2.75 * GIB


def test_llama31_405b_fp8_ring_exchange_reduce_scatters():
    """FP8 with Megatron-Bridge's FP8 config (proj_fprop and fc2_fprop as ring exchange): 8 all-gather buffers in
    uint8, 8 x 128 MiB; qkv_wgrad and fc1_wgrad 16-bit, 2 x 256 MiB; the two ring reduce-scatters 16-bit with
    2 x 4 - 1 = 7 chunks of 2048 rows, 2 x 7 x 64 MiB: 2,432 MiB. At TP 2 the chunks are 3 of 4096 rows."""
    fp8 = row(**LLAMA405, precision=1, ub_communicators=12, ub_ring_exchange_rs=2)
    assert userbuffer_bytes(fp8) == (8 * 128 + 2 * 256 + 2 * 7 * 64) * MIB == 2432 * MIB
    tp2 = row(**{**LLAMA405, "tp": 2, "dp": 8}, precision=1, ub_communicators=12, ub_ring_exchange_rs=2)
    assert userbuffer_bytes(tp2) == (8 * 128 + 2 * 256 + 2 * 3 * 128) * MIB
    # CP 2 halves the rows: Megatron passes seq x micro-batch / cp
    cp2 = row(**{**LLAMA405, "cp": 2, "dp": 2}, ub_communicators=12)
    assert userbuffer_bytes(cp2) == 12 * 128 * MIB


def test_mlperf_gpt3_ten_communicators():
    """TE 09ba842 (v3.1) and v1.6rc1 (v4.0) make 10 communicators, 6 of them all-gathers (uint8 under FP8):
    T h = 2048 x 12288 = 24 Mi elements. v3.1, every reduce-scatter pipelined: 6 x 24 + 4 x 48 = 336 MiB. v4.0
    micro-batch 2 (T = 4096), fc2_fprop as ring exchange (7 chunks of 1024 rows): 6 x 48 + 3 x 96 + 7 x 24 = 744 MiB."""
    assert userbuffer_bytes(row(**GPT3, ub_communicators=10)) == (6 * 24 + 4 * 48) * MIB == 336 * MIB
    v40 = row(**{**GPT3, "micro_batch": 2}, ub_communicators=10, ub_ring_exchange_rs=1)
    assert userbuffer_bytes(v40) == (6 * 48 + 3 * 96 + 7 * 24) * MIB == 744 * MIB


def test_no_userbuffers_without_the_overlap_tp_or_a_te_stack():
    """No tp_comm_overlap, TP 1, or a stack whose TP overlap is not TE's (ub_communicators 0): nothing, and the TP
    all-gather stays charged in buffers."""
    assert userbuffer_bytes(row(**{**LLAMA405, "tp_comm_overlap": 0}, ub_communicators=12)) == 0.0
    assert userbuffer_bytes(row(**{**LLAMA405, "tp": 1, "dp": 16}, ub_communicators=12)) == 0.0
    assert userbuffer_bytes(row(**LLAMA405, ub_communicators=0)) == 0.0


def test_records_take_the_stack_and_their_own_te():
    """The 405B BF16 V2 recipe plan (megatron-core profile: 12) carries 3 GiB; the MLPerf v4.0 micro-batch-2 record
    states 10 communicators and one ring reduce-scatter (744 MiB); no B200 peak-memory run has the overlap, so
    the validation of memory_allocated / memory_reserved cannot move."""
    plan = next(r for r in read_records(DATA + "recipe_plans.jsonl") if r.id == "mbridge-llama31-405b-gb200-bf16-v2")
    columns = np.asarray(plan.columns, dtype=np.float64).ravel()
    assert (columns[C["ub_communicators"]], columns[C["ub_ring_exchange_rs"]]) == (12.0, 0.0)
    assert userbuffer_bytes(columns) == 3 * GIB
    mlperf = next(r for r in read_records(DATA + "runs_dev.jsonl")
                  if r.id == "mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo")
    columns = np.asarray(mlperf.columns, dtype=np.float64).ravel()
    assert userbuffer_bytes(columns) == pytest.approx(744 * MIB, rel=1e-12)
    b200 = read_records(DATA + "runs_dev_b200.jsonl")
    assert b200 and all(userbuffer_bytes(np.asarray(r.columns, dtype=np.float64).ravel()) == 0.0 for r in b200)


def test_megatron_core_profile_sets_te_communicators_only():
    """Megatron-Core's TP overlap is TE's Userbuffers (12 communicators at TE 2.7+, UB_COMMUNICATORS_TE); DeepSpeed's
    and TorchTitan's profiles leave 0, so their tp_comm_overlap carries no Userbuffers; a record may state its own."""
    def resolved(framework, **fields):
        return resolve(ExecutionSpec(framework=framework, tp_comm_overlap=True, **fields), pp=1, layers=32)

    assert resolved("Megatron-Bridge").ub_communicators == 12.0
    # no userbuffers config named: TE's initialize_ub defaults, both forward reduce-scatters pipelined, FP8 too
    # (base.py lines 288-298; Megatron-Bridge CommOverlapConfig.setup: tp_comm_overlap_cfg None; review7 F6)
    assert not resolved("Megatron-Bridge", precision="fp8").ub_ring_exchange_rs
    assert resolved("NeMo (MLPerf v4.0 NVIDIA submission, 24.04)", ub_communicators=10.0).ub_communicators == 10.0
    assert not resolved("DeepSpeed").ub_communicators
    assert not resolved("TorchTitan").ub_communicators


def _backward_buffers(columns, stage):
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_peak import P_BACKWARD, phase_kinds

    dense, moe, resident, working, gather, comm, grads, logits = peak_terms(columns)
    return phase_kinds(columns, float(stage), P_BACKWARD, dense, moe, working, gather, comm, grads, logits,
                       resident)[4]


def test_the_lm_head_keeps_megatrons_all_gather_buffer():
    """The LM head is Megatron's own ColumnParallelLinear (gpt_model.py ``output_layer``), whose SP all-gather fills
    Megatron's global buffer (tensor_parallel/layers.py ``get_global_memory_buffer().get_tensor``), not a
    Userbuffer: its rank keeps the 2 T h. PP 1, TP 8, Llama 3 70B's width at 8192 tokens: every rank holds the
    head, buffers are the same with and without Userbuffers (the 12 x 128 MiB are all overhead). PP 16 (405B):
    rank 0 loses the 2 T h = 8192 x 16384 x 2 B = 256 MiB at a backward, the last rank keeps it."""
    llama70 = dict(layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=128256,
                   seq_len=8192, micro_batch=1, global_batch=512, tp=8, pp=1, dp=8, sequence_parallel=1,
                   tp_comm_overlap=1)
    on, off = _kinds(row(**llama70, ub_communicators=12)), _kinds(row(**llama70, ub_communicators=0))
    assert on[M_BUFFERS] == off[M_BUFFERS]
    assert on[M_OVERHEAD] - off[M_OVERHEAD] == 12 * 128 * MIB
    assert on.sum() - off.sum() == 12 * 128 * MIB
    on, off = row(**LLAMA405, ub_communicators=12), row(**LLAMA405, ub_communicators=0)
    assert _backward_buffers(off, 0) - _backward_buffers(on, 0) == 256 * MIB
    assert _backward_buffers(on, 15) == _backward_buffers(off, 15)
