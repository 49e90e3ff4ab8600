"""JSONL readers of run and serving records (fastmodel/spec/records.py ``read_jsonl``)."""

import json
import re

import pytest

from fastmodel.errors import SpecError
from fastmodel.spec.records import Refused, first_record, lower_objects, read_jsonl


def _lower(data, where):
    if not isinstance(data, dict) or "id" not in data:
        raise SpecError(where, "id", "required field missing")
    return data["id"]


def test_refusals_are_collected_and_good_lines_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\n{"x": 1}\n{"id": "b"}\n')
    refused = []
    assert read_jsonl(path, _lower, "records", refused=refused) == ["a", "b"]
    assert [r.where for r in refused] == [f"{path}:2"]


def test_an_empty_file_is_an_error_even_beside_another_files_refusals(tmp_path):
    """A caller's list may already hold another file's refusals: an empty file is still "no records", one line (it
    raised IndexError reading the earlier file's entry as this one's)."""
    earlier = [Refused("other.jsonl:1", {}, "bad")]
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(SpecError, match="no records in the file"):
        read_jsonl(path, _lower, "records", refused=earlier)
    path.write_text("not json\n")
    with pytest.raises(SpecError, match="not one line of the file is JSON"):
        read_jsonl(path, _lower, "records", refused=earlier)


def test_a_list_of_parsed_records_is_read_as_a_file_is(tmp_path):
    """fastmodel.validate takes a list of dicts: each named ``runs[i]``, a bad one refused (a miss) or raised."""
    def lower(data, where):
        if "x" not in data:
            raise SpecError(where, "x", "required field missing")
        return (where, data["x"])

    refused: list = []
    assert read_jsonl([{"x": 1}, {"y": 2}, "text"], lower, "things", refused=refused) == [("runs[0]", 1)]
    assert [r.reason for r in refused] == ["runs[1]: x: required field missing",
                                           "runs[2]: expected a record as a dict (a parsed JSON line), got str"]
    with pytest.raises(SpecError, match=r"^runs\[1\]: x: required field missing$"):
        lower_objects([{"x": 1}, {}], lower, "things")
    with pytest.raises(SpecError, match="^runs: no things in the list$"):
        lower_objects([], lower, "things", refused=[])


def test_first_record_skips_what_is_not_json(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n{bad\n[1]\n{}\n")
    assert first_record(path) == [1] and first_record(tmp_path / "none.jsonl") is None


def test_a_comment_line_is_named_a_comment_as_batch_names_it(tmp_path):
    """review8 #8: ``validate`` and ``calibrate`` (``read_jsonl``) called a ``#`` or ``//`` line "invalid JSON:
    Expecting value" where ``batch`` calls it a comment; one helper (``fastmodel.errors.comment_line``) words both.
    A file of comments alone is still "not one line of the file is JSON"; ``validate`` says it in one line."""
    from fastmodel.errors import comment_line
    from tests.suite_fixtures import cli

    path = tmp_path / "r.jsonl"
    path.write_text('# the runs\n{"id": "a"}\n  // one more\n{"x": 1}\n')
    refused: list = []
    assert read_jsonl(path, _lower, "records", refused=refused) == ["a"]
    said = "a comment: JSON lines have none"
    assert comment_line("  // x") == comment_line("#") == said and comment_line('{"#": 1}') is None
    assert [r.reason for r in refused] == [f"{path}:1: {said}", f"{path}:3: {said}", f"{path}:4: id: required field "
                                                                                     "missing"]
    path.write_text("# only a comment\n")
    with pytest.raises(SpecError, match=f"^{path}:1: {said}; not one line of the file is JSON"):
        read_jsonl(path, _lower, "records", refused=[])
    result = cli("validate", path)
    assert result.exit_code == 2 and result.output == f"error: {path}:1: {said}; not one line of the file is JSON, " \
                                                      "so it holds no run records\n", result.output


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_toml_file_given_as_records_says_it_is_toml(tmp_path, command):
    """Hurried walk 9: ``calibrate sweep.toml`` said 's.toml:1: invalid JSON: Expecting value' and ``validate`` the
    same with '; not one line of the file is JSON'; a TOML file (a spec, a sweep file, a calibration) now says what
    it is, in one line, before its lines are read as JSON. A file of comments alone is still the comment line."""
    from tests.suite_fixtures import cli

    for name, text in (("s.toml", 'model = "llama-7b"\n[axes]\nnum_nodes = [2]\n'),
                       ("cal.toml", "# fastmodel calibration\n\n[calibration]\nformat = 2\n")):
        path = tmp_path / name
        path.write_text(text)
        said = f"{path}: a TOML file (a spec, sweep file or calibration), not JSON lines of run records (one JSON " \
               "object a line)"
        with pytest.raises(SpecError, match=f"^{re.escape(said)}$"):
            read_jsonl(path, _lower, "run records", refused=[])
        result = cli(command, path)
        assert result.exit_code == 2 and result.output == f"error: {said}\n", result.output


def test_a_csv_file_given_as_records_says_it_is_csv_and_a_bad_first_line_keeps_its_refusal(tmp_path):
    """Walk 9: ``serve in.csv`` and ``validate in.csv`` said 'in.csv:1: invalid JSON: Expecting value'; a CSV file
    is named so in one line. A file with a JSON object in its head is still read line by line (a first line with
    commas is that line's refusal, the records after it are read)."""
    from tests.suite_fixtures import cli

    path = tmp_path / "in.csv"
    path.write_text("model,system,task\nllama3-8b,dgx-h100,llm-pretrain\n")
    for command, what in (("validate", "run records"), ("serve", "serving records")):
        result = cli(command, path)
        assert result.exit_code == 2 and result.output == f"error: {path}: a CSV file, not JSON lines of {what} (one " \
                                                          "JSON object a line)\n", result.output
    path.write_text('a,b\n{"id": "a"}\n')
    refused: list = []
    assert read_jsonl(path, _lower, "records", refused=refused) == ["a"]
    assert [r.reason for r in refused] == [f"{path}:1: invalid JSON: Expecting value"]


@pytest.mark.parametrize("case", [{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "num_nodes": 16},
                                  {"model": {"name": "x"}, "system": {"gpu": "H100"}, "task": "llm-pretrain"},
                                  {"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp,ddp/mp"}])
def test_serve_of_a_batch_case_file_names_the_file_kind_as_validate_does(tmp_path, case):
    """``fastmodel serve mixed.jsonl`` whose line is a batch case said "serve: required block missing" (or
    "model: expected an object"); it names the kind, a batch case, and where it goes, as validate does."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(case) + "\n")
    run = CliRunner().invoke(main, ["serve", str(path)])
    assert run.exit_code == 2
    assert run.output.startswith(f"error: {path}:1: record: a batch case (model, system and task: a line of fastmodel "
                                 "batch), not a serving record"), run.output
    assert "batch cases go to fastmodel batch" in run.output


def test_one_rule_names_a_csv_or_toml_file_given_as_json_lines():
    """review11 #4: ``io.outputs.other_kind`` is the one rule of read_jsonl and batch: a CSV or a TOML head with no
    JSON-object line is its kind; a head with one JSON line, or of comments only, is neither."""
    from fastmodel.io.outputs import other_kind

    assert other_kind(b"id,model\n1,llama\n") == "csv"
    assert other_kind(b"# a sweep\n[model]\nname = 'x'\n") == "toml"
    assert other_kind(b"id,model\n{\"id\": 1}\n") is None
    assert other_kind(b"# nothing\n// else\n\n") is None
    assert other_kind(b"{\"model\": {}}\n") is None


@pytest.mark.parametrize("text, said", [
    (json.dumps({"id": "a", "plan": {"tp": 2}}, indent=2), "one JSON object over 6 lines, not JSON lines"),
    (json.dumps({"id": "a"}, indent=2) + "\n" + json.dumps({"id": "b"}, indent=2), "2 JSON objects over 6 lines"),
    (json.dumps([{"id": "a"}, {"id": "b"}]), "a JSON array of 2 items, not JSON lines"),
])
def test_json_that_is_not_json_lines_is_one_line_saying_how_to_write_it(tmp_path, text, said):
    """A pretty-printed record (json.dump(indent=2)) was refused line by line, one "invalid JSON" per line of the
    file (98 lines for one run record), and a JSON array was one record "expected a JSON object, got list"
    (h-mend15's campaign); now the file is one SpecError naming it, with the jq line that fixes it."""
    path = tmp_path / "r.jsonl"
    path.write_text(text + "\n")
    refused = []
    with pytest.raises(SpecError) as error:
        read_jsonl(path, _lower, "records", refused=refused)
    assert error.value.source == str(path) and said in error.value.reason and "jq -c" in error.value.reason
    assert refused == [] and "\n" not in str(error.value)


def test_json_lines_and_bad_lines_keep_their_rule(tmp_path):
    """One object a line, CRLF line ends, a line that is not JSON among good ones: as before (no file error); a
    serving file of one pretty-printed object is still read whole (``whole_object``)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"id": "a"}\r\n{"id": "b"}\r\n')
    assert read_jsonl(path, _lower, "records") == ["a", "b"]
    path.write_text('{"id": "a"}\n{"id": "b", bad\n')
    refused = []
    assert read_jsonl(path, _lower, "records", refused=refused) == ["a"] and len(refused) == 1
    path.write_text(json.dumps({"id": "a"}, indent=2))
    assert read_jsonl(path, _lower, "records", whole_object=True) == ["a"]
