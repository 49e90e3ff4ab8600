"""Sweeps: labeled grids identical to single-config runs, status codes, stores, Dask."""

import importlib
import json

import numpy as np
import pytest
import xarray as xr

import fastmodel
from fastmodel import sweep
from fastmodel.errors import SweepError
from fastmodel.madmax.lowering.params import STATUS
from fastmodel.madmax.sweep.definition import Sweep
from fastmodel.sweeps import run_in_memory, run_to_store, write_units

sweep_module = importlib.import_module("fastmodel.sweeps")  # the shared sweep machinery (fastmodel.sweep: the call)

AXES = {
    "num_nodes": [1, 4, 16],
    "global_batch": [96, 512, 2048],
    "flops_util": [0.5, 0.705],
    "plan": ["fsdp/ddp", "tp,ddp/mp", "ddp,pp/mp,ddp", "tp/mp"],
}


@pytest.fixture(scope="module")
def small():
    return sweep("llama-7b", "dc-a", "llm-pretrain", AXES, semantics="madmax")


def test_dims_coords_attrs(small):
    assert dict(small.sizes) == {"num_nodes": 3, "global_batch": 3, "flops_util": 2, "plan": 4}
    assert list(small.plan.values) == AXES["plan"]
    assert small.num_nodes.attrs["field"] == "system.num_nodes"
    assert small.iteration_time.attrs["units"] == "s"
    assert "flag_meanings" in small.status.attrs
    definition = json.loads(small.attrs["sweep"])
    assert definition["axes"]["num_nodes"] == [1, 4, 16]
    assert small.attrs["fastmodel_version"] == fastmodel.__version__
    assert "global_batch" not in small.data_vars  # it is the coordinate


def test_every_point_equals_single_config_run(small):
    task = {"name": "t", "kind": "pretrain", "global_batch": 1}
    for nodes in AXES["num_nodes"]:
        for batch in AXES["global_batch"]:
            for util in AXES["flops_util"]:
                for plan in AXES["plan"]:
                    point = small.sel(num_nodes=nodes, global_batch=batch, flops_util=util, plan=plan)
                    system = fastmodel.make_config("llama-7b", "dc-a", "llm-pretrain-fsdp").system
                    system = system.model_copy(update={"device": system.device.model_copy(update={"flops_util": util})})
                    try:
                        single = fastmodel.evaluate("llama-7b", system, dict(task, global_batch=batch), plan=plan,
                                                    num_nodes=nodes, semantics="madmax")
                    except fastmodel.FastmodelError:
                        assert int(point.status) != STATUS["ok"]
                        assert np.isnan(float(point.iteration_time))
                        continue
                    if not bool(single.fits_memory):
                        assert int(point.status) == STATUS["does_not_fit"]
                        assert np.isnan(float(point.throughput))
                        assert float(point.memory_per_device) == float(single.memory_per_device)
                        continue
                    assert int(point.status) == STATUS["ok"]
                    for name in ("iteration_time", "throughput", "exposed_comm", "time_allreduce", "weight_memory"):
                        assert float(point[name]) == float(single[name]), (nodes, batch, util, plan, name)


def test_status_codes(small):
    one_node = small.sel(num_nodes=1)
    assert (one_node.status.sel(plan="tp,ddp/mp") == STATUS["degree_le_1"]).all()
    # 96 sequences do not divide over 128 data-parallel replicas
    assert int(small.status.sel(num_nodes=16, global_batch=96, flops_util=0.5, plan="fsdp/ddp")) == \
        STATUS["batch_not_divisible"]
    ok = small.status == STATUS["ok"]
    assert bool(ok.any())
    assert bool(np.isfinite(small.throughput.where(ok)).sum() == ok.sum())
    assert bool(small.throughput.where(~ok).isnull().all())


def test_plan_all_and_rules():
    ds = sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [1, 2], "plan": "all"})
    assert ds.sizes["plan"] == 52
    single_node_legal = (ds.status.sel(num_nodes=1) != STATUS["degree_le_1"]).sum()
    assert int(single_node_legal) <= 8
    ds = sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [2], "plan": {"dense": ["tp", "ddp"], "emb": ["mp"]}})
    assert sorted(ds.plan.values) == sorted(["ddp/mp", "tp/mp", "tp,ddp/mp", "ddp,tp/mp"])
    ds = sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [1], "plan": "all"})
    assert ds.sizes["plan"] == 8  # only the 1-D shapes exist on one node


@pytest.mark.parametrize(
    "axes, message",
    [
        ({"num_node": [2]}, "did you mean 'num_nodes'"),
        ({"num_nodes": []}, "empty"),
        ({"num_nodes": [2, 2], "plan": "all"}, "duplicate value 2"),
        ({"num_nodes": ["two"], "plan": "all"}, "not a number"),
        ({"num_nodes": [2.5], "plan": "all"}, "not an integer"),
        ({"flops_util": [0.5, 1.5], "plan": "all"}, "flops_util = 1.5"),
        ({"plan": ["tp8,ddp"]}, "axis plan"),
        ({"plan": ["tp/"]}, "cannot parse plan"),
        ({"num_nodes": [2]}, "leaves the plan open"),
        ({}, "at least one axis"),
        ({"name": ["x"]}, "unknown axis"),
        ({"flops_util": {"start": 0.5, "stop": 0.7}}, "needs 'num' or 'step'"),
        ({"plan": {"dense": ["tq"]}}, "did you mean 'tp'"),
    ],
)
def test_bad_axes(axes, message):
    with pytest.raises(SweepError, match=message):
        sweep("llama-7b", "dc-a", "llm-pretrain", axes)


def test_every_point_illegal_says_why():
    with pytest.raises(SweepError, match=r"every point .* degree_le_1 \(100%"):
        sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [1], "plan": ["tp,ddp/mp"]})


def test_ranges_and_units():
    ds = sweep("llama-7b", "dc-a", "llm-pretrain-fsdp", {
        "flops_util": {"start": 0.4, "stop": 0.8, "num": 5},
        "port_bandwidth_bytes_per_s": ["12.5 GB/s", "25 GB/s"],
        "fp16": {"start": 312e12, "stop": 1248e12, "num": 3, "scale": "log"},
    })
    np.testing.assert_allclose(ds.flops_util.values, [0.4, 0.5, 0.6, 0.7, 0.8])
    assert list(ds.port_bandwidth_bytes_per_s.values) == [12.5e9, 25e9]
    np.testing.assert_allclose(ds.fp16.values, [312e12, 624e12, 1248e12])
    # faster GPUs never make an iteration slower
    assert bool((ds.iteration_time.diff("fp16") <= 1e-12).all())


def test_structural_axes_layers_and_kind():
    ds = sweep("llama-7b", "dc-a", "llm-pretrain-fsdp", {"num_layers": [8, 32], "kind": ["pretrain", "inference"]})
    t = ds.iteration_time
    assert float(t.sel(num_layers=32, kind="pretrain")) > float(t.sel(num_layers=8, kind="pretrain"))
    assert float(t.sel(num_layers=32, kind="inference")) < float(t.sel(num_layers=32, kind="pretrain"))
    single = fastmodel.evaluate({**fastmodel.make_config("llama-7b", "dc-a", "llm-pretrain-fsdp").model.model_dump(),
                                 "num_layers": 8}, "dc-a", {"name": "i", "kind": "inference", "global_batch": 2048},
                                plan="fsdp/ddp")
    assert float(t.sel(num_layers=8, kind="inference")) == float(single.iteration_time)


def test_too_large_without_store(monkeypatch):
    monkeypatch.setattr(importlib.import_module("fastmodel.sweeps.size"), "available_memory_bytes", lambda: 1 << 20)
    with pytest.raises(SweepError, match="GiB .* zarr"):
        sweep("llama-7b", "dc-a", "llm-pretrain-fsdp", {"flops_util": {"start": 0.1, "stop": 1.0, "num": 10_000}})


def test_zarr_store_equals_memory_and_resumes(tmp_path):
    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=5)
    assert definition.num_units > 4
    in_memory = run_in_memory(definition)
    path = str(tmp_path / "s.zarr")
    sweep_module.create_store(definition, path)
    units = list(definition.units())
    write_units(definition, path, units[: len(units) // 2])  # an "interrupted" run
    partial = xr.open_zarr(path)
    assert int(partial.unit_done.sum()) == len(units) // 2
    resumed = run_to_store(definition, path, resume=True)
    assert bool(resumed.unit_done.all())
    for name in ("iteration_time", "throughput", "status", "fits_memory", "memory_per_device"):
        xr.testing.assert_identical(resumed[name].load().drop_attrs(), in_memory[name].drop_attrs())
    other = Sweep("llama-7b", "dc-a", "llm-pretrain", {**AXES, "num_nodes": [2]}, unit_configs=5)
    with pytest.raises(SweepError, match="different sweep definition"):
        run_to_store(other, path, resume=True)


def test_dask_local_cluster_matches_local(tmp_path):
    pytest.importorskip("distributed")
    path = str(tmp_path / "d.zarr")
    local = sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=6)
    distributed = sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=6, store=path, workers=2)
    for name in ("iteration_time", "exposed_comm", "status"):
        xr.testing.assert_identical(distributed[name].load().drop_attrs(), local[name].drop_attrs())
    with pytest.raises(SweepError, match="zarr store"):
        sweep("llama-7b", "dc-a", "llm-pretrain", AXES, workers=2)


def test_progress_bar_only_when_enabled():
    import io

    from fastmodel.sweeps import Progress

    stream = io.StringIO()
    bar = Progress(100, stream=stream, enabled=True, min_interval_s=0.0)
    bar(40)
    bar(60)
    bar.close()
    text = stream.getvalue()
    assert "100/100 configs" in text and "configs/s" in text and "ETA" in text
    quiet = io.StringIO()
    silent = Progress(100, stream=quiet)  # StringIO is not a terminal
    silent(100)
    silent.close()
    assert quiet.getvalue() == ""


def test_local_batch_task_sweeps_global_batch():
    task = {"name": "t", "kind": "pretrain", "local_batch": {"dense": 1, "emb": 1}}
    ds = sweep("llama-7b", "dc-a", task, {"num_nodes": [2], "global_batch": [16, 32], "plan": ["fsdp/ddp"]})
    assert int((ds.status == 0).sum()) == 2


def test_review_regressions():
    partial = Sweep("llama-7b", "dc-a", "llm-pretrain", {"num_nodes": [2, 4], "plan": ["tp,ddp4/mp", "tp,ddp2/mp"]})
    assert list(partial.axes[-1].values) == ["tp,ddp4/mp", "tp,ddp2/mp"]
    rebuilt = Sweep.from_definition(partial.definition())
    assert [p.label for p in rebuilt.plans] == [p.label for p in partial.plans]
    finetune = {"name": "f", "kind": "finetune", "global_batch": 256}
    with pytest.raises(SweepError, match="all_frozen"):
        Sweep("llama-7b", "dc-a", finetune, {"freeze_emb": [False, True], "freeze_dense": [False, True],
                                            "plan": ["fsdp/ddp"]})
    ds = sweep("llama-7b", "dc-a", {"name": "t", "kind": "pretrain", "global_batch": 48},
               {"num_nodes": [3], "devices_per_node": [8],
                                                   "plan": ["tp16,ddp/mp", "fsdp/ddp"]})
    assert int(ds.status.sel(plan="tp16,ddp/mp").squeeze()) == STATUS["product_ne_devices"]


def test_resume_refuses_a_store_with_other_status_codes(tmp_path):
    """A store whose ``status`` codes another fastmodel numbered (a status added or moved since) is not
    completed with this version's codes: the two numberings would mix in one variable."""
    import zarr

    definition = Sweep("llama-7b", "dc-a", "llm-pretrain", AXES, unit_configs=5)
    path = str(tmp_path / "s.zarr")
    sweep_module.create_store(definition, path)
    write_units(definition, path, list(definition.units())[:1])
    status = zarr.open_group(path, mode="r+")["status"]
    meanings = status.attrs["flag_meanings"].split()
    status.attrs["flag_meanings"] = " ".join([meanings[1], meanings[0], *meanings[2:]])  # two codes swapped
    zarr.consolidate_metadata(path)
    with pytest.raises(SweepError, match="status codes were numbered by another fastmodel version"):
        run_to_store(definition, path, resume=True)
