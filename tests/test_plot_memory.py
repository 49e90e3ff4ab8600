"""The memory-by-kind figure of real-world sweeps."""

import numpy as np
import pytest

from fastmodel.lm_sweep import lm_sweep
from fastmodel.plot.data import PlotError
from fastmodel.plot.memory import memory_bars


@pytest.fixture(scope="module")
def grid():
    return lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16,
                    axes={"plan": ["tp8.pp8", "tp8.pp4", "tp4.pp8", "tp2", "tp3"]},
                    execution={"recompute": "selective"})


def test_bars_stack_to_memory_per_device_and_draw_the_hbm_line(grid):
    fig, ax = memory_bars(grid)
    legal = (grid.status == 0).values
    heights = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        heights[x] = heights.get(x, 0.0) + patch.get_height()
    expected = grid.memory_per_device.values[legal] / 2**30
    assert np.allclose([heights[i] for i in range(len(expected))], expected)
    line = [ln for ln in ax.get_lines() if ln.get_gid() == "hbm"]
    assert line and line[0].get_ydata()[0] == pytest.approx(grid.attrs["usable_hbm_bytes"] / 2**30)
    assert len(ax.get_xticklabels()) == int(legal.sum())              # the illegal tp3 is left out


def test_memory_kinds_sum_to_memory_per_device(grid):
    ok = grid.status == 0
    assert np.allclose(grid.memory.sum("memory_kind").where(ok).values[ok.values],
                       grid.memory_per_device.values[ok.values])
    assert grid.fits_memory.dtype == bool


def test_more_than_one_varying_dimension_is_a_one_line_error():
    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp2", "tp4"], "micro_batch": [1, 2]})
    with pytest.raises(PlotError, match="micro_batch"):
        memory_bars(ds)
