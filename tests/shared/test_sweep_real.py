"""`fastmodel sweep FILE.toml` on real-world LM sweep files and serving sweep files (their plans in the wings,
run by the shared machinery of fastmodel/sweeps): end to end through the CLI, the same numbers as the engines
they reuse, resumable stores and Dask workers as MAD-Max sweeps have, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main
from tests.suite_fixtures import one_line_error

LM = """
model = "llama3-70b"
system = "dgx-h100"
task = "llm-pretrain"
[execution]
sharding = "distopt"
[axes]
num_nodes = [4, 8]
plan = ["tp8.pp4", "tp4.pp4", "tp3"]
micro_batch = [1, 2]
"""

SERVE = """
model = "llama3.1-70b"
system = "H100"
task = "serve-chat"
[axes]
device = ["H100", "H200"]
precision = ["bf16", "fp8"]
tp = [2, 3, 4]
batch_size = [1, 16, 64]
"""


@pytest.fixture
def cli():
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


def write(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- real-world LM training -------------------------------------------------------------

def test_lm_sweep_file_to_netcdf_matches_lm_sweep(cli, tmp_path):
    import fastmodel

    out = tmp_path / "o.nc"
    result = cli("sweep", write(tmp_path, LM), "-o", out)
    assert result.exit_code == 0, result.output
    ds = xr.open_dataset(out, engine="scipy")
    assert dict(ds.sizes) == {"num_nodes": 2, "plan": 3, "micro_batch": 2, "memory_kind": 7}
    assert list(ds.plan.values) == ["tp8.pp4", "tp4.pp4", "tp3"]
    names = ds.status.attrs["flag_meanings"].split()
    # 64 heads are not divisible by tp3: an illegal point keeps its status and NaN results
    assert {names[s] for s in ds.status.sel(plan="tp3").values.ravel()} <= {"devices_not_divisible",
                                                                            "heads_not_divisible"}
    assert np.isnan(ds.step_time.sel(plan="tp3")).all()
    ok = ds.status.sel(plan=["tp8.pp4", "tp4.pp4"]) == 0
    assert bool(ok.all())
    # one step is global_batch sequences of seq_len tokens (task llm-pretrain: 2048 x 8192)
    np.testing.assert_allclose((ds.tokens_per_s * ds.step_time).where(ok), 2048 * 8192, rtol=1e-12)
    # the same engine as the Python API, value for value
    direct = fastmodel.sweep(model="llama3-70b", system="dgx-h100", task="llm-pretrain",
                             axes={"num_nodes": [4, 8], "plan": ["tp8.pp4", "tp4.pp4", "tp3"], "micro_batch": [1, 2]})
    for name in ("step_time", "mfu", "memory_per_device", "status"):
        np.testing.assert_array_equal(ds[name].values, direct[name].values)


def test_lm_sweep_plan_all_best_and_heatmap(cli, tmp_path):
    text = "only_fitting = true\n" + LM.replace('plan = ["tp8.pp4", "tp4.pp4", "tp3"]', 'plan = "all"').replace(
        "[1, 2]", "[1]")
    out = tmp_path / "o.nc"
    assert cli("sweep", write(tmp_path, text), "-o", out).exit_code == 0
    ds = xr.open_dataset(out, engine="scipy")
    assert {"tp8.pp4", "dp", "tp8.pp8"} <= set(ds.plan.values) and "tp3" not in set(ds.plan.values)
    result = cli("best", out, "--by", "tokens_per_s_per_gpu", "--top", "3", "--where", "status=ok", "--where",
                 "fits_memory")
    assert result.exit_code == 0, result.output
    assert "tokens_per_s_per_gpu" in result.output and result.output.count(" ok") == 3
    result = cli("best", out, "--by", "step_time", "--top", "2", "--where", "status=does_not_fit")
    assert result.exit_code == 0 and "does_not_fit" in result.output, result.output
    assert cli("best", out, "--by", "step_time", "--where", "status=does_not_fitt").output.count("did you mean") == 1
    result = cli("plot", "heatmap", out, "--x", "num_nodes", "--y", "plan", "--var", "tokens_per_s_per_gpu",
                 "--sel", "micro_batch=1", "-o", tmp_path / "h.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "h.png").stat().st_size > 1000


def test_lm_sweep_zarr_streams_and_resumes(cli, tmp_path):
    import zarr

    path = write(tmp_path, LM)
    nc, store = tmp_path / "o.nc", tmp_path / "o.zarr"
    assert cli("sweep", path, "-o", nc).exit_code == 0
    result = cli("sweep", path, "-o", store, "--unit-configs", "3")
    assert result.exit_code == 0, result.output
    whole = xr.open_dataset(nc, engine="scipy")
    streamed = xr.open_zarr(store)
    assert streamed.unit_done.size == 6 and bool(streamed.unit_done.all())
    for name in whole.data_vars:
        np.testing.assert_array_equal(whole[name].values, streamed[name].values)
    # an interruption leaves units undone: readers refuse the store, --resume completes it
    group = zarr.open_group(str(store), mode="r+")
    group["unit_done"][1] = False
    group["step_time"][0, 1, :] = np.nan
    result = cli("best", store, "--by", "step_time")
    assert result.exit_code == 2 and "--resume" in result.output
    assert cli("sweep", path, "-o", store).exit_code == 2  # exists: neither --resume nor --force
    result = cli("sweep", path, "-o", store, "--resume")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(xr.open_zarr(store).step_time.values, whole.step_time.values)
    # another sweep definition cannot resume it; --force replaces it
    other = write(tmp_path, LM.replace("[4, 8]", "[4, 16]"), "other.toml")
    one_line_error(cli("sweep", other, "-o", store, "--resume"), "different sweep definition")
    assert cli("sweep", other, "-o", store, "--force").exit_code == 0
    assert list(xr.open_zarr(store).num_nodes.values) == [4, 16]


@pytest.mark.parametrize("change, parts", [
    (("micro_batch = [1, 2]", "micro_batc = [1, 2]"), ("axes.micro_batc", "unknown axis", "did you mean 'micro_batch'")),
    (("micro_batch = [1, 2]", 'recompute = ["none", "ful"]'), ("axes.recompute", "'ful'", "did you mean 'full'")),
    (('"tp3"', '"tq3"'), ("axes.plan", "'tq3'")),
    (("[execution]", "[executon]"), ("executon", "unknown key", "did you mean 'execution'")),
    (('sharding = "distopt"', 'sharding = "zero4"'), ("execution.sharding",)),
    (('sharding = "distopt"', 'sharding = "distopt"\noptimizer = "moun"'), ("execution.optimizer", "did you mean 'muon'")),
    (("num_nodes = [4, 8]", "num_nodes = [0, 8]"), ("axes.num_nodes", "whole number of nodes >= 1")),
    (("num_nodes = [4, 8]", "num_nodes = [4, 4]"), ("axes.num_nodes", "duplicate")),
    (("micro_batch = [1, 2]", "micro_batch = []"), ("axes.micro_batch", "empty")),
    (('task = "llm-pretrain"', 'task = "llm-pretrian"'), ("did you mean 'llm-pretrain'",)),
    (('system = "dgx-h100"', 'system = "dgx-h10"'), ("did you mean 'dgx-h100'",)),
    (('model = "llama3-70b"', 'model = "llama3-70c"'), ("model: unknown built-in model", "did you mean 'llama3-70b'")),
    (('task = "llm-pretrain"', 'task = "llm-pretrain"\nsemantics = "madmax"'), ("semantics", "'default'")),
    (('model = "llama3-70b"', 'model = "llama2-70b"'), ("model", "is a MAD-Max model")),
    (('system = "dgx-h100"', 'system = "dc-a"'), ("system", "a MAD-Max system")),
])
def test_lm_sweep_file_errors_name_file_field_and_reason(cli, tmp_path, change, parts):
    path = write(tmp_path, LM.replace(*change))
    result = cli("sweep", path, "-o", tmp_path / "o.nc")
    one_line_error(result, str(path), *parts)
    assert "model: model:" not in result.output and "system: system:" not in result.output   # the field once
    assert not (tmp_path / "o.nc").exists()


def test_lm_and_serving_sweeps_run_on_dask_workers_and_huge_grids_are_refused(cli, tmp_path):
    """The store of a real-world and of a serving sweep written by two Dask workers equals the local one, value
    for value (the workers rebuild the plan from the store's definition, fastmodel.engines)."""
    for name, text in (("lm", LM), ("serve", SERVE)):
        path = write(tmp_path, text, f"{name}.toml")
        local, distributed = tmp_path / f"{name}.nc", tmp_path / f"{name}.zarr"
        assert cli("sweep", path, "-o", local).exit_code == 0
        result = cli("sweep", path, "-o", distributed, "--workers", "2", "--unit-configs", "4")
        assert result.exit_code == 0, result.output
        whole, stored = xr.open_dataset(local, engine="scipy"), xr.open_zarr(distributed)
        assert bool(stored.unit_done.all()) and stored.unit_done.size > 2
        for var in whole.data_vars:
            np.testing.assert_array_equal(whole[var].values, stored[var].values)
    path = write(tmp_path, LM)
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc", "--workers", "2"), ".zarr")
    huge = LM.replace("micro_batch = [1, 2]", "micro_batch = { start = 1, stop = 100000, num = 100000 }\n"
                      "global_batch = { start = 1, stop = 100000, num = 100000 }")
    one_line_error(cli("sweep", write(tmp_path, huge, "huge.toml"), "-o", tmp_path / "o.zarr"), "--yes")


# --- serving ---------------------------------------------------------------------------

def test_serve_sweep_file_matches_serving_engine(cli, tmp_path):
    from fastmodel.serve.api import evaluate

    out = tmp_path / "s.nc"
    result = cli("sweep", write(tmp_path, SERVE), "-o", out)
    assert result.exit_code == 0, result.output
    ds = xr.open_dataset(out, engine="scipy")
    assert dict(ds.sizes) == {"device": 2, "precision": 2, "tp": 3, "batch_size": 3}
    assert ds.attrs["fastmodel_task"] == "serve"
    names = ds.status.attrs["flag_meanings"].split()
    # 64 heads are not divisible by tp 3
    assert {names[s] for s in ds.status.sel(tp=3).values.ravel()} == {"heads_not_divisible_by_tp"}
    # KV bytes per token = 2 * layers * kv_heads * head_dim * bytes (Llama 3.1 70B: 80, 8, 128), the KV heads
    # split over the tp devices
    kv = ds.kv_bytes_per_token.sel(tp=4, batch_size=1, device="H100")
    assert kv.sel(precision="bf16").item() == 2 * 80 * 8 * 128 * 2 / 4
    assert kv.sel(precision="fp8").item() == 2 * 80 * 8 * 128 * 1 / 4
    # task serve-chat fixes 1024 prompt and 256 output tokens; the engine gives the same point
    one = evaluate("llama3.1-70b", "H200", precision="fp8", tp=4, batch_size=16, input_len=1024, output_len=256)
    point = ds.sel(device="H200", precision="fp8", tp=4, batch_size=16)
    for name in ("ttft", "tpot", "output_tokens_per_s_per_gpu", "memory_per_device"):
        assert point[name].item() == pytest.approx(one[name], rel=1e-12)
    assert ds.fits_memory.dtype == bool


def test_serve_concurrency_axis_max_throughput_task_and_lm_model(cli, tmp_path):
    text = SERVE.replace("batch_size = [1, 16, 64]", "concurrency = [8, 32]").replace(
        'device = ["H100", "H200"]\n', "").replace('precision = ["bf16", "fp8"]\n', "")
    out = tmp_path / "c.nc"
    assert cli("sweep", write(tmp_path, text), "-o", out).exit_code == 0
    ds = xr.open_dataset(out, engine="scipy")
    assert dict(ds.sizes) == {"tp": 3, "concurrency": 2}   # device and precision fixed: not dimensions
    assert ds.device.item() == "H100"
    offline = ('model = "llama3.1-8b"\nsystem = "dgx-h200"\ntask = "serve-offline"\n'
               "[axes]\ntp = [1, 2]\ninput_len = [128, 2048]\n")
    out = tmp_path / "m.nc"
    result = cli("sweep", write(tmp_path, offline, "m.toml"), "-o", out)
    assert result.exit_code == 0, result.output
    ds = xr.open_dataset(out, engine="scipy")
    assert ds.device.item() == "H200-SXM-141GB"     # the cluster's gpu
    assert (ds.batch_size > 1).all()                 # max_throughput chooses the batch
    # a family-"lm" model spec serves as well as a serving-model name
    lm = offline.replace('"llama3.1-8b"', '"llama3.1-8b"\n').replace('model = "llama3.1-8b"\n', 'model = "llama3-8b"')
    assert cli("sweep", write(tmp_path, lm, "l.toml"), "-o", tmp_path / "l.nc").exit_code == 0


@pytest.mark.parametrize("change, parts", [
    (('"H200"]', '"H2000"]'), ("axes.device", "'H2000'", "did you mean")),
    (('"fp8"]', '"fp9"]'), ("axes.precision", "'fp9'")),
    (("tp = [2, 3, 4]", "tpp = [2, 3, 4]"), ("axes.tpp", "did you mean 'tp'")),
    (("tp = [2, 3, 4]", "tp = [0, 2]"), ("axes.tp", "positive integer")),
    (("batch_size = [1, 16, 64]", "batch_size = [1]\nconcurrency = [2]"), ("axes.concurrency", "not both")),
    (('model = "llama3.1-70b"', 'model = "llama3.1-70c"'), ("model", "did you mean")),
    (('system = "H100"\n', 'system = "H1000"\n'), ("system", "'H1000'")),
    # a misspelt serving task is named (it was taken for a training task, and the device for a missing system)
    (('task = "serve-chat"', 'task = "serve-chatt"'), ("task", "'serve-chatt'", "did you mean 'serve-chat'")),
])
def test_serve_sweep_file_errors(cli, tmp_path, change, parts):
    path = write(tmp_path, SERVE.replace(*change))
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"), str(path), *parts)


def test_serve_task_spec_errors(cli, tmp_path):
    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nkind = "serve"\ninput_len = 128\noutput_len = 128\nbatch_size = 4\n'
                    "max_throughput = true\n")
    text = SERVE.replace('task = "serve-chat"', f'task = "{task}"')
    one_line_error(cli("sweep", write(tmp_path, text), "-o", tmp_path / "o.nc"), str(task), "one load mode")
    task.write_text('name = "t"\nkind = "serve"\ninput_len = 128\noutput_lenn = 128\n')
    one_line_error(cli("sweep", write(tmp_path, text), "-o", tmp_path / "o.nc"), str(task), "task.output_lenn",
                   "did you mean 'output_len'")
    task.write_text('name = "t"\nkind = "serv"\ninput_len = 128\noutput_len = 128\n')
    one_line_error(cli("sweep", write(tmp_path, text), "-o", tmp_path / "o.nc"), str(task), "task.kind",
                   "did you mean 'serve'")
    # the MAD-Max commands say what a serving task is for
    one_line_error(cli("run", "-m", "llama2-70b", "-s", "dc-a", "-t", "serve-chat", "--semantics", "madmax"),
                   "serving task")


def test_serve_sweep_zarr_and_pareto(cli, tmp_path):
    path = write(tmp_path, SERVE)
    store = tmp_path / "s.zarr"
    assert cli("sweep", path, "-o", store, "--unit-configs", "5").exit_code == 0
    nc = tmp_path / "s.nc"
    assert cli("sweep", path, "-o", nc).exit_code == 0
    for name in ("tpot", "ttft", "status", "fits_memory"):
        np.testing.assert_array_equal(xr.open_zarr(store)[name].values,
                                      xr.open_dataset(nc, engine="scipy")[name].values)
    result = cli("plot", "pareto", store, "--sel", "precision=fp8", "-o", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    assert "device = H100:" in result.output and "device = H200:" in result.output
    assert (tmp_path / "p.png").stat().st_size > 1000
    result = cli("plot", "pareto", nc, "--curve", "precision", "--where", "tp=4", "-o", tmp_path / "q.png")
    assert result.exit_code == 0, result.output
    assert "tp=2" not in result.output and "precision = fp8:" in result.output
    result = cli("best", nc, "--by", "output_tokens_per_s_per_gpu", "--where", "fits_memory", "--where",
                 "status=ok", "--top", "2")
    assert result.exit_code == 0 and "tpot" in result.output, result.output
    one_line_error(cli("best", nc, "--by", "tpot", "--where", "status=no_kv_rom"), "did you mean 'no_kv_room'")


def test_builtin_example_sweeps_run(cli, tmp_path):
    """The summary line counts points that fit and legal points over memory apart (issue 25 item 5: sweeps
    without only_fitting keep the latter as status ok, and the line called them all feasible)."""
    import re

    for name in ("llama3_70b_h100_plans", "llama3.1_70b_serving", "llama2_70b_plans"):
        result = cli("sweep", name, "-o", tmp_path / f"{name}.nc")
        assert result.exit_code == 0, result.output
        found = re.search(r"done: ([\d,]+) of ([\d,]+) configurations legal and feasible \(fit in memory\), "
                          r"([\d,]+) legal but over memory, ([\d,]+) illegal or not evaluated", result.output)
        assert found, result.output
        # ... and the run's time and rate (walk 1207e: only the assumed rate was said, off a terminal)
        assert re.search(r"illegal or not evaluated; [\d,.]+ s, [\d,]+ configurations/s \(kernel loading",
                         result.output), result.output
        fits, total, over, rest = (int(g.replace(",", "")) for g in found.groups())
        ds = xr.open_dataset(tmp_path / f"{name}.nc")
        names = ds.status.attrs["flag_meanings"].split()
        ok = ds.status.values == 0
        fitting = ok & (ds.fits_memory.values > 0) if "fits_memory" in ds else ok
        assert fits == int(fitting.sum()) and fits + over + rest == total == ds.status.size
        dnf = (ds.status.values == names.index("does_not_fit")).sum() if "does_not_fit" in names else 0
        assert over == int((ok & ~fitting).sum() + dnf) and over > 0


def test_heatmap_of_real_world_sweep_names_its_statuses(cli, tmp_path):
    """Real-world sweeps have their own status codes and keep results of points that do not fit: the heatmap
    hides those (memory aside), names the reasons by the dataset's codes and marks the best legal point."""
    from fastmodel.plot import heatmap

    out = tmp_path / "o.nc"
    assert cli("sweep", write(tmp_path, "only_fitting = true\n" + LM), "-o", out).exit_code == 0
    ds = xr.open_dataset(out, engine="scipy")
    names = ds.status.attrs["flag_meanings"].split()
    fig, ax = heatmap(ds, "num_nodes", "plan", var="step_time", sel={"micro_batch": 1})
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    tp3 = {names[s] for s in ds.status.sel(plan="tp3", micro_batch=1).values}
    assert any(text.startswith("illegal: ") and all(n in text for n in tp3) for text in legend), legend
    ok = ds.step_time.where(ds.status == 0).sel(micro_batch=1)
    assert any(f"{ok.min().item():,.0f}" in text or f"{ok.min().item():.3g}" in text for text in legend
               if text.startswith("best")), (legend, ok.min().item())


def test_fastmodel_sweep_takes_a_serving_task_as_the_sweep_file_does(cli, tmp_path):
    """From Python a serving task sweeps serving (fastmodel.engines.for_sweep), in memory or into a store, with
    the values of the same sweep file."""
    import fastmodel

    axes = {"precision": ["bf16", "fp8"], "tp": [2, 4], "batch_size": [1, 16]}
    grid = fastmodel.sweep("llama3.1-70b", "H100", "serve-chat", axes)
    text = SERVE.replace('device = ["H100", "H200"]\n', "").replace("tp = [2, 3, 4]", "tp = [2, 4]").replace(
        "batch_size = [1, 16, 64]", "batch_size = [1, 16]")
    out = tmp_path / "s.nc"
    assert cli("sweep", write(tmp_path, text), "-o", out).exit_code == 0
    ds = xr.open_dataset(out, engine="scipy")
    assert grid.attrs["fastmodel_engine"] == "serve" and dict(grid.sizes) == dict(ds.sizes)
    for name in ("tpot", "ttft", "memory_per_device", "status", "fits_memory"):
        np.testing.assert_array_equal(grid[name].values, ds[name].values)
    stored = fastmodel.sweep("llama3.1-70b", "H100", "serve-chat", axes, store=str(tmp_path / "s.zarr"),
                             unit_configs=3)
    assert int(stored.unit_done.size) == 4
    np.testing.assert_array_equal(stored.tpot.values, grid.tpot.values)
    with pytest.raises(fastmodel.SpecError, match="calibration"):
        fastmodel.sweep("llama3.1-70b", "H100", "serve-chat", axes, calibration="cal.toml")


def test_a_serving_sweep_refuses_training_options_in_one_wording_by_file_and_by_api(tmp_path):
    """``fastmodel.serve.sweep_file.training_only``: a calibration, an execution or semantics other than 'default'
    in a serving sweep, refused alike by ``fastmodel.sweep`` and a sweep file."""
    import fastmodel
    from fastmodel.errors import SpecError
    from fastmodel.serve.sweep_file import sweep_plan_from_file

    training = "applies to training sweeps of the real-world model, not to serving"
    semantics = "serving sweeps run under the 'default' semantics only"
    args = ("llama3.1-8b", "H100", "serve-chat", {"tp": [1, 2]})
    for kw, said in ((dict(execution={"recompute": "full"}), f"execution: {training}"),
                     (dict(calibration="c.toml"), f"calibration: {training}"),
                     (dict(semantics="madmax-fixed"), f"semantics: {semantics}")):
        with pytest.raises(SpecError) as refused:
            fastmodel.sweep(*args, **kw)
        assert str(refused.value) == said
    data = dict(zip(("model", "system", "task", "axes"), args))
    # the file's own semantics names the file; a calibration is the caller's argument (the CLI's --calibration),
    # never the file's: it names the argument, not the file (it said "s.toml: calibration: ...")
    for extra, calibration, said in (({"semantics": "madmax"}, None, f"s.toml: semantics: {semantics}"),
                                     ({}, "c.toml", f"calibration: {training}")):
        with pytest.raises(SpecError) as refused:
            sweep_plan_from_file("s.toml", {**data, **extra}, tmp_path, calibration=calibration)
        assert str(refused.value) == said


def test_a_serving_sweep_file_with_the_cli_calibration_names_the_flag(tmp_path):
    """``fastmodel sweep s.toml --calibration cal.toml`` of a serving sweep: '--calibration: applies to training
    sweeps ...', the flag, not the file that never held it (it said 's.toml: calibration: ...')."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from tests.lm.test_calibrate import GOOD

    sweep = tmp_path / "s.toml"
    sweep.write_text('model = "llama3.1-8b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\ntp = [1, 2]\n')
    cal = tmp_path / "cal.toml"
    cal.write_text(GOOD)
    run = CliRunner().invoke(main, ["sweep", str(sweep), "-o", str(tmp_path / "o.nc"), "--calibration", str(cal)])
    assert run.exit_code == 2
    assert run.output.strip().splitlines()[-1] == ("error: --calibration: applies to training sweeps of the "
                                                   "real-world model, not to serving")
