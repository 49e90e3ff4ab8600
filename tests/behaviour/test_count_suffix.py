"""A count written with a unit suffix (``seq_len = "8k"``): 8k tokens is 8000 or 8192, so a count takes the whole
number, and every door says so as ``serve --input-len 8k`` does (``fastmodel.spec.quantity.count_suffix_hint``):
a model spec said "Input should be a valid integer (got '8k')", a sweep axis "'8k' is not a number of tokens"."""
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.spec.quantity import count_suffix_hint
from tests.suite_fixtures import cli, one_line_error

SPECS = Path(__file__).resolve().parents[2] / "specs"
HINT = "a count takes no unit suffix; write the whole number (8k tokens: 8000 or 8192)"


@pytest.mark.parametrize("value, said", [("8k", True), ("4Ki", True), (" 2 M ", True), ("1.5k", True),
                                         ("8000", False), ("abc", False), (8, False), ("8 GB", False)])
def test_the_hint_names_only_a_count_with_a_suffix(value, said):
    assert (count_suffix_hint(value) == f"; {HINT}") is said
    assert said or count_suffix_hint(value) == ""


def test_a_model_spec_count_with_a_suffix(tmp_path):
    text = (SPECS / "models" / "llama3.1-8b.toml").read_text().replace("seq_len = 8192", 'seq_len = "8k"')
    path = tmp_path / "m.toml"
    path.write_text(text)
    one_line_error(cli("run", "-m", path, "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "1", "-p", "tp8"),
                   f"{path}: model.seq_len: Input should be a valid integer (got '8k'); {HINT}")
    import fastmodel
    with pytest.raises(SpecError, match="8000 or 8192"):
        fastmodel.evaluate(str(path), "dgx-h100", "llm-pretrain", num_nodes=1, plan="tp8")


def test_a_sweep_axis_count_with_a_suffix(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [1]\n'
                    'plan = ["tp8"]\nseq_len = ["8k", "4k"]\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"), f"axes.seq_len: '8k' is not a number of tokens; {HINT}")
    assert not (tmp_path / "o.nc").exists()


def test_a_serving_sweep_axis_count_with_a_suffix(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('model = "llama3.1-70b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\ntp = [8]\n'
                    'input_len = ["8k"]\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   f"axes.input_len: '8k' is not a non-negative number; {HINT}")
