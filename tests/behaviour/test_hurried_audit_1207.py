"""The hurried user's walk of 2026-12-07 (docs/usage.md "The hurried user's walk"): filters that keep nothing,
Ctrl-C after a command's output is whole. Each is one line and a documented exit code, never a crash; no test
here compiles a kernel (synthetic datasets, interpreted subprocesses)."""

import numpy as np
import pytest
import xarray as xr

from fastmodel.analysis.best import where_mask
from fastmodel.errors import SweepError
from tests.suite_fixtures import cli, one_line_error


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """A two-point result written as a sweep's .nc: step times 3 s and 5 s, 40 GB and 60 GB per device."""
    ds = xr.Dataset({"step_time": ("num_nodes", [3.0, 5.0], {"units": "s"}),
                     "memory_per_device": ("num_nodes", [40e9, 60e9], {"units": "bytes"}),
                     "status": ("num_nodes", np.array([0, 0], dtype=np.int8), {"flag_meanings": "ok illegal"})},
                    coords={"num_nodes": [1, 2]})
    path = tmp_path_factory.mktemp("best") / "r.nc"
    ds.to_netcdf(path, engine="scipy")
    return ds, path


def test_a_bare_number_on_a_variable_in_bytes_that_keeps_nothing_says_its_unit(result):
    """``best --where memory_per_device<80`` (meaning 80 GB) compared with 80 bytes and said only "no configuration
    passes the filters"; ``plot pareto`` said "no point has finite step_time and memory_per_device". The filter that
    keeps nothing is named, with the unit a bare number was read in."""
    ds, path = result
    one_line_error(cli("best", path, "--by", "step_time", "--where", "memory_per_device<80"),
                   "error: no configuration passes the filters: memory_per_device<80 keeps none (memory_per_device "
                   "is in bytes, so a bare 80 is 80 bytes; give a unit, e.g. 80GiB)")
    assert cli("best", path, "--by", "step_time", "--where", "memory_per_device<80GB").exit_code == 0
    with pytest.raises(SweepError, match=r"step_time<2 keeps none \(step_time is in seconds, so a bare 2 is 2 "
                                         r"seconds; give a unit, e.g. 2ms\)$"):
        where_mask(ds, ["step_time<2"])
    with pytest.raises(SweepError, match=r"passes the filters: step_time<2s keeps none$"):
        where_mask(ds, ["step_time<2s"])       # a number with its unit: nothing to add
    with pytest.raises(SweepError, match=r"each keeps some points, but no point passes all of num_nodes=1, "
                                         r"step_time>4$"):
        where_mask(ds, ["num_nodes=1", "step_time>4"])
    assert where_mask(ds, ["step_time>4"]).values.tolist() == [False, True]


def test_a_pareto_figure_names_the_filter_that_keeps_nothing(result, tmp_path):
    _, path = result
    figure = tmp_path / "p.png"
    one_line_error(cli("plot", "pareto", path, "--x", "step_time", "--y", "memory_per_device", "--where",
                       "memory_per_device<80", "-o", figure), "memory_per_device<80 keeps none (memory_per_device is in bytes")
    assert not figure.exists()


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_python_tears_down_after_the_command_changes_nothing(signal_name):
    """Ctrl-C (or ``timeout``'s SIGTERM) in the 0.1-0.3 s after ``done: ...`` / ``wrote out.csv``, while Python
    tears down, killed the process by the signal without a line (exit 130 in the shell, 124 under ``timeout``):
    the output was whole but the status said otherwise. The console entry ignores both once the command has
    ended, so the status is the command's. Here the signal arrives in an atexit callback (interpreted, no kernel)."""
    import os
    import subprocess
    import sys

    code = ("import atexit, os, signal, sys\n"
            "sys.argv = ['fastmodel', 'specs', 'list', 'device']\n"
            "from fastmodel.cli import entry\n"
            f"atexit.register(lambda: os.kill(os.getpid(), signal.{signal_name}))\n"
            "entry()\n")
    env = dict(os.environ, FASTMODEL_JIT="0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr)
    assert "h100" in done.stdout.lower()
