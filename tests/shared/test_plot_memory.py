"""The memory-by-kind figure of real-world sweeps."""

import numpy as np
import pytest
from click.testing import CliRunner
from plot_data import synthetic_sweep

import fastmodel.plot as P
from fastmodel.cli import main
from fastmodel.lm.sweep import lm_sweep
from fastmodel.plot.data import PlotError
from fastmodel.plot.memory import memory_bars, memory_table


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
    # the default margin is each plan's own allocator cache (docs/model_memory.md "What a run keeps free"): the
    # line is the HBM itself
    assert grid.attrs["memory_margin_rule"] == "allocator_cache" and "usable_hbm_bytes" not in grid.attrs
    assert line and line[0].get_ydata()[0] == pytest.approx(grid.attrs["hbm_bytes"] / 2**30)
    assert len(ax.get_xticklabels()) == int(legal.sum())              # the illegal tp3 is left out
    assert ax.get_xlabel() == "plan (1 illegal left out)"              # ... and the axis says so
    assert ax.get_title(loc="left") == "Llama 3.1 70B on dgx-h100, llm-pretrain"
    # the HBM line is named in the legend, not by a text on the line, which sat on the bars crossing it
    assert not [t for t in ax.texts if "HBM" in t.get_text()]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"HBM {grid.attrs['hbm_bytes'] / 2**30:.0f} GiB\n(less each plan's\nallocator cache)" in legend


def test_memory_kinds_sum_to_memory_per_device(grid):
    ok = grid.status == 0
    assert np.allclose(grid.memory.sum("memory_kind").where(ok).values[ok.values],
                       grid.memory_per_device.values[ok.values])
    assert grid.fits_memory.dtype == bool


def test_more_than_one_varying_dimension_is_a_one_line_error():
    """Walk 9: with two dimensions varying it said 'fix the others with --sel: plan, micro_batch', every one of
    them; it says which vary and that --dim names the bars' (then 'only plan may vary' names the rest)."""
    ds = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp2", "tp4"], "micro_batch": [1, 2]})
    with pytest.raises(PlotError, match=r"^the memory breakdown shows configurations along one dimension, and plan, "
                                        r"micro_batch vary: name the bars' with --dim \(dim= in Python\) and fix the "
                                        r"others with --sel \(ds\.sel\)$"):
        memory_bars(ds)
    with pytest.raises(PlotError, match=r"\(only 'plan' may vary\); fix the others with --sel \(ds\.sel in "
                                        r"Python\): micro_batch$"):
        memory_bars(ds, dim="plan")


# --- with a selection, through breakdown(quantity="memory") and the CLI -------------------------------------


@pytest.fixture(scope="module")
def two_dims():
    return lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain",
                    axes={"num_nodes": [16, 32], "plan": ["tp8.pp4", "tp4.pp4", "dp", "tp3"]})


def _stacks(ax):
    heights = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        heights[x] = heights.get(x, 0.0) + patch.get_height()
    return [heights[i] for i in sorted(heights)]


def test_a_selection_leaves_one_dimension_and_breakdown_stacks_the_same(two_dims):
    fig, ax = memory_bars(two_dims, sel={"num_nodes": 32})
    point = two_dims.sel(num_nodes=32)
    legal = [p for p in point.plan.values if int(point.status.sel(plan=p)) == 0]
    assert [t.get_text() for t in ax.get_xticklabels()] == legal == ["tp8.pp4", "tp4.pp4", "dp"]
    assert np.allclose(_stacks(ax), [float(point.memory_per_device.sel(plan=p)) / 2**30 for p in legal])
    fig2, ax2 = P.breakdown(two_dims, sel={"num_nodes": 32}, quantity="memory")
    assert _stacks(ax2) == _stacks(ax)
    assert [p.get_gid() for p in ax2.patches] == [p.get_gid() for p in ax.patches]


def test_one_configuration_is_one_bar_named_by_its_coordinates(two_dims, tmp_path):
    fig, ax = memory_bars(two_dims, sel={"num_nodes": 16, "plan": "tp8.pp4"})
    assert len(_stacks(ax)) == 1
    assert _stacks(ax)[0] == pytest.approx(float(two_dims.memory_per_device.sel(num_nodes=16, plan="tp8.pp4")) / 2**30)
    label = ax.get_xticklabels()[0].get_text()
    assert "plan=tp8.pp4" in label and "num_nodes=16" in label
    P.save(fig, tmp_path / "one.svg")
    # the H100 80 GB's CUDA-visible 79.11 GiB; each plan keeps its own allocator cache free below it
    svg = (tmp_path / "one.svg").read_text()
    assert "HBM 79 GiB" in svg and "(less each plan" in svg
    fig.draw_without_rendering()
    assert ax.get_window_extent().width > 0.3 * fig.bbox.width     # the legend leaves the bars their room


def test_the_title_says_what_the_selection_fixed(two_dims):
    _, ax = memory_bars(two_dims, sel={"num_nodes": 16})
    assert ax.get_title(loc="left") == "Llama 3.1 70B on dgx-h100, llm-pretrain: num_nodes=16"


def test_python_errors(two_dims):
    with pytest.raises(PlotError, match="num_nodes, plan vary: name the bars. with --dim .* fix the others with --sel"):
        memory_bars(two_dims)
    with pytest.raises(PlotError, match="did you mean 'plan'"):
        memory_bars(two_dims, dim="plans", sel={"num_nodes": 16})
    with pytest.raises(PlotError, match="did you mean 'memory'"):
        P.breakdown(two_dims, quantity="memroy")
    with pytest.raises(PlotError, match=r"no result \(illegal or does not fit\) for plan=tp3"):
        P.breakdown(two_dims, sel={"num_nodes": 16})
    with pytest.raises(PlotError, match="real-world training result.*MAD-Max results hold weights only"):
        memory_bars(synthetic_sweep())


def test_a_serving_result_is_told_which_memory_variables_it_holds():
    import xarray as xr
    serving = xr.Dataset({"kv_cache_memory": ("concurrency", np.ones(2)), "weight_memory": ("concurrency", np.ones(2))})
    with pytest.raises(PlotError, match="serving result holds weight_memory, kv_cache_memory") as err:
        memory_bars(serving)
    assert "MAD-Max" not in str(err.value)


@pytest.fixture(scope="module")
def files(two_dims, tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    two_dims.to_netcdf(folder / "real.nc")
    synthetic_sweep().to_netcdf(folder / "madmax.nc", engine="scipy")
    return str(folder / "real.nc"), str(folder / "madmax.nc")


MAGIC = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}


@pytest.mark.parametrize("args, suffix", [
    (["memory", "{r}", "--sel", "num_nodes=16"], ".png"),
    (["memory", "{r}", "--sel", "plan=tp8.pp4", "--size", "double"], ".pdf"),
    (["breakdown", "{r}", "--memory", "--sel", "num_nodes=32", "--sel", "plan=dp", "--sel", "plan=tp4.pp4"], ".svg"),
    (["breakdown", "{r}", "--quantity", "memory", "--sel", "num_nodes=32"], ".png"),
    (["breakdown", "{r}", "--sel", "num_nodes=32", "--sel", "plan=dp", "--sel", "plan=tp8.pp4"], ".svg"),
])
def test_cli_writes_the_figure_atomically(files, tmp_path, args, suffix):
    out = tmp_path / f"fig{suffix}"
    result = CliRunner().invoke(main, ["plot", *[a.format(r=files[0]) for a in args], "-o", str(out), "--dpi", "60"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(MAGIC[suffix])
    assert [p.name for p in tmp_path.iterdir()] == [out.name]          # no temporary left behind


@pytest.mark.parametrize("args, text", [
    (["memory", "{r}"], "fix the others with --sel"),
    (["memory", "{r}", "--sel", "num_nodes=16", "--dim", "plans"], "did you mean 'plan'"),
    (["memory", "{r}", "--sel", "num_nodes=64"], "num_nodes=64 is not in the data"),
    (["memory", "{m}", "--sel", "num_nodes=16"], "real-world training result"),
    (["breakdown", "{m}", "--memory", "--sel", "num_nodes=16"], "real-world training result"),
    (["breakdown", "{r}", "--sel", "num_nodes=16"], "no result (illegal or does not fit) for plan=tp3"),
    (["breakdown", "{r}", "--quantity", "mem", "--sel", "num_nodes=16"], "'mem' is not one of"),
    (["memory", "missing.nc"], "no such file"),
])
def test_cli_bad_input_is_one_line_exit_2(files, tmp_path, args, text):
    out = tmp_path / "x.png"
    result = CliRunner().invoke(main, ["plot", *[a.format(r=files[0], m=files[1]) for a in args], "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.output
    assert not out.exists()


def test_time_breakdown_of_a_real_world_result_stacks_to_the_step_time(two_dims):
    from fastmodel.registry.lm import BREAKDOWN

    compute = BREAKDOWN.overlapped[:5]      # GEMM, attention, memory-bound, optimizer, pipeline bubble

    plans = ["tp8.pp4", "tp4.pp4", "dp"]
    fig, ax = P.breakdown(two_dims, sel={"num_nodes": 32, "plan": plans})
    bars = {p.get_gid(): (p.get_y(), p.get_height()) for p in ax.patches if p.get_gid()}
    for i, plan in enumerate(plans):
        row = two_dims.sel(num_nodes=32, plan=plan)
        for kind, prefix in (("Serialized", "comm_"), ("Overlapped", "exposed_")):
            parts = [*compute, *(prefix + g for g in ("tp", "cp", "ep", "pp", "dp"))]
            bottom = 0.0
            for part in parts:
                component = {"pipeline_bubble": "bubble"}.get(part, part.split("_", 1)[1])
                y, h = bars[f"{kind}:{component}:{i}"]
                assert y == pytest.approx(bottom) and h == pytest.approx(float(row[part]))
                bottom += h
            if kind == "Overlapped":
                assert bottom == pytest.approx(float(row.step_time), rel=1e-9)
    assert float(two_dims.exposed_tp.sel(num_nodes=32, plan="tp8.pp4")) > 0      # the TP share is drawn
    assert "TP comm." in [t.get_text() for t in fig.legends[0].get_texts()]
    assert ax.get_ylabel() == "time per step [s]"


def test_one_configuration_of_many_fixed_coordinates_keeps_its_axes(tmp_path):
    """Walk of 2026-12-07e: ``plot memory plans.nc --sel num_nodes=16 --sel micro_batch=1 --sel recompute=selective
    --sel plan=tp8.pp4`` named its one bar by the four coordinates on one line, wider than the axes: matplotlib
    warned 'constrained_layout not applied because axes sizes collapsed to zero' on stderr and the bar stood in a
    sliver of the figure. The label now puts a coordinate on each line."""
    import warnings

    ds = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", axes={"num_nodes": [16], "plan": ["tp8.pp4"],
                                                                     "micro_batch": [1], "recompute": ["selective"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, ax = memory_bars(ds)
        P.save(fig, tmp_path / "one.png")
    assert ax.get_xticklabels()[0].get_text().split("\n")[:2] == ["num_nodes=16", "plan=tp8.pp4"]
    assert ax.get_window_extent().width > 0.3 * fig.bbox.width
    # review8 #9: the newlines are the figure's; the coordinate memory_table returns to Python keeps ", "
    dim, table = memory_table(ds)
    name = str(table["configuration"].values[0])
    assert dim == "configuration" and "\n" not in name and name.split(", ")[:2] == ["num_nodes=16", "plan=tp8.pp4"]
    assert ax.get_xticklabels()[0].get_text() == name.replace(", ", "\n")
