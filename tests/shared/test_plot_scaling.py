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
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_gid() != "ideal"}
    assert list(lines) == PLANS
    for plan, line in lines.items():
        np.testing.assert_array_equal(line.get_xdata(), ds.num_nodes.values)
        np.testing.assert_array_equal(line.get_ydata(), ds.throughput.sel(global_batch=2048, plan=plan).values)
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    assert fig.get_suptitle() == "global_batch=2048 samples"       # the title says what --sel fixed
    P.save(fig, tmp_path / "s.svg")
    svg = (tmp_path / "s.svg").read_text()
    assert "throughput [samples/s]" in svg and "tp,ddp/mp" in svg


def test_top_and_reduce(ds):
    _, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", reduce=[("max", "global_batch")], top=1)
    (line,) = [line for line in ax.get_lines() if line.get_gid() != "ideal"]
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
    # one --sel value fixes the dimension: it was "unknown dimension 'plan'; dimensions: num_nodes"
    with pytest.raises(PlotError, match=r"^--hue plan: plan is fixed by --sel plan=\.\.\.; keep two or more"):
        P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 512, "plan": "fsdp/ddp"})


def test_lines_differ_in_marker_and_style_and_ideal_scaling_is_linear(ds):
    _, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048})
    lines = [line for line in ax.get_lines() if line.get_gid() != "ideal"]
    styles = [(line.get_marker(), line.get_linestyle(), line.get_markerfacecolor()) for line in lines]
    assert len(set(styles)) == len(styles)  # overlapping lines stay distinguishable
    (ideal,) = [line for line in ax.get_lines() if line.get_gid() == "ideal"]
    values = ds.throughput.sel(global_batch=2048).transpose("plan", "num_nodes").values
    first = np.flatnonzero(np.isfinite(values).any(axis=0))[0]
    start = np.nanmax(values[:, first])  # best plan at the smallest cluster, then x-fold on x-fold nodes
    nodes = ds.num_nodes.values.astype(float)
    np.testing.assert_allclose(ideal.get_ydata(), start * nodes / nodes[first], rtol=1e-12)
    _, ax = P.scaling(ds, "num_nodes", var="iteration_time", hue="plan", sel={"global_batch": 2048})
    (ideal,) = [line for line in ax.get_lines() if line.get_gid() == "ideal"]
    times = ds.iteration_time.sel(global_batch=2048).transpose("plan", "num_nodes").values
    np.testing.assert_allclose(ideal.get_ydata(), np.nanmin(times[:, first]) * nodes[first] / nodes, rtol=1e-12)
    _, ax = P.scaling(ds, "global_batch", var="throughput", hue="plan", sel={"num_nodes": 32})
    assert not [line for line in ax.get_lines() if line.get_gid() == "ideal"]  # not a hardware axis


def test_a_line_without_results_says_so_and_inf_starts_no_ideal_line():
    import xarray as xr

    from fastmodel.plot.scaling import ideal_line

    rows = np.array([[np.inf, 2.0, 4.0], [1.0, 2.0, 3.0]])
    np.testing.assert_allclose(ideal_line([1, 2, 4], rows, True), [1.0, 2.0, 4.0])   # from the finite 1.0
    da = xr.DataArray([[np.nan, np.nan, np.nan], [1.0, 2.0, 3.0]], dims=("plan", "num_nodes"),
                      coords={"plan": ["a", "b"], "num_nodes": [1, 2, 4]}, name="throughput")
    fig, ax = P.scaling(da, "num_nodes", hue="plan")
    labels = ax.get_legend().get_texts()
    assert [t.get_text() for t in labels][:2] == ["a (no result)", "b"]


def test_ideal_scaling_of_a_rate_per_device_is_flat():
    """Linear scaling multiplies the cluster's tokens/s by the node ratio and leaves tokens/s per GPU (and MFU)
    where they were: the ideal line of a per-GPU rate ran up 2x from 8 to 16 nodes, as if each GPU got faster.
    Hand derivation: best at 8 nodes 1,000 tokens/s per GPU -> ideal 1,000 at 8, 16 and 32 nodes; the cluster's
    8 x 8 x 1,000 = 64,000 tokens/s -> 64,000, 128,000, 256,000."""
    import xarray as xr

    from fastmodel.plot.scaling import per_device

    nodes = [8, 16, 32]
    per_gpu = xr.DataArray([[1000.0, 900.0, 800.0], [950.0, 940.0, 930.0]], dims=("plan", "num_nodes"),
                           coords={"plan": ["a", "b"], "num_nodes": nodes}, name="tokens_per_s_per_gpu",
                           attrs={"units": "tokens/s"})
    _, ax = P.scaling(per_gpu, "num_nodes", hue="plan")
    (ideal,) = [line for line in ax.get_lines() if line.get_gid() == "ideal"]
    np.testing.assert_allclose(ideal.get_ydata(), [1000.0, 1000.0, 1000.0])
    assert ideal.get_label() == "ideal (constant per device)"
    whole = (per_gpu * xr.DataArray(np.array(nodes) * 8.0, dims="num_nodes")).rename("tokens_per_s")
    _, ax = P.scaling(whole.assign_attrs(units="tokens/s"), "num_nodes", hue="plan")
    (ideal,) = [line for line in ax.get_lines() if line.get_gid() == "ideal"]
    np.testing.assert_allclose(ideal.get_ydata(), [64000.0, 128000.0, 256000.0])
    assert ideal.get_label() == "ideal (linear)"
    assert per_device("mfu", "1") and per_device("eff_flop_per_s", "FLOP/s") and not per_device("throughput",
                                                                                                  "samples/s")


def test_many_lines_keep_the_best_and_say_how_many_of_all():
    """114 plans drew 114 lines and a legend taller than the figure (the axes collapsed to a sliver): without
    --top, the 12 best are drawn and the legend's title counts them; --top asks for any number."""
    import xarray as xr

    from fastmodel.plot.scaling import MAX_LINES

    n = 30
    values = np.arange(n, dtype=float)[:, None] * np.array([1.0, 2.0])[None, :] + 1.0   # plan k: k+1, 2k+2
    da = xr.DataArray(values, dims=("plan", "num_nodes"), name="throughput", attrs={"units": "samples/s"},
                      coords={"plan": [f"p{k}" for k in range(n)], "num_nodes": [16, 32]})
    fig, ax = P.scaling(da, "num_nodes", hue="plan")
    drawn = [line.get_label() for line in ax.get_lines() if line.get_gid() != "ideal"]
    assert drawn == [f"p{k}" for k in range(n - MAX_LINES, n)]              # the highest throughputs
    assert ax.get_legend().get_title().get_text() == f"plan: {MAX_LINES} best of {n}"
    fig.draw_without_rendering()
    legend = ax.get_legend().get_window_extent()
    assert legend.height <= fig.bbox.height                               # the legend fits the figure
    _, ax = P.scaling(da, "num_nodes", hue="plan", top=n)
    assert len([line for line in ax.get_lines() if line.get_gid() != "ideal"]) == n
    assert ax.get_legend().get_title().get_text() == "plan"


def test_points_that_do_not_fit_are_gaps_and_the_legend_counts_them(ds):
    """A real-world sweep keeps the results of plans over HBM (fits_memory 0): scaling drew 'dp' at 570 GiB per
    GPU as the best line. Such points are now gaps, as in the heatmap, and a legend line counts what the drawn
    lines leave out. Hand count: dp does not fit at 4 and 8 nodes, tp2 at 4 -> 3 points, no line for dp."""
    import xarray as xr

    from fastmodel.registry.lm_status import STATUSES

    dims, coords = ("num_nodes", "plan"), {"num_nodes": [4, 8], "plan": ["dp", "tp2", "tp8.pp2"]}
    rate = np.array([[1384.0, 1100.0, 1006.0], [1380.0, 1200.0, 1126.0]])
    fits = np.array([[0, 0, 1], [0, 1, 1]], dtype=np.int8)
    status = xr.DataArray(np.zeros((2, 3), dtype=np.int8), dims=dims,
                          attrs={"flag_meanings": " ".join(s.name for s in STATUSES)})
    real = xr.Dataset({"tokens_per_s_per_gpu": (dims, rate, {"units": "tokens/s"}), "fits_memory": (dims, fits),
                       "status": status}, coords=coords)
    _, ax = P.scaling(real, "num_nodes", var="tokens_per_s_per_gpu", hue="plan")
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines() if line.get_gid() != "ideal"}
    assert list(lines) == ["dp (no result)", "tp2", "tp8.pp2"]
    np.testing.assert_array_equal(lines["tp2"], [np.nan, 1200.0])
    np.testing.assert_array_equal(lines["tp8.pp2"], [1006.0, 1126.0])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.left_out == "left out 3 of 6 points: 3 does_not_fit"    # 2 nodes x 3 plans drawn
    assert legend[-1] in (ax.left_out, "left out 3 of 6 points")     # whole, or its head when too long
    # the MAD-Max sweep: ddp/ddp does not fit at 16 nodes, tp,ddp/mp is illegal at 128 (global batch 2048)
    _, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048})
    assert ax.left_out == "left out 2 of 12 points: 1 does_not_fit, 1 product_ne_devices"


def test_top_at_least_the_hue_count_draws_every_line_and_the_legend_says_plain_hue():
    """The cap applies in the Python API too (top=None): an author asking for all of 30 lines passes top=30 (or
    more) and gets all 30, the legend titled 'plan' (no 'best of')."""
    import xarray as xr

    n = 30
    values = np.arange(n, dtype=float)[:, None] * np.array([1.0, 2.0])[None, :] + 1.0
    da = xr.DataArray(values, dims=("plan", "num_nodes"), name="throughput", attrs={"units": "samples/s"},
                      coords={"plan": [f"p{k}" for k in range(n)], "num_nodes": [16, 32]})
    for top in (n, 10 * n):
        _, ax = P.scaling(da, "num_nodes", hue="plan", top=top)
        assert len([line for line in ax.get_lines() if line.get_gid() != "ideal"]) == n
        assert ax.get_legend().get_title().get_text() == "plan"
