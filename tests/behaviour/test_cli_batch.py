"""``fastmodel batch`` (fastmodel/cli/batch.py): what the command checks before it evaluates a line."""

import pytest

from tests.suite_fixtures import DATA, cli

GOES_TOML = (" (a sweep file runs with 'fastmodel sweep FILE -o out.nc', a spec with 'fastmodel run', a calibration "
             "with --calibration)")


@pytest.mark.parametrize("name, text, kind", [
    ("in.csv", "model,system,task,plan\nllama3-8b,dgx-h100,llm-pretrain,tp8\n", "CSV"),
    ("bad.csv", "modle,system,task\nllama3-8b,dgx-h100,llm-pretrain\n", "CSV"),
    ("s.toml", 'model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [2]\n', "TOML"),
])
def test_a_csv_or_toml_file_given_as_the_cases_is_one_line(tmp_path, name, text, kind):
    """Hurried walk 9: a CSV of configurations (batch reads JSON lines) or a sweep file given to batch printed an
    'invalid JSON: Expecting value at column 1' row per line and exited 3; it is one line, exit 2, before any
    output is written."""
    cases, out = tmp_path / name, tmp_path / "out.jsonl"
    cases.write_text(text)
    result = cli("batch", cases, "-o", out)
    goes = GOES_TOML if kind == "TOML" else ""
    assert result.exit_code == 2 and result.output == (f"error: {cases}: a {kind} file, not JSON lines: batch reads "
                                                       f"one configuration or record per line as a JSON object{goes}\n")
    assert not out.exists()


def test_a_file_with_a_json_line_keeps_a_row_per_line(tmp_path):
    """A bad first line before JSON lines is still a row of its own (batch's rule), and a CSV file of the
    repository (comment lines above its header) is refused as CSV."""
    cases = tmp_path / "c.jsonl"
    cases.write_text('a,b\n{"model": "llama3-8b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp8"}\n')
    result = cli("batch", cases)
    assert result.exit_code == 0 and result.stdout.count("\n") == 2 and '"status":"ok"' in result.stdout
    csv = DATA / "korthikanti2022_fig1_fig7_memory_via_calculon.csv"
    result = cli("batch", csv)
    assert result.exit_code == 2 and result.output.startswith(f"error: {csv}: a CSV file, not JSON lines")


@pytest.mark.parametrize("text, says", [
    ('[{"model": "llama3-8b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp8"}]\n',
     "a JSON array of 1 items, not JSON lines of configurations or records: write one JSON object a line "
     "(jq -c '.[]' FILE)"),
    ('{\n  "model": "llama3-8b",\n  "system": "dgx-h100",\n  "task": "llm-pretrain",\n  "plan": "tp8"\n}\n',
     "one JSON object over 6 lines, not JSON lines of configurations or records: write each object on one line "
     "(jq -c . FILE)"),
])
def test_a_json_array_or_pretty_printed_json_is_one_line(tmp_path, text, says):
    """A JSON array ended with exit 3, "every line is an error", and a pretty-printed object gave one 'invalid JSON'
    row per line (h-mend15's campaign, left for batch); each is one line naming the file and the jq fix, exit 2,
    before any output is written."""
    cases, out = tmp_path / "c.jsonl", tmp_path / "out.jsonl"
    cases.write_text(text)
    result = cli("batch", cases, "-o", out)
    assert result.exit_code == 2 and result.output == f"error: {cases}: {says}\n"
    assert not out.exists()
