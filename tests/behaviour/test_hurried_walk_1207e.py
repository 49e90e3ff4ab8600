"""The hurried user's walk of 2026-12-07e (brief "walk8": plots, calibrate, batch, sweeps at scale, the Python
API for papers). Each case is a defect found on the walk, the message or result it now gives; no test here
compiles a kernel at a new signature (synthetic datasets, refusals before any evaluation, the serving sweep
tests/behaviour/test_hurried_leftovers.py evaluates)."""

import pytest

from tests.plot_data import synthetic_file
from tests.suite_fixtures import cli, one_line_error


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    return synthetic_file(tmp_path_factory)


def test_a_heatmap_axis_fixed_by_sel_says_so(sweep_file, tmp_path):
    """Was ``unknown dimension 'plan'; dimensions: num_nodes`` for ``plot heatmap --x num_nodes --y plan --sel
    plan=...``: the dimension is in the data, --sel took it away; ``plot scaling`` said so for its --x and --hue."""
    one_line_error(cli("plot", "heatmap", sweep_file, "--x", "num_nodes", "--y", "plan", "--var", "step_time",
                       "--sel", "global_batch=1024", "--sel", "plan=fsdp/ddp", "-o", tmp_path / "h.png"),
                   "--y plan: plan is fixed by --sel plan=...; keep two or more values")
    one_line_error(cli("plot", "heatmap", sweep_file, "--x", "num_nodes", "--y", "global_batch", "--var",
                       "step_time", "--sel", "num_nodes=16", "--sel", "plan=fsdp/ddp", "-o", tmp_path / "h.png"),
                   "--x num_nodes: num_nodes is fixed by --sel num_nodes=...")
    result = cli("plot", "heatmap", sweep_file, "--x", "num_nodes", "--y", "plan", "--var", "step_time",
                 "--sel", "global_batch=1024", "--sel", "plan=fsdp/ddp", "--sel", "plan=ddp/ddp", "-o",
                 tmp_path / "two.png")
    assert result.exit_code == 0 and (tmp_path / "two.png").exists(), result.output


@pytest.fixture(scope="module")
def serving_file(tmp_path_factory):
    """The serving grid of test_hurried_leftovers.py (same kernel signature) as a file for ``plot pareto``."""
    from fastmodel.io.aliases import without_aliases
    from fastmodel.serve.api import sweep

    ds = sweep("llama3.1-70b", device=["H100", "A100"], precision="fp8", tp=[1, 8], batch_size=[1, 256],
               input_len=8192, output_len=256, load_mode="concurrency")
    path = tmp_path_factory.mktemp("walk8s") / "serve.nc"
    without_aliases(ds).to_netcdf(path, engine="scipy")
    return path


def test_a_serving_pareto_of_one_selected_device_or_one_point_draws_it(serving_file, tmp_path):
    """``plot pareto serve.nc --sel device=H100`` was refused with ``unknown curve dimension 'device'`` (the
    default curve, the device, fixed by --sel); it now draws that device's one frontier. A selection down to one
    point (every dimension fixed) raised ValueError from numpy (a traceback); it is a frontier of one point."""
    result = cli("plot", "pareto", serving_file, "--sel", "device=H100", "-o", tmp_path / "one.png")
    assert result.exit_code == 0 and "device = H100:" in result.output, result.output
    assert "tp=8, batch_size=256" in result.output
    result = cli("plot", "pareto", serving_file, "--sel", "device=H100", "--sel", "tp=8", "--sel", "batch_size=1",
                 "-o", tmp_path / "point.png")
    assert result.exit_code == 0 and (tmp_path / "point.png").exists(), result.output
    rows = result.output.split("device = H100:\n")[1].splitlines()
    assert len(rows[0].split()) == 2 and rows[1] == f"wrote {tmp_path / 'point.png'}", result.output
    one_line_error(cli("plot", "pareto", serving_file, "--sel", "device=A100", "--sel", "tp=8", "--sel",
                       "batch_size=1", "--curve", "tp", "-o", tmp_path / "left.png"),
                   "for a tp frontier: left out 1 of 1 points: 1 no_fp8")


def test_validate_of_a_file_of_batch_cases_only_is_one_line(tmp_path):
    """``fastmodel validate tests/data/madmax_cases_dev.jsonl`` printed 65 'refused (a miss): ... a batch case'
    lines and a table of 0 runs answered, and exited 0 (``calibrate`` of the same file stops in one line, as
    ``validate`` of a file of plan-only records does); not one line is a run record, so it is one line, exit 2."""
    from tests.suite_fixtures import data_lines

    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(data_lines("madmax_cases_dev.jsonl", 3)) + "\n\n")
    one_line_error(cli("validate", path), f"{path}: record: no line is a run record: all 3 lines are batch cases",
                   "batch cases go to fastmodel batch")
    path.write_text(data_lines("madmax_cases_dev.jsonl", 1)[0])
    one_line_error(cli("validate", path, "--plot", tmp_path / "v.png"), "the one line is a batch case")
    assert not (tmp_path / "v.png").exists()


def test_a_value_repeated_in_sel_is_selected_once(sweep_file, tmp_path):
    """``plot scaling --x num_nodes --sel num_nodes=8 --sel num_nodes=8`` drew the one point twice at x = 8: two
    ticks on one spot, thinned to 'num nodes (every 2nd labelled)', the label turned on its side, and an 'ideal'
    line of one point in the legend; a heatmap drew the repeated plan as two rows. A value given twice is
    selected once (--sel of one value fixes its dimension, and --x then says so)."""
    import xarray as xr

    from fastmodel.plot.data import prepare

    ds = xr.open_dataset(sweep_file)
    da, _ = prepare(ds, "step_time", sel={"plan": ["fsdp/ddp", "fsdp/ddp", "ddp/ddp"], "global_batch": 1024})
    assert list(da["plan"].values) == ["fsdp/ddp", "ddp/ddp"]
    one_line_error(cli("plot", "scaling", sweep_file, "--x", "num_nodes", "--var", "throughput", "--sel",
                       "global_batch=1024", "--sel", "plan=fsdp/ddp", "--sel", "num_nodes=32", "--sel", "num_nodes=32",
                       "-o", tmp_path / "s.png"), "--x num_nodes: num_nodes is fixed by --sel num_nodes=...")


def test_a_relative_to_baseline_not_in_the_data_names_the_option(sweep_file, tmp_path):
    """``plot heatmap ... --relative-to tp8.pp3`` said only ``plan='tp8.pp3' is not in the data``: the plan was
    given to --relative-to, not to --sel; the line now starts with the option."""
    one_line_error(cli("plot", "heatmap", sweep_file, "--x", "num_nodes", "--y", "plan", "--var", "throughput",
                       "--sel", "global_batch=1024", "--relative-to", "fsdp/dp", "-o", tmp_path / "r.png"),
                   "error: --relative-to fsdp/dp: plan='fsdp/dp' is not in the data (did you mean 'fsdp/ddp'?)")


def test_validate_plot_says_it_wrote_the_figure(tmp_path):
    """``validate runs.jsonl --plot v.png`` wrote the figure without a word, where ``-o rows.csv`` and every plot
    command print ``wrote FILE``; it now says it too."""
    from tests.suite_fixtures import data_lines

    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev.jsonl", 2)) + "\n")
    result = cli("validate", runs, "--plot", tmp_path / "v.svg", "-o", tmp_path / "rows.csv")
    assert result.exit_code == 0 and (tmp_path / "v.svg").exists(), result.output
    assert f"wrote {tmp_path / 'v.svg'}\n" in result.output and f"wrote {tmp_path / 'rows.csv'}" in result.output


@pytest.mark.parametrize("args, said", [
    (("best", "{r}", "--by", "throughput", "--sel", "num_nodes=16"),
     "No such option '--sel': 'main best' picks points with --where DIM=VALUE (e.g. --where num_nodes=8)"),
    (("best", "{r}", "--by", "throughput", "--filter=num_nodes=16"), "best' picks points with --where"),
    (("plot", "heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--where", "global_batch=1024", "-o", "h.png"),
     "No such option '--where': 'main plot heatmap' picks points with --sel DIM=VALUE"),
])
def test_an_option_another_command_has_for_the_job_names_this_commands_own(sweep_file, args, said):
    """``best r.nc --sel num_nodes=16`` (plot's selection) was "No such option '--sel'. (Did you mean one of: '--csv',
    '--help'?)", and ``plot heatmap --where`` (best's filter) "Did you mean '--help'?"; each now names the option
    the command has for it (CliRunner names the program main)."""
    one_line_error(cli(*(str(a).replace("{r}", str(sweep_file)) for a in args)), said)


def test_a_frontier_per_curve_labels_its_axes_with_units(sweep_file, tmp_path):
    """``plot pareto r.nc --x step_time --y memory_per_device --curve plan`` (the frontier per curve, a training
    result) labelled its axes 'step time (lower is better)' with no [s] and memory_per_device in bytes as 1e+10;
    the axes now say their display units, as the one-frontier figure does."""
    import xarray as xr

    from fastmodel.plot.serving import serving_pareto

    fig, ax = serving_pareto(xr.open_dataset(sweep_file), curve="plan", x="step_time", y="memory_per_device",
                             sel={"global_batch": 1024})
    assert ax.get_xlabel() == "step time (lower is better) [ms]"      # the synthetic steps take milliseconds
    assert ax.get_ylabel() == "memory per device (lower is better) [GiB]"
    fig.draw_without_rendering()
    shown = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert shown and not any("e+" in t for t in shown), shown


def test_a_frontier_per_curve_of_too_many_curves_is_one_line(sweep_file, tmp_path):
    """``plot pareto madmax.nc --x step_time --y memory_per_device --curve plan`` (52 plans) drew 45 frontiers: a
    legend over the axes, colours repeating, matplotlib's 'constrained_layout not applied' warning on stderr. More
    curves than plot scaling draws lines (12) is one line naming --sel to keep some."""
    import numpy as np
    import xarray as xr

    ds = xr.open_dataset(sweep_file)
    many = xr.concat([ds.isel(plan=[k % 3]).assign_coords(plan=[f"p{k}"]) for k in range(13)], dim="plan")
    path = tmp_path / "many.nc"
    many.to_netcdf(path, engine="scipy")
    one_line_error(cli("plot", "pareto", path, "--x", "step_time", "--y", "memory_per_device", "--curve", "plan",
                       "-o", tmp_path / "p.png"),
                   "--curve plan: 13 frontiers are too many to tell apart in one figure (at most 12",
                   "keep some with --sel plan=VALUE (repeatable)")
    result = cli("plot", "pareto", path, "--x", "step_time", "--y", "memory_per_device", "--curve", "plan",
                 *np.ravel([("--sel", f"plan=p{k}") for k in range(12)]), "-o", tmp_path / "p.png")
    assert result.exit_code == 0 and (tmp_path / "p.png").exists(), result.output


def test_an_axis_in_gib_is_ticked_at_round_gib(sweep_file):
    """A memory axis or colour bar was ticked at round byte counts and labelled in GiB: 9.31323, 18.6265, 27.9397
    (1e10, 2e10, 3e10 bytes) on plot scaling and pareto, 186.265 ... 931.323 on a heatmap's colour bar. The ticks
    are now round numbers of the display unit (style.DisplayUnitLocator); seconds keep matplotlib's own."""
    import xarray as xr

    import fastmodel.plot as P
    from fastmodel.plot.serving import serving_pareto

    ds = xr.open_dataset(sweep_file)

    def shown(axis):
        lo, hi = sorted(axis.get_view_interval())
        return [float(t.get_text().replace(",", "")) for t in axis.get_ticklabels()
                if t.get_text() and lo <= t.get_position()[axis.axis_name == "y"] <= hi]

    figures = [P.scaling(ds, x="num_nodes", var="memory_per_device", hue="plan", sel={"global_batch": 1024})[1].yaxis,
               P.pareto(ds, x="step_time", y="memory_per_device")[1].yaxis,
               serving_pareto(ds, curve="plan", x="step_time", y="memory_per_device")[1].yaxis]
    fig, _ = P.heatmap(ds, x="num_nodes", y="plan", var="memory_per_device", sel={"global_batch": 1024})
    figures.append(fig.axes[-1].yaxis)
    for axis in figures:
        axis.get_figure().draw_without_rendering()
        ticks = shown(axis)
        assert len(ticks) >= 2 and all(float(f"{t:.2g}") == t for t in ticks), ticks     # 9.31323: not round


def test_a_comment_line_in_a_batch_file_is_named_a_comment(tmp_path):
    """``fastmodel batch`` of a file with ``# ...`` or ``// ...`` lines gave each the row 'error: invalid JSON:
    Expecting value at column 1'; it now says the line is a comment, which JSON lines do not have (the row stays:
    one output row per input line)."""
    import csv

    from tests.suite_fixtures import data_lines

    path = tmp_path / "cases.jsonl"
    path.write_text("# the dev cases\n" + data_lines("madmax_cases_dev.jsonl", 1)[0] + "\n  // one more\n")
    result = cli("batch", path, "-o", tmp_path / "out.csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    said = "error: a comment: JSON lines have none (the line keeps its row of the output)"
    assert [r["status"] for r in rows] == [said, "ok", said]
