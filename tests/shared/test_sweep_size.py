"""fastmodel.sweeps.size: the memory a process may still take, and running out of it as one line."""

import importlib

import pytest
from click.testing import CliRunner

from fastmodel.cli import main

size = importlib.import_module("fastmodel.sweeps.size")
GIB = 1 << 30


def test_available_memory_is_the_least_of_meminfo_cgroup_and_ulimit(monkeypatch):
    """MemAvailable 64 GiB, a cgroup limit of 10 GiB with 4 used, an address-space limit 3 GiB above the
    process's virtual size: 3 GiB are available; without the ulimit, the cgroup's 6."""
    import resource

    monkeypatch.setattr(size, "_meminfo_available", lambda: 64 * GIB)
    files = {"/sys/fs/cgroup/memory.max": 10 * GIB, "/sys/fs/cgroup/memory.current": 4 * GIB}
    monkeypatch.setattr(size, "_read_int", files.get)
    monkeypatch.setattr(size, "_stat_value", lambda path, key: 0)
    monkeypatch.setattr(size, "_virtual_size_bytes", lambda: 5 * GIB)
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (8 * GIB, resource.RLIM_INFINITY))
    assert size.available_memory_bytes() == 3 * GIB
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert size.available_memory_bytes() == 6 * GIB
    monkeypatch.setattr(size, "_read_int", lambda path: None)          # no cgroup limit: MemAvailable
    assert size.available_memory_bytes() == 64 * GIB


def test_running_out_of_memory_is_one_line_and_exit_2(monkeypatch, tmp_path):
    """A limit the size check cannot see (numpy's _ArrayMemoryError is a MemoryError) is one line, exit 2,
    not a traceback."""
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                          '[axes]\nnum_nodes = [1, 4]\nplan = ["fsdp/ddp"]\n')

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 2.6 GiB")

    monkeypatch.setattr(importlib.import_module("fastmodel.sweeps.run"), "check_memory", no_memory)
    result = CliRunner().invoke(main, ["sweep", str(sweep_file), "-o", str(tmp_path / "s.nc")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: out of memory") and "Traceback" not in result.output


def test_reclaimable_page_cache_is_not_counted_as_used(monkeypatch):
    """A cgroup at 10 GiB with 9 GiB charged, 5 GiB of it inactive file cache: 6 GiB are available."""
    import resource

    monkeypatch.setattr(size, "_meminfo_available", lambda: 64 * GIB)
    files = {"/sys/fs/cgroup/memory.max": 10 * GIB, "/sys/fs/cgroup/memory.current": 9 * GIB}
    monkeypatch.setattr(size, "_read_int", files.get)
    monkeypatch.setattr(size, "_stat_value", lambda path, key: 5 * GIB if key == "inactive_file" else 0)
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert size.available_memory_bytes() == 6 * GIB


class _Unbuilt(list):
    """An axis of 10^9 values that must not be iterated: its length is all a size check needs."""

    def __len__(self):
        return 10**9

    def __iter__(self):
        raise AssertionError("the axis was built before the size check")


@pytest.mark.parametrize("model, system", [("llama3.1-70b", "dgx-h100"), ("llama2-70b", "dc-a")])
def test_a_python_sweep_too_large_for_memory_is_refused_before_its_axes_are_built(model, system):
    """fastmodel.sweep(..., axes={"num_nodes": range(1, 10**9)}) built 10^9 checked values (minutes, tens of GB)
    before its grid's size was checked; it is refused from the axes' lengths."""
    from fastmodel import sweep
    from fastmodel.errors import SweepError

    with pytest.raises(SweepError, match="1,000,000,000 configurations"):
        sweep(model, system, "llm-pretrain", axes={"num_nodes": _Unbuilt(), "plan": "all"})


def test_a_range_is_an_axis_in_every_engine():
    """axes={"num_nodes": range(2, 5)} said "range(2, 5) is not a number" under MAD-Max (the real-world engine
    took it): a range is a list of its values, and one over MAX_AXIS_VALUES is refused by its length."""
    from fastmodel import sweep
    from fastmodel.errors import SweepError
    from fastmodel.sweeps.ranges import MAX_AXIS_VALUES, expand

    assert expand("num_nodes", range(2, 5)) == [2, 3, 4]
    ds = sweep("llama2-70b", "dc-a", "llm-pretrain", axes={"num_nodes": range(2, 5), "plan": ["fsdp/ddp"]})
    assert list(ds.num_nodes.values) == [2, 3, 4]
    with pytest.raises(SweepError, match="at most"):
        expand("num_nodes", range(MAX_AXIS_VALUES + 1))


def test_a_netcdf_sweep_counts_the_writers_copy(monkeypatch, tmp_path):
    """A .nc sweep was checked against its result matrix alone, but scipy's netCDF-3 writer allocates every stored
    variable whole before it writes (a 1.56 M-point grid estimated at 323 MiB peaked 665 MiB above the small run):
    a grid whose matrix fits half the memory but whose matrix + stored copy does not is refused up front, the
    line naming both parts and the limit; the same grid into a .zarr store (streamed) and in Python (no writer)
    is not refused by it."""
    from fastmodel.sweeps.file import load_sweep_file

    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama2-70b"\nsystem = "dc-a"\ntask = "llm-pretrain"\nsemantics = "madmax"\n'
                          '[axes]\nnum_nodes = [16, 32, 64]\nplan = "all"\n')
    plan = load_sweep_file(str(sweep_file), None, None)
    matrix, copy = size.netcdf_peak_bytes(plan)
    assert matrix == plan.num_configs * (8 * plan.num_rows + 1)        # float64 rows + an int8 status
    assert copy == plan.num_configs * plan.stored_bytes_per_config() and copy > 0
    have = 2 * (matrix + copy) - 2                    # half of it: 1 byte short of matrix + copy, above the matrix
    monkeypatch.setattr(size, "available_memory_bytes", lambda: have)
    size.check_memory(plan)                           # the matrix alone fits: the Python API's in-memory sweep
    with pytest.raises(size.SweepError) as error:
        size.check_memory(plan, netcdf=True)
    assert f"({matrix / GIB:.1f} GiB of results + {copy / GIB:.1f} GiB the .nc writer holds at once, " \
           f"{plan.num_configs:,} configurations)" in str(error.value)
    assert f"(the limit is half of it, {have / 2 / GIB:.1f} GiB)" in str(error.value)
    out = tmp_path / "s.nc"
    result = CliRunner().invoke(main, ["sweep", str(sweep_file), "-o", str(out)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "-o out.zarr" in result.output, result.output
    assert not out.exists()
    result = CliRunner().invoke(main, ["sweep", str(sweep_file), "-o", str(tmp_path / "s.zarr")])
    assert result.exit_code == 0, result.output
