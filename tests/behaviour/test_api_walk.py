"""The Python API as a hurried notebook user calls it (fastmodel.__all__, fastmodel.analysis.best.best,
fastmodel.plot, fastmodel.serve.api): a misspelt keyword, a str where a list goes, numpy integers, a path where a
dict goes, a calibration of the wrong type -- each one line of a FastmodelError naming the argument and the
reason (the nearest valid name for a typo), never a bare TypeError, AttributeError or KeyError."""

from __future__ import annotations

import inspect

import pytest

import fastmodel
import fastmodel.plot as fp
from fastmodel.analysis.best import best
from fastmodel.errors import ArgumentError, FastmodelError

LM = ("llama3.1-8b", "dgx-h100", "llm-pretrain")


@pytest.mark.parametrize("call, said", [
    (lambda: fastmodel.evaluate(*LM, num_node=2), "evaluate(): unknown argument 'num_node' (did you mean 'num_nodes'?)"),
    (lambda: fastmodel.sweep(*LM, axes={}, only_fiting=True), "(did you mean 'only_fitting'?)"),
    (lambda: fastmodel.evaluate_record({}, sorce="x"), "(did you mean 'source'?)"),
    (lambda: fastmodel.memory_by_stage(*LM, memory_marign=0), "(did you mean 'memory_margin'?)"),
    (lambda: best(None, "step_time", acending=True), "best(): unknown argument 'acending' (did you mean 'ascending'?)"),
    (lambda: fp.heatmap(None, varr="step_time"), "heatmap(): unknown argument 'varr' (did you mean 'var'?)"),
    (lambda: fastmodel.evaluate("llama3.1-8b"), "evaluate(): missing a required argument: 'system'"),
    (lambda: fp.timeline(*LM), "timeline(): too many positional arguments (positional: config; by keyword: model=, "
                               "system=, task=, record="),
    (lambda: fastmodel.evaluate(*LM, *range(6)), "evaluate(): too many positional arguments (positional: model, "
                                                  "system, task, semantics, plan, num_nodes, execution, calibration)"),
])
def test_a_misspelt_keyword_names_the_nearest_parameter(call, said):
    """Python's own error names neither the function's parameters nor the nearest one; the call is refused before
    anything is loaded."""
    with pytest.raises(ArgumentError) as error:
        call()
    assert said in str(error.value) and "\n" not in str(error.value)
    assert isinstance(error.value, TypeError) and isinstance(error.value, FastmodelError)


def test_checked_functions_keep_their_signature_and_docstring():
    """``help(fastmodel.evaluate)`` shows the parameters, not ``*args, **kwargs``."""
    assert list(inspect.signature(fastmodel.evaluate).parameters)[:3] == ["model", "system", "task"]
    assert "var" in inspect.signature(fp.heatmap).parameters
    assert fastmodel.evaluate.__doc__.startswith("Evaluate one configuration")


@pytest.mark.parametrize("call", [
    lambda: fastmodel.evaluate(*LM, plan="tp2", num_nodes=2, calibration=3),
    lambda: fastmodel.sweep(*LM, axes={"plan": ["tp2"]}, calibration=["cal.toml"]),
])
def test_a_calibration_of_the_wrong_type_is_named(call):
    """A path (str or Path) or a Calibration; anything else was ``TypeError: expected str, bytes or os.PathLike``."""
    with pytest.raises(FastmodelError, match=r"^calibration: expected a path to a 'fastmodel calibrate' TOML file "
                                             r"or a Calibration, got (int|list)$"):
        call()


def test_numpy_numbers_in_an_execution_dict_are_numbers():
    """``np.int64(2)`` from a notebook's ``np.arange`` is the integer 2 (the strict schema refused it: "Input should
    be a valid integer (got np.int64(2))"); the result is the one the Python int gives."""
    import numpy as np

    given = fastmodel.evaluate(*LM, plan="tp2", num_nodes=2, execution={"micro_batch": np.int64(2),
                                                                      "recompute_fraction": np.float32(0.5)})
    plain = fastmodel.evaluate(*LM, plan="tp2", num_nodes=2, execution={"micro_batch": 2, "recompute_fraction": 0.5})
    assert float(given.step_time) == float(plain.step_time)


def test_plain_numbers_keeps_what_is_not_numpy():
    import numpy as np

    from fastmodel.spec.loader import plain_numbers

    out = plain_numbers({"a": np.int64(3), "b": [np.float64(0.5), "x"], "c": (np.bool_(True),), "d": None})
    assert out == {"a": 3, "b": [0.5, "x"], "c": (True,), "d": None}
    assert type(out["a"]) is int and type(out["c"][0]) is bool


def _run_record() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parents[1] / "data" / "runs_dev.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize("change, said", [
    (lambda r: "runs.jsonl", "record: expected one record as a dict (a parsed JSON line), got str: read a file"),
    (lambda r: [r], "record: expected one record as a dict, got list"),
    (lambda r: {k: v for k, v in r.items() if k != "plan"}, "plan: required block missing (a run record needs"),
    (lambda r: {**r, "plan": "tp8"}, "plan: a run record's plan block must be an object (got 'tp8')"),
])
def test_evaluate_record_names_what_is_not_a_record(change, said):
    """A path, a list of records or a record with a hole was "not a run record ... nor a serving record", which
    named neither the type given nor the block missing."""
    with pytest.raises(FastmodelError) as error:
        fastmodel.evaluate_record(change(_run_record()))
    assert str(error.value).startswith(said)


@pytest.mark.parametrize("kwargs, said", [
    ({"model": "record"}, "model: a run record: pass it as record=..."),
    ({}, "model: give model, system and task (specs) or record= (a run record)"),
    ({"record": "runs.jsonl"}, "record: expected one run record as a dict (a parsed JSON line), got str"),
    ({"record": {}}, "record: not a real-world training configuration"),
])
def test_memory_by_stage_says_where_a_record_goes(kwargs, said):
    """A record given positionally, nothing at all, or a path as ``record`` was "model: not a real-world training
    configuration", which sent the user to the wrong argument."""
    kwargs = {k: _run_record() if v == "record" else v for k, v in kwargs.items()}
    for function in (fastmodel.memory_by_stage, fp.memory_timeline):
        with pytest.raises(FastmodelError) as error:
            function(**kwargs)
        assert str(error.value).startswith(said)


@pytest.fixture(scope="module")
def grid():
    return fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": ["dp", "tp2", "tp2.pp2"]})


def test_best_takes_what_a_notebook_hands_it(grid, tmp_path):
    """One filter as a str (was split into characters: "filter on unknown variable 'n'"), a numpy top, and the
    path of a result as the CLI takes it; the table names each column's units."""
    import numpy as np

    table = best(grid, "step_time", top=np.int64(2), where="num_nodes=2")
    assert list(table.num_nodes) == [2, 2] and table.equals(best(grid, "step_time", top=2, where=["num_nodes=2"]))
    assert table.attrs["units"]["step_time"] == "s" and table.attrs["units"]["memory_per_device"] == "bytes"
    grid.to_netcdf(tmp_path / "grid.nc")
    assert best(tmp_path / "grid.nc", "step_time", top=2).step_time.tolist() == best(grid, "step_time", top=2).step_time.tolist()


@pytest.mark.parametrize("ds, top, said", [
    ("grid.step_time", 3, "ds: expected a result Dataset (fastmodel.sweep) or the path of a .nc/.zarr result, got "
                          "DataArray: pass the Dataset (ds), not one of its variables"),
    ("grid", "3", "top: expected a whole number of configurations >= 1 (got '3')"),
    ("grid", 2.5, "top: expected a whole number of configurations >= 1 (got 2.5)"),
])
def test_best_names_a_wrong_argument(grid, ds, top, said):
    """Were AttributeError ('DataArray' object has no attribute 'data_vars') and TypeError ('<' not supported)."""
    with pytest.raises(FastmodelError) as error:
        best(grid.step_time if ds == "grid.step_time" else grid, "step_time", top=top)
    assert str(error.value) == said


@pytest.mark.parametrize("axes", [["num_nodes"], "num_nodes=2", ("plan", "tp2")])
def test_sweep_axes_must_be_a_dict(axes):
    """Was AttributeError: 'list' object has no attribute 'values'."""
    with pytest.raises(FastmodelError, match=r"^axes: expected a dict of axis name -> values \(e\.g\. "
                                             r"\{'num_nodes': \[16, 32\]\}\), got (list|str|tuple)$"):
        fastmodel.sweep(*LM, axes=axes)


@pytest.mark.parametrize("store", ["grid.nc", "grid", "grid.ZARR"])
def test_a_sweep_store_ends_in_zarr(store, tmp_path, monkeypatch):
    """store='grid.nc' wrote a zarr directory named grid.nc (the CLI's -o writes netCDF there); now refused, as
    the CLI refuses an output that ends in neither .zarr nor .nc, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FastmodelError, match=rf"^store: a zarr store's path, ending in \.zarr \(got '{store}'\)"):
        fastmodel.sweep(*LM, axes={"plan": ["tp2"]}, store=store)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kwargs, said", [
    ({"tpp": 4, "batch_size": 1}, "tpp: unknown column (did you mean 'tp'?)"),
    ({"tpp": 4}, "tpp: unknown column (did you mean 'tp'?)"),
    ({"tp": 4, "input_len": "1k", "batch_size": 1}, "input_len: expected a number, got '1k'; a count takes no unit "
     "suffix; write the whole number (8k tokens: 8000 or 8192)"),
    ({"tp": "4", "batch_size": 1}, "tp: expected a number, got '4'"),
    ({"tp": [2, 4], "batch_size": 1}, "tp: one value per evaluate() call, got a list [2, 4]; to compare several, sweep them: "
     "fastmodel.serve.api.sweep(model, device, tp=[...])"),
])
def test_serve_evaluate_names_a_misspelt_column_or_a_value_that_is_no_number(kwargs, said):
    """``tpp=4`` was "load: give exactly one of batch_size, ..." (the load was checked first) and
    ``input_len="1k"`` a bare TypeError; ``tp="4"`` was read as 4 and ``tp=[2, 4]`` was a TypeError (a list is
    an axis of ``sweep``, not of ``evaluate``)."""
    from fastmodel.serve.api import evaluate

    with pytest.raises(FastmodelError) as error:
        evaluate("llama3.1-70b", "H100", **kwargs)
    assert str(error.value) == said


def test_serve_evaluate_takes_numpy_integers():
    import numpy as np

    from fastmodel.serve.api import evaluate

    given = evaluate("llama3.1-70b", "H100", tp=np.int64(4), input_len=np.int32(128), output_len=128, batch_size=1)
    assert given == evaluate("llama3.1-70b", "H100", tp=4, input_len=128, output_len=128, batch_size=1)


def test_memory_by_stage_labels_every_variable():
    """``fits_memory``, ``peak_moment`` and the ``stage`` coordinate had no attrs; every number now names its
    units and every variable its long name, as the Datasets of ``evaluate`` and ``sweep`` do."""
    ds = fastmodel.memory_by_stage(*LM, plan="tp2.pp2", num_nodes=2)
    assert ds.fits_memory.attrs["units"] == "1" and ds.memory.attrs["units"] == "bytes"
    assert ds.stage.attrs["units"] == "1" and list(ds.stage.values) == [0, 1]
    assert all("long_name" in ds[name].attrs for name in ds.variables if name != "memory_kind")
    assert all("units" in ds[name].attrs for name in ds.data_vars if ds[name].dtype.kind in "fiub")
    assert float(ds.memory.sel(stage=0).sum("memory_kind")) == pytest.approx(float(ds.memory_per_device.sel(stage=0)))


def test_slo_search_reads_one_name_and_durations_as_the_cli_does():
    """``precisions="fp8"`` was read letter by letter ("unknown value 'f'"), ``modes="agg"`` too, and
    ``ttft="1s"`` was a bare TypeError; now they are the one name and the duration ``--ttft 1s`` reads."""
    from fastmodel.serve.search import slo_search

    args = dict(input_len=1024, output_len=256, gpus=2, concurrency=(1, 8, 64))
    given = slo_search("llama3.1-8b", "H100", ttft="1s", tpot="50ms", precisions="fp8", modes="agg", **args)
    plain = slo_search("llama3.1-8b", "H100", ttft=1.0, tpot=0.05, precisions=("fp8",), modes=("agg",), **args)
    assert given.best == plain.best and given.best["precision"] == "fp8"
    assert given.dataset.identical(plain.dataset) and list(given.dataset.precision.values) == ["fp8"]


@pytest.mark.parametrize("kwargs, said", [
    ({"ttft": "1 sec", "tpot": 0.05}, "ttft: "),
    ({"ttft": 1, "tpot": 0.05, "gpu": 2}, "slo_search(): unknown argument 'gpu' (did you mean 'gpus'?)"),
])
def test_slo_search_names_a_wrong_argument(kwargs, said):
    from fastmodel.serve.search import slo_search

    with pytest.raises(FastmodelError) as error:
        slo_search("llama3.1-8b", "H100", input_len=1024, output_len=256, **kwargs)
    assert str(error.value).startswith(said)


@pytest.mark.parametrize("figure", ["heatmap", "scaling", "pareto", "breakdown", "memory_bars"])
@pytest.mark.parametrize("sel", ["num_nodes=2", ["num_nodes=2"]])
def test_a_figure_names_a_selection_that_is_no_dict(grid, figure, sel):
    """``sel="num_nodes=2"`` (the CLI's --sel text) was AttributeError: 'str' object has no attribute 'items'."""
    calls = {"heatmap": lambda: fp.heatmap(grid, x="num_nodes", y="plan", var="step_time", sel=sel),
             "scaling": lambda: fp.scaling(grid, "num_nodes", var="step_time", hue="plan", sel=sel),
             "pareto": lambda: fp.pareto(grid, "step_time", "tokens_per_s_per_gpu", sel=sel),
             "breakdown": lambda: fp.breakdown(grid, sel=sel),
             "memory_bars": lambda: fp.memory_bars(grid, sel=sel)}
    with pytest.raises(FastmodelError, match=r"^sel: expected a dict of dimension -> value \(e\.g\. "
                                             r"sel=\{'num_nodes': 256\}\), got (str|list) "):
        calls[figure]()


def test_run_batch_takes_dicts_and_refuses_a_str_or_path():
    """A list of parsed records was TypeError (unhashable type: 'dict'); a path or one line as a str was read
    character by character (a status 'invalid JSON' per character)."""
    import json
    from pathlib import Path

    import numpy as np

    from fastmodel.io.batch import run_batch

    lines = (Path(__file__).parents[1] / "data" / "runs_dev.jsonl").read_text().splitlines()[:2]
    dicts = [json.loads(line) for line in lines]
    dicts[1]["plan"]["micro_batch"] = np.int64(dicts[1]["plan"]["micro_batch"])
    assert list(run_batch(dicts)) == list(run_batch(lines))
    for given in (lines[0], Path("runs.jsonl"), lines[0].encode()):
        with pytest.raises(FastmodelError, match=r"^lines: expected an iterable of JSON lines or dicts"):
            run_batch(given)
    with pytest.raises(FastmodelError, match=r"^lines: line 1: a dict that is not JSON"):
        list(run_batch([{"model": object()}]))


def test_a_command_name_on_the_package_says_its_python_call():
    """``fastmodel.run`` (the CLI's name) was a bare "no attribute 'run'"; it now names ``fastmodel.evaluate``.
    Still an AttributeError, so ``hasattr`` keeps working."""
    with pytest.raises(AttributeError, match=r"'fastmodel run' is fastmodel\.evaluate \(specs\)"):
        fastmodel.run  # noqa: B018
    assert not hasattr(fastmodel, "best") and not hasattr(fastmodel, "nothing_here")


def test_fastmodel_plot_is_the_plot_subpackage_after_import_fastmodel(monkeypatch):
    """``fastmodel.plot`` said "'fastmodel plot' is fastmodel.plot in Python", the name just typed; it is now the
    subpackage, imported on first use (the attribute an earlier import set is removed, so the package's
    ``__getattr__`` answers)."""
    import importlib

    monkeypatch.delattr(fastmodel, "plot", raising=False)
    assert fastmodel.plot is importlib.import_module("fastmodel.plot")
    assert callable(fastmodel.plot.heatmap)


@pytest.mark.parametrize("specs, semantics", [(LM, "default"), (("llama2-70b", "dc-a", "llm-pretrain"), "madmax")])
def test_the_all_plan_keyword_is_read_whatever_its_case_in_python(specs, semantics):
    """A sweep file read plan = "ALL" as "all" (test_hurried_user); fastmodel.sweep refused it ("'all' is not a
    degree like tp8" for the real-world model, "cannot parse plan 'ALL'" for MAD-Max)."""
    def plans(keyword):
        return fastmodel.sweep(*specs, axes={"plan": keyword, "num_nodes": 16}, semantics=semantics)

    assert plans("ALL").identical(plans("all")) and plans(" All ").identical(plans("all"))


def test_several_models_say_where_they_go():
    """A list of models was "expected a name, a path or a dict, got list" (MAD-Max) and "unknown axis 'model'
    (did you mean 'num_nodes'?)" (a real-world model axis)."""
    with pytest.raises(FastmodelError, match=r"got list \(several models: a MAD-Max sweep's model axis, "
                                             r"axes=\{'model': \[\.\.\.\]\}\)$"):
        fastmodel.sweep(["llama2-70b", "llama-7b"], "dc-a", "llm-pretrain", axes={"num_nodes": [16]})
    with pytest.raises(FastmodelError, match=r"^axes\.model: a real-world sweep takes one model"):
        fastmodel.sweep(*LM, axes={"model": ["llama3.1-8b", "llama3.1-70b"]})


@pytest.mark.parametrize("name", [n for n in fastmodel.__all__ if n[0].islower() and n != "__version__"])
def test_every_public_function_has_a_docstring(name):
    """``help(fastmodel.X)`` says what X does; the four that return results say their units."""
    value = getattr(fastmodel, name)
    assert (value.__doc__ or "").strip(), name
    if name in ("evaluate", "evaluate_record", "sweep", "memory_by_stage"):
        assert "units" in value.__doc__ or "bytes" in value.__doc__, name


def test_a_serving_result_dict_names_where_its_units_are():
    from fastmodel.registry.serve import SERVE_RESULTS
    from fastmodel.serve.api import evaluate

    assert "SERVE_RESULTS" in evaluate.__doc__
    result = evaluate("llama3.1-70b", "H100", tp=4, input_len=128, output_len=128, batch_size=1)
    assert set(result) == {r.name for r in SERVE_RESULTS} | {"status", "notes"}


def test_a_memory_margin_with_a_bytes_unit():
    """memory_margin="2 GiB" (a spec file's way to write bytes) was "'2 GiB' is not a number"; it is 2 x 2^30
    bytes, the same result as the number. A wrong unit or a negative one stays one line."""
    ds = fastmodel.memory_by_stage(*LM, plan="tp2.pp2", num_nodes=2, memory_margin="2 GiB")
    assert ds.identical(fastmodel.memory_by_stage(*LM, plan="tp2.pp2", num_nodes=2, memory_margin=2 * 2**30))
    from fastmodel.analysis.margin import check_margin

    # the unit in any case, as the CLI's --memory-margin 8 gib ("2 gib" was "not a number")
    assert check_margin("2 gib") == check_margin("2GIB") == 2 * 2**30 and check_margin("500 mb") == 500e6
    for given, said in (("2 XB", "memory_margin: unknown unit 'XB' for bytes"),
                        ("-2 GiB", "memory_margin: '-2 GiB' is negative"),
                        ("2 GB/s", "memory_margin: '2 GB/s' is not a number")):
        with pytest.raises(FastmodelError) as error:
            fastmodel.memory_by_stage(*LM, plan="tp2.pp2", num_nodes=2, memory_margin=given)
        assert str(error.value).startswith(said)


@pytest.mark.parametrize("nodes", [None, [[1, 2]], [float("nan")], [-1], [1.5], [0], ["two"]])
def test_a_node_count_that_is_no_whole_number_is_named(nodes):
    """None, a nested list and nan were TypeError / ValueError from int(max(nodes) * gpus_per_node); -1 and 1.5
    were swept and came back as "every point is illegal (devices_not_divisible / batch_not_divisible)"."""
    with pytest.raises(FastmodelError, match=r"^axes\.num_nodes: (every value must be a whole number of nodes >= 1 "
                                             r"\(got .*\)|'two' is not a number|None; give a list, a scalar .*)$"):
        fastmodel.sweep(*LM, axes={"num_nodes": nodes, "plan": "tp2"})


def test_whole_node_counts_of_any_type_sweep_alike():
    import numpy as np

    plain = fastmodel.sweep(*LM, axes={"num_nodes": [1, 2], "plan": "tp2"})
    assert fastmodel.sweep(*LM, axes={"num_nodes": np.array([1.0, 2.0]), "plan": "tp2"}).step_time.equals(plain.step_time)


@pytest.mark.parametrize("call, said", [
    (lambda e, s: e("llama3.1-8b", "H100", batch_size=1, tp=0), "tp: 0 is outside [1, 65536]"),
    (lambda e, s: e("llama3.1-8b", "H100", batch_size=1, tp=-1), "tp: -1 is outside [1, 65536]"),
    (lambda e, s: e("llama3.1-8b", "H100", concurrency=0), "concurrency: 0 is outside [1, 16777216] requests"),
    (lambda e, s: e("llama3.1-8b", "H100", batch_size=1, input_len=0), "input_len: 0 is outside [1, 16777216] tokens"),
    (lambda e, s: s("llama3.1-8b", tp=[1, 0], batch_size=1), "tp: 0 is outside [1, 65536]"),
    (lambda e, s: s("llama3.1-8b", tp=[float("nan")], batch_size=1), "tp: nan is outside [1, 65536]"),
    (lambda e, s: s("llama3.1-8b", tp=[None], batch_size=1), "tp: expected a number, got None"),
    (lambda e, s: e("llama3.1-8b", "H100", batch_size=2.5), "batch_size: every value must be a whole number (got 2.5)"),
    (lambda e, s: e("llama3.1-8b", "H100", concurrency=1.5), "concurrency: every value must be a whole number (got 1.5)"),
    (lambda e, s: e("llama3.1-8b", "H100", batch_size=1, input_len=100.5),
     "input_len: every value must be a whole number (got 100.5)"),
])
def test_a_serving_value_outside_its_column_is_named(call, said):
    """tp=0 was ZeroDivisionError inside the numba kernel (SystemError from the sweep), tp=-1 and input_len=0
    were evaluated as if legal, tp=[None] a bare TypeError; each is now one line with the column's bounds."""
    from fastmodel.serve.api import evaluate, sweep

    with pytest.raises(FastmodelError) as error:
        call(evaluate, sweep)
    assert str(error.value) == said


@pytest.mark.parametrize("name, wrong, right", [("serving_pareto", "yy", "y"), ("serving_frontiers", "curv", "curve"),
                                               ("disagg_frontier", "x_dri", "x_dir"), ("mark_slo", "yy", "y"),
                                               ("left_out", "kep", "keep")])
def test_the_serving_figures_name_a_misspelt_keyword(name, wrong, right):
    """The walk's leftover: fastmodel.plot.serving's entry points took ``curv=`` with Python's bare TypeError."""
    import fastmodel.plot.serving as serving

    with pytest.raises(ArgumentError, match=rf"^{name}\(\): unknown argument '{wrong}' \(did you mean '{right}'\?\)"):
        getattr(serving, name)(None, **{wrong: "tpot"})


@pytest.mark.parametrize("axes", [{"tp": [1, 1.5]}, {"tp": 1.5}, {"batch_size": [2.5]}, {"input_len": [1024.5]}])
def test_a_serving_sweep_refuses_a_degree_that_is_no_whole_number(axes):
    """The training sweeps' rule (``axis 'tp': every value must be a whole number``) on the serving sweep's axes,
    scalars included: tp=[1.5] was evaluated as a mesh of 1.5 GPUs."""
    from fastmodel.errors import SweepError
    from fastmodel.serve.api import sweep

    name, value = next(iter(axes.items()))
    bad = value[-1] if isinstance(value, list) else value
    with pytest.raises(SweepError, match=rf"^axis '{name}': every value must be a whole number \(got {bad}\)$"):
        sweep("llama3.1-8b", "H100", **axes)
