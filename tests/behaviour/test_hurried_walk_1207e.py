"""The hurried user's walk of 2026-12-07e (brief "walk8": plots, calibrate, batch, sweeps at scale, the Python
API for papers). Each case is a defect found on the walk, the message or result it now gives; no test here
compiles a kernel at a new signature (synthetic datasets, refusals before any evaluation, the serving sweep
tests/behaviour/test_hurried_leftovers.py evaluates)."""

import pytest

from tests.plot_data import synthetic_sweep
from tests.suite_fixtures import cli, one_line_error


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("walk8") / "r.nc"
    synthetic_sweep().to_netcdf(path, engine="scipy")
    return path


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
