"""One layer's forward costs (kernels/lm/layer.py): the idle time each tensor-parallel collective adds."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_TP, layer_costs
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import lower_record
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).parents[1] / "data"
TP8 = "simumax-b200-llama3_70b_l12_tp8_pp1_dp1_mbc32_cef"


def _record(record_id):
    for line in (DATA / "runs_dev_b200.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data["id"] == record_id:
            return lower_record(data)
    raise AssertionError(record_id)


def _tp(row):
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    return work[W_TP]


@pytest.mark.parametrize("sp, collectives", [(1.0, 4), (0.0, 2)])
def test_each_tp_collective_idles_the_gpu_once(sp, collectives):
    """Sequence parallelism runs an all-gather and a reduce-scatter around attention and around the MLP (4 per
    forward pass); without it two all-reduces run: 4 or 2 times collective_overhead_s (23.6 us on B200)."""
    row = _record(TP8).columns.copy()
    assert row[C["collective_overhead_s"]] == pytest.approx(23.6e-6)
    row[C["sequence_parallel"]] = sp
    bare = row.copy()
    bare[C["collective_overhead_s"]] = 0.0
    assert _tp(row) - _tp(bare) == pytest.approx(collectives * 23.6e-6, rel=1e-9)


def test_the_step_pays_it_forward_and_backward_on_every_layer_and_micro_batch():
    """Llama 3 70B (12 layers), TP 8 with SP, 32 micro-batches, no TP overlap: 12 x 32 x (4 + 4) collectives
    each 23.6 us longer = 72.5 ms more step time."""
    row = _record(TP8).columns
    bare = row.copy()
    bare[C["collective_overhead_s"]] = 0.0
    step = evaluate_table(np.stack([row, bare], axis=1))["step_time"]
    assert step[0] - step[1] == pytest.approx(12 * 32 * 8 * 23.6e-6, rel=1e-6)
