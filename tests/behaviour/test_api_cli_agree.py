"""The Python API and the command line give the same numbers for the same input: five cases, one per door
(real-world specs, the same with an execution field, a MAD-Max configuration, a run record, a serving
configuration). Every number both print is compared exactly (the same kernels run both)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import fastmodel
from tests.suite_fixtures import cli, data_lines

LM = ("llama3.1-8b", "dgx-h100", "llm-pretrain")


def _numbers(values: dict) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _api_numbers(ds) -> dict[str, float]:
    out = {name: float(ds[name]) for name in ds.data_vars if ds[name].ndim == 0 and ds[name].dtype.kind in "fiu"}
    if "memory" in ds:
        out.update({f"memory_{k}": float(v) for k, v in zip(ds.memory_kind.values, ds.memory.values)})
    return out


def _cli_json(*args) -> dict:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))


def _agree(api: dict, said: dict, least: int) -> None:
    shared = sorted(set(_numbers(said)) & set(api))
    assert len(shared) >= least, shared
    for name in shared:
        a, c = api[name], float(said[name])
        assert a == c or (math.isnan(a) and math.isnan(c)), (name, a, c)


@pytest.mark.parametrize("args, kwargs", [
    (["--nodes", 2, "-p", "tp2"], {"num_nodes": 2, "plan": "tp2"}),
    (["--nodes", 2, "-p", "tp2.pp2", "-x", "micro_batch=2", "-x", "recompute=\"full\""],
     {"num_nodes": np.int64(2), "plan": "tp2.pp2", "execution": {"micro_batch": 2, "recompute": "full"}}),
])
def test_real_world_specs(args, kwargs):
    said = _cli_json("run", "-m", LM[0], "-s", LM[1], "-t", LM[2], *args)
    _agree(_api_numbers(fastmodel.evaluate(*LM, **kwargs)), said, 20)


def test_madmax_configuration():
    said = _cli_json("run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain", "--nodes", 256, "-p",
                     "tp,ddp/mp", "--semantics", "madmax")
    ds = fastmodel.evaluate("llama2-70b", "dc-a", "llm-pretrain", plan="tp,ddp/mp", num_nodes=256, semantics="madmax")
    _agree(_api_numbers(ds), said, 10)


def test_run_record(tmp_path):
    line = next(line for line in data_lines("runs_dev.jsonl", 40) if "tp8pp12" in line)
    (tmp_path / "my_run.json").write_text(line)
    said = _cli_json("run", "-m", tmp_path / "my_run.json")
    _agree(_api_numbers(fastmodel.evaluate_record(json.loads(line))), said, 20)


def test_serving_configuration():
    from fastmodel.serve.api import evaluate

    said = _cli_json("serve", "-m", "llama3.1-70b", "-d", "H100", "--tp", 4, "--input-len", 128, "--output-len",
                     128, "--batch-size", 1)
    api = evaluate("llama3.1-70b", "H100", tp=4, input_len=128, output_len=128, batch_size=1)
    assert said["status"] == api["status"] == "ok"
    _agree(_numbers(api), said, 10)


@pytest.mark.parametrize("axis, values, said", [
    ("precision", ["fp9"], "axes.precision: unknown value 'fp9'"),     # the API said 'precision: unknown value'
    ("micro_batch", ["x"], "axes.micro_batch: 'x' is not a number of sequences"),       # was "axis 'micro_batch'"
    ("num_nodes", [0], "axes.num_nodes: "),
])
def test_a_training_sweep_axis_error_names_the_same_field_path(tmp_path, axis, values, said):
    """The same bad axis in a sweep file and in fastmodel.sweep(axes=...) names one field path, axes.NAME."""
    from fastmodel.errors import FastmodelError

    (tmp_path / "s.toml").write_text(f'model = "{LM[0]}"\nsystem = "{LM[1]}"\ntask = "{LM[2]}"\n[axes]\n'
                                     f'plan = ["tp2"]\n{axis} = {json.dumps(values)}\n')
    result = cli("sweep", tmp_path / "s.toml", "-o", tmp_path / "s.nc")
    assert result.exit_code == 2 and f"s.toml: {said}" in result.output, result.output
    with pytest.raises(FastmodelError) as error:
        fastmodel.sweep(*LM, axes={"plan": ["tp2"], axis: values})
    assert str(error.value).startswith(said), error.value


def test_a_range_axis_error_names_the_same_field_path(tmp_path):
    """sweeps/ranges.py names a range's axis bare (``axis num_nodes: ...``, no quotes): the API renames it to
    axes.num_nodes as the sweep file does (it printed ``axis num_nodes: a range needs 'num' or 'step'``)."""
    from fastmodel.errors import FastmodelError

    said = "axes.num_nodes: a range needs 'num' or 'step'"
    (tmp_path / "s.toml").write_text(f'model = "{LM[0]}"\nsystem = "{LM[1]}"\ntask = "{LM[2]}"\n[axes]\n'
                                     'plan = ["tp2"]\nnum_nodes = {start = 1, stop = 4}\n')
    result = cli("sweep", tmp_path / "s.toml", "-o", tmp_path / "s.nc")
    assert result.exit_code == 2 and f"s.toml: {said}" in result.output, result.output
    with pytest.raises(FastmodelError) as error:
        fastmodel.sweep(*LM, axes={"plan": ["tp2"], "num_nodes": {"start": 1, "stop": 4}})
    assert str(error.value) == said
