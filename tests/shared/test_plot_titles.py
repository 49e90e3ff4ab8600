"""A default title of many --sel coordinates on a small figure: above readable.MAX_TITLE_LINES lines it keeps the
subject (model, system, task) and ellipsizes the fixed coordinates, so the axes keep their height."""

import numpy as np
import pytest
import xarray as xr

import fastmodel.plot as P
from fastmodel.plot.readable import MAX_TITLE_LINES, _lines

FIXED = {"global_batch": 2048, "micro_batch": 1, "recompute": "selective", "sequence_length": 8192,
         "precision": "bf16", "sharding": "distopt", "activation_offload": "none", "pipeline_schedule": "1f1b"}


def _grid():
    """A 4 x 3 (num_nodes x plan) throughput grid with eight fixed scalar coordinates and a model and system."""
    da = xr.DataArray(np.arange(12.0).reshape(4, 3) + 1, dims=("num_nodes", "plan"),
                      coords={"num_nodes": [8, 16, 32, 64], "plan": ["tp8", "tp8.pp2", "tp8.pp4"], **FIXED},
                      attrs={"units": "samples/s", "long_name": "throughput"}, name="throughput")
    return da.to_dataset().assign_attrs(model="llama3.1-70b", system="dgx-h100", task="llm-pretrain")


def test_a_four_line_default_title_keeps_the_subject_and_the_axes_height(recwarn):
    fig, ax = P.heatmap(_grid(), x="num_nodes", y="plan", var="throughput", size=2.5)
    fig.draw_without_rendering()
    title = ax.title.get_text()
    assert title.replace("\n", " ").startswith("llama3.1-70b on dgx-h100, llm-pretrain: ")   # the subject whole
    assert title.endswith("more fixed)") and _lines(ax.title) <= MAX_TITLE_LINES
    # the axes keep 30 % of the figure's height or more (with the whole title, 7 lines here, the layout collapsed)
    assert ax.get_position().height > 0.3
    assert not [w for w in recwarn if "collapsed" in str(w.message)]     # the first layout's warning is not shown


def test_the_whole_title_would_have_squashed_the_axes():
    """The case needs the rule: the same figure with the whole title (wrapped, not shortened) is over the budget
    and its axes are under 30 % of the figure's height (constrained layout gives up: 'axes sizes collapsed')."""
    fig, ax = P.heatmap(_grid(), x="num_nodes", y="plan", var="throughput", size=2.5)
    whole = "llama3.1-70b on dgx-h100, llm-pretrain: " + ", ".join(
        f"{k}={v}" + (" samples" if k == "global_batch" else " tokens" if k == "sequence_length" else "")
        for k, v in FIXED.items())
    ax.set_title(whole)
    ax.title.set_wrap(True)
    with pytest.warns(UserWarning, match="collapsed"):
        fig.draw_without_rendering()
    assert _lines(ax.title) > MAX_TITLE_LINES


def test_a_title_given_by_the_caller_is_left_whole():
    title = "My long caption, " * 12
    fig, ax = P.heatmap(_grid(), x="num_nodes", y="plan", var="throughput", size=2.5, title=title)
    assert ax.title.get_text().replace("\n", " ") == title
