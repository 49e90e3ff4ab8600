"""Regression tests of issue 15: no lost data, no silent wrong answers, no tracebacks."""

import json
import os
import subprocess
import sys

import pytest
import xarray as xr

from fastmodel.analysis.best import best, open_result, where_mask
from fastmodel.errors import FastmodelError, SweepError
from fastmodel.io.store import writer_lock
from fastmodel.madmax.lowering.params import STATUS
from fastmodel.madmax.sweep.axes import MAX_AXIS_VALUES, axis_values
from fastmodel.madmax.sweep.definition import Sweep
from fastmodel.sweeps import create_store, run_in_memory, run_to_store, write_units
from tests.suite_fixtures import cli, one_line_error

AXES = {"num_nodes": [2, 4], "flops_util": {"start": 0.4, "stop": 0.8, "num": 9}, "plan": ["fsdp/ddp", "tp,ddp/mp"]}
SWEEP_TOML = ('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
              '[axes]\nnum_nodes = [2, 4]\nflops_util = { start = 0.4, stop = 0.8, num = 9 }\n'
              'plan = ["fsdp/ddp", "tp,ddp/mp"]\n')


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SWEEP_TOML)
    return path


# --- item 2: decimal range coordinates, tolerant equality ------------------------------------------------

def test_range_coordinates_are_the_decimals_written():
    values = axis_values("system.device.flops_util", {"start": 0.4, "stop": 0.8, "num": 9})
    assert values.tolist() == [0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]
    assert axis_values("system.device.flops_util", {"start": 0.1, "stop": 0.3, "step": 0.1}).tolist() == [0.1, 0.2, 0.3]
    logs = axis_values("system.network.port_bandwidth_bytes_per_s", {"start": 1e9, "stop": 1e12, "num": 4, "scale": "log"})
    assert logs.tolist() == [1e9, 1e10, 1e11, 1e12]


def test_best_where_equality_matches_a_range_value():
    ds = run_in_memory(Sweep("llama-7b", "dc-a", "llm-pretrain", AXES))
    table = best(ds, "throughput", top=50, where=["flops_util=0.6"])
    assert len(table) and set(table.flops_util) == {0.6}
    # a coordinate computed the old way (0.6000000000000001) still matches, as plot --sel does
    da = xr.Dataset({"x": ("u", [1.0, 2.0])}, coords={"u": [0.4 + 0.2 * 1.0000000000000002, 0.7]})
    assert da.u.values[0] != 0.6
    assert where_mask(da, ["u=0.6"]).values.tolist() == [True, False]
    assert where_mask(da, ["u!=0.6"]).values.tolist() == [False, True]
    assert where_mask(da, ["u<=0.6"]).values.tolist() == [True, False]
    assert where_mask(da, ["u>0.6"]).values.tolist() == [False, True]


# --- item 3: incomplete stores -------------------------------------------------------------------------------

def test_incomplete_store_is_marked_and_refused(tmp_path):
    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=4)
    path = str(tmp_path / "s.zarr")
    create_store(definition, path)
    units = list(definition.units())
    write_units(definition, path, units[:2])
    raw = xr.open_zarr(path)
    status = raw.status.values
    assert (status == STATUS["not_computed"]).sum() == sum(u.size for u in units[2:])
    assert not (status[status != STATUS["not_computed"]] == STATUS["not_computed"]).any()
    with pytest.raises(FastmodelError, match=f"{len(units) - 2:,} of {len(units):,} units .* not computed"):
        open_result(path)
    one_line_error(cli("best", path, "--by", "throughput"), "not computed")
    one_line_error(cli("plot", "heatmap", path, "--x", "num_nodes", "--y", "plan", "--sel", "flops_util=0.6",
                       "-o", tmp_path / "f.png"), "not computed")
    run_to_store(definition, path, resume=True)
    assert len(best(open_result(path), "throughput", top=3)) == 3


def test_store_being_written_names_its_writer(tmp_path):
    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=4)
    path = str(tmp_path / "s.zarr")
    create_store(definition, path)
    with writer_lock(path):
        with pytest.raises(SweepError, match=f"being written by pid {os.getpid()}"):
            run_to_store(definition, path, resume=True)
        code = f"from fastmodel.analysis.best import open_result; open_result({path!r})"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert f"still being written by pid {os.getpid()}" in done.stderr
    run_to_store(definition, path, resume=True)  # the lock is free again
    assert not os.path.exists(path + ".lock")


# --- item 4: outputs never destroy data -------------------------------------------------------------------

def test_sweep_force_never_deletes_what_is_not_a_sweep_store(tmp_path, sweep_file):
    precious = tmp_path / "data.zarr"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    one_line_error(cli("sweep", sweep_file, "-o", precious, "--force"), "not a fastmodel sweep store")
    assert (precious / "thesis.tex").read_text() == "years of work"
    one_line_error(cli("sweep", sweep_file, "-o", precious, "--resume"), "not a fastmodel sweep store")
    notnc = tmp_path / "notes.nc"
    notnc.write_text("my notes")
    one_line_error(cli("sweep", sweep_file, "-o", notnc, "--force"), "not the netCDF dataset")
    assert notnc.read_text() == "my notes"
    store = tmp_path / "r.zarr"
    assert cli("sweep", sweep_file, "-o", store).exit_code == 0
    assert cli("sweep", sweep_file, "-o", store, "--force").exit_code == 0  # our own store: replaced


def test_best_csv_never_replaces_a_dataset_or_its_input(tmp_path, sweep_file):
    result = tmp_path / "plans.nc"
    assert cli("sweep", sweep_file, "-o", result).exit_code == 0
    before = result.read_bytes()
    one_line_error(cli("best", result, "--by", "throughput", "--csv", result), "also an input")
    other = tmp_path / "other.nc"
    other.write_bytes(before)
    one_line_error(cli("best", result, "--by", "throughput", "--csv", other, "--force"), "not the CSV")
    assert result.read_bytes() == before and other.read_bytes() == before
    csv = tmp_path / "t.csv"
    assert cli("best", result, "--by", "throughput", "--csv", csv).exit_code == 0
    one_line_error(cli("best", result, "--by", "throughput", "--csv", csv), "pass --force")
    assert cli("best", result, "--by", "throughput", "--csv", csv, "--force").exit_code == 0


def test_batch_never_replaces_its_input(tmp_path):
    cases = tmp_path / "c.jsonl"
    text = json.dumps({"model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp"}) + "\n"
    cases.write_text(text)
    one_line_error(cli("batch", cases, "-o", cases), "also an input")
    one_line_error(cli("batch", cases, "-o", cases, "--force"), "also an input")
    link = tmp_path / "link.jsonl"
    link.symlink_to(cases)
    one_line_error(cli("batch", cases, "-o", link, "--force"), "also an input")
    assert cases.read_text() == text
    out = tmp_path / "o.jsonl"
    out.write_text('{"case": 1, "status": "ok"}\n')
    one_line_error(cli("batch", cases, "-o", out), "pass --force")
    assert cli("batch", cases, "-o", out, "--force").exit_code == 0


def test_figure_never_replaces_a_file_of_another_kind(tmp_path, sweep_file):
    result = tmp_path / "r.nc"
    assert cli("sweep", sweep_file, "-o", result).exit_code == 0
    fake = tmp_path / "fig.png"
    fake.write_text("not a picture")
    args = ["plot", "heatmap", result, "--x", "num_nodes", "--y", "plan", "--sel", "flops_util=0.6", "--dpi", "30"]
    one_line_error(cli(*args, "-o", fake), "not the PNG figure")
    one_line_error(cli(*args, "-o", fake, "--force"), "not the PNG figure")
    assert fake.read_text() == "not a picture"
    good = tmp_path / "good.png"
    assert cli(*args, "-o", good).exit_code == 0
    one_line_error(cli(*args, "-o", good), "pass --force")   # issue 25: figures follow batch's rule too
    assert cli(*args, "-o", good, "--force").exit_code == 0


# --- item 5: atomic creation and the writer lock -------------------------------------------------------------

def test_interrupted_creation_leaves_no_store(tmp_path, monkeypatch):
    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=4)
    path = tmp_path / "s.zarr"
    import zarr

    real = zarr.open_group

    def interrupted(*args, **kwargs):  # Ctrl-C after the metadata is written, before the status fill
        raise KeyboardInterrupt

    monkeypatch.setattr(zarr, "open_group", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_to_store(definition, str(path))
    monkeypatch.setattr(zarr, "open_group", real)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no store, no temporary, no lock
    with pytest.raises(SweepError, match="nothing to resume"):
        run_to_store(definition, str(path), resume=True)
    ds = run_to_store(definition, str(path))
    assert bool(ds.unit_done.all())


def test_second_writer_is_refused_with_the_owner(tmp_path, sweep_file):
    path = tmp_path / "s.zarr"
    with writer_lock(path):
        result = cli("sweep", sweep_file, "-o", path)
        one_line_error(result, "is being written by pid")
        assert not path.exists()


# --- item 6: relative store paths on Dask workers with another working directory ----------------------------

def test_relative_store_path_with_workers_elsewhere(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=6)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.run(os.chdir, str(elsewhere))
        ds = run_to_store(definition, "rel.zarr", client=client)
        xr.testing.assert_identical(ds.throughput.load().drop_attrs(),
                                    run_in_memory(definition).throughput.drop_attrs())
        assert not (elsewhere / "rel.zarr").exists()

        class Blind:  # a cluster whose workers do not mount the store's filesystem
            def run(self, func, *args):
                return {"tcp://10.0.0.9:1234": False}

        with pytest.raises(SweepError, match="1 of 1 Dask workers cannot see the store"):
            run_to_store(definition, "blind.zarr", client=Blind())


# --- item 7: size guards before anything is materialized -----------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ({"start": 0.1, "stop": 1.0, "num": 10**14}, "100,000,000,000,000 values"),
    ({"start": 0.1, "stop": 1.0, "step": 1e-15}, "values; an axis may have at most"),
    ({"start": 0.1, "stop": 1.0, "num": 3, "step": 0.1}, "either 'num' or 'step'"),
    ({"start": 0.1, "stop": 1.0, "num": 2.5}, "positive integer"),
    ({"start": 0.1, "stop": float("inf"), "num": 2}, "finite"),
])
def test_range_sizes_are_checked_first(spec, message):
    with pytest.raises(SweepError, match=message):
        axis_values("system.device.flops_util", spec)
    assert MAX_AXIS_VALUES >= 100_000


def test_huge_sweep_prints_an_estimate_and_needs_confirmation(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain-fsdp"\n[axes]\n'
                    'flops_util = { start = 0.01, stop = 1.0, num = 3000 }\n'
                    'hbm_bandwidth_util = { start = 0.01, stop = 1.0, num = 3000 }\n'
                    'link_util = { start = 0.01, stop = 1.0, num = 3000 }\n')
    result = cli("sweep", path, "-o", tmp_path / "big.zarr")
    one_line_error(result, "27,000,000,000 configurations")
    assert "pass --yes" in result.output and "TB" in result.output
    assert not (tmp_path / "big.zarr").exists()


def test_sweep_prints_its_size_estimate(tmp_path, sweep_file):
    result = cli("sweep", sweep_file, "-o", tmp_path / "r.nc")
    assert result.exit_code == 0
    assert "36 configurations in" in result.output and "uncompressed" in result.output


# --- item 8: tracebacks and misleading messages ---------------------------------------------------------------

def test_messages_that_were_tracebacks_or_misleading(tmp_path, sweep_file):
    result = tmp_path / "r.nc"
    assert cli("sweep", sweep_file, "-o", result).exit_code == 0
    one_line_error(cli("plot", "pareto", result, "--x", "plan", "--y", "throughput", "-o", tmp_path / "p.png"),
                   "plan is not numeric")
    one_line_error(cli("sweep", sweep_file, "-o", tmp_path / "d.zarr", "--scheduler", "notaurl"),
                   "not a scheduler address")
    for name, text in (("c.jsonl", '{"a": 1}\n'), ("f.png", "\x89PNG....")):
        path = tmp_path / name
        path.write_text(text)
        result_ = cli("best", path, "--by", "throughput")
        one_line_error(result_, "not a netCDF file")
        assert "netcdf4" not in result_.output
    again = cli("sweep", sweep_file, "-o", result)
    one_line_error(again, "pass --force")
    assert "--resume" not in again.output  # a .nc cannot resume
    one_line_error(cli("sweep", sweep_file, "-o", tmp_path / "none.zarr", "--resume"), "run without --resume")
    shown = cli("specs", "show", "cloud_dlrm_a")
    assert shown.exit_code == 0 and "[axes]" in shown.output
    one_line_error(cli("run", "-m", "", "-s", "dc-a", "-t", "llm-pretrain"), "empty model")
    inline = tmp_path / "inline.toml"
    inline.write_text('model = { family = "llm", name = "x", num_layers = -1 }\nsystem = "dc-a"\n'
                      'task = "llm-pretrain"\n[axes]\nplan = ["fsdp/ddp"]\n')
    one_line_error(cli("sweep", inline, "-o", tmp_path / "i.nc"), f"{inline}: model.num_layers")
    semantics = tmp_path / "sem.toml"
    semantics.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                         'semantics = { base = "madmax", bogus = 1 }\n[axes]\nplan = ["fsdp/ddp"]\n')
    one_line_error(cli("sweep", semantics, "-o", tmp_path / "s.nc"), f"{semantics}: semantics.bogus")


# --- item 9: figures of categorical data and of nothing ----------------------------------------------------------

def test_status_and_boolean_heatmaps_are_categorical():
    import matplotlib

    matplotlib.use("Agg")
    from fastmodel.plot import heatmap

    ds = run_in_memory(Sweep("llama-7b", "dc-a", "llm-pretrain",
                             {"num_nodes": [1, 4], "plan": ["fsdp/ddp", "tp,ddp/mp", "ddp,pp/mp,ddp"]}))
    assert {int(s) for s in ds.status.values.ravel()} > {STATUS["ok"]}  # some cells are illegal
    for var, labels in (("status", {"ok", "degree_le_1"}), ("fits_memory", {"fits", "does not fit"})):
        fig, ax = heatmap(ds, "num_nodes", "plan", var=var)
        colorbar = fig.axes[-1]
        ticks = {t.get_text() for t in colorbar.get_yticklabels()}
        assert ticks and ticks <= labels | set(ds.status.attrs["flag_meanings"].split()), ticks
        assert not any(p.get_gid() == "best" for p in ax.patches)  # no "best" of a category


def test_all_nan_variable_is_refused_even_with_illegal_cells(tmp_path):
    ds = run_in_memory(Sweep("llama-7b", "dc-a", "llm-pretrain",
                             {"num_nodes": [1, 4], "plan": ["fsdp/ddp", "tp,ddp/mp", "ddp,pp/mp,ddp"]}))
    path = tmp_path / "r.nc"
    ds.to_netcdf(path, engine="scipy")
    one_line_error(cli("plot", "heatmap", path, "--x", "num_nodes", "--y", "plan", "--var", "cost",
                       "-o", tmp_path / "c.png"), "cost has no finite value")
    assert not (tmp_path / "c.png").exists()


# --- item 10: implausible inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("hbm_capacity_bytes", 1e300), ("hbm_capacity_bytes", "1e30 GB"), ("hbm_bandwidth_bytes_per_s", 1e25),
])
def test_implausibly_large_quantities_are_rejected(field, value):
    import fastmodel

    system = fastmodel.make_config("llama-7b", "dc-a", "llm-pretrain-fsdp").system.model_dump()
    system["device"][field] = value
    with pytest.raises(fastmodel.SpecError, match=f"system.device.{field}: .*implausibly large"):
        fastmodel.evaluate("llama-7b", system, "llm-pretrain-fsdp")


def test_default_semantics_bounds_pp_by_layers_and_tp_by_heads():
    import fastmodel

    for plan, rule in (("pp2048/mp", "pp_gt_layers"), ("tp2048/mp", "tp_gt_heads")):
        with pytest.raises(fastmodel.PlanError, match=rule):
            fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain", plan=plan, num_nodes=256, semantics="default")
        fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain", plan=plan, num_nodes=256, semantics="madmax")
    ds = run_in_memory(Sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [2, 8], "num_heads": [8, 32],
                                                                   "plan": ["pp/mp", "tp/mp"]}, semantics="default"))
    status = ds.status.transpose("plan", "num_nodes", "num_heads").values
    # llama-7b has 32 layers: pp16 fits, pp64 does not; tp16 > 8 heads, tp64 > 32 heads
    assert status[0, 0].tolist() == [STATUS["ok"], STATUS["ok"]]
    assert status[0, 1].tolist() == [STATUS["pp_gt_layers"]] * 2
    assert status[1, 0].tolist() == [STATUS["tp_gt_heads"], STATUS["ok"]]
    assert status[1, 1].tolist() == [STATUS["tp_gt_heads"]] * 2


def test_damaged_store_resume_says_force_and_force_replaces_it(tmp_path, sweep_file):
    import shutil

    store = tmp_path / "r.zarr"
    assert cli("sweep", sweep_file, "-o", store, "--unit-configs", "4").exit_code == 0
    shutil.rmtree(store / "status")  # a store that lost an array (e.g. made by an older, non-atomic version)
    (store / ".zmetadata").unlink()
    one_line_error(cli("sweep", sweep_file, "-o", store, "--resume"), "damaged")
    assert cli("sweep", sweep_file, "-o", store, "--force").exit_code == 0
    assert len(best(open_result(str(store)), "throughput", top=2)) == 2


def test_categorical_variables_are_not_ranked_or_drawn_as_quantities(tmp_path, sweep_file):
    result = tmp_path / "r.nc"
    assert cli("sweep", sweep_file, "-o", result).exit_code == 0
    one_line_error(cli("best", result, "--by", "status"), "categorical")
    one_line_error(cli("best", result, "--by", "fits_memory"), "categorical")
    figure = tmp_path / "f.png"
    one_line_error(cli("plot", "scaling", result, "--x", "num_nodes", "--var", "status", "--hue", "plan",
                       "--sel", "flops_util=0.6", "-o", figure), "categorical")
    one_line_error(cli("plot", "pareto", result, "--x", "status", "--y", "throughput", "-o", figure), "categorical")
    one_line_error(cli("plot", "heatmap", result, "--x", "num_nodes", "--y", "plan", "--var", "status",
                       "--sel", "flops_util=0.6", "--relative-to", "fsdp/ddp", "-o", figure), "categorical")
    assert not figure.exists()


def test_an_output_folder_that_does_not_exist_is_reported_before_any_work(tmp_path, sweep_file):
    result = tmp_path / "r.nc"
    assert cli("sweep", sweep_file, "-o", result).exit_code == 0
    missing = tmp_path / "nodir"
    one_line_error(cli("sweep", sweep_file, "-o", missing / "x.zarr"), "no such directory")
    one_line_error(cli("sweep", sweep_file, "-o", missing / "x.nc"), "no such directory")
    one_line_error(cli("best", result, "--by", "throughput", "--csv", missing / "t.csv"), "no such directory")
    one_line_error(cli("plot", "heatmap", result, "--x", "num_nodes", "--y", "plan", "--sel", "flops_util=0.6",
                       "-o", missing / "f.png"), "no such directory")
    assert not missing.exists()


def test_api_store_is_never_overwritten_silently(tmp_path):
    from fastmodel import sweep

    path = str(tmp_path / "s.zarr")
    sweep("llama-7b", "dc-a", "llm-pretrain", AXES, store=path)
    with pytest.raises(SweepError, match="exists; complete it"):
        sweep("llama-7b", "dc-a", "llm-pretrain", AXES, store=path)
    again = sweep("llama-7b", "dc-a", "llm-pretrain", AXES, store=path, overwrite=True)
    assert bool(again.unit_done.all())
