"""MAD-Max sweep files (fastmodel/madmax/sweep/file.py): TOML's unquoted dotted keys in [axes] are full axis paths."""

import pytest

from fastmodel.errors import SpecError
from fastmodel.madmax.sweep.file import _dotted_axes
from fastmodel.sweeps.file import load_sweep_file


def test_unquoted_dotted_axes_are_the_paths_they_spell():
    """`model.hidden = [...]` in [axes] is TOML's table model = {hidden = [...]}: read as the axis "model.hidden"
    (it was validated as an inline model spec: "model.family: required field missing")."""
    axes = {"num_nodes": [16], "model": {"hidden": [4096, 8192]},
            "system": {"network": {"port_bandwidth_bytes_per_s": {"start": 12.5e9, "stop": 50e9, "num": 3}}}}
    assert _dotted_axes(axes) == {"num_nodes": [16], "model.hidden": [4096, 8192],
                                  "system.network.port_bandwidth_bytes_per_s": {"start": 12.5e9, "stop": 50e9,
                                                                                "num": 3}}
    inline = {"model": {"name": "m", "family": "llm", "hidden": 4096}}     # single values: an inline spec, kept
    assert _dotted_axes(inline) == inline
    assert _dotted_axes({"model": ["llama2-70b", "llama2-13b"]}) == {"model": ["llama2-70b", "llama2-13b"]}


def test_a_sweep_file_with_dotted_axes_sweeps_them(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('model = "llama2-70b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [16]\n'
                    'model.hidden = [4096, 8192]\nplan = "all"\n')
    plan = load_sweep_file(str(path))
    assert plan.definition()["axes"]["hidden"] == [4096, 8192]       # the model.hidden axis, both values


def test_a_list_of_models_outside_axes_says_where_it_goes(tmp_path):
    """`model = [...]` at the top of a sweep file: one line saying a model list is an axis (it was "expected a name,
    a path or a dict, got list")."""
    path = tmp_path / "s.toml"
    path.write_text('model = ["llama2-70b", "llama2-13b"]\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\n'
                    'num_nodes = [16]\nplan = "all"\n')
    with pytest.raises(SpecError) as error:
        load_sweep_file(str(path))
    assert str(error.value) == (f"{path}: model: expected one model (a built-in name or a path), got a list; MAD-Max "
                                "sweeps take several as an axis: [axes] model = [...]")
