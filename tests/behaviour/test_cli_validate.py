"""`fastmodel validate` (fastmodel/cli/validate.py) on what a hurried user gives it: each is one line and exit 2,
before any record is evaluated."""

import json
from pathlib import Path

from click.testing import CliRunner

from fastmodel.cli import main
from tests.suite_fixtures import one_line_error

DATA = Path(__file__).resolve().parents[1] / "data"


def _lines(name: str, count: int) -> list[str]:
    return [line for line in (DATA / name).read_text().splitlines() if line.strip()][:count]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_a_file_mixing_serving_and_training_records_is_one_line_naming_the_first_of_the_other_kind(tmp_path):
    """Was: each record of the other kind a 'refused (a miss)' line, counted as a miss of the model and scored
    in groups of its own (engine=other, load=-)."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(_lines("runs_dev_small.jsonl", 2) + _lines("serve_dev_load.jsonl", 2)) + "\n")
    one_line_error(run("validate", mixed), f"{mixed}:3: record: a serving record (SERVE_RUNS.md) in a file of "
                   "training run records (RUNS.md, from line 1): one kind per file")
    mixed.write_text("\n".join(_lines("serve_dev_load.jsonl", 1) + ["", "not json"] + _lines("runs_dev_small.jsonl", 1))
                     + "\n")
    one_line_error(run("validate", mixed), f"{mixed}:4: record: a training run record (RUNS.md) in a file of "
                   "serving records (SERVE_RUNS.md, from line 1)")


def test_heldout_without_a_split_beside_runs_says_how_to_name_one(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(run("validate", runs, "--heldout"), f"{tmp_path / 'heldout.json'}: cannot read the held-out "
                   "split: no such file; --heldout without a value reads heldout.json beside RUNS: name the split, "
                   "--heldout SPLIT.json")
    result = run("validate", runs, "--heldout", tmp_path / "split.json")   # named: no hint about the default
    one_line_error(result, "split.json: cannot read the held-out split: no such file")
    assert "beside RUNS" not in result.output


def test_a_calibration_of_the_wrong_kind_and_an_output_without_force_are_one_line(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(run("validate", runs, "--calibration", runs), "runs.jsonl: invalid TOML")
    spec = tmp_path / "not_a_calibration.toml"
    spec.write_text('[device]\nname = "H100"\n')
    one_line_error(run("validate", runs, "--calibration", spec), "not_a_calibration.toml")
    table = tmp_path / "v.csv"
    table.write_text("id,status\n")
    one_line_error(run("validate", runs, "-o", table), "v.csv exists; pass --force to replace it")
    assert json.loads(runs.read_text().splitlines()[0])["id"]          # RUNS untouched
