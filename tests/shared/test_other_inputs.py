"""fastmodel.spec.other_inputs: a record, JSON lines or a sweep file given as the model of `plans` (and `serve`,
tests/serve/test_serve_models.py) is one line naming what it is."""

import pytest

from fastmodel.errors import SpecError
from fastmodel.spec.other_inputs import refuse_other_input
from tests.suite_fixtures import cli, data_lines, one_line_error


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, said", [
    ("run.json", None, "a training run record (RUNS.md), not a model spec: 'fastmodel run -m FILE' evaluates it"),
    ("runs.jsonl", None, "a JSON-lines file (one record per line), not a model spec"),
    ("sweep.toml", 'model = "llama3.1-8b"\n[axes]\nnum_nodes = [1]\n', "a sweep file (it has [axes])"),
])
def test_plans_of_another_input_names_it(tmp_path, name, text, said):
    """`plans -s dgx-h100 -m run.json` said "model.id: unknown field (did you mean 'hidden'?) [and 21 more
    problems]", a .jsonl "invalid TOML: Invalid statement"."""
    path = _write(tmp_path, name, text if text is not None else data_lines("runs_dev.jsonl", 1)[0] + "\n")
    one_line_error(cli("plans", "-s", "dgx-h100", "--nodes", "2", "-m", path), f"{path}: model: {said}")


def test_a_spec_file_or_a_name_passes(tmp_path):
    refuse_other_input("llama3.1-8b")
    refuse_other_input(_write(tmp_path, "m.toml", 'family = "lm"\nname = "x"\n'))
    with pytest.raises(SpecError, match="a cluster spec"):
        refuse_other_input(_write(tmp_path, "c.toml", 'kind = "cluster"\nname = "c"\n'))
