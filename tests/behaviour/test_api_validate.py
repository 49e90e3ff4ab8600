"""``fastmodel.validate`` and ``fastmodel.calibrate`` give what ``fastmodel validate`` / ``fastmodel calibrate`` print
and write, number for number (the command prints the object the function returns: fastmodel/api.py)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

import fastmodel
from fastmodel.errors import ArgumentError, FastmodelError, SpecError
from tests.suite_fixtures import DATA, cli, data_lines


def _slice(tmp_path, name: str, count: int):
    """The first ``count`` lines of tests/data/``name`` under the same file name (heldout.json keys by it)."""
    path = tmp_path / name
    path.write_text("\n".join(data_lines(name, count)) + "\n")
    return path


def _same_rows(api_rows: list[dict], csv_path) -> None:
    """Every cell of ``validate -o`` equals the API's row: text as written, numbers exactly (CSV keeps repr)."""
    with open(csv_path, newline="") as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(api_rows) > 0
    for said, row in zip(written, api_rows):
        assert list(said) == list(row)
        for key, value in row.items():
            if isinstance(value, (float, np.floating)):
                assert float(said[key]) == value or (math.isnan(float(said[key])) and math.isnan(value)), key
            else:
                assert said[key] == str(value), key


def _equal(a, b) -> bool:
    """Rows equal cell by cell, NaN equal to NaN."""
    return len(a) == len(b) and all(list(x) == list(y) and all(
        x[k] == y[k] or (isinstance(x[k], float) and math.isnan(x[k]) and math.isnan(y[k])) for k in x)
        for x, y in zip(a, b))


def _check_scores(result, metric: str, error: str) -> None:
    """The dev line of all records, by hand from the rows: n, misses, MAPE, bias and the hit rate."""
    dev = [row for row in result.rows if row["split"] == "dev" and row.get(f"measured_{metric}", 1)]
    errors = [row[error] for row in dev if np.isfinite(row[error])]
    line = result.score(metric=metric)
    assert line["split"] == "dev" and line["group"] == "all" and line["n"] in (len(errors), len(dev))
    assert line["miss"] == len(dev) - len(errors)
    assert line["mape"] == pytest.approx(np.mean(np.abs(errors)), rel=1e-12)
    assert line["bias"] == pytest.approx(np.mean(errors), rel=1e-12)
    assert line["hit_rate"] == pytest.approx(sum(abs(e) <= 0.25 for e in errors) / len(dev), rel=1e-12)


def test_validate_of_run_records_is_the_command(tmp_path):
    runs = _slice(tmp_path, "runs_dev_small.jsonl", 10)     # held-out ids among them: lines 2, 4, 7 and 8
    bad = tmp_path / "bad_line.jsonl"
    table = tmp_path / "rows.csv"
    said = cli("validate", runs, "--heldout", DATA / "heldout.json", "-o", table)
    assert said.exit_code == 0, said.output
    result = fastmodel.validate(runs, heldout=DATA / "heldout.json")
    assert said.stdout.rstrip("\n") == result.report == str(result)
    _same_rows(result.rows, table)
    assert {row["split"] for row in result.rows} == {"dev", "held-out"}
    _check_scores(result, "step_time", "error")
    held = result.score(split="held-out")
    assert f"{100 * held['mape']:6.1f}%" in next(line for line in result.report.splitlines()
                                                 if line.startswith("all [held-out]"))
    assert result.score(key="source", group=result.rows[0]["source"])["n"] >= 1
    with pytest.raises(KeyError, match="group 'no-such-gpu' is none of "):
        result.score(key="gpu", group="no-such-gpu")
    # a list of dicts, one refused, held-out ids as a set: the same rows and one miss more
    records = [json.loads(line) for line in data_lines("runs_dev_small.jsonl", 10)]
    ids = {row["id"] for row in result.rows if row["split"] == "held-out"}
    listed = fastmodel.validate([*records, {"id": "broken", "system": {}}], heldout=ids)
    assert _equal(listed.rows[:-1], result.rows) and listed.rows[-1]["status"] == "refused"
    assert listed.messages == ["refused (a miss): runs[10]: model: required block missing"]
    assert listed.score()["miss"] == result.score()["miss"] + 1
    bad.write_text(runs.read_text() + "{not json\n")
    said = cli("validate", bad)
    assert said.stderr.splitlines() == fastmodel.validate(bad).messages


def test_validate_of_serving_records_is_the_command(tmp_path):
    runs = _slice(tmp_path, "serve_dev_disagg.jsonl", 6)    # held out: lines 4 and 5
    table = tmp_path / "rows.csv"
    said = cli("validate", runs, "--heldout", DATA / "heldout.json", "-o", table)
    assert said.exit_code == 0, said.output
    result = fastmodel.validate(runs, heldout=DATA / "heldout.json")
    assert result.kind == "serving" and said.stdout.rstrip("\n") == result.report
    _same_rows(result.rows, table)
    for metric in {line["metric"] for line in result.scores}:
        _check_scores(result, metric, f"error_{metric}")
    with pytest.raises(SpecError, match="^calibration: applies to run records, not serving records$"):
        fastmodel.validate(runs, calibration=tmp_path / "cal.toml")


def test_validate_refuses_what_it_cannot_read_in_one_line(tmp_path):
    runs = _slice(tmp_path, "runs_dev_small.jsonl", 2)
    with pytest.raises(ArgumentError, match=r"unknown argument 'held_out' \(did you mean 'heldout'\?\)"):
        fastmodel.validate(runs, held_out=True)
    with pytest.raises(SpecError, match="beside RUNS: name the split"):
        fastmodel.validate(runs, heldout=True)         # no heldout.json beside it: as --heldout says
    with pytest.raises(SpecError, match="^heldout: a split file lists ids by the runs file's name"):
        fastmodel.validate([json.loads(data_lines("runs_dev_small.jsonl", 1)[0])], heldout=True)
    with pytest.raises(SpecError, match="^runs: expected a JSON-lines file's path or a list of records"):
        fastmodel.validate(42)
    with pytest.raises(SpecError, match=r"^runs: no run records in the list$"):
        fastmodel.validate([])


def test_calibrate_returns_what_the_command_writes(tmp_path):
    from fastmodel.lm.calibrate import read_calibration

    runs = _slice(tmp_path, "runs_dev_small.jsonl", 12)
    out = tmp_path / "cal.toml"
    said = cli("calibrate", runs, "--folds", 0, "-o", out)
    assert said.exit_code == 0, said.output
    written = read_calibration(out)
    cal = fastmodel.calibrate(runs, folds=0)
    assert cal.devices and cal.source == "" and not (tmp_path / "cal2.toml").exists()
    for name in ("devices", "framework", "stacks", "stack_devices", "custom"):
        assert getattr(cal, name) == getattr(written, name), name
    assert {k: v for k, v in cal.header.items() if k != "fitted_at"} == \
           {k: v for k, v in written.header.items() if k != "fitted_at"}
    # usable as calibration=: validate with the object predicts as validate --calibration FILE prints
    checked = cli("validate", runs, "--calibration", out)
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.rstrip("\n").endswith(fastmodel.validate(runs, calibration=cal).report)
    again = fastmodel.calibrate(runs, folds=0, output=tmp_path / "cal2.toml")
    assert again.source == str(tmp_path / "cal2.toml") and again.devices == written.devices
    with pytest.raises(FastmodelError, match="exists; pass force=True"):      # the API's argument, not the flag
        fastmodel.calibrate(runs, folds=0, output=out)


def test_calibrate_refuses_in_one_line(tmp_path):
    serving = _slice(tmp_path, "serve_dev_disagg.jsonl", 2)
    with pytest.raises(FastmodelError, match="these are serving records"):
        fastmodel.calibrate(serving)
    runs = _slice(tmp_path, "runs_dev_small.jsonl", 2)
    # from Python an error names the argument (prior=, loss=); the command names its flags (cli/common.flag_names)
    with pytest.raises(FastmodelError, match=r"^prior: must be a finite number >= 0, 'cv' or 'auto', got -1"):
        fastmodel.calibrate(runs, prior=-1)
    with pytest.raises(FastmodelError, match="^loss: must be one of soft_l1, linear, got 'l2'$"):
        fastmodel.calibrate(runs, loss="l2")
    with pytest.raises(FastmodelError, match=r"^folds: must be 0 or between 2 and the number of runs \(2\), got 3$"):
        fastmodel.calibrate(runs, folds=3)
    with pytest.raises(FastmodelError, match=r"^seed: must be a whole number >= 0, got -1$"):
        fastmodel.calibrate(runs, seed=-1)
    for flag, value, said in (("--prior", "-1", "--prior: must be a finite number >= 0, 'cv' or 'auto', got '-1'"),
                              ("--folds", "3", "--folds: must be 0 or between 2 and the number of runs (2), got 3")):
        run = cli("calibrate", runs, flag, value)
        assert run.exit_code == 2 and run.stderr == f"error: {said}\n", run.output
    with pytest.raises(ArgumentError, match=r"unknown argument 'fold' \(did you mean 'folds'\?\)"):
        fastmodel.calibrate(runs, fold=2)


def test_validate_and_calibrate_are_public_names():
    assert {"validate", "calibrate"} <= set(fastmodel.__all__) and "validate" not in fastmodel._COMMANDS
    assert fastmodel.validate.__module__ == fastmodel.calibrate.__module__ == "fastmodel.api"
