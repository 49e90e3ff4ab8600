"""A record with a hole, given to each command that reads records by content (run, batch, serve, plot timeline):
one line naming the file and the block it lacks, exit 2 (batch: that line's status), never the message of another
kind of input ("--system and --task are required", "unknown key 'id'")."""

import csv
import json

import pytest

from tests.suite_fixtures import cli, data_lines, one_line_error


def _without(name: str, block: str) -> dict:
    record = json.loads(data_lines(name, 1)[0])
    del record[block]
    return record


@pytest.mark.parametrize("command", [["run", "-m"], ["plot", "timeline", "-m"], ["plot", "memory-timeline", "-m"]])
@pytest.mark.parametrize("block", ["model", "system", "plan"])
def test_a_run_record_without_a_block(tmp_path, command, block):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_without("runs_dev.jsonl", block)))
    extra = ["-o", tmp_path / "f.png"] if command[0] == "plot" else []
    one_line_error(cli(*command, path, *extra), f"{path}: {block}: required block missing (a run record needs")
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize("block", ["model", "serve"])
def test_a_serving_record_without_a_block(tmp_path, block):
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(_without("serve_dev_load.jsonl", block)))
    one_line_error(cli("serve", path), f"{path}:1: {block}: required block missing")
    one_line_error(cli("run", "-m", path), f"{path}: ")


def test_batch_names_the_missing_block_in_the_line_status(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(_without("runs_dev.jsonl", "model")) + "\n" + data_lines("runs_dev.jsonl", 1)[0] + "\n")
    out = tmp_path / "out.csv"
    result = cli("batch", cases, "-o", out)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["status"] == "error: model: required block missing (a run record needs model, system, plan)"
    assert rows[1]["status"] == "ok"
