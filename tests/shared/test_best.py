"""Top-k tables and filters over sweep results."""

import numpy as np
import pytest

from fastmodel import sweep
from fastmodel.analysis.best import best, open_result, where_mask
from fastmodel.errors import SweepError


@pytest.fixture(scope="module")
def ds():
    return sweep("llama-13b", "dc-a", "llm-pretrain",
                 {"num_nodes": [2, 8], "global_batch": [256, 1024], "plan": "all"})


def test_top_k_equals_brute_force(ds):
    table = best(ds, "throughput", top=7, where=["fits_memory"])
    flat = ds.throughput.where(ds.fits_memory).values.reshape(-1)
    expected = np.sort(flat[np.isfinite(flat)])[::-1][:7]
    np.testing.assert_array_equal(table["throughput"].to_numpy(), expected)
    assert list(table.columns[:3]) == ["num_nodes", "global_batch", "plan"]
    assert (table["status"] == "ok").all()


def test_filters_and_ascending(ds):
    table = best(ds, "iteration_time", top=3, where=["num_nodes=8", "status=ok", "plan!=fsdp/ddp"], ascending=True)
    assert (table["num_nodes"] == 8).all() and "fsdp/ddp" not in set(table["plan"])
    assert list(table["iteration_time"]) == sorted(table["iteration_time"])
    mask = where_mask(ds, ["global_batch>=1024", "!fits_memory"])
    assert bool(((ds.global_batch >= 1024) | ~mask).all())
    assert bool((mask & ~ds.fits_memory).sum() == mask.sum())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"by": "thruput"}, "did you mean 'throughput'"),
        ({"by": "throughput", "where": ["num_node=8"]}, "did you mean 'num_nodes'"),
        ({"by": "throughput", "where": ["status=fine"]}, "status 'fine' unknown"),
        ({"by": "throughput", "where": ["num_nodes"]}, "needs a comparison"),
        ({"by": "throughput", "where": ["num_nodes=999"]}, "num_nodes=999 is not in the data; values: 2, 8"),
        ({"by": "throughput", "where": ["num_nodes=8", "throughput>1e30"]}, "no configuration passes"),
        ({"by": "throughput", "top": 0}, "at least 1"),
        ({"by": "throughput", "where": ["num_nodes=>8"]}, "numeric"),
        ({"by": "throughput", "where": ["fits_memory=maybe"]}, "true or false"),
        ({"by": "throughput", "where": ["plan=fsdp/ddpp"]}, r"not in the data \(did you mean 'fsdp/ddp'\?\)"),
        ({"by": "throughput", "where": ["iteration_time<5 parsecs"]}, "iteration_time is in s"),
    ],
)
def test_errors(ds, kwargs, message):
    with pytest.raises(SweepError, match=message):
        best(ds, **kwargs)


def test_default_order_is_best_first_by_the_registry_direction(ds):
    flat_time = ds.iteration_time.values.reshape(-1)
    flat_time = np.sort(flat_time[np.isfinite(flat_time)])
    assert best(ds, "iteration_time", top=3).iteration_time.tolist() == flat_time[:3].tolist()     # min: smallest
    assert best(ds, "iteration_time", top=3, ascending=False).iteration_time.tolist() == flat_time[::-1][:3].tolist()
    flat_rate = np.sort(ds.throughput.values[np.isfinite(ds.throughput.values)].reshape(-1))
    assert best(ds, "throughput", top=3).throughput.tolist() == flat_rate[::-1][:3].tolist()       # max: largest
    assert ds.iteration_time.attrs["better"] == "min" and ds.throughput.attrs["better"] == "max"


def test_cli_best_descending_overrides_the_registry_direction(tmp_path, ds):
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "r.nc"
    ds.to_netcdf(path)
    fastest = CliRunner().invoke(main, ["best", str(path), "--by", "iteration_time", "--top", "1"])
    slowest = CliRunner().invoke(main, ["best", str(path), "--by", "iteration_time", "--top", "1", "--descending"])
    assert fastest.exit_code == 0 and slowest.exit_code == 0
    stored = open_result(str(path))
    assert fastest.output.strip() == best(stored, "iteration_time", top=1, ascending=True).to_string(index=False).strip()
    assert slowest.output.strip() == best(stored, "iteration_time", top=1, ascending=False).to_string(index=False).strip()


def test_a_filter_value_may_carry_the_variable_s_unit(ds):
    """``iteration_time<5000ms`` is ``iteration_time<5`` (the variable's units are s); ``memory_per_device<80GB`` is 80e9
    bytes, ``memory_per_device<80GiB`` 80 x 2^30."""
    assert bool((where_mask(ds, ["iteration_time<5000ms"]) == where_mask(ds, ["iteration_time<5"])).all())
    assert bool((where_mask(ds, ["iteration_time<5000 ms"]) == where_mask(ds, ["iteration_time<5"])).all())
    assert bool((where_mask(ds, ["memory_per_device<80GB"]) == where_mask(ds, ["memory_per_device<80e9"])).all())
    assert bool((where_mask(ds, ["memory_per_device<80GiB"]) == where_mask(ds, [f"memory_per_device<{80 * 2**30}"])).all())


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "Infinity"])
def test_a_filter_value_that_is_not_finite_is_refused(ds, text):
    """``iteration_time<inf`` kept nothing (the tolerance of inf is inf, and x < inf - inf is false), and the command
    said "no configuration passes the filters": it is refused, naming the variable and the value."""
    with pytest.raises(SweepError) as error:
        where_mask(ds, [f"iteration_time<{text}"])
    assert str(error.value) == f"where: iteration_time compares with a finite number, not {text!r}"
    assert bool(where_mask(ds, ["iteration_time<1e300"]).sum() == np.isfinite(ds.iteration_time).sum())


def test_a_netcdf_file_that_is_not_a_sweep_result_is_refused(tmp_path):
    """Hurried-user walk: `best other.nc --by a` ranked another program's netCDF file as if a sweep result, and
    `plot heatmap other.nc` said "unknown variable 'throughput'"; every engine's result has a status variable."""
    import xarray as xr

    from fastmodel.errors import FastmodelError

    path = tmp_path / "other.nc"
    xr.Dataset({"a": ("x", [1.0, 2.0])}).to_netcdf(path, engine="scipy")
    with pytest.raises(FastmodelError, match=r"other.nc: not a fastmodel sweep result \(no status variable; it "
                                             r"holds a\); give a .nc file or .zarr store written by 'fastmodel sweep'$"):
        open_result(str(path))
    xr.Dataset({"a": ("x", [1.0]), "disagg_status": ("x", [0])}).to_netcdf(path, engine="scipy")
    assert "a" in open_result(str(path))   # a disaggregated-only serving search has disagg_status alone
