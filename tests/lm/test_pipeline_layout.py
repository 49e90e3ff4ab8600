"""An explicit pipeline layout's last rank (kernels/lm/step.py ``last_rank_layers``, ``middle_rank_can_lead``;
docs/model.md §11.22) against a hand derivation, and the recipe builder's reading of Megatron-Core layout strings
(tests/data/make_recipe_plans.py ``expand_layout``, ``last_stage_layers``)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.table import row, table

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
    path = Path(__file__).resolve().parents[1] / "data" / "make_recipe_plans.py"
    spec = importlib.util.spec_from_file_location("make_recipe_plans", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
