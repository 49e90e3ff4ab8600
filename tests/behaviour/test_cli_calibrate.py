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


def test_no_run_is_one_line_and_an_existing_calibration_needs_force(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    one_line_error(run("calibrate", empty), "none.jsonl: no run records in the file")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(_lines("runs_dev_small.jsonl", 2)) + "\n")
    (tmp_path / "cal.toml").write_text("[calibration]\n")
    one_line_error(run("calibrate", runs, "-o", tmp_path / "cal.toml"), "cal.toml exists; pass --force to replace it")
