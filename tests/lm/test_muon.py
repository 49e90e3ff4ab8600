"""The Muon optimizer (kernels/lm/muon.py; docs/model.md §11.7 "Muon", docs/model_memory.md "Optimizer states"),
each term against a hand count from KellerJordan/Muon@00ba60d muon.py and the modded-nanogpt records of October
2024 (KellerJordan/modded-nanogpt@f411b3d3 records/track_1_short/2024-10-1*/)."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import M_OPTIMIZER, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.muon import muon_step, ns_flops, ns_iteration_flops, ns_time, owned_share, stage_matrices
from fastmodel.kernels.roofline import gemm_time, memory_bound_time
from fastmodel.lm.table import row

#: the 2024-10-14..18 records' model: 12 layers, h 768, 6 heads of 128, a 2-matrix 3072 MLP, tied 50304 vocab
SPEEDRUN = dict(layers=12, hidden=768, ffn=3072, heads=6, kv_heads=6, head_dim=128, vocab=50304, seq_len=1024,
                gated_mlp=0, tied_embeddings=1, micro_batch=64, global_batch=512, n_gpus=8, dp=8, sharding="ddp",
                grad_reduce_bytes=4, optimizer="muon", cuda_context_bytes=0, cublas_workspace_bytes=0,
                nccl_channels=0, nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)


def test_newton_schulz_flops_of_a_768_by_3072_matrix_by_hand():
    # muon.py: X is 768 x 3072 (m = 768 <= n = 3072). A = X X^T: 2 x 768 x 768 x 3072 = 3,623,878,656;
    # A A: 2 x 768^3 = 905,969,664; B X: 2 x 768 x 768 x 3072 = 3,623,878,656 -> 8,153,726,976 per iteration
    r = row(**SPEEDRUN)
    assert ns_iteration_flops(r, 768.0, 3072.0) == 8_153_726_976
    assert ns_flops(r, 768.0, 3072.0) == 5 * 8_153_726_976 == 40_768_634_880
    assert ns_flops(r, 3072.0, 768.0) == ns_flops(r, 768.0, 3072.0)        # a tall update is transposed first
    # the October 2024 records: A = X X^T, B = A X, A B, three 768 x 768 x 3072 products = 10,871,635,968
    old = row(**SPEEDRUN, muon_ns_gram_square=0)
    assert ns_iteration_flops(old, 768.0, 3072.0) == 3 * 3_623_878_656 == 10_871_635_968
    assert ns_flops(old, 768.0, 3072.0) == 54_358_179_840
    # square matrices: both forms are 6 m^3
    assert ns_iteration_flops(old, 768.0, 768.0) == ns_iteration_flops(r, 768.0, 768.0) == 6 * 768 ** 3


def test_newton_schulz_time_is_its_gemms_and_element_wise_passes():
    r = row(**SPEEDRUN, muon_ns_steps=3)
    m, n = 768.0, 3072.0
    iteration = (gemm_time(r, m, m, n, False) + gemm_time(r, m, m, m, False) + gemm_time(r, m, n, m, False)
                 + memory_bound_time(r, 2 * (3 * m * m + 3 * m * n)))
    prologue = memory_bound_time(r, (4 + 4) * m * n)        # read the FP32 update, write and read its bf16 copy
    assert ns_time(r, m, n, 2.0) == pytest.approx(2 * (3 * iteration + prologue), rel=1e-12)


def test_the_records_matrices_and_their_round_robin_share():
    # per layer Q, K, V, O (768 x 768) and the MLP's two 768 x 3072: 6 matrices, 4 x 768^2 + 2 x 768 x 3072
    r = row(**SPEEDRUN)
    count, params = stage_matrices(r, 12.0, 0.0)
    assert (count, params) == (72, 12 * (4 * 768 * 768 + 2 * 768 * 3072)) == (72, 84_934_656)
    assert owned_share(r, 72.0) == pytest.approx(9 / 72)       # 72 over 8 ranks: 9 each
    assert owned_share(r, 73.0) == pytest.approx(10 / 73)      # the busiest rank gets ceil(73 / 8)
    assert owned_share(row(**SPEEDRUN, muon_distributed=0), 72.0) == 1.0


def test_update_passes_by_hand():
    # owned element, FP32 momentum, gradient and parameter: lerp 2x4 + 4, Nesterov lerp 2x4 + 4, decay 2x4,
    # add 2x4 + 2 (bf16 update) = 42 bytes; each rank owns 1/8 of the 84,934,656 matrix parameters
    _, passes, params = muon_step(row(**SPEEDRUN), 12.0, 0.0, 4.0)
    assert params == 84_934_656
    assert passes == pytest.approx(84_934_656 / 8 * 42, rel=1e-12)


def test_muon_optimizer_state_bytes_by_hand():
    def optimizer_bytes(**values):
        out = np.full(N_MEMORY_KINDS, np.nan)
        memory_row(row(**{**SPEEDRUN, **values}), out)
        return out[M_OPTIMIZER]

    matrices = 84_934_656
    others = 50304 * 768 + 12 * 2 * 768 + 768          # tied embedding, two norms per layer, the final norm
    adam = optimizer_bytes(optimizer="adamw")
    assert adam == pytest.approx(12 * (matrices + others), rel=1e-12)      # FP32 master + m + v
    # Muon: the matrices keep the FP32 master and one FP32 momentum, on their owner only (1/8 of them per rank);
    # AdamW's 12 bytes for the rest
    assert optimizer_bytes() == pytest.approx(4 * matrices + 4 * matrices / 8 + 12 * others, rel=1e-12)
    assert optimizer_bytes(muon_distributed=0) == pytest.approx(8 * matrices + 12 * others, rel=1e-12)


def test_muon_step_time_by_hand():
    """time_optimizer = Newton-Schulz on the owned matrices + the gather + the memory-bound passes (linear in
    bytes, no constant term): against AdamW, Muon replaces AdamW's 30 bytes per matrix element (master 8, bf16
    copy 2, moments 16, gradient 4) with 42 bytes per owned element, and adds the owned iterations and the
    all-gather of the 4-byte matrices over the 8 ranks."""
    from fastmodel.kernels.nccl import allgather_time
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    def optimizer_time(**values):
        return evaluate_table(table(1, **{**SPEEDRUN, **values}))["time_optimizer"][0]

    p = 84_934_656
    r = row(**SPEEDRUN)
    ns = 12 * (ns_time(r, 768.0, 768.0, 4.0) + ns_time(r, 768.0, 3072.0, 2.0))
    adam = optimizer_time(optimizer="adamw")
    replicated = optimizer_time(muon_distributed=0)
    assert replicated - adam == pytest.approx(ns + memory_bound_time(r, p * (42 - 30)), rel=1e-9)
    distributed = optimizer_time()
    gather = allgather_time(r, 4.0 * p, 8.0, 1.0)
    assert distributed - adam == pytest.approx(ns / 8 + gather + memory_bound_time(r, p * 42 / 8)
                                               - memory_bound_time(r, p * 30), rel=1e-9)


def test_muon_steps_the_mtp_module_s_layer_and_projection_by_hand():
    """Review: Muon's step omitted the MTP module's matrices. With one MTP module (a dense model: its layer is a
    dense layer, shape.mtp_layer_is_moe) the last stage holds 13 layers' matrices and eh_proj, 2h x h = 1536 x 768
    (docs/model.md §11.4 "MTP module"): replicated Muon minus AdamW is 13 layers' and eh_proj's Newton-Schulz plus
    12 more bytes per matrix element; the optimizer memory keeps 8 bytes per matrix element and AdamW's 12 for the
    rest, now with the module's five norms (the layer's two, enorm, hnorm, final_layernorm)."""
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    mtp = dict(mtp_layers=1)
    p = 13 * (4 * 768 * 768 + 2 * 768 * 3072) + 2 * 768 * 768
    r = row(**SPEEDRUN, **mtp)
    ns = 13 * (ns_time(r, 768.0, 768.0, 4.0) + ns_time(r, 768.0, 3072.0, 2.0)) + ns_time(r, 1536.0, 768.0, 1.0)

    def optimizer_time(**values):
        return evaluate_table(table(1, **{**SPEEDRUN, **mtp, **values}))["time_optimizer"][0]

    assert optimizer_time(muon_distributed=0) - optimizer_time(optimizer="adamw") == pytest.approx(
        ns + memory_bound_time(r, p * (42 - 30)), rel=1e-9)
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(row(**{**SPEEDRUN, **mtp, "muon_distributed": 0}), out)
    others = 50304 * 768 + 13 * 2 * 768 + 768 + 3 * 768
    assert out[M_OPTIMIZER] == pytest.approx(8 * p + 12 * others, rel=1e-12)
