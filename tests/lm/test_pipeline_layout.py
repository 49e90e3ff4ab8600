"""An explicit pipeline layout's last rank (kernels/lm/step.py ``last_rank_layers``, ``middle_rank_can_lead``;
docs/model.md §11.22) against a hand derivation, and the recipe builder's reading of Megatron-Core layout strings
(tests/data/make_recipe_plans.py ``expand_layout``, ``last_stage_layers``)."""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.table import row, table
from tests.bench_scripts import load_script

# 7 dense layers on 4 pipeline ranks, uneven: the busiest rank holds ceil(7 / 4) = 2 layers; the default split
# charges the last rank 2 layers + the LM head. The layout "Et*2|t*2|t*2|tL" gives the last rank 1 layer.
BASE = dict(layers=7, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=4096, seq_len=2048,
            n_gpus=16, pp=4, dp=4, micro_batch=1, recompute="none", uneven_stages=1)


def _per_microbatch(**values):
    """Seconds one more micro-batch adds to the step (m 8 -> 16): the busiest rank's micro-batch."""
    small = evaluate_table(table(1, **{**BASE, **values}, global_batch=32))["step_time"][0]
    large = evaluate_table(table(1, **{**BASE, **values}, global_batch=64))["step_time"][0]
    return (large - small) / 8


def _head(**values):
    from fastmodel.kernels.lm.layer import N_WORK
    from fastmodel.kernels.lm.passes import head_passes
    return sum(head_passes(row(**{**BASE, **values}), np.zeros(N_WORK)))


def test_a_layout_with_one_layer_on_the_last_rank_makes_a_middle_rank_the_busiest_by_hand():
    # t_layer: what two more layers per rank add (7 -> 11 layers on 4 ranks: 2 -> 3 on the busiest rank)
    t_layer = _per_microbatch(layers=11) - _per_microbatch()
    t_head = _head()
    assert 0.0 < t_head < t_layer
    # default: t_mb = 2 t_layer + t_head; layout: max(2 t_layer, 1 t_layer + t_head) = 2 t_layer
    assert _per_microbatch() - _per_microbatch(last_stage_layers=1) == pytest.approx(t_head, rel=1e-9)
    # a layout that states the default split's own count (2 layers on the last rank) changes nothing
    assert _per_microbatch(last_stage_layers=2) == pytest.approx(_per_microbatch(), rel=1e-12)


def test_with_a_head_heavier_than_a_layer_the_last_rank_stays_the_busiest_with_its_stated_layers():
    t_layer = _per_microbatch(layers=11, vocab=256000) - _per_microbatch(vocab=256000)
    assert _head(vocab=256000) > t_layer
    # default 2 t_layer + t_head; layout 1 t_layer + t_head: one layer less
    saved = _per_microbatch(vocab=256000) - _per_microbatch(vocab=256000, last_stage_layers=1)
    assert saved == pytest.approx(t_layer, rel=1e-9)


def _builder():
    return load_script(Path(__file__).resolve().parents[1] / "data" / "make_recipe_plans.py")


def test_megatron_layout_strings_expand_as_megatron_core_reads_them():
    b = _builder()
    stages = b.expand_layout("Et*4|(t*4|)*14tmL")        # DeepSeek-V3's 16 virtual stages
    assert len(stages) == 16 and stages[0] == "Etttt" and stages[1:15] == ["tttt"] * 14 and stages[15] == "tmL"
    assert b.expand_layout("Et|(tt|)*30mL") == ["Et"] + ["tt"] * 30 + ["mL"]
    # rank r holds stages r, r + p, ...: PP 16 -> 1 layer on the last rank; PP 4 x VP 4 -> 4 + 4 + 4 + 1 = 13
    assert b.last_stage_layers("Et*4|(t*4|)*14tmL", 16, 61) == 1
    assert b.last_stage_layers("Et*4|(t*4|)*14tmL", 4, 61) == 13
    assert b.last_stage_layers("Et|(tt|)*30mL", 8, 61) == 6      # 2 + 2 + 2 + MTP and loss
    with pytest.raises(AssertionError):                            # the layers must add up to the model's
        b.last_stage_layers("Et*4|(t*4|)*14tmL", 16, 60)


# --- the rule table's layout_not_runnable (kernels/lm/rules.py layout_broken, fastmodel/lm/rules.py layout_reason) ---

def _status(**values):
    from fastmodel.kernels.lm.rules import plan_status_row
    return plan_status_row(row(**{**BASE, "global_batch": 32, **values}))


def test_a_layout_megatron_core_refuses_is_layout_not_runnable():
    from fastmodel.registry.lm import STATUS_CODES
    bad = STATUS_CODES["layout_not_runnable"]
    # 7 layers on 4 ranks: every count 0 .. 7 runs (short and empty stages, docs/model.md §11.25)
    assert [_status(last_stage_layers=n) for n in (-1, 0, 1, 3, 5, 6, 7)] == [0] * 7
    assert _status(last_stage_layers=float("nan")) == bad and _status(last_stage_layers=float("inf")) == bad
    assert _status(last_stage_layers=8) == bad            # above the model's 7 layers
    assert _status(last_stage_layers=1.5) == bad          # not a whole number of layers
    assert _status(last_stage_layers=-2) == bad           # negative but not the -1 default
    assert _status(last_stage_layers=1, embedding_loss_in_split=1) == bad    # Megatron-Core refuses the pair
    assert _status(last_stage_layers=1, pp=1, dp=16) == bad                   # pp 1: the one rank holds all 7
    assert _status(last_stage_layers=7, pp=1, dp=16) == 0 and _status(pp=1, dp=16) == 0


def test_a_single_plan_with_a_bad_layout_is_one_line_naming_the_field():
    from fastmodel.errors import PlanError
    from fastmodel.lm.rules import check_plan
    with pytest.raises(PlanError, match=r"^r\.json: plan: illegal plan \(layout_not_runnable\): "
                                        r"plan\.last_stage_layers = 8 exceeds the model's 7 layers \(Megatron-Core "
                                        r"validate_layer_layout: a layout's decoder layers must match num_layers\)$"):
        check_plan(row(**{**BASE, "global_batch": 32, "last_stage_layers": 8}), "r.json: plan")
    with pytest.raises(PlanError, match=r"last_stage_layers = 1 at pp = 1: the one pipeline rank builds all the "
                                        r"model's 7 layers"):
        check_plan(row(**{**BASE, "global_batch": 32, "last_stage_layers": 1, "pp": 1, "dp": 16}))
    check_plan(row(**{**BASE, "global_batch": 32, "last_stage_layers": 6}))      # 1 layer on 3 ranks: runs
    # NaN and inf give the reason line, not a crash in int()
    for bad in (float("nan"), float("inf")):
        with pytest.raises(PlanError, match=r"last_stage_layers = (nan|inf): a whole number of decoder layers"):
            check_plan(row(**{**BASE, "global_batch": 32, "last_stage_layers": bad}))


def test_layout_reason_reads_whole_numbers_as_the_kernel_does():
    """The kernel's is_multiple takes 8 + 1e-12 as the whole number 8 (1e-9 relative): the reason names the rule
    the kernel broke (more than the model's 7 layers), not a fractional count."""
    from fastmodel.kernels.lm.rules import layout_broken
    from fastmodel.lm.rules import layout_reason
    columns = row(**{**BASE, "global_batch": 32, "last_stage_layers": 8 + 1e-12})
    assert layout_broken(columns)
    assert "exceeds the model's 7 layers" in layout_reason(columns)
    assert not layout_broken(row(**{**BASE, "global_batch": 32, "last_stage_layers": 6 + 1e-12}))
    assert "whole number" in layout_reason(row(**{**BASE, "global_batch": 32, "last_stage_layers": 5.5}))


def test_at_pp2_every_last_stage_count_megatron_runs_is_accepted_and_charged_by_hand():
    """Megatron-Core runs any layout that builds each decoder layer once (PipelineParallelLayerLayout
    .validate_layer_layout, empty stages allowed). 8 layers on 2 ranks: rank 0 holds exactly 8 - n_last
    (layout_busiest_layers), the step's busiest micro-batch is max((8 - n_last) t_layer, n_last t_layer + t_head)."""
    from fastmodel.kernels.lm.memory_states import layout_busiest_layers, stage_layers
    values = dict(layers=8, pp=2, n_gpus=8, dp=4, uneven_stages=0)
    assert [_status(**values, last_stage_layers=n) for n in range(0, 9)] == [0] * 9
    for n in (2, 4, 7):
        columns = row(**{**BASE, **values, "global_batch": 32, "last_stage_layers": n})
        assert layout_busiest_layers(columns) == 8 - n
        assert stage_layers(columns, 0.0) == (8.0 - n, 0.0, 0.0) and stage_layers(columns, 1.0) == (n, 0.0, 0.0)
    t_layer = _per_microbatch(**values, last_stage_layers=2) - _per_microbatch(**values, last_stage_layers=3)
    t_head = _head(**values)
    assert 0.0 < t_head < t_layer
    # n_last 2: rank 0's 6 layers lead; n_last 4 (the default split): 4 t_layer + t_head
    assert _per_microbatch(**values, last_stage_layers=2) == pytest.approx(
        _per_microbatch(**values) + 2 * t_layer - t_head, rel=1e-9)
    # p > 2: the other ranks split the rest evenly, 7 layers on 4 ranks with n_last 0 charge them ceil(7 / 3) = 3
    assert layout_busiest_layers(row(**{**BASE, "global_batch": 32, "last_stage_layers": 0})) == 3
    assert layout_busiest_layers(row(**{**BASE, "global_batch": 32, "last_stage_layers": 3})) == 2
    assert layout_busiest_layers(row(**{**BASE, "global_batch": 32, "last_stage_layers": 5})) == 1   # was 2


# --- memory: the last rank holds the layers the layout states (kernels/lm/memory_states.py stage_layers,
# memory_chunks.py layout_chunk_layers; the timeline fastmodel/lm/memory_timeline.py reads the same kernels) ----------

#: SMALL of tests/lm/test_memory.py on 7 layers and 4 ranks (uneven: the busiest rank 2 layers), DDP, 4 micro-batches
SMALL7 = dict(layers=7, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
              gated_mlp=0, tied_embeddings=0, micro_batch=2, global_batch=8, dp=1, n_gpus=4, pp=4, uneven_stages=1,
              sharding="ddp", grad_reduce_bytes=4, cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0,
              nccl_p2p_channels_per_peer=0, allocator_cache_fraction=0)


def _stage_kinds(columns, stage):
    """(kernel's peak kinds of rank ``stage``, the timeline's largest moment of that rank)."""
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_peak import stage_peak
    from fastmodel.lm.memory_timeline import memory_timeline
    kernel = np.array(stage_peak(columns, float(stage), *peak_terms(columns)))
    return kernel, memory_timeline(columns).stages[stage].totals.max()


def test_a_short_last_stage_holds_its_stated_layers_by_hand():
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_states import stage_layers, stage_params
    h, f, v = 1024, 4096, 1000
    layer = 4 * h * h + 2 * h * f + 2 * h                     # q, k, v, o; the 2-matrix MLP; two norms
    default, layout = row(**SMALL7), row(**SMALL7, last_stage_layers=1)
    assert stage_layers(default, 3.0) == (2.0, 0.0, 0.0) and stage_layers(layout, 3.0) == (1.0, 0.0, 0.0)
    assert stage_params(layout, 3.0) == (1 * layer + v * h + h, 0.0)      # a layer, the untied head, final norm
    assert stage_params(default, 3.0) == (2 * layer + v * h + h, 0.0)
    assert stage_layers(layout, 2.0) == stage_layers(default, 2.0) == (2.0, 0.0, 0.0)   # the others: unchanged
    # the last rank of 1F1B holds one micro-batch: one layer's activations fewer; DDP states 2 + 4 + 12 bytes
    (w0, g0, o0, a0, b0), peak0 = _stage_kinds(default, 3)
    (w1, g1, o1, a1, b1), peak1 = _stage_kinds(layout, 3)
    assert (w0 - w1, g0 - g1, o0 - o1) == (2 * layer, 4 * layer, 12 * layer)
    assert a0 - a1 == pytest.approx(peak_terms(default)[0], rel=1e-12)      # one stored layer, one micro-batch
    assert b0 == b1
    # the timeline (its moments walk the same kernels) moves that rank's worst moment by as much
    assert peak0 - peak1 == pytest.approx(18 * layer + a0 - a1, rel=1e-12)


def test_interleaved_chunks_of_a_short_last_rank_fill_in_order():
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_activations import head_activation_bytes
    from fastmodel.kernels.lm.memory_chunks import chunk_microbatch_bytes
    # 15 layers, PP 4 x VP 2, uneven: 2 layers per chunk; the layout's last rank 3 layers: chunks 2 and 1
    values = {**SMALL7, "layers": 15, "vp": 2, "pipeline_schedule": "interleaved", "global_batch": 16}
    default, layout = row(**values), row(**values, last_stage_layers=3)
    assert _status_of(layout) == 0
    dense = peak_terms(default)[0]
    head = head_activation_bytes(default)
    chunks = [chunk_microbatch_bytes(layout, 3.0, c, dense, 0.0) for c in (0.0, 1.0)]
    assert chunks == pytest.approx([2 * dense, 1 * dense + head], rel=1e-12)
    assert chunk_microbatch_bytes(default, 3.0, 1.0, dense, 0.0) == pytest.approx(2 * dense + head, rel=1e-12)
    # one layer fewer on the last rank: its states (DDP, 18 bytes a parameter) and in-flight chunks fall in the
    # kernel and in the timeline, which walks the schedule; the kernel's closed form stays an upper bound of the
    # walk (its moments differ by a few MB with and without the layout, before this change too)
    (kernel0, peak0), (kernel1, peak1) = _stage_kinds(default, 3), _stage_kinds(layout, 3)
    states = 18 * (4 * 1024 * 1024 + 2 * 1024 * 4096 + 2 * 1024)
    assert kernel0.sum() - kernel1.sum() >= states and peak0 - peak1 >= states
    assert kernel0.sum() >= peak0 and kernel1.sum() >= peak1
    assert kernel1.sum() == pytest.approx(peak1, rel=0.01)


def _status_of(columns):
    from fastmodel.kernels.lm.rules import plan_status_row
    return plan_status_row(columns)
