"""Pareto: the frontier is exactly the brute-force non-dominated set, for any directions."""

import numpy as np
import pytest
import xarray as xr
from plot_data import synthetic_sweep

import fastmodel.plot as P
from fastmodel.plot.data import PlotError, direction
from fastmodel.plot.pareto import pareto_mask


def brute_force(x, y, x_dir, y_dir):
    a = np.where(x_dir == "min", x, -x)
    b = np.where(y_dir == "min", y, -y)
    ok = np.isfinite(a) & np.isfinite(b)
    out = np.zeros(a.size, dtype=bool)
    for i in np.flatnonzero(ok):
        others = ok & (a <= a[i]) & (b <= b[i]) & ((a < a[i]) | (b < b[i]))
        out[i] = not others.any()
    return out


@pytest.mark.parametrize("x_dir, y_dir", [("min", "min"), ("min", "max"), ("max", "min"), ("max", "max")])
@pytest.mark.parametrize("seed", range(4))
def test_mask_equals_brute_force(x_dir, y_dir, seed):
    rng = np.random.default_rng(seed)
    n = 300
    x = rng.integers(0, 25, n).astype(float)   # many ties on each axis and duplicate points
    y = rng.integers(0, 25, n).astype(float)
    x[rng.random(n) < 0.05] = np.nan
    y[rng.random(n) < 0.05] = np.inf
    np.testing.assert_array_equal(pareto_mask(x, y, x_dir, y_dir), brute_force(x, y, x_dir, y_dir))


def test_default_directions():
    assert [direction(n) for n in ("throughput", "iteration_time", "cost", "memory_per_device", "gpu_hours",
                                   "energy", "train_time", "eff_flop_per_s", "flops_util")] == \
        ["max", "min", "min", "min", "min", "min", "min", "max", "max"]


def test_directions_come_from_the_registries_before_the_name():
    # hfu (real-world), ttft (serving), memory_activations (memory kind): the names alone would guess min/min/min
    assert [direction(n) for n in ("hfu", "ttft", "memory_activations", "mfu")] == ["max", "min", "min", "max"]
    assert direction("my_gain_column") == "max"                       # not registered: the name decides
    assert direction("iteration_time", {"better": "max"}) == "max"    # a dataset's own attr wins


def test_figure_marks_exactly_the_frontier_and_labels_it(tmp_path):
    ds = synthetic_sweep()
    fig, ax = P.pareto(ds, "iteration_time", "throughput", sel={"num_nodes": 64})
    point = ds.sel(num_nodes=64)
    x, y = point.iteration_time.values.ravel(), point.throughput.values.ravel()
    want = brute_force(x, y, "min", "max")
    (front,) = [c for c in ax.collections if c.get_gid() == "frontier"]
    (dominated,) = [c for c in ax.collections if c.get_gid() == "dominated"]
    got = {tuple(p) for p in front.get_offsets()}
    assert got == {(a, b) for a, b in zip(x[want], y[want])}
    assert len(dominated.get_offsets()) == int(np.isfinite(x).sum() - want.sum())
    dims = point.iteration_time.dims
    plans, batches = (c.transpose(*dims).values.ravel()
                      for c in xr.broadcast(point.plan, point.global_batch, point.iteration_time)[:2])
    labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "frontier-label")
    # every varying dimension is named: the plan, and the global batch that tells its points apart
    assert labels == sorted(f"{p}, global_batch={int(b)}" for p, b in zip(plans[want], batches[want]))
    assert ax.frontier.on_frontier.sum() == want.sum()
    P.save(fig, tmp_path / "p.svg")
    svg = (tmp_path / "p.svg").read_text()
    assert "step time (lower is better) [s]" in svg and "throughput (higher is better) [samples/s]" in svg


def test_direction_override_and_where(tmp_path):
    ds = synthetic_sweep()
    _, ax = P.pareto(ds, "iteration_time", "memory_per_device", x_dir="max", where=ds.fits_memory)
    table = ax.frontier
    ok = ds.fits_memory.values.ravel()
    x, y = ds.iteration_time.values.ravel(), ds.memory_per_device.values.ravel()
    want = brute_force(np.where(ok, x, np.nan), y, "max", "min")
    assert table.on_frontier.sum() == want.sum() and len(table) == int(ok.sum())


def test_errors():
    ds = synthetic_sweep()
    with pytest.raises(PlotError, match="did you mean 'iteration_time'"):
        P.pareto(ds, "iteration_tim", "throughput")
    with pytest.raises(PlotError, match="'min' or 'max'"):
        P.pareto(ds, "iteration_time", "throughput", x_dir="up")


def test_a_dimension_constant_on_the_frontier_is_named_once_in_the_legend():
    ds = synthetic_sweep()
    fig, ax = P.pareto(ds, "iteration_time", "throughput", sel={"plan": "fsdp/ddp"})
    table = ax.frontier
    front_nodes = set(table[table.on_frontier].num_nodes)
    assert len(front_nodes) == 1 and table.num_nodes.nunique() > 1  # varies, but not along the frontier
    (front,) = [c for c in ax.collections if c.get_gid() == "frontier"]
    assert front.get_label() == f"Pareto frontier (num_nodes={front_nodes.pop()})"
    labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "frontier-label")
    assert labels == sorted(f"global_batch={b}" for b in table[table.on_frontier].global_batch)


def test_the_legend_sits_under_the_axes():
    ds = synthetic_sweep()
    fig, ax = P.pareto(ds, "iteration_time", "throughput", title="a title")
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.y1 <= ax.get_tightbbox(renderer).y0 + 1e-6    # below the x label, never over the points


def test_one_point_has_no_dominated_entry():
    one = synthetic_sweep().isel(num_nodes=[0], global_batch=[0], plan=[0])
    fig, ax = P.pareto(one, "iteration_time", "throughput")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Pareto frontier"]


def test_the_title_says_what_sel_fixed():
    ds = synthetic_sweep().assign_attrs(model='{"name": "LLaMA2-70B"}', system='{"name": "dc-a"}')
    _, ax = P.pareto(ds, "num_nodes", "throughput", sel={"global_batch": 2048})
    assert ax.get_title() == "LLaMA2-70B on dc-a: global_batch=2048 samples"
    _, ax = P.pareto(ds, "num_nodes", "throughput")
    assert ax.get_title() == "LLaMA2-70B on dc-a"


@pytest.mark.parametrize("draw", ["pareto", "frontier", "serving_pareto"])
def test_a_path_or_other_object_given_as_the_data_is_one_line(draw):
    """`serving_pareto("sweep.nc")` and `pareto("sweep.nc", x, y)` raised AttributeError "'str' object has no
    attribute 'variables'" (a traceback); heatmap and scaling already said what they take."""
    from fastmodel.plot.serving import serving_pareto

    call = {"pareto": lambda d: P.pareto(d, "tpot", "ttft"), "frontier": lambda d: P.frontier(d, "tpot", "ttft"),
            "serving_pareto": lambda d: serving_pareto(d, curve="device")}[draw]
    with pytest.raises(PlotError, match=r"^expected an xarray Dataset or DataArray, got str 'sweep\.nc' "
                                        r"\(a result file: open it with xarray\.open_dataset\)$"):
        call("sweep.nc")


def test_no_legal_point_says_which_statuses_left_them_out():
    """A sweep of one illegal point said "no point has finite step_time and memory_per_device", not why."""
    ds = synthetic_sweep()
    ds["status"] = xr.full_like(ds["status"], 1)
    ds["step_time"] = ds["step_time"].where(ds["status"] == 0)
    with pytest.raises(PlotError) as err:
        P.pareto(ds, x="step_time", y="memory_per_device")
    n = ds["status"].size
    assert str(err.value).startswith(f"no point has finite step_time and memory_per_device: left out {n} of {n} "
                                     f"points: {n} ")
