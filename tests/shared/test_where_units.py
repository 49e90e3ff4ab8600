"""fastmodel.analysis.where_units: a bare number compared with a variable in seconds or bytes that keeps every
point is named (``best --where tpot<13.8`` read 13.8 s and ranked every point, silently)."""

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.analysis.where_units import unit_slips
from fastmodel.cli import main


@pytest.fixture
def ds():
    tpot = xr.DataArray(np.array([0.0102, 0.0138, 0.0167]), dims="batch_size", attrs={"units": "s"})
    memory = xr.DataArray(np.array([21e9, 25e9, 39e9]), dims="batch_size", attrs={"units": "bytes"})
    return xr.Dataset({"tpot": tpot, "memory_per_device": memory}, coords={"batch_size": [1, 8, 64]})


def test_a_bare_number_that_keeps_every_point_is_named(ds):
    # every tpot (10.2 to 16.7 ms) is below 13.8 s: the filter keeps all three points
    assert unit_slips(ds, ["tpot<13.8"]) == [
        "--where tpot<13.8 keeps every point: tpot is in seconds, so a bare 13.8 is 13.8 seconds; "
        "give a unit, e.g. tpot<13.8ms"]
    # every memory_per_device (21 to 39 GB) is above 24 bytes; 24 GiB = 25.77e9 B keeps only the 39 GB point
    [said] = unit_slips(ds, ["memory_per_device >= 24"])
    assert said.startswith("--where memory_per_device >= 24 keeps every point: memory_per_device is in bytes, "
                           "so a bare 24 is 24 bytes; give a unit, e.g. memory_per_device>=24GiB"), said


@pytest.fixture
def training():
    """A training-style result: steps of 1.8 to 3.1 s, 21 to 39 GB per device (review17 F4's reproduction)."""
    step = xr.DataArray(np.array([1.8, 2.4, 3.1]), dims="num_nodes", attrs={"units": "s"})
    memory = xr.DataArray(np.array([21e9, 25e9, 39e9]), dims="num_nodes", attrs={"units": "bytes"})
    return xr.Dataset({"step_time": step, "memory_per_device": memory}, coords={"num_nodes": [1, 2, 4]})


@pytest.mark.parametrize("expression", ["step_time<5", "step_time>0", "step_time>=0", "memory_per_device>0",
                                        "memory_per_device<1e11", "memory_per_device<80", "step_time<1e9"])
def test_a_valid_filter_that_keeps_every_point_is_not_named(training, expression):
    """Read in ms / GiB these keep no point (5 ms), the same points (1e11 GiB, 80 GiB, 1e9 ms = 1e6 s) or are 0 in
    any unit: the user meant what they wrote (review17 F4: each said "give a unit")."""
    assert unit_slips(training, [expression]) == []


def test_a_slip_is_named_when_the_meant_unit_keeps_some_points_and_not_all(training):
    # 2500 ms = 2.5 s keeps 1.8 and 2.4 s; read as 2500 s every point
    assert unit_slips(training, ["step_time<2500"]) == [
        "--where step_time<2500 keeps every point: step_time is in seconds, so a bare 2500 is 2500 seconds; "
        "give a unit, e.g. step_time<2500ms"]
    # 30 GiB = 32.21e9 B keeps only the 39 GB point
    assert len(unit_slips(training, ["memory_per_device>=30"])) == 1


@pytest.mark.parametrize("expression", ["tpot<13.8ms", "tpot<0.0138", "tpot<0.02s", "memory_per_device<3e10",
                                        "batch_size<100", "tpot=13.8", "fits_memory", "!tpot<13.8"])
def test_a_unit_a_filter_that_drops_a_point_or_no_inequality_is_not_named(ds, expression):
    """13.8ms and 0.0138 (a bare number that drops a point) are not named; nor a coordinate without units, an
    equality, a flag or a negation."""
    ds["fits_memory"] = xr.DataArray(np.array([True, True, False]), dims="batch_size")
    assert unit_slips(ds, [expression]) == []


def test_cli_best_prints_the_note_on_stderr_and_ranks_as_before(tmp_path):
    from fastmodel.serve.api import sweep

    path = tmp_path / "serve.nc"
    sweep("llama3.1-8b", device="H100", tp=[1, 2], batch_size=[1, 8], input_len=128, output_len=128).to_netcdf(path)
    run = CliRunner().invoke(main, ["best", str(path), "--by", "tpot", "--where", "tpot<5"])
    assert run.exit_code == 0, run.output
    # tpot 4.3 to 6.9 ms: 5 s keeps all four points, 5 ms two of them
    assert "note: --where tpot<5 keeps every point: tpot is in seconds" in run.stderr
    plain = CliRunner().invoke(main, ["best", str(path), "--by", "tpot"])
    assert run.stdout == plain.stdout


def test_cli_plot_pareto_prints_the_note_too(tmp_path):
    from fastmodel.serve.api import sweep

    path = tmp_path / "serve.nc"
    sweep("llama3.1-8b", device="H100", tp=[1, 2], batch_size=[1, 8], input_len=128, output_len=128).to_netcdf(path)
    run = CliRunner().invoke(main, ["plot", "pareto", str(path), "--x", "tpot", "--y", "output_tokens_per_s_per_gpu",
                                    "--where", "ttft<10", "-o", str(tmp_path / "p.png")])
    assert run.exit_code == 0, run.output
    # ttft 8.3 to 26 ms: 10 ms keeps two of the four points
    assert "note: --where ttft<10 keeps every point: ttft is in seconds, so a bare 10 is 10 seconds" in run.stderr


def test_one_rule_for_a_bare_number_in_a_filter_and_in_an_slo_option():
    """``--where tpot<13.8`` and ``serve --search --tpot 50`` read a value without a unit by one rule
    (``bare_number``); each keeps its own note, pinned word for word (the --where one above)."""
    from fastmodel.analysis.where_units import bare_number, flag_slip_note

    assert bare_number("13.8") == 13.8 and bare_number(" 50") == 50.0
    assert bare_number("13.8ms") is None and bare_number("fast") is None
    assert flag_slip_note("--tpot", "50", 50.0, 1.0) == (
        "--tpot 50 reads as 50 s (a number without a unit is seconds); write e.g. 50ms for milliseconds")
    assert flag_slip_note("--ttft", "2000", 2000.0, 60.0).startswith("--ttft 2000 reads as 2000 s")
    assert flag_slip_note("--tpot", "0.05", 0.05, 1.0) is None          # plausible seconds: no note
    assert flag_slip_note("--tpot", "50s", 50.0, 1.0) is None           # a unit given: read as written
    # the filter's note takes the same values as bare: 13.8ms is read as written, no note
    tpot = xr.DataArray(np.array([0.0102, 0.0138]), dims="batch_size", attrs={"units": "s"})
    assert unit_slips(xr.Dataset({"tpot": tpot}), ["tpot<13.8ms"]) == []
