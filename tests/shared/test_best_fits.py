"""`best` answers "the fastest plan that fits" on real-world results; MAD-Max results keep their behaviour."""

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel import sweep
from fastmodel.analysis.best import best, fits_filter_applies, status_names
from fastmodel.cli import main
from fastmodel.errors import SweepError
from fastmodel.lm.sweep import lm_sweep

PLANS = ["dp", "cp2", "tp8.pp4", "tp4.pp4", "tp8.pp8", "tp2.pp8", "tp3"]


@pytest.fixture(scope="module")
def grid():
    return lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16, axes={"plan": PLANS})


@pytest.fixture(scope="module")
def oom(grid):
    """Legal plans whose memory exceeds usable HBM, from memory_per_device, memory_reserved and the dataset's HBM:
    the default margin is each plan's allocator cache, so a plan fits when reserved + overhead <= HBM."""
    legal = np.isfinite(grid.tokens_per_s_per_gpu.values)
    cache = grid.memory_reserved.values - grid.memory_allocated.values
    over = grid.memory_per_device.values + cache > grid.attrs["hbm_bytes"]
    return set(grid.plan.values[legal & over]), set(grid.plan.values[legal & ~over])


def test_the_grid_has_both_kinds(grid, oom):
    over, under = oom
    assert "dp" in over and "tp8.pp4" in under            # 70B on one GPU's worth of dp: ~0.6 TB; tp8.pp4 fits
    assert "tp3" not in over | under                       # illegal: 64 heads are not divisible by 3
    assert fits_filter_applies(grid)


def test_default_ranks_only_plans_that_fit(grid, oom):
    over, under = oom
    table = best(grid, "tokens_per_s_per_gpu", top=10)
    assert set(table.plan) == under
    fits = table.attrs["fits_filter"]
    assert (fits["applied"], fits["dropped"], fits["of"]) == (True, len(over), len(over) + len(under))
    hbm = grid.attrs["hbm_bytes"]
    assert fits["margin"] == {"bytes": None, "hbm_bytes": hbm, "source": "default", "rule": "allocator_cache"}
    fastest = max(under, key=lambda p: float(grid.tokens_per_s_per_gpu.sel(plan=p)))
    assert table.plan.iloc[0] == fastest
    assert list(table.status) == ["ok"] * len(table)      # the dataset's own status names


def test_include_oom_ranks_everything_and_shows_fits_memory(grid, oom):
    over, under = oom
    table = best(grid, "tokens_per_s_per_gpu", top=10, include_oom=True)
    assert set(table.plan) == over | under
    assert table.plan.iloc[0] in over                      # without the filter an OOM plan would win
    assert dict(zip(table.plan, table.fits_memory)) == {p: p in under for p in table.plan}
    assert table.attrs["fits_filter"]["applied"] is False


def test_a_fits_memory_filter_of_the_user_replaces_the_default(grid, oom):
    over, _ = oom
    table = best(grid, "tokens_per_s_per_gpu", top=10, where=["!fits_memory"])
    assert set(table.plan) == over and table.attrs["fits_filter"]["applied"] is False


def test_nothing_fits_is_one_error_naming_the_way_out(grid, tmp_path):
    """Python names the argument, ``fastmodel best`` the flag (cli/common.flag_names)."""
    from suite_fixtures import cli, one_line_error

    with pytest.raises(SweepError, match=r"none of the 1 ranked configurations fits.*; pass include_oom=True to "
                                         r"rank them anyway$"):
        best(grid, "tokens_per_s_per_gpu", where=["plan=dp"])
    grid.to_netcdf(tmp_path / "grid.nc")
    one_line_error(cli("best", tmp_path / "grid.nc", "--by", "tokens_per_s_per_gpu", "--where", "plan=dp"),
                   "none of the 1 ranked configurations fits", "; pass --include-oom to rank them anyway\n")


def test_status_filter_uses_the_datasets_names():
    ds = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16, axes={"plan": ["dp", "tp8.pp4", "tp3"]},
                  only_fitting=True)
    table = best(ds, "memory_per_device", where=["status=does_not_fit"], include_oom=True)
    assert list(table.plan) == ["dp"] and list(table.status) == ["does_not_fit"]


def test_madmax_results_are_unchanged():
    ds = sweep("llama2-70b", "dc-a", "llm-pretrain", {"num_nodes": [1, 2], "plan": "all"})
    assert not fits_filter_applies(ds)
    table = best(ds, "memory_per_device", top=5, ascending=False)
    flat = ds.memory_per_device.values.reshape(-1)
    np.testing.assert_array_equal(table.memory_per_device.to_numpy(), np.sort(flat[np.isfinite(flat)])[::-1][:5])
    assert "does_not_fit" in set(table.status)             # MAD-Max keeps ranking them by memory, as before
    assert table.equals(best(ds, "memory_per_device", top=5, include_oom=True, ascending=False))
    assert table.attrs["fits_filter"]["applied"] is False


@pytest.fixture
def result_file(grid, tmp_path):
    path = tmp_path / "plans.nc"
    grid.to_netcdf(path)
    return str(path)


def test_cli_says_the_filter_applied_and_how_many_were_dropped(result_file, oom):
    over, under = oom
    runner = CliRunner()
    result = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu"], catch_exceptions=False)
    assert result.exit_code == 0
    assert (f"only plans that fit: dropped {len(over)} of {len(over) + len(under)} configurations"
            in result.stderr) and "--include-oom" in result.stderr
    assert "dp " not in result.stdout and "tp8.pp4" in result.stdout
    every = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu", "--include-oom"])
    assert every.exit_code == 0 and every.stderr == "" and "fits_memory" in every.stdout
    assert every.stdout.splitlines()[1].split()[0] in over
    # only plans that fit pass the filter: nothing dropped, nothing said (was "dropped 0 of 1 configurations")
    fitting = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu", "--where", "plan=tp8.pp4"])
    assert fitting.exit_code == 0 and fitting.stderr == "" and "tp8.pp4" in fitting.stdout
    none = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu", "--where", "plan=dp"])
    assert none.exit_code == 2 and none.output.count("\n") == 1 and "--include-oom" in none.output


def test_serving_results_rank_only_batches_that_fit():
    from fastmodel.serve.api import sweep as serving_sweep

    ds = serving_sweep("llama3.1-70b", device=["H100"], precision="bf16", tp=[1, 2, 4, 8], batch_size=[16, 256],
                       input_len=1024, output_len=256, load_mode="batch")
    rate = ds.output_tokens_per_s_per_gpu.values
    fits = ds.fits_memory.values == 1.0
    assert (np.isfinite(rate) & ~fits).any()               # tp1 at batch 256: 70B in BF16 alone is 140 GB
    table = best(ds, "output_tokens_per_s_per_gpu", top=20)
    assert len(table) == int((np.isfinite(rate) & fits).sum())
    assert table.attrs["fits_filter"]["dropped"] == int((np.isfinite(rate) & ~fits).sum())
    assert table.output_tokens_per_s_per_gpu.iloc[0] == np.nanmax(np.where(fits, rate, np.nan))


def test_a_memory_margin_of_the_user_decides_what_fits(grid):
    """memory_margin (bytes): a plan fits when memory_per_device <= HBM - margin. No margin keeps every plan up
    to the HBM; a margin of HBM - the smallest legal memory keeps only that plan."""
    hbm = grid.attrs["hbm_bytes"]
    memory = grid.memory_per_device.values
    legal = np.isfinite(grid.tokens_per_s_per_gpu.values)
    table = best(grid, "tokens_per_s_per_gpu", top=10, memory_margin=0.0)
    assert set(table.plan) == set(grid.plan.values[legal & (memory <= hbm)])
    assert table.attrs["fits_filter"]["margin"]["source"] == "user"
    smallest = np.nanmin(np.where(legal, memory, np.nan))
    table = best(grid, "tokens_per_s_per_gpu", top=10, memory_margin=hbm - smallest)
    assert list(table.plan) == list(grid.plan.values[legal & (memory == smallest)])


@pytest.mark.parametrize("margin, message", [(-1.0, "-1.0 bytes is negative"), (float("nan"), "nan is not a number"),
                                             (1e15, "not below the HBM")])
def test_a_bad_memory_margin_is_one_error(grid, margin, message):
    with pytest.raises(SweepError, match=f"memory_margin: .*{message}"):
        best(grid, "tokens_per_s_per_gpu", memory_margin=margin)


def test_cli_memory_margin_says_which_margin(result_file):
    runner = CliRunner()
    default = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu"])
    assert "minus each plan's own allocator cache" in default.stderr and "(the default:" in default.stderr
    user = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu", "--memory-margin", "10"])
    assert user.exit_code == 0 and "a margin of 10.0 GiB, set by --memory-margin" in user.stderr
    # A6: the value as typed, in GiB (not "-5368709120.0 is negative"); nan is "not a number"
    for bad, said in (("-5", "--memory-margin: -5 GiB is negative"), ("nan", "--memory-margin: 'nan' is not a number"),
                      ("1000000", "--memory-margin: 1000000 GiB is not below the HBM")):
        result = runner.invoke(main, ["best", result_file, "--by", "tokens_per_s_per_gpu", "--memory-margin", bad])
        assert result.exit_code == 2 and result.output.count("\n") == 1 and said in result.output, result.output


def test_a_margin_typed_as_minus_zero_is_zero_not_minus_zero():
    """``--memory-margin -0`` is a margin of 0 bytes; best's line said "a margin of -0.0 GiB"."""
    import math

    from fastmodel.analysis.margin import check_margin, describe, gib_margin

    for value in (gib_margin("-0"), gib_margin("-0.0"), check_margin(-0.0)):
        assert value == 0.0 and math.copysign(1.0, value) == 1.0
    chosen = {"bytes": gib_margin("-0"), "hbm_bytes": 80 * 2**30, "source": "user"}
    assert describe(chosen) == "HBM 80.0 GiB minus a margin of 0.0 GiB, set by --memory-margin"


def test_a_margin_typed_with_its_unit_is_read_and_a_decimal_unit_is_named():
    """Hurried-user walk: ``--memory-margin 8GiB`` was "not a number" (the option is in GiB); ``8GB`` is refused
    naming its value in GiB, 8e9 / 2^30 = 7.451, never read as 8 GiB."""
    from fastmodel.analysis.margin import gib_margin
    from fastmodel.errors import SweepError

    assert gib_margin("8GiB") == gib_margin(" 8 gib ") == gib_margin("8") == 8 * 2**30
    with pytest.raises(SweepError, match=r"^--memory-margin: '8GB' is in GB, the option in GiB \(8GB = 7.451 GiB\)"):
        gib_margin("8GB")
    with pytest.raises(SweepError, match="'nanGB' is not a number"):
        gib_margin("nanGB")


@pytest.fixture(scope="module")
def marked():
    """A sweep that marks plans over usable HBM ``does_not_fit`` (only_fitting): Llama 3.1 70B on 16 DGX H100,
    tp8 at about 77.9 GiB (over the default margin, under the HBM of 79.11 GiB), tp4.pp4 about 74.7, tp8.pp4
    about 40.9, dp far over."""
    return lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16, only_fitting=True,
                    axes={"plan": ["tp8.pp4", "tp4.pp4", "tp8", "dp"]})


def test_a_user_margin_decides_the_status_best_shows(marked):
    """The stored status was decided under the default margin; under the user's margin a ranked row said
    ``does_not_fit`` while best counted it as fitting (walk of issues 22-23). ok / does_not_fit and fits_memory now
    follow the margin used: a plan is ok when memory_per_device <= HBM - margin."""
    hbm = marked.attrs["hbm_bytes"]
    memory = dict(zip(marked.plan.values, marked.memory_per_device.values))
    names = status_names(marked)
    stored = {p: names[int(s)] for p, s in zip(marked.plan.values, marked.status.values)}
    assert stored["tp8"] == "does_not_fit" and memory["tp8"] <= hbm          # the case the fix is for
    table = best(marked, "tokens_per_s_per_gpu", memory_margin=0.0)
    assert set(table.plan) == {"tp8.pp4", "tp4.pp4", "tp8"} and list(table.status) == ["ok"] * 3
    margin = 10 * 2**30                                                       # 69.1 GiB usable: tp4.pp4 is over
    table = best(marked, "tokens_per_s_per_gpu", memory_margin=margin, include_oom=True)
    for plan, status, fits in zip(table.plan, table.status, table.fits_memory):
        assert bool(fits) == (memory[plan] <= hbm - margin)
        assert status == ("ok" if memory[plan] <= hbm - margin else "does_not_fit"), plan
    assert stored["tp4.pp4"] == "ok" and dict(zip(table.plan, table.status))["tp4.pp4"] == "does_not_fit"


def test_a_user_margin_leaves_ok_alone_where_the_sweep_marks_nothing(grid):
    """A sweep without only_fitting keeps status ok over memory (fits_memory says it); the margin does not invent
    does_not_fit there, but fits_memory follows it."""
    hbm = grid.attrs["hbm_bytes"]
    table = best(grid, "tokens_per_s_per_gpu", top=10, memory_margin=0.0, include_oom=True)
    assert set(table.status) == {"ok"}
    assert list(table.fits_memory) == [m <= hbm for m in table.memory_per_device]


def test_only_fitting_is_read_from_the_sweep_attr_once_for_best_and_figures():
    """``marks_over_memory``, which ``best``'s table and ``fit_view`` both read: ``only_fitting`` of the sweep's
    definition (the ``sweep`` attr, JSON); no attr, another kind of JSON or text that is no JSON marks nothing."""
    import xarray as xr

    from fastmodel.analysis.margin import marks_over_memory

    def with_sweep(text):
        return xr.Dataset(attrs={} if text is None else {"sweep": text})

    assert marks_over_memory(with_sweep('{"only_fitting": true, "axes": {}}'))
    assert not marks_over_memory(with_sweep('{"only_fitting": false}'))
    assert not marks_over_memory(with_sweep("{}"))
    assert not marks_over_memory(with_sweep(None))
    assert not marks_over_memory(with_sweep("[1, 2]"))       # no .get: AttributeError
    assert not marks_over_memory(with_sweep("not json"))     # ValueError
