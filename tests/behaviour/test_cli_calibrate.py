"""`fastmodel calibrate` (fastmodel/cli/calibrate.py) on what a hurried user gives it: one line and exit 2, or a
fit of what there is."""

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
    """Serving records first was "these are serving records" for a file that also holds run records."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(_lines("serve_dev_load.jsonl", 2) + _lines("runs_dev_small.jsonl", 1)) + "\n")
    result = run("calibrate", mixed, "-o", tmp_path / "cal.toml")
    one_line_error(result, f"{mixed}:3: record: a training run record (RUNS.md) in a file of serving records "
                   "(SERVE_RUNS.md, from line 1)")
    assert not (tmp_path / "cal.toml").exists()
    mixed.write_text("\n".join(_lines("runs_dev_small.jsonl", 1) + _lines("serve_dev_load.jsonl", 1)) + "\n")
    one_line_error(run("calibrate", mixed), f"{mixed}:2: record: a serving record (SERVE_RUNS.md) in a file of "
                   "training run records (RUNS.md, from line 1)")


def test_no_run_is_one_line_and_an_existing_calibration_needs_force(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    one_line_error(run("calibrate", empty), "none.jsonl: no run records in the file")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(_lines("runs_dev_small.jsonl", 2)) + "\n")
    (tmp_path / "cal.toml").write_text("[calibration]\n")
    one_line_error(run("calibrate", runs, "-o", tmp_path / "cal.toml"), "cal.toml exists; pass --force to replace it")
