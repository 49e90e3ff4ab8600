"""fastmodel.spec.other_inputs: a record, JSON lines or a sweep file given as the model of `plans` (and `serve`,
tests/serve/test_serve_models.py) is one line naming what it is. The model loader (``loader.resolve_source``)
asks, so the Python API (``fastmodel.evaluate``, ``fastmodel.serve.api.evaluate``) says the same, reading the file
once."""

import json

import pytest

from fastmodel.errors import SpecError
from fastmodel.spec.loader import resolve_source
from tests.suite_fixtures import cli, data_lines, one_line_error

RUN = "a training run record (RUNS.md), not a model spec: 'fastmodel run -m FILE' evaluates it"
JSONL = "a JSON-lines file (one record per line), not a model spec"
SERVE = "a serving record (SERVE_RUNS.md), not a model spec: evaluate it as RECORDS ('fastmodel serve FILE')"


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, said", [
    ("run.json", None, RUN),
    ("runs.jsonl", None, JSONL),
    ("sweep.toml", 'model = "llama3.1-8b"\n[axes]\nnum_nodes = [1]\n', "a sweep file (it has [axes])"),
])
def test_plans_of_another_input_names_it(tmp_path, name, text, said):
    """`plans -s dgx-h100 -m run.json` said "model.id: unknown field (did you mean 'hidden'?) [and 21 more
    problems]", a .jsonl "invalid TOML: Invalid statement"."""
    path = _write(tmp_path, name, text if text is not None else data_lines("runs_dev.jsonl", 1)[0] + "\n")
    one_line_error(cli("plans", "-s", "dgx-h100", "--nodes", "2", "-m", path), f"{path}: model: {said}")


def test_a_spec_file_or_a_name_passes(tmp_path):
    assert resolve_source("llama3.1-8b", "model")[1] == "llama3.1-8b"
    path = _write(tmp_path, "m.toml", 'family = "lm"\nname = "x"\n')
    assert resolve_source(str(path), "model")[0] == {"family": "lm", "name": "x"}
    with pytest.raises(SpecError, match="a cluster spec"):
        resolve_source(str(_write(tmp_path, "c.toml", 'kind = "cluster"\nname = "c"\n')), "model")


def test_only_a_model_file_is_refused(tmp_path):
    """A run record read as another kind is that kind's loader's to judge: the check is the model loader's."""
    path = _write(tmp_path, "run.json", data_lines("runs_dev.jsonl", 1)[0])
    assert resolve_source(str(path), "task")[0] == json.loads(data_lines("runs_dev.jsonl", 1)[0])


@pytest.mark.parametrize("name, line, said", [
    ("run.json", "runs_dev.jsonl", RUN),
    ("serve.json", "serve_dev_load.jsonl", SERVE),
    ("runs.jsonl", "runs_dev.jsonl", JSONL),
])
def test_the_api_names_another_input_given_as_the_model(tmp_path, name, line, said):
    """The training API and the serving API load the model through the same loader: the same SpecError."""
    import fastmodel
    from fastmodel.serve import api

    path = _write(tmp_path, name, data_lines(line, 1)[0] + "\n")
    with pytest.raises(SpecError) as training:
        fastmodel.evaluate(str(path), "dgx-h100", "llm-pretrain-fsdp")
    with pytest.raises(SpecError) as serving:
        api.evaluate(str(path), "H100", tp=1, input_len=128, output_len=128, batch_size=1)
    for error in (training.value, serving.value):
        assert (error.source, error.field) == (str(path), "model") and said in error.reason


def test_serving_reads_a_model_file_once(tmp_path, monkeypatch):
    """`serve -m FILE` ran the check on its own parse of the file, then the loader parsed it again: now one read."""
    from fastmodel.serve.models import serving_model
    from fastmodel.spec import loader

    path = _write(tmp_path, "m.toml", loader.builtin_text("model", "llama3.1-8b"))
    reads = []
    read_file = loader.read_file
    monkeypatch.setattr(loader, "read_file", lambda p: reads.append(p) or read_file(p))
    assert serving_model(str(path))[1]["hidden"] == 4096.0
    assert reads == [path]
