"""PyTorch FSDP1's backward prefetch and rate limiter (docs/model_memory.md "PyTorch FSDP1: prefetch and the rate
limiter", "PyTorch FSDP1: the recompute's re-gather"): which units are gathered at the backward's peak, which
gathers the time model exposes, how far the CPU may run ahead without the limiter, the stacks' defaults by version,
and the recompute's third gather where the checkpoint wraps the FSDP units. Every expected value is worked out by
hand from the registry's default model (h = 4096, f = 11008, a = kv = 32, d = 128, gated MLP, V = 32000)."""

import pytest

from fastmodel.kernels.lm.evaluate import reserved_bytes
from fastmodel.kernels.lm.memory_fsdp import fsdp_gather_buffer_bytes, fsdp_run_ahead_bytes
from fastmodel.kernels.lm.parallel import fsdp_layer_exposed
from fastmodel.kernels.lm.passes import fsdp_backward_window, recompute_gather
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import resolve
from fastmodel.lm.table import row

H, F, V = 4096, 11008, 32000
#: one layer on one device: q, k, v, o (4 h a d with a d = h) + gate, up, down (3 h f) + two norms (2 h)
LAYER = 4 * H * H + 3 * H * F + 2 * H
FSDP = {"sharding": "fsdp", "dp": 8, "grad_reduce_bytes": 4}


@pytest.mark.parametrize("prefetch, overlap, gathered", [(0, 1, 2), (1, 1, 1), (2, 0, 1), (0, 0, 1)])
def test_units_gathered_at_the_backward_peak(prefetch, overlap, gathered):
    """BACKWARD_PRE (code 0, overlapped): the current and the next unit gathered beside the current unsharded FP32
    gradient, (2 x 2 + 4) U; BACKWARD_POST (1): _post_backward_hook reshards the current unit before it gathers
    the next, (2 + 4) U; no prefetch (2, overlap_param_gather 0) and DeepSpeed-era no-overlap (0, 0): (2 + 4) U."""
    r = row(**FSDP, fsdp_backward_prefetch=prefetch, overlap_param_gather=overlap)
    assert LAYER == 202_383_360
    assert fsdp_gather_buffer_bytes(r) == pytest.approx((gathered * 2 + 4) * LAYER, rel=1e-12)


def test_without_backward_prefetch_only_the_backward_gathers_are_exposed():
    """Per layer: gather 1 s, reduce-scatter 2 s, forward compute 3 s, backward compute 6 s, no SM sharing.
    FSDP1 with backward_prefetch None (code 2, overlap_param_gather 0, overlap_grad_reduce 1): the forward gather
    hides under the forward (the CPU issues it ahead), the backward gather runs alone, the reduce-scatter hides:
    1 s. The same switches without FSDP1's code (DeepSpeed ZeRO-3 with overlap_comm off for gathers): both
    gathers exposed, 2 s. BACKWARD_PRE or POST (overlap 1): 0 s."""
    base = {**FSDP, "overlap_grad_reduce": 1, "comm_sm_share": 0.0}
    none = row(**base, fsdp_backward_prefetch=2, overlap_param_gather=0)
    serial = row(**base, fsdp_backward_prefetch=0, overlap_param_gather=0)
    post = row(**base, fsdp_backward_prefetch=1, overlap_param_gather=1)
    assert fsdp_layer_exposed(none, 1.0, 2.0, 3.0, 6.0) == 1.0
    assert fsdp_layer_exposed(serial, 1.0, 2.0, 3.0, 6.0) == 2.0
    assert fsdp_layer_exposed(post, 1.0, 2.0, 3.0, 6.0) == 0.0


def test_run_ahead_without_the_rate_limiter_is_the_steps_gathers_and_gradients():
    """FSDP1 (fsdp_version 1), limit_all_gathers false, two layers, pp 1, m = 64 / (2 x 8) = 4 micro-batches.
    The stage's parameters on one device: 2 layers + embedding V h + final norm h + untied head V h. Each
    micro-batch gathers them twice in 2 bytes and builds one 4-byte gradient: 4 x (2 x 2 + 4) x P. With the
    limiter, for FSDP2 (no FSDP1 passes) or without sharding: nothing."""
    plan = {**FSDP, "layers": 2, "vocab": V, "micro_batch": 2, "global_batch": 64, "fsdp_version": 1, "fsdp1_grad_passes": 2}
    params = 2 * LAYER + V * H + H + V * H
    assert fsdp_run_ahead_bytes(row(**plan, fsdp_limit_all_gathers=0), 0.0) == pytest.approx(
        4 * (2 * 2 + 4) * params, rel=1e-12)
    assert fsdp_run_ahead_bytes(row(**plan, fsdp_limit_all_gathers=1), 0.0) == 0.0
    assert fsdp_run_ahead_bytes(row(**{**plan, "fsdp_version": 2}, fsdp_limit_all_gathers=0), 0.0) == 0.0
    assert fsdp_run_ahead_bytes(row(**{**plan, "sharding": "distopt"}, fsdp_limit_all_gathers=0), 0.0) == 0.0


def test_reserved_memory_takes_the_run_ahead_up_to_what_the_device_holds():
    """allocated 10 GB, cache fraction 0.05, overhead 1 GB: 10.5 GB reserved with the limiter. Without it (the
    run-ahead above, 4 x 8 x P = 32 x 666,914,816 B = 21.34 GB): a 30 GB device caps it at 30 - 1 = 29 GB (the
    allocator synchronizes and releases there); an 80 GB one holds 10.5 GB + 21.34 GB. Never below the limiter's
    10.5 GB (a 5 GB device)."""
    plan = {**FSDP, "layers": 2, "vocab": V, "micro_batch": 2, "global_batch": 64, "fsdp_version": 1, "fsdp1_grad_passes": 2,
            "allocator_cache_fraction": 0.05}
    run = 4 * (2 * 2 + 4) * (2 * LAYER + 2 * V * H + H)
    assert reserved_bytes(row(**plan, hbm_bytes=80e9), 10e9, 1e9, 0.0) == pytest.approx(10.5e9, rel=1e-12)
    off = {**plan, "fsdp_limit_all_gathers": 0}
    assert run == 32 * 666_914_816
    assert reserved_bytes(row(**off, hbm_bytes=30e9), 10e9, 1e9, 0.0) == pytest.approx(29e9, rel=1e-12)
    assert reserved_bytes(row(**off, hbm_bytes=80e9), 10e9, 1e9, 0.0) == pytest.approx(10.5e9 + run, rel=1e-12)
    assert reserved_bytes(row(**off, hbm_bytes=5e9), 10e9, 1e9, 0.0) == pytest.approx(10.5e9, rel=1e-12)


@pytest.mark.parametrize("framework, prefetch, limiter, overlap", [
    ("PyTorch 1.10 FSDP", "none", False, False),          # no backward_prefetch option yet, no rate limiter
    ("PyTorch 1.13 FSDP", "none", False, False),          # backward_prefetch None, limit_all_gathers False
    ("PyTorch 2.0 FSDP", "pre", False, None),             # BACKWARD_PRE (PR #88428), limiter still off
    ("PyTorch 2.1 FSDP", "pre", True, None),              # limit_all_gathers=True by default (PR #104900)
    ("PyTorch 2 FSDP", "pre", True, None),                # a bare major: some 2.x, as no version (review14 #3)
    ("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", "pre", True, None),
    ("llm-foundry (Composer, PyTorch FSDP)", "post", True, None),     # FSDPConfig backward_prefetch BACKWARD_POST
    ("HF Accelerate FSDP", "none", True, False),          # FullyShardedDataParallelPlugin: NO_PREFETCH
])
def test_fsdp1_stacks_take_prefetch_and_limiter_defaults_by_version(framework, prefetch, limiter, overlap):
    spec = resolve(ExecutionSpec(framework=framework, sharding="fsdp"), 1, 32)
    assert (spec.fsdp_backward_prefetch, spec.fsdp_limit_all_gathers, spec.overlap_param_gather) == (
        prefetch, limiter, overlap)


def test_a_run_stating_no_backward_prefetch_exposes_its_backward_gathers_on_any_fsdp1_stack():
    spec = resolve(ExecutionSpec(framework="fms-fsdp", sharding="fsdp", fsdp_backward_prefetch="none"), 1, 32)
    assert (spec.fsdp_backward_prefetch, spec.overlap_param_gather) == ("none", False)
    stated = resolve(ExecutionSpec(framework="composer", sharding="fsdp", fsdp_limit_all_gathers=False), 1, 32)
    assert (stated.fsdp_backward_prefetch, stated.fsdp_limit_all_gathers) == ("post", False)


def test_fsdp1_prefetch_none_leaves_zero_1_and_2_overlap_alone():
    """review14 #14: FSDP1's backward_prefetch does not gate ZeRO-2's post-step gather (overlap_param_gather left
    to the run); PyTorch 1.x keeps no DP overlap whatever the sharding."""
    zero2 = resolve(ExecutionSpec(framework="HF Accelerate DeepSpeed ZeRO-2", sharding="zero2"), 1, 32)
    assert (zero2.stack, zero2.fsdp_backward_prefetch, zero2.overlap_param_gather) == ("accelerate", "none", None)
    old = resolve(ExecutionSpec(framework="PyTorch 1.10 FSDP", sharding="zero2"), 1, 32)
    assert old.overlap_param_gather is False


def test_a_run_stating_overlap_under_no_backward_prefetch_is_told_the_two_disagree():
    """review14 #4: the stated overlap wins for the time, none for the memory; the note says so, and only then."""
    notes = []
    spec = resolve(ExecutionSpec(framework="fms-fsdp", sharding="fsdp", fsdp_backward_prefetch="none",
                                 overlap_param_gather=True), 1, 32, notes=notes)
    assert spec.overlap_param_gather is True and any("state one of them" in n for n in notes)
    quiet = []
    resolve(ExecutionSpec(framework="fms-fsdp", sharding="fsdp", fsdp_backward_prefetch="none"), 1, 32, notes=quiet)
    assert not any("state one of them" in n for n in quiet)


def test_an_accelerate_fsdp_record_not_stating_its_prefetch_gets_a_note():
    """review14 #13: `accelerate config` writes BACKWARD_PRE while the plugin's default is None: the assumed none
    is named in the notes; a stated prefetch, or no FSDP, gets no note."""
    notes = []
    resolve(ExecutionSpec(framework="HF Accelerate FSDP", sharding="fsdp"), 1, 32, notes)
    assert any(note.startswith("fsdp_backward_prefetch assumed none") for note in notes)
    for spec in (ExecutionSpec(framework="HF Accelerate FSDP", sharding="fsdp", fsdp_backward_prefetch="pre"),
                 ExecutionSpec(framework="HF Accelerate", sharding="zero2")):
        quiet = []
        resolve(spec, 1, 32, quiet)
        assert not any("fsdp_backward_prefetch" in note for note in quiet)
    stated = resolve(ExecutionSpec(framework="HF Accelerate FSDP", sharding="fsdp", fsdp_backward_prefetch="pre"),
                     1, 32)
    assert (stated.fsdp_backward_prefetch, stated.overlap_param_gather) == ("pre", None)


def test_the_recompute_gathers_again_where_the_checkpoint_wraps_the_fsdp_units():
    """A layer's all-gather 1 s (times its fully recomputed share), its recomputed forward 3 s, comm_sm_share 0.1.
    FSDP units inside the checkpointed block (fsdp_units_in_checkpoint 1): a third gather, 1 s on the NCCL stream,
    hidden under the recompute but for the compute it slows, 0.1 x 1 = 0.1 s; with a 0.5 s recompute, 0.5 s left
    over plus 0.1 x 0.5 = 0.55 s. The checkpoint inside the unit (0): no re-gather. DeepSpeed's own fetch
    (param_fetch_bw > 0): the 1 s refetch, all of it exposed, as before (docs/model.md 11.33)."""
    nested = row(**FSDP, fsdp_units_in_checkpoint=1, comm_sm_share=0.1)
    assert recompute_gather(nested, 1.0, 3.0) == pytest.approx((1.0, 0.1), rel=1e-12)
    assert recompute_gather(nested, 1.0, 0.5) == pytest.approx((1.0, 0.55), rel=1e-12)
    assert recompute_gather(row(**FSDP, comm_sm_share=0.1), 1.0, 3.0) == (0.0, 0.0)
    assert recompute_gather(row(**FSDP, comm_sm_share=0.1, param_fetch_bw=21.8e9), 1.0, 3.0) == (1.0, 1.0)


def test_the_recompute_hides_the_re_gather_and_the_backward_the_reduce_scatter():
    """review14 #1, by hand: gather 1 s, reduce-scatter 2 s, re-gather 1.4 s, backward 1.5 s, recompute 1.5 s,
    backward_prefetch none (overlap_param_gather 0, overlap_grad_reduce 1), comm_sm_share 0, forward 3 s (its
    gather hidden). The backward gather is serial, 1 s; the reduce-scatter against the backward alone,
    max(0, 2 - 1.5) = 0.5 s; the re-gather against the recompute, max(0, 1.4 - 1.5) = 0: 1.5 s in all (the NCCL
    stream carries 3.4 s against 3.0 s of compute; 1.0 s when both took backward + recompute). Without the
    re-gather (checkpoint inside the unit) the reduce-scatter keeps backward + recompute: 1.0 s."""
    base = {**FSDP, "overlap_grad_reduce": 1, "comm_sm_share": 0.0, "fsdp_backward_prefetch": 2,
            "overlap_param_gather": 0}
    nested = row(**base, fsdp_units_in_checkpoint=1)
    refetch, refetch_exposed = recompute_gather(nested, 1.4, 1.5)
    window = fsdp_backward_window(nested, refetch, 1.5, 1.5)
    assert (refetch, refetch_exposed, window) == (1.4, 0.0, 1.5)
    assert fsdp_layer_exposed(nested, 1.0, 2.0, 3.0, window) + refetch_exposed == pytest.approx(1.5, rel=1e-12)
    inside = row(**base)
    assert fsdp_backward_window(inside, recompute_gather(inside, 1.4, 1.5)[0], 1.5, 1.5) == 3.0
    assert fsdp_layer_exposed(inside, 1.0, 2.0, 3.0, 3.0) == pytest.approx(1.0, rel=1e-12)
    hooked = row(**base, fsdp_units_in_checkpoint=1, param_fetch_bw=21.8e9)
    assert fsdp_backward_window(hooked, 1.4, 1.5, 1.5) == 3.0


def test_the_checkpoint_nesting_is_stated_never_inferred():
    """Every stack leaves the checkpoint inside the FSDP unit (0); a run states 1 and it reaches the plan."""
    for framework in ("PyTorch 1.10 FSDP", "PyTorch 2.4 FSDP", "composer", "HF Accelerate FSDP", "torchtitan"):
        assert not resolve(ExecutionSpec(framework=framework, sharding="fsdp"), 1, 32).fsdp_units_in_checkpoint
    stated = ExecutionSpec(framework="PyTorch 1.10 FSDP", sharding="fsdp", fsdp_units_in_checkpoint=True)
    assert resolve(stated, 1, 32).fsdp_units_in_checkpoint
