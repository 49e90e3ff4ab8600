"""`fastmodel plot ...` through click's runner: figures written in each format, one-line errors with exit 2."""

import pytest
from plot_data import synthetic_file, synthetic_sweep

from fastmodel.cli.plot import parse_window
from fastmodel.plot.data import PlotError
from tests.suite_fixtures import cli

MAGIC = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    return synthetic_file(tmp_path_factory)


@pytest.mark.parametrize("args, suffix", [
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--var", "throughput", "--sel", "global_batch=2048"],
     ".png"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "global_batch", "--reduce", "argmax:plan"], ".svg"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--sel", "global_batch=1024", "--relative-to", "fsdp/ddp",
      "--annotate", "--size", "double"], ".pdf"),
    (["breakdown", "{r}", "--sel", "num_nodes=64", "--sel", "global_batch=2048", "--sel", "plan=fsdp/ddp",
      "--sel", "plan=tp,ddp/mp"], ".svg"),
    (["pareto", "{r}", "--x", "iteration_time", "--y", "memory_per_device", "--where", "fits_memory"], ".pdf"),
    (["scaling", "{r}", "--x", "num_nodes", "--var", "throughput", "--hue", "plan", "--sel", "global_batch=2048"],
     ".png"),
])
def test_each_kind_writes_each_format(result_file, tmp_path, args, suffix):
    out = tmp_path / f"fig{suffix}"
    result = cli("plot", *[a.format(r=result_file) for a in args], "-o", str(out), "--dpi", "80")
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(MAGIC[suffix])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_svg_carries_the_labels(result_file, tmp_path):
    out = tmp_path / "h.svg"
    cli("plot", "heatmap", result_file, "--x", "num_nodes", "--y", "plan", "--var", "iteration_time",
        "--sel", "global_batch=2048", "-o", str(out))
    svg = out.read_text()
    for text in ("step time [s]", "does not fit in memory", "illegal: product_ne_devices", "best (min)"):
        assert text in svg, text


def test_pareto_prints_the_frontier(result_file, tmp_path):
    result = cli("plot", "pareto", result_file, "--x", "iteration_time", "--y", "throughput",
                 "--sel", "num_nodes=64", "-o", str(tmp_path / "p.png"))
    assert result.exit_code == 0
    assert "iteration_time" in result.output and "points on the frontier" in result.output


@pytest.mark.parametrize("args, text", [
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--var", "thruput", "--sel", "global_batch=512"],
     "did you mean 'throughput'"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--sel", "global_batch=500"], "global_batch=500"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--sel", "global_batch"], "DIM=VALUE"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan"], "global_batch"),
    (["heatmap", "{r}", "--x", "num_node", "--y", "plan", "--sel", "global_batch=512"], "did you mean 'num_nodes'"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--reduce", "mx:global_batch"], "did you mean 'max'"),
    (["scaling", "{r}", "--x", "num_nodes", "--hue", "plan", "--sel", "plan=tp,dp/mp"], "did you mean 'tp,ddp/mp'"),
    (["breakdown", "{r}", "--sel", "num_nodes=64"], "--sel"),
    (["pareto", "{r}", "--x", "cost", "--y", "throughput"], "unknown variable 'cost'"),
    (["pareto", "missing.nc", "--x", "iteration_time", "--y", "throughput"], "no such file"),
    # a dimension as --var: was a ValueError traceback (scaling) and "unknown dimension 'global_batch'" (heatmap)
    (["scaling", "{r}", "--x", "num_nodes", "--var", "global_batch"],
     "'global_batch' is a dimension of the result (an axis of the figure, or --sel), not a variable to plot"),
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--var", "plan", "--sel", "global_batch=512"],
     "'plan' is a dimension of the result"),
    # reducing the axis the figure is drawn along: was "unknown dimension 'plan'; dimensions: num_nodes"
    (["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--sel", "global_batch=512", "--reduce", "max:plan"],
     "--reduce max:plan removes 'plan', which the figure is drawn along"),
])
def test_errors_are_one_line_exit_2(result_file, tmp_path, args, text):
    out = tmp_path / "x.png"
    result = cli("plot", *[a.format(r=result_file) for a in args], "-o", str(out))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.output
    assert not out.exists()


def test_bad_suffix(result_file, tmp_path):
    result = cli("plot", "breakdown", result_file, "--sel", "num_nodes=64", "--sel", "global_batch=2048",
                 "-o", str(tmp_path / "fig.jpg"))
    assert result.exit_code == 2 and ".png, .pdf or .svg" in result.output


def test_parse_window():
    assert parse_window("0:0.5") == (0.0, 0.5)
    assert parse_window("100ms:300ms") == pytest.approx((0.1, 0.3))
    with pytest.raises(PlotError, match="START:END"):
        parse_window("0.5")


def test_timeline_command(tmp_path):
    out = tmp_path / "t.svg"
    result = cli("plot", "timeline", "--model", "llama2-70b", "--system", "dc-a", "--nodes", "256",
                 "--task", "llm-pretrain-fsdp", "--window", "0:200ms", "--aggregate", "-o", str(out))
    assert result.exit_code == 0, result.output
    svg = out.read_text()
    assert "fsdp2048/ddp2048" in svg and "time [ms]" in svg
    bad = cli("plot", "timeline", "--model", "llama2-70c", "--system", "dc-a", "--task", "llm-pretrain-fsdp",
              "-o", str(tmp_path / "u.png"))
    assert bad.exit_code == 2 and "did you mean 'llama2-70b'" in bad.output


@pytest.mark.parametrize("command", ["timeline", "memory-timeline"])
def test_a_timeline_of_specs_needs_system_and_task(command, tmp_path):
    """Specs (not a run record) need --system and --task: a usage error (exit 2) naming both, before any file."""
    for given in (["--system", "dgx-h100"], ["--task", "llm-pretrain"]):
        result = cli("plot", command, "--model", "llama3.1-8b", *given, "-o", str(tmp_path / "t.svg"))
        assert result.exit_code == 2 and "--system and --task are required (unless --model is a run record)" \
            in result.output, result.output
    assert not (tmp_path / "t.svg").exists()


@pytest.mark.parametrize("command", ["timeline", "memory-timeline"])
@pytest.mark.parametrize("extra", [[], ["--model", "llama3.1-8b"]])
def test_a_timeline_given_a_result_file_says_it_draws_one_configuration(command, extra, result_file, tmp_path):
    """``plot timeline RESULT.nc`` answered "Missing option '--model'" (and with -m, "Got unexpected extra
    argument"): one line saying a timeline draws one configuration, from -m/-s/-t/--plan, exit 2."""
    result = cli("plot", command, str(result_file), *extra, "-o", str(tmp_path / "t.svg"))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"error: plot {command} draws one configuration, from -m/-s/-t (and --plan), "
                                    f"not a result file ({result_file}); "), result.output
    assert not (tmp_path / "t.svg").exists()


@pytest.fixture(scope="module")
def empty_result(tmp_path_factory):
    """The synthetic sweep with no plan left (a dimension of length 0), and a real-world ``memory`` variable."""
    import numpy as np
    import xarray as xr

    ds = synthetic_sweep().isel(plan=[]).transpose("plan", ...)   # netCDF-3 (scipy) reads a length-0 dimension
    ds["memory"] = xr.DataArray(np.zeros((0, 4, 3, 2)), dims=("plan", "num_nodes", "global_batch", "memory_kind"),
                                coords={"memory_kind": ["weights", "activations"]})     # only as the first one
    path = tmp_path_factory.mktemp("empty") / "empty.nc"
    ds.to_netcdf(path, engine="scipy")
    return str(path)


@pytest.mark.parametrize("args", [
    ["heatmap", "{r}", "--x", "num_nodes", "--y", "plan", "--sel", "global_batch=2048"],
    ["scaling", "{r}", "--x", "num_nodes", "--hue", "plan", "--sel", "global_batch=2048"],
    ["breakdown", "{r}", "--sel", "num_nodes=64", "--sel", "global_batch=2048"],
    ["memory", "{r}", "--sel", "num_nodes=64", "--sel", "global_batch=2048"],
    ["memory", "{r}", "--sel", "num_nodes=64", "--sel", "global_batch=2048", "--dim", "plan"],
])
def test_a_result_without_configurations_is_one_line_naming_the_empty_dimension(empty_result, tmp_path, args):
    """A result with no plan: one line naming the dimension of length 0, exit 2, no figure (plot memory was an
    IndexError traceback: it read the first value of each fixed dimension before checking for one)."""
    out = tmp_path / "x.png"
    result = cli("plot", *[a.format(r=empty_result) for a in args], "-o", str(out))
    assert result.exit_code == 2, result.output
    assert result.output == "error: the selection is empty: plan has no value\n"
    assert not out.exists()


def test_the_serving_frontier_printout_names_its_columns(tmp_path):
    """`plot pareto` of a serving result printed each frontier as bare number pairs; a header now names them: x
    the tokens/s per user, y the tokens/s per GPU (plot/serving.py X, Y), or the --x / --y given."""
    from fastmodel.plot.serving import X, Y

    search = tmp_path / "s.nc"
    run = cli("serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "2s", "--tpot", "50ms", "--gpus", "2",
              "--search-precision", "bf16", "--search-concurrency", "4", "-o", search)
    assert run.exit_code == 0, run.output
    result = cli("plot", "pareto", search, "-o", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    head, first = result.output.splitlines()[:2]
    assert head.split() == ["x", "y", "configuration", "(x:", f"{X},", "y:", f"{Y})"]
    assert first.endswith(":")      # then each frontier under its name
    other = cli("plot", "pareto", search, "--x", "ttft", "--y", "tpot", "-o", tmp_path / "q.png")
    assert other.exit_code == 0 and "(x: ttft, y: tpot)" in other.output.splitlines()[0]
