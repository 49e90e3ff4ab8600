"""The backward re-gather of sequence-parallel inputs for the weight gradient (docs/model.md §11.41): Megatron-Core
and Transformer Engine save each column-parallel GEMM's input as the local sequence slice and all-gather it again
in backward, at the forward gather's bytes; PyTorch DTensor plans save the gathered input. Each check against a
hand derivation."""

from types import SimpleNamespace

import numpy as np
import pytest

from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, layer_costs
from fastmodel.kernels.lm.passes import A_EXPOSED_B, A_EXPOSED_F, A_TP_COMM, A_TP_EXPOSED, layer_passes
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.nccl import allgather_time
from fastmodel.kernels.roofline import gemm_roofline
from fastmodel.lm.stacks import kempnerforge, torchtitan
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import RECOMPUTE_CODES, column_defaults
from tests.lm.lowprec_rows import BLACKWELL, HOPPER, MICRO, SEQ, TP, H, sp_row

N = SEQ * MICRO * H                                 # 25,165,824 elements gathered per collective
OVERHEAD = 20e-6


def _row(precision="bf16", recipe="unstated", cc=HOPPER, **values) -> np.ndarray:
    """SP on, the default wgrad re-gather, a collective overhead of OVERHEAD."""
    return sp_row(precision, recipe, cc, overhead=OVERHEAD, **values)


def _layer(row):
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    return work[W_TP], work[W_TP_BACKWARD]


def test_default_is_megatron_and_te():
    assert column_defaults()[C["sp_wgrad_regather"]] == 1.0


# bytes of the re-gathered input: the forward gather's (TE gathers the saved quantized copy: per-tensor FP8 its
# rowwise uint8 data, MXFP8 / blockwise the columnwise copy and its scales, NVFP4 its E2M1 data and E4M3 scales)
@pytest.mark.parametrize("precision, recipe, cc, nbytes", [
    ("bf16", "unstated", HOPPER, 2.0 * N),                                 # 50,331,648 B
    ("fp8", "delayed", HOPPER, 1.0 * N),                                   # 25,165,824 B
    ("fp8", "mxfp8", BLACKWELL, 25_952_256.0),                             # (1 + 1/32) N
    ("fp8", "blockwise", HOPPER, 25_952_256.0),                            # (1 + 4/128) N
    ("fp4", "unstated", BLACKWELL, 14_155_776.0),                          # (0.5 + 1/16) N
])
def test_backward_adds_two_gathers_at_the_forward_bytes(precision, recipe, cc, nbytes):
    """backward = 2 (AG(b_b N) + AG(2 N)) + 4 o + amax + 2 (AG(b_f N) + o); the forward is unchanged."""
    on = _row(precision, recipe, cc)
    off = _row(precision, recipe, cc, sp_wgrad_regather=0.0)
    regather = 2.0 * (allgather_time(on, nbytes, TP, 1.0) + OVERHEAD)
    assert regather > 2.0 * OVERHEAD
    (fwd_on, bwd_on), (fwd_off, bwd_off) = _layer(on), _layer(off)
    assert fwd_on == fwd_off
    assert bwd_on - bwd_off == pytest.approx(regather, rel=1e-9)


def test_bf16_layer_by_hand():
    """BF16, TP 4 under SP: six all-gathers of 2 N = 50,331,648 B in backward (the output-gradient gathers, the
    reduce-scatters priced as all-gathers, the wgrad re-gathers) against four forward; 6 o against 4 o."""
    row = _row()
    ag = allgather_time(row, 50_331_648.0, TP, 1.0)
    assert _layer(row) == pytest.approx((4.0 * ag + 4.0 * OVERHEAD, 6.0 * ag + 6.0 * OVERHEAD), rel=1e-12)


def test_delayed_fp8_layer_by_hand():
    """MLPerf GPT-3's delayed-scaling FP8 (TE 1.x): every gather 1 B per element, the reduce-scatters 2 B."""
    row = _row("fp8", "delayed")
    gather, scatter = allgather_time(row, N, TP, 1.0), allgather_time(row, 2.0 * N, TP, 1.0)
    fixed = 4.0 * OVERHEAD + amax_reduction_time(row)
    forward = 2.0 * (gather + scatter) + fixed
    backward = 2.0 * (gather + scatter) + fixed + 2.0 * (gather + OVERHEAD)
    assert _layer(row) == pytest.approx((forward, backward), rel=1e-12)


def test_no_regather_without_sp_or_tp():
    plain = _row(sequence_parallel=0.0)
    assert _layer(plain) == _layer(_row(sequence_parallel=0.0, sp_wgrad_regather=0.0))
    assert _layer(plain)[0] == _layer(plain)[1]
    assert _layer(_row(tp=1.0)) == (0.0, 0.0)


def test_recompute_leaves_the_regather_at_one_per_backward():
    """Full recompute re-runs the forward (its gathers: W_TP twice); the backward, and its re-gathers, runs once:
    A_TP_COMM = 2 W_TP + W_TP_BACKWARD."""
    shape = {"layers": 2.0, "heads": 96.0, "kv_heads": 96.0, "head_dim": 128.0, "ffn": 49152.0, "moe_experts": 0.0}
    for recompute, forwards in (("none", 1.0), ("full", 2.0)):
        row = _row(recompute=RECOMPUTE_CODES[recompute], **shape)
        forward, backward = _layer(row)
        off = _layer(_row(recompute=RECOMPUTE_CODES[recompute], sp_wgrad_regather=0.0, **shape))
        assert backward - off[1] == pytest.approx(2.0 * (allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD))
        work = np.zeros(N_PASS_WORK)
        layer_passes(row, work)
        assert work[A_TP_COMM] == pytest.approx(forwards * forward + backward, rel=1e-12), recompute


def test_dtensor_stacks_save_the_gathered_input():
    execution = SimpleNamespace(torch_compile=False, moe_dispatcher="alltoall", compile_scope="model")
    assert torchtitan.defaults(execution, "TorchTitan")["sp_wgrad_regather"] is False
    assert kempnerforge.defaults(execution, "KempnerForge")["sp_wgrad_regather"] is False


def _moe_layer(**values):
    row = _row(heads=96.0, kv_heads=96.0, head_dim=128.0, moe_experts=64.0, moe_topk=2.0, moe_ffn=2048.0, **values)
    work = np.zeros(N_WORK)
    layer_costs(row, True, False, work)
    return row, work[W_TP_BACKWARD]


@pytest.mark.parametrize("shared, overlap, linears", [
    (0.0, 0.0, 1.0),    # QKV only: the dispatcher's gather (a mapping) feeds the experts, nothing re-gathered
    (1.0, 0.0, 2.0),    # + the shared expert's FC1, a TE column-parallel linear on the SP input
    (1.0, 1.0, 1.0),    # --moe-shared-expert-overlap: its gather is gather_from_sequence_parallel_region
])
def test_a_moe_layer_regathers_its_own_column_parallel_inputs(shared, overlap, linears):
    row, on = _moe_layer(moe_shared_experts=shared, moe_shared_expert_overlap=overlap)
    _, off = _moe_layer(moe_shared_experts=shared, moe_shared_expert_overlap=overlap, sp_wgrad_regather=0.0)
    assert on - off == pytest.approx(linears * (allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD), rel=1e-9)


# --- the re-gather runs under its own linear's dgrad GEMM (async, §11.41) ------------------------------------------
GPT3 = {"layers": 2.0, "heads": 96.0, "kv_heads": 96.0, "head_dim": 128.0, "ffn": 49152.0, "gated_mlp": 0.0}
TOKENS = SEQ * MICRO


def _hidden_by_hand(row, windows):
    """Per linear: the gather (AG(b_f N) + o) against its dgrad GEMM D: exposed = max(0, c - D) + s min(c, D), so
    hidden = c - exposed (s = comm_sm_share)."""
    c = allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD
    s = row[C["comm_sm_share"]]
    return sum(c - (max(0.0, c - d) + s * min(c, d)) for d in windows)


def _gemm(row, m, n, k):
    return gemm_roofline(row, 1.0, m, n, k, False, 2.0, 1.0) / row[C["stack_compute_eff"]]


def test_the_dgrad_windows_are_the_layers_column_parallel_gemms():
    """GPT-3 (ungated MLP): the layer's forward GEMMs are QKV (3h/t), out-proj, FC1 (f/t), FC2; the dgrad of a
    linear is a GEMM of its forward's size, so QKV's and FC1's windows are those two forward GEMMs, and with the
    row-parallel two they sum to the layer's W_GEMM."""
    row = _row(**GPT3)
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    qkv, fc1 = _gemm(row, TOKENS, 3.0 * H / TP, H), _gemm(row, TOKENS, 49152.0 / TP, H)
    proj, fc2 = _gemm(row, TOKENS, H, H / TP), _gemm(row, TOKENS, H, 49152.0 / TP)
    assert qkv + fc1 + proj + fc2 == pytest.approx(work[W_GEMM], rel=1e-12)
    assert work[W_TP_HIDDEN] == pytest.approx(_hidden_by_hand(row, (qkv, fc1)), rel=1e-12)
    assert 0.0 < work[W_TP_HIDDEN] < 2.0 * (allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD)


@pytest.mark.parametrize("share", [0.0, 0.15])
def test_limits_of_the_overlap(share):
    """A GEMM longer than the gather hides it all but the SM share: hidden = (1 - s) c per linear; a gather longer
    than the GEMM (slow links) hides (1 - s) D."""
    fast = _row(comm_sm_share=share, **GPT3)
    c = allgather_time(fast, 2.0 * N, TP, 1.0) + OVERHEAD
    qkv, fc1 = _gemm(fast, TOKENS, 3.0 * H / TP, H), _gemm(fast, TOKENS, 49152.0 / TP, H)
    work = np.zeros(N_WORK)
    assert c < min(qkv, fc1)                  # 0.14 ms against 0.75 / 0.90 ms at the default H100 NVLink
    layer_costs(fast, False, False, work)
    assert work[W_TP_HIDDEN] == pytest.approx(2.0 * (1.0 - share) * c, rel=1e-12)
    slow = _row(comm_sm_share=share, collective_overhead_s=1.0, **GPT3)   # c > 1 s > any GEMM here
    layer_costs(slow, False, False, work)
    assert work[W_TP_HIDDEN] == pytest.approx((1.0 - share) * (qkv + fc1), rel=1e-12)


def test_exposed_tp_drops_by_the_hidden_share_only_without_tp_overlap():
    """A_TP_COMM is unchanged (the gather still runs); without tp_comm_overlap A_TP_EXPOSED = A_TP_COMM - hidden; with
    it the layer's rule: exposed(A_TP_COMM, passes x W_GEMM) (TE's ub_bulk_dgrad overlaps the gather with dgrad)."""
    for overlap in (0.0, 1.0):
        row = _row(tp_comm_overlap=overlap, **GPT3)
        work = np.zeros(N_PASS_WORK)
        layer_passes(row, work)
        layer = np.zeros(N_WORK)
        layer_costs(row, False, False, layer)
        assert work[A_TP_COMM] == pytest.approx(layer[W_TP] + layer[W_TP_BACKWARD], rel=1e-12)
        if overlap:
            s = row[C["comm_sm_share"]]
            window = 3.0 * layer[W_GEMM]
            tp = work[A_TP_COMM]
            assert work[A_TP_EXPOSED] == pytest.approx(max(0.0, tp - window) + s * min(tp, window), rel=1e-12)
        else:
            assert work[A_TP_EXPOSED] == pytest.approx(work[A_TP_COMM] - layer[W_TP_HIDDEN], rel=1e-12)
            assert layer[W_TP_HIDDEN] > 0.0
            # the hidden share is the backward's: the forward's TP stays exposed whole
            assert work[A_EXPOSED_F] == pytest.approx(layer[W_TP], rel=1e-12)
            assert work[A_EXPOSED_B] == pytest.approx(layer[W_TP_BACKWARD] - layer[W_TP_HIDDEN], rel=1e-12)


def test_nothing_hidden_without_a_regather():
    for values in ({"sp_wgrad_regather": 0.0}, {"sequence_parallel": 0.0}, {"tp": 1.0}):
        work = np.zeros(N_WORK)
        layer_costs(_row(**{**GPT3, **values}), False, False, work)
        assert work[W_TP_HIDDEN] == 0.0, values


def test_a_moe_layer_hides_qkv_and_the_shared_expert_fc1():
    """MoE: QKV's window, plus the shared expert's FC1 ((m - 1) s f_moe / t wide) when it re-gathers."""
    for shared, overlap, fc1 in ((0.0, 0.0, False), (1.0, 0.0, True), (1.0, 1.0, False)):
        row = _row(heads=96.0, kv_heads=96.0, head_dim=128.0, moe_experts=64.0, moe_topk=2.0, moe_ffn=2048.0,
                   moe_shared_experts=shared, moe_shared_expert_overlap=overlap)
        work = np.zeros(N_WORK)
        layer_costs(row, True, False, work)
        windows = [_gemm(row, TOKENS, 3.0 * H / TP, H)] + ([_gemm(row, TOKENS, 2.0 * 2048.0 / TP, H)] if fc1 else [])
        assert work[W_TP_HIDDEN] == pytest.approx(_hidden_by_hand(row, windows), rel=1e-12), (shared, overlap)
