"""Scaling: one line per hue value whose points are the data, log2 axis for powers of two."""

import numpy as np
import pytest
from plot_data import PLANS, synthetic_sweep

import fastmodel.plot as P
from fastmodel.plot.data import PlotError


@pytest.fixture(scope="module")
def ds():
    return synthetic_sweep()


def test_lines_are_the_data(ds, tmp_path):
    fig, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == PLANS
    for plan, line in lines.items():
        np.testing.assert_array_equal(line.get_xdata(), ds.num_nodes.values)
        np.testing.assert_array_equal(line.get_ydata(), ds.throughput.sel(global_batch=2048, plan=plan).values)
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    P.save(fig, tmp_path / "s.svg")
    svg = (tmp_path / "s.svg").read_text()
    assert "throughput [samples/s]" in svg and "tp,ddp/mp" in svg


def test_top_and_reduce(ds):
    _, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", reduce=[("max", "global_batch")], top=1)
    (line,) = ax.get_lines()
    best = ds.throughput.max("global_batch")
    winner = str(best.max("num_nodes").idxmax("plan").values)
    assert line.get_label() == winner
    np.testing.assert_array_equal(line.get_ydata(), best.sel(plan=winner).values)


def test_no_hue_single_line(ds):
    _, ax = P.scaling(ds, "global_batch", var="iteration_time", sel={"num_nodes": 32, "plan": "fsdp/ddp"})
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_ydata(), ds.iteration_time.sel(num_nodes=32, plan="fsdp/ddp").values)


def test_errors(ds):
    with pytest.raises(PlotError, match="global_batch"):
        P.scaling(ds, "num_nodes", var="throughput", hue="plan")
    with pytest.raises(PlotError, match="did you mean 'plan'"):
        P.scaling(ds, "num_nodes", var="throughput", hue="plna", sel={"global_batch": 512})
