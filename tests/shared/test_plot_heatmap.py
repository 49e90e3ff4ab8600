"""Heatmaps: the image is the data slice, missing cells are masked and explained, the best cell is marked."""

import re

import numpy as np
import pytest
from matplotlib.colors import LogNorm
from plot_data import synthetic_sweep

import fastmodel.plot as P
from fastmodel.madmax.lowering.params import STATUS
from fastmodel.plot.data import PlotError


@pytest.fixture(scope="module")
def ds():
    return synthetic_sweep()


def _image(ax):
    (image,) = ax.get_images()
    return image, image.get_array()


def test_image_is_the_slice_with_missing_cells_masked(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 1024})
    _, array = _image(ax)
    expected = ds.throughput.sel(global_batch=1024).transpose("plan", "num_nodes").values
    assert array.shape == expected.shape
    np.testing.assert_array_equal(np.ma.getmaskarray(array), np.isnan(expected))
    np.testing.assert_array_equal(array.compressed(), expected[~np.isnan(expected)])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fsdp/ddp", "tp,ddp/mp", "ddp/ddp"]


def test_illegal_and_infeasible_cells_are_drawn_with_reasons(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048})
    status = ds.status.sel(global_batch=2048).transpose("plan", "num_nodes").values
    groups = {c.get_label(): len(c.get_paths()) for c in ax.collections if c.get_gid() == "missing"}
    assert groups == {"does not fit in memory": int((status == STATUS["does_not_fit"]).sum()),
                      "illegal: product_ne_devices": int((status == STATUS["product_ne_devices"]).sum())}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    counts = [f"{label} ({n} cell{'' if n == 1 else 's'})" for label, n in groups.items()]
    assert all(text in legend for text in counts), (counts, legend)   # each entry says how many cells it marks


def test_dataarray_without_status_marks_nan_as_no_result(ds):
    fig, ax = P.heatmap(ds.throughput.sel(global_batch=2048), x="num_nodes", y="plan")
    (group,) = [c for c in ax.collections if c.get_gid() == "missing"]
    assert group.get_label() == "no result (NaN)"
    assert len(group.get_paths()) == int(ds.throughput.sel(global_batch=2048).isnull().sum())


@pytest.mark.parametrize("var, pick", [("throughput", np.nanargmax), ("iteration_time", np.nanargmin)])
def test_best_cell_is_marked(ds, var, pick):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var=var, sel={"global_batch": 1024})
    values = ds[var].sel(global_batch=1024).transpose("plan", "num_nodes").values
    r, c = np.unravel_index(pick(values), values.shape)
    (box,) = [p for p in ax.patches if p.get_gid() == "best"]
    assert box.get_xy() == (c - 0.5, r - 0.5)


def test_relative_to_plan_is_a_diverging_gain(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="iteration_time", sel={"global_batch": 2048},
                        relative_to="fsdp/ddp")
    image, array = _image(ax)
    t = ds.iteration_time.sel(global_batch=2048).transpose("plan", "num_nodes")
    expected = (t.sel(plan="fsdp/ddp") / t).transpose("plan", "num_nodes").values  # time: baseline / time
    np.testing.assert_allclose(array.filled(np.nan), expected, equal_nan=True)
    assert isinstance(image.norm, LogNorm) and image.norm.vmin * image.norm.vmax == pytest.approx(1.0)
    assert image.cmap.name.startswith("RdBu")


def test_reduce_max_and_argmax(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="global_batch", var="throughput", reduce=[("max", "plan")])
    _, array = _image(ax)
    np.testing.assert_allclose(array.filled(np.nan), ds.throughput.max("plan").transpose("global_batch", "num_nodes"))
    fig, ax = P.heatmap(ds, x="num_nodes", y="global_batch", var="throughput", reduce=[("argmax", "plan")])
    image, codes = _image(ax)
    cbar_labels = [t.get_text() for t in image.colorbar.ax.get_yticklabels()]
    best = ds.throughput.fillna(-1).argmax("plan").transpose("global_batch", "num_nodes").values
    assert [[cbar_labels[int(k)] for k in row] for row in codes] == [[ds.plan.values[i] for i in row] for row in best]


def test_annotations_one_per_finite_cell(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="iteration_time", sel={"global_batch": 2048}, annotate=True)
    values = ds.iteration_time.sel(global_batch=2048).values
    numbers = [t for t in ax.texts if re.fullmatch(r"[\d,.]+", t.get_text())]
    assert len(numbers) == int(np.isfinite(values).sum())


def test_svg_text_and_deterministic_bytes(ds, tmp_path):
    fig, _ = P.heatmap(ds, x="num_nodes", y="plan", var="iteration_time", sel={"global_batch": 2048}, best="min")
    for suffix in ("svg", "pdf", "png"):
        a, b = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
        P.save(fig, a, dpi=100)
        P.save(fig, b, dpi=100)
        assert a.read_bytes() == b.read_bytes(), suffix
    svg = (tmp_path / "a.svg").read_text()
    for text in ("step time [s]", "tp,ddp/mp", "num nodes", "does not fit in memory", "global_batch=2048"):
        assert text in svg, text
    assert "<dc:date>" not in svg
    assert b"CreationDate" not in (tmp_path / "a.pdf").read_bytes()


@pytest.mark.parametrize("kwargs, text", [
    ({"x": "num_nodes", "y": "plan", "var": "throughput"}, "global_batch"),
    ({"x": "num_node", "y": "plan", "var": "throughput", "sel": {"global_batch": 512}}, "did you mean 'num_nodes'"),
    ({"x": "num_nodes", "y": "plan", "var": "thruput"}, "did you mean 'throughput'"),
    ({"x": "num_nodes", "y": "plan", "var": "throughput", "sel": {"global_batch": 500}}, "global_batch=500"),
    ({"x": "num_nodes", "y": "plan", "var": "throughput", "sel": {"global_batch": 512}, "relative_to": "fsdp/dp"},
     "did you mean 'fsdp/ddp'"),
    # a wrong x or y is named even while other dimensions are left to fix (it used to say only "needs 2 dimensions")
    ({"x": "num_node", "y": "plan", "var": "throughput"}, "did you mean 'num_nodes'"),
    ({"x": "plan", "y": "plan", "var": "throughput"}, "x and y are both 'plan'"),
    # a dimension --sel fixed, then reduced: it was "unknown dimension 'global_batch'; dimensions: num_nodes, plan"
    ({"x": "num_nodes", "y": "plan", "var": "throughput", "sel": {"global_batch": 512},
      "reduce": [("max", "global_batch")]}, "--reduce max:global_batch: global_batch is fixed by --sel "
                                            "global_batch=...; reduce it or select it, not both"),
])
def test_errors_name_what_is_wrong(ds, kwargs, text):
    with pytest.raises(PlotError, match=re.escape(text)):
        P.heatmap(ds, **kwargs)


def test_one_value_axes_need_no_sel_and_missing_inputs_are_an_error(ds):
    one_batch = ds.sel(global_batch=[1024])            # a sweep axis with a single value
    fig, ax = P.heatmap(one_batch, x="num_nodes", y="plan", var="throughput")
    _, array = _image(ax)
    expected = ds.throughput.sel(global_batch=1024).transpose("plan", "num_nodes").values
    np.testing.assert_array_equal(array.compressed(), expected[~np.isnan(expected)])
    no_price = ds.assign(cost=ds.throughput * np.nan).assign(status=ds.status * 0)
    with pytest.raises(PlotError, match="cost has no finite value"):
        P.heatmap(no_price, x="num_nodes", y="plan", var="cost", sel={"global_batch": 1024})


def test_annotations_share_one_format(ds):
    _, ax = P.heatmap(ds, x="num_nodes", y="plan", var="iteration_time", sel={"global_batch": 2048}, annotate=True)
    numbers = [t.get_text() for t in ax.texts if re.fullmatch(r"[\d,.]+", t.get_text())]
    decimals = {len(text.partition(".")[2]) for text in numbers}
    assert len(numbers) > 1 and len(decimals) == 1, numbers


def test_title_prints_quantities_with_units():
    import xarray as xr

    da = xr.DataArray(np.arange(4.0).reshape(2, 2), dims=("a", "b"), coords={"a": [1, 2], "b": [3, 4]},
                      name="throughput")
    da = da.assign_coords(port_bandwidth_bytes_per_s=xr.DataArray(25e9, attrs={"units": "B/s"}))
    _, ax = P.heatmap(da, x="b", y="a")
    assert ax.get_title() == "port_bandwidth_bytes_per_s=25 GB/s"


def test_relative_to_colour_bar_spans_the_data(ds):
    fig, _ = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048},
                       relative_to="fsdp/ddp")
    colorbar = fig.axes[-1]
    gains = (ds.throughput.sel(global_batch=2048) / ds.throughput.sel(global_batch=2048, plan="fsdp/ddp")).values
    lo, hi = np.nanmin(gains), np.nanmax(gains)
    np.testing.assert_allclose(sorted(colorbar.get_ylim()), [lo, hi], rtol=1e-12)


def test_the_best_cell_is_named_in_the_legend(ds):
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048}, best="max")
    values = ds.throughput.sel(global_batch=2048).where(ds.status.sel(global_batch=2048) == 0)
    at = values.where(values == values.max(), drop=True)
    text = [t.get_text() for t in fig.legends[0].get_texts() if t.get_text().startswith("best")][0]
    assert text.endswith(f"at plan={at.plan.item()}, num_nodes={at.num_nodes.item()}")


def _real_world_like():
    """A real-world sweep without only_fitting: every point ok, fits_memory 0 for two of six (the faster ones)."""
    import xarray as xr

    from fastmodel.registry.lm_status import STATUSES

    dims, coords = ("num_nodes", "plan"), {"num_nodes": [4, 8], "plan": ["dp", "tp2", "tp8.pp2"]}
    rate = np.array([[1384.0, 1100.0, 1006.0], [1380.0, 1200.0, 1126.0]])
    fits = np.array([[0, 0, 1], [0, 1, 1]], dtype=np.int8)
    status = xr.DataArray(np.zeros((2, 3), dtype=np.int8), dims=dims,
                          attrs={"flag_meanings": " ".join(s.name for s in STATUSES)})
    return xr.Dataset({"tokens_per_s_per_gpu": (dims, rate, {"units": "tokens/s"}),
                       "memory_per_device": (dims, np.full((2, 3), 9e10), {"units": "bytes"}),
                       "fits_memory": (dims, fits), "status": status}, coords=coords)


def test_points_over_memory_of_a_real_world_sweep_are_not_shown_or_reduced():
    """Hurried-user walk: a real-world sweep without only_fitting keeps points over HBM ``ok`` (fits_memory 0);
    the heatmap drew them as results and marked one best, and ``--reduce max:plan`` took the fastest plan
    whether it fit or not (1384 at 4 nodes where ``best`` says 1006). They are now drawn as not fitting, and
    reduced over the plans that fit; a memory map still shows them."""
    ds = _real_world_like()
    _, ax = P.heatmap(ds, x="plan", y="num_nodes", var="tokens_per_s_per_gpu")
    _, array = _image(ax)
    np.testing.assert_array_equal(np.ma.getmaskarray(array), ds.fits_memory.values == 0)
    groups = {c.get_label(): len(c.get_paths()) for c in ax.collections if c.get_gid() == "missing"}
    assert groups == {"does not fit in memory": 3}
    _, ax = P.heatmap(ds, x="plan", y="num_nodes", var="memory_per_device")
    assert not np.ma.getmaskarray(_image(ax)[1]).any()
    from fastmodel.plot.data import prepare

    best, status = prepare(ds, "tokens_per_s_per_gpu", reduce=[("max", "plan")])
    assert best.values.tolist() == [1006.0, 1200.0] and status.values.tolist() == [0, 0]
    with pytest.raises(PlotError, match=r"^tokens_per_s_per_gpu: every point of this selection is illegal or "
                                        r"infeasible \(does_not_fit\); nothing to draw$"):
        prepare(ds.isel(plan=[0]), "tokens_per_s_per_gpu", reduce=[("max", "num_nodes")])


def test_only_sizes_in_bytes_keep_the_points_over_memory():
    """Review: 'memory' in a variable's name kept the points over HBM, so ``time_memory_bound`` (seconds) drew
    them and marked a plan that does not fit best; the rule is the variable's units, bytes."""
    ds = _real_world_like()
    ds["time_memory_bound"] = (ds.memory_per_device.dims, np.full((2, 3), 18.0), {"units": "s"})
    ds["memory_peak_stage"] = (ds.memory_per_device.dims, np.zeros((2, 3)), {"units": "1"})
    for var in ("time_memory_bound", "memory_peak_stage"):
        _, ax = P.heatmap(ds, x="plan", y="num_nodes", var=var)
        np.testing.assert_array_equal(np.ma.getmaskarray(_image(ax)[1]), ds.fits_memory.values == 0)
    _, ax = P.heatmap(ds, x="plan", y="num_nodes", var="memory_per_device")
    assert not np.ma.getmaskarray(_image(ax)[1]).any()


def test_a_map_of_no_feasible_cell_is_refused_in_one_line_as_plot_scaling_refuses_it(tmp_path):
    """Hurried-user walks: a real-world sweep whose every point is over HBM drew hatched cells beside a colour bar
    reading -0.1 .. 0.1 (an earlier walk took the ticks away); it still wrote a fully hatched map and said nothing,
    exit 0. plot scaling refuses such a selection (exit 2, what it left out, --include-oom); the heatmap now says
    the same, before any figure, and draws once a cell has a value (a memory map shows the points over HBM)."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    ds = _real_world_like().isel(plan=[0])          # dp: over HBM at both sizes
    said = (r"^tokens_per_s_per_gpu: no point of this selection has a result to draw \(left out 2 of 2 points: 2 "
            r"does_not_fit\); --include-oom draws the points over memory$")
    with pytest.raises(PlotError, match=said):
        P.heatmap(ds, x="plan", y="num_nodes", var="tokens_per_s_per_gpu")
    assert not np.ma.getmaskarray(_image(P.heatmap(ds, x="plan", y="num_nodes", var="memory_per_device")[1])[1]).any()
    _, ax = P.heatmap(_real_world_like(), x="plan", y="num_nodes", var="tokens_per_s_per_gpu")
    ax.figure.canvas.draw()
    assert [t.get_text() for t in ax.figure.axes[1].get_yticklabels() if t.get_text()]   # a scale where values are
    path, figure = tmp_path / "oom.nc", tmp_path / "h.png"
    ds.to_netcdf(path)
    result = CliRunner().invoke(main, ["plot", "heatmap", str(path), "--x", "plan", "--y", "num_nodes", "-o",
                                       str(figure)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and not figure.exists(), result.output
    assert result.output.startswith("error: tokens_per_s_per_gpu: no point of this selection has a result to draw")


def test_annotating_more_cells_than_can_be_read_is_refused_at_once():
    """A 1,000 x 1,000 map with --annotate spent over 5 minutes laying out 10^6 numbers nobody can read; it is
    refused in one line before any drawing, and a map at the limit (50 x 50) is still annotated cell by cell."""
    import time

    import xarray as xr

    from fastmodel.plot.heatmap import MAX_ANNOTATED_CELLS

    n = 1000
    big = xr.DataArray(np.arange(n * n, dtype=float).reshape(n, n) + 1.0, dims=("a", "b"), name="throughput",
                       coords={"a": np.arange(n), "b": np.arange(n)}, attrs={"units": "samples/s"})
    start = time.perf_counter()
    with pytest.raises(PlotError, match=r"1,000 x 1,000 cells are too many to read \(at most 2,500\)"):
        P.heatmap(big, x="b", y="a", annotate=True)
    assert time.perf_counter() - start < 5.0
    side = int(MAX_ANNOTATED_CELLS ** 0.5)
    _, ax = P.heatmap(big.isel(a=slice(0, side), b=slice(0, side)), x="b", y="a", annotate=True, best=None)
    assert len([t for t in ax.texts if t.get_text()]) == side * side
