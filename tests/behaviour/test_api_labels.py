"""A researcher's walk through the result datasets (the README's "Python API"): every variable and coordinate
labelled (``long_name``, ``units`` on numbers), every dataset saying what made it, the same call twice the same
dataset, a sweep's halves concatenated the whole, files keeping attrs and dtypes. Small grids, any JIT mode."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import fastmodel
from fastmodel.serve.api import sweep as serve_sweep

LM = ("llama3.1-8b", "dgx-h100", "llm-pretrain")
MADMAX = ("llama2-70b", "dc-a", "llm-pretrain")


def _unlabelled(ds: xr.Dataset) -> list[str]:
    """Variables and coordinates without a long_name, or numbers without units."""
    out = []
    for name, var in ds.variables.items():
        if "long_name" not in var.attrs:
            out.append(f"{name}: no long_name")
        if var.dtype.kind in "iufb" and "units" not in var.attrs:
            out.append(f"{name}: no units")
    return out


@pytest.fixture(scope="module")
def lm_grid():
    return fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": ["dp", "tp2"], "micro_batch": [1, 2]})


@pytest.mark.parametrize("make", [
    lambda: fastmodel.evaluate(*LM, plan="tp2", num_nodes=2),
    lambda: fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": ["dp", "tp2"], "micro_batch": [1, 2],
                                       "precision": ["bf16", "fp8"]}),
    lambda: fastmodel.evaluate(*MADMAX, plan="tp,ddp/mp", num_nodes=256, semantics="madmax"),
    lambda: fastmodel.sweep(*MADMAX, semantics="madmax", axes={"num_nodes": [128, 256], "num_layers": [40, 80],
                                                               "plan": ["tp,ddp/mp", "fsdp,ddp/mp"]}),
    lambda: serve_sweep("llama3.1-8b", device=["H100", "H200"], tp=[1, 2], batch_size=[1, 8], input_len=128,
                        output_len=[128]),
    lambda: fastmodel.sweep("llama3.1-8b", "H100", "serve-chat", axes={"concurrency": [1, 8], "tp": [1, 2]}),
], ids=["lm-evaluate", "lm-sweep", "madmax-evaluate", "madmax-sweep", "serve-api-sweep", "serve-sweep"])
def test_every_variable_and_coordinate_is_labelled(make):
    """A coordinate had only ``field`` (num_nodes, plan, tp) or nothing (memory_kind, the serving API's axes):
    ``ds.step_time.plot()`` labelled its axis with the bare name and no units. Every coordinate now has a
    long_name (the name spaced, as fastmodel's figures label it) and, when numeric, units ('1' for a count)."""
    assert _unlabelled(make()) == []


def test_coordinate_units_name_the_quantity(lm_grid):
    assert lm_grid.num_nodes.attrs["units"] == "1" and lm_grid.num_nodes.attrs["long_name"] == "num nodes"
    assert lm_grid.micro_batch.attrs["units"] == "sequences"
    assert lm_grid.micro_batch.attrs["field"] == "micro_batch"         # what the engine said stays
    assert "units" not in lm_grid.plan.attrs and lm_grid.memory_kind.attrs["long_name"] == "memory kind"
    madmax = fastmodel.sweep(*MADMAX, semantics="madmax", axes={"seq_len": [2048, 4096],
                                                                "bytes_per_dense_param": [1, 2],
                                                                "plan": ["tp,ddp/mp"]})
    assert madmax.seq_len.attrs["units"] == "tokens" and madmax.bytes_per_dense_param.attrs["units"] == "bytes"


def test_the_same_call_twice_is_the_same_dataset(lm_grid):
    again = fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": ["dp", "tp2"], "micro_batch": [1, 2]})
    xr.testing.assert_identical(lm_grid, again)


def test_a_sweep_in_two_halves_concatenated_is_the_whole(lm_grid):
    """Values, coordinates and their attrs are the whole's; the dataset attrs are the first half's (xarray's
    concat keeps the first's: its ``sweep`` attr names the first half's axes)."""
    halves = [fastmodel.sweep(*LM, axes={"num_nodes": nodes, "plan": ["dp", "tp2"], "micro_batch": [1, 2]})
              for nodes in ([1], [2])]
    joined = xr.concat(halves, dim="num_nodes", data_vars="different", coords="different", compat="equals",
                       join="exact")
    xr.testing.assert_equal(lm_grid, joined)
    for name in lm_grid.variables:
        assert joined[name].attrs == lm_grid[name].attrs and joined[name].dtype == lm_grid[name].dtype, name


def test_a_zarr_file_keeps_attrs_and_dtypes(lm_grid, tmp_path):
    lm_grid.to_zarr(tmp_path / "g.zarr")
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "g.zarr").load(), lm_grid)


def test_a_netcdf_file_keeps_attrs_and_flags(lm_grid, tmp_path):
    """netCDF-3 (scipy, the writer fastmodel uses) has no 64-bit integers: int64 coordinates come back int32,
    strings as object arrays; values, attrs and the bool fits_memory are kept."""
    lm_grid.to_netcdf(tmp_path / "g.nc", engine="scipy")
    back = xr.open_dataset(tmp_path / "g.nc").load()
    xr.testing.assert_equal(back, lm_grid)
    for name in lm_grid.variables:
        assert back[name].attrs.keys() == lm_grid[name].attrs.keys(), name
    assert list(back.status.attrs["flag_values"]) == lm_grid.status.attrs["flag_values"]
    assert back.fits_memory.dtype == bool and back.status.dtype == np.int8


def test_a_serving_sweep_records_what_made_it():
    """``fastmodel.serve.api.sweep`` recorded the model's name, the load mode and notes: not the fastmodel version,
    the engine, nor a value given as a scalar (``input_len=128``: in no coordinate), so the figure could not be
    remade from the file. Its ``call`` attr is the call's arguments as JSON: the same call again gives the same
    dataset."""
    import json

    ds = serve_sweep("llama3.1-8b", device=["H100"], tp=[1, 2], batch_size=[1, 8], input_len=np.int64(128),
                     output_len=128, engine="vllm")
    assert ds.attrs["fastmodel_version"] == fastmodel.__version__ and ds.attrs["fastmodel_engine"] == "serve"
    call = json.loads(ds.attrs["call"])
    assert call["input_len"] == 128 and call["output_len"] == 128 and call["engine"] == "vllm"
    xr.testing.assert_identical(serve_sweep(**call), ds)


def test_a_serving_sweep_of_model_columns_records_them():
    import json

    from fastmodel.serve.api import model_columns

    columns = model_columns("llama3.1-8b")
    ds = serve_sweep(columns, device="H100", batch_size=[1, 8], input_len=128, output_len=128)
    assert ds.attrs["model"] == "custom" and json.loads(ds.attrs["call"])["model"] == columns


def test_an_slo_search_dataset_is_labelled_and_records_what_made_it():
    """The searched sweep (``serve --search -o search.nc``) had unlabelled coordinates (engine, tp, the pools'
    degrees), two flags without long_name or units, and no record of the input and output lengths it was
    searched at, the device or the fastmodel version."""
    from fastmodel.serve.search import slo_search

    ds = slo_search("llama3.1-8b", "H100", input_len=1024, output_len=128, ttft="2s", tpot="50ms", gpus=2,
                    precisions="bf16", concurrency=[1, 8], modes=("agg", "disagg")).dataset
    assert _unlabelled(ds) == []
    assert ds.attrs["fastmodel_version"] == fastmodel.__version__
    assert (ds.attrs["input_len"], ds.attrs["output_len"], ds.attrs["device"]) == (1024, 128, "H100")


@pytest.mark.parametrize("kwargs, said", [
    ({"tp": "two"}, "tp: expected a number, got 'two'"),
    ({"kv_cache_mem_fraction": "0.9 GB"}, "kv_cache_mem_fraction: expected a number, got '0.9 GB'"),
    ({"tp": 0}, "tp: "),
])
def test_a_serving_sweep_names_a_fixed_value_that_is_no_number(kwargs, said):
    """A value given as a scalar (one fixed value, not an axis) was ``ValueError: could not convert string to
    float: 'two'``; the same value in a list, or to ``evaluate``, was already this line."""
    with pytest.raises(fastmodel.FastmodelError) as error:
        serve_sweep("llama3.1-8b", batch_size=[1], **kwargs)
    assert str(error.value).startswith(said) and "\n" not in str(error.value)


@pytest.mark.parametrize("plan", [[], ()])
def test_an_empty_plan_axis_is_named(plan):
    """Every other empty axis said ``axes.NAME: empty list``; an empty plan list said ``the grid is empty``."""
    with pytest.raises(fastmodel.SweepError, match=r"^axes\.plan: empty list$"):
        fastmodel.sweep(*LM, axes={"num_nodes": [1], "plan": plan})


def test_a_plan_axis_that_is_no_list_is_named():
    """``plan=5`` was ``TypeError: 'int' object is not iterable``."""
    with pytest.raises(fastmodel.SweepError, match=r"^axes\.plan: expected 'all', a plan string or a list of them, "
                                                    r"got 5$"):
        fastmodel.sweep(*LM, axes={"num_nodes": [1], "plan": 5})


def test_fits_memory_states_its_margin():
    """It said "fits (... the real-world model and serving: in usable HBM)" without saying what usable HBM is; the
    margin of each engine is now in the variable's own description."""
    said = fastmodel.evaluate(*LM, plan="tp2", num_nodes=2).fits_memory.attrs["description"]
    for words in ("memory_reserved + overhead <= HBM", "usable_hbm_fraction x HBM", "memory_weight_factor x weights",
                  "0.95", "no margin"):
        assert words in said, words


def test_a_swept_global_batch_is_not_also_one_attr():
    """Under a global_batch axis the attrs said ``global_batch: 2048`` (the task's) beside the coordinate
    [1024, 2048]; the attr is kept only where it holds for every point."""
    swept = fastmodel.sweep(*LM, axes={"global_batch": [1024, 2048], "plan": ["tp2"]})
    assert "global_batch" not in swept.attrs and list(swept.global_batch.values) == [1024, 2048]
    assert fastmodel.evaluate(*LM, plan="tp2").attrs["global_batch"] == 2048


def _first_record(path: str) -> dict:
    import json
    from pathlib import Path

    with open(Path(__file__).parents[1] / "data" / path) as lines:
        return json.loads(lines.readline())


@pytest.mark.parametrize("make, engine", [
    (lambda: fastmodel.evaluate(*MADMAX, plan="tp,ddp/mp", num_nodes=256, semantics="madmax"), "madmax"),
    (lambda: fastmodel.evaluate_record(_first_record("runs_dev.jsonl")), "lm"),
    (lambda: fastmodel.evaluate_record(_first_record("serve_dev_load.jsonl")), "serve"),
    (lambda: fastmodel.memory_by_stage(*LM, plan="tp2.pp2", num_nodes=2), "lm"),
    (lambda: fastmodel.evaluate(*LM, plan="tp2"), "lm"),
], ids=["madmax-evaluate", "lm-record", "serve-record", "memory-by-stage", "lm-evaluate"])
def test_every_result_names_the_version_and_engine_that_made_it(make, engine):
    """A record's result, a MAD-Max configuration's and the memory stages named no fastmodel version (or no
    engine) while a sweep's did: a file of one could not say what made it."""
    ds = make()
    assert ds.attrs["fastmodel_version"] == fastmodel.__version__ and ds.attrs["fastmodel_engine"] == engine


@pytest.fixture(scope="module")
def validation():
    from pathlib import Path

    return fastmodel.validate(Path(__file__).parents[1] / "data" / "runs_dev.jsonl", heldout=True)


@pytest.mark.parametrize("kwargs, said", [
    ({"split": "heldout"}, "split 'heldout' is none of dev, held-out (did you mean 'held-out'?)"),
    ({"key": "gpuu"}, "key 'gpuu' is none of "),
    ({"metric": "step_tim"}, "(did you mean 'step_time'?)"),
    ({"key": "gpu", "group": "no-such-gpu"}, "group 'no-such-gpu' is none of "),
])
def test_a_score_that_is_not_there_names_what_is(validation, kwargs, said):
    """``val.score(split="heldout")`` was a bare KeyError whose message listed the groups of the key only; it is
    a FastmodelError (still a KeyError, printed as a plain line) naming the first argument that matches nothing,
    what there is, and the nearest."""
    with pytest.raises(fastmodel.FastmodelError) as error:
        validation.score(**kwargs)
    assert isinstance(error.value, KeyError) and said in str(error.value), str(error.value)
    assert not str(error.value).startswith(("'", '"'))


def test_a_misspelt_score_keyword_names_the_nearest(validation):
    from fastmodel.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"score\(\): unknown argument 'splt' \(did you mean 'split'\?\)"):
        validation.score(splt="held-out")


def test_numpy_scalars_where_validate_and_calibrate_take_a_bool_or_an_int():
    """``heldout=np.bool_(True)`` was refused ("expected True ..., got bool") and ``folds=np.int64(0)`` said
    "--folds: must be 0 or between 2 and the number of runs (720), got 0"; numpy's values are Python's."""
    from pathlib import Path

    runs = Path(__file__).parents[1] / "data" / "runs_dev.jsonl"
    assert fastmodel.validate(runs, heldout=np.bool_(True)).score(split="held-out")["n"] > 0
    three = [_first_record("runs_dev_small.jsonl")]
    three = [dict(three[0], id=f"r{i}") for i in range(3)]
    assert "A100-SXM4-80GB" in fastmodel.calibrate(three, folds=np.int64(0), seed=np.int32(0)).devices


def test_best_of_a_grid_with_no_legal_point_says_why():
    """A selection whose every point is illegal (tp3 on 8-GPU nodes) said "step_time has no finite value", as if
    the model had failed; the statuses say why."""
    from fastmodel.analysis.best import best

    grid = fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": ["tp3", "tp2"]})
    with pytest.raises(fastmodel.SweepError, match=r"^step_time has no finite value: no configuration is legal "
                                                   r"\(status devices_not_divisible: 2\)$"):
        best(grid.sel(plan=["tp3"]), "step_time")


def test_evaluate_of_a_serving_task_names_the_python_call():
    """``fastmodel.evaluate(model, "dgx-h100", "serve-chat")`` pointed a Python user at the command line only."""
    with pytest.raises(fastmodel.SpecError, match=r"fastmodel\.serve\.api\.evaluate.*fastmodel\.sweep"):
        fastmodel.evaluate("llama3.1-8b", "dgx-h100", "serve-chat")


def test_a_plan_axis_as_a_numpy_array_is_its_list(lm_grid):
    """``axes={"plan": df.plan.unique()}`` (a numpy array of str) was "ValueError: The truth value of an array with
    more than one element is ambiguous" (``values == "all"``); it is the list it holds."""
    given = fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": np.array(["dp", "tp2"]), "micro_batch": [1, 2]})
    xr.testing.assert_identical(given, lm_grid)


def test_a_training_result_names_its_task(tmp_path):
    """Every real-world result said ``fastmodel_task: llm-pretrain`` and nothing else of its task, so a figure's
    default title named llm-pretrain for llm-pretrain-fsdp or a task of one's own; the ``task`` attr is its name."""
    from fastmodel.plot.data import subject

    own = {"name": "my-pretrain", "kind": "pretrain", "global_batch": 512}
    one = fastmodel.evaluate("llama3.1-8b", "dgx-h100", own, plan="tp2")
    assert one.attrs["task"] == "my-pretrain" and subject(one) == "Llama 3.1 8B on dgx-h100, my-pretrain"
    grid = fastmodel.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain-fsdp", axes={"plan": ["tp2"]})
    assert grid.attrs["task"] == "llm-pretrain-fsdp"
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain-fsdp"\n'
                          '[axes]\nplan = ["tp2"]\n')
    from fastmodel.sweeps.file import load_sweep_file

    assert load_sweep_file(str(sweep_file)).dataset_attrs()["task"] == "llm-pretrain-fsdp"
