"""The Python API: labeled 0-d datasets with units and self-describing attrs."""

import json

import pytest

import fastmodel
from fastmodel.registry.madmax import NAMES, REGISTRY


def test_dataset_variables_units_and_attrs():
    ds = fastmodel.evaluate("llama-7b", "dc-a", "llm-pretrain", plan="tp,ddp/mp", num_nodes=4)
    assert set(NAMES) <= set(ds.data_vars)
    for name in NAMES:
        assert ds[name].ndim == 0
        assert ds[name].attrs["units"] == REGISTRY[name].units
        assert ds[name].attrs["long_name"]
    assert ds.attrs["plan"] == "tp8,ddp4/mp32"
    assert json.loads(ds.attrs["model"])["name"] == "LLaMA-7B"
    assert json.loads(ds.attrs["semantics"])["name"] == "default"   # the API default
    assert ds.attrs["fastmodel_version"] == fastmodel.__version__


def test_identities_hold():
    ds = fastmodel.evaluate("gpt3-175b", "dc-a", "llm-pretrain", plan="fsdp,tp/ddp,mp", num_nodes=32, semantics="default")
    T = float(ds.iteration_time)
    assert float(ds.throughput) == pytest.approx(2048 / T)
    assert float(ds.exposed_comm) == pytest.approx(T - float(ds.time_gemm) - float(ds.time_emb))
    comm = sum(float(ds[v]) for v in ("time_all2all", "time_allreduce", "time_allgather", "time_reducescatter"))
    assert float(ds.overlapped_comm) == pytest.approx(comm - float(ds.exposed_comm))
    assert float(ds.forward_time) < T


def test_inference_forward_only():
    ds = fastmodel.evaluate("llama2-70b", "dc-a", "llm-inference", plan="tp,ddp/ddp", num_nodes=256)
    assert float(ds.forward_time) == float(ds.iteration_time)
    assert float(ds.time_reducescatter) == 0.0
    # tp8 x ddp256: 2048 / 256 = 8 samples per replica, each GEMM split over 8 tp ranks
    flops_per_device = 80 * 2 * 4096 * (4 * 8192**2 + 2 * 8192 * 21846) * 8 / 8
    assert float(ds.time_gemm) == pytest.approx(flops_per_device / (312e12 * 0.705), rel=1e-12)


def test_fits_memory_is_a_bool_in_evaluate_as_in_sweeps():
    import fastmodel as fm

    one = fm.evaluate("llama2-70b", "dc-a", "llm-pretrain", plan="fsdp/ddp")
    grid = fm.sweep("llama2-70b", "dc-a", "llm-pretrain", {"num_nodes": [2, 4], "plan": ["fsdp/ddp"]})
    assert one.fits_memory.dtype == bool and grid.fits_memory.dtype == bool
    assert list(one.data_vars)[:2] == ["step_time", "throughput"]
    assert one.iteration_time.attrs["alias_of"] == "step_time" and float(one.iteration_time) == float(one.step_time)
