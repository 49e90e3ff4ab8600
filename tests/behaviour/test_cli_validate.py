"""`fastmodel validate` (fastmodel/cli/validate.py) on what a hurried user gives it: each is one line and exit 2,
before any record is evaluated. (A record of the other kind in a file is refused and counted as a miss, not
a reason to stop the file: issue 26 item 7, "it never aborts a file for one record".)"""

import json

from tests.suite_fixtures import cli, data_lines, one_line_error


def test_heldout_without_a_split_beside_runs_says_how_to_name_one(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(cli("validate", runs, "--heldout"), f"{tmp_path / 'heldout.json'}: cannot read the held-out "
                   "split: no such file; --heldout without a value reads heldout.json beside RUNS: name the split, "
                   "--heldout SPLIT.json")
    result = cli("validate", runs, "--heldout", tmp_path / "split.json")   # named: no hint about the default
    one_line_error(result, "split.json: cannot read the held-out split: no such file")
    assert "beside RUNS" not in result.output


def test_a_calibration_of_the_wrong_kind_and_an_output_without_force_are_one_line(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(cli("validate", runs, "--calibration", runs), "runs.jsonl: JSON, not a calibration")
    spec = tmp_path / "not_a_calibration.toml"
    spec.write_text('[device]\nname = "H100"\n')
    one_line_error(cli("validate", runs, "--calibration", spec), "not_a_calibration.toml")
    table = tmp_path / "v.csv"
    table.write_text("id,status\n")
    one_line_error(cli("validate", runs, "-o", table), "v.csv exists; pass --force to replace it")
    assert json.loads(runs.read_text().splitlines()[0])["id"]          # RUNS untouched


def test_help_names_the_moe_and_memory_sections_the_output_prints(tmp_path):
    """Walk of issues 22-23: `validate --help` said nothing of the MoE section (issue 22 item 7) nor of the memory
    tables (issue 23); it names both, and a file with a measured MoE run prints each of them."""
    help_text = " ".join(cli("validate", "--help").output.split())
    assert "MoE section (by dispatcher, overlap, routing and stack" in help_text
    assert "peak memory errors" in help_text and "predicted not to fit" in help_text
    moe = [line for line in data_lines("runs_dev_b200.jsonl", 100) if json.loads(line)["model"].get("moe_experts")]
    runs = tmp_path / "runs.jsonl"
    runs.write_text(moe[0] + "\n")
    output = cli("validate", runs).output
    for header in ("MoE step time by dispatcher", "MoE step time by overlap", "MoE step time by routing",
                   "MoE step time by stack", "peak memory per device", "runs that ran but are predicted not to fit"):
        assert header in output, header


def test_the_help_names_the_groups_each_table_is_split_by():
    """--help named the error tables but not their groups; issue 26 asks for tables by stack and issue 24 by
    engine, GPU and precision, which the tables do (lm/validate.py and serve/validate.py GROUP_KEYS)."""
    from fastmodel.lm.validate import GROUP_KEYS as RUN_GROUPS
    from fastmodel.serve.validate import GROUP_KEYS as SERVE_GROUPS

    text = " ".join(cli("validate", "--help").output.split())
    assert RUN_GROUPS == ("source", "stack", "gpu", "parallelism_kind", "tier")
    assert "by source, software stack, GPU, parallelism kind and tier" in text
    assert SERVE_GROUPS == ("engine", "gpu", "precision", "mode", "model", "load")
    assert "by engine, GPU, precision, mode, model and load" in text and "naive baseline" in text


def test_validate_plot_takes_the_plot_commands_dpi_and_width(tmp_path, monkeypatch):
    """`validate --plot` is sized as `plot ...` is (one definition: cli/common.py figure_size_options): --width 3
    gives a 3 in figure, --dpi 50 reaches save; --size double a 7.16 in one."""
    import fastmodel.plot.style as style

    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    saved = []
    monkeypatch.setattr(style, "save", lambda fig, path, dpi=300: saved.append((fig.get_size_inches()[0], dpi)))
    assert cli("validate", runs, "--plot", tmp_path / "v.png", "--width", "3", "--dpi", "50").exit_code == 0
    assert cli("validate", runs, "--plot", tmp_path / "w.png", "--size", "double").exit_code == 0
    assert saved == [(3.0, 50), (7.16, 300)]


def test_validate_dpi_without_plot_is_one_line(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(cli("validate", runs, "--dpi", "100"), "--dpi size the --plot figure: give --plot FILE.png too")


def test_validate_and_plot_share_one_definition_of_the_figure_options():
    from fastmodel.cli.plot import plot
    from fastmodel.cli.validate import validate

    def helps(command):
        return {p.name: p.help for p in command.params if p.name in ("dpi", "size", "width")}

    assert helps(validate) == helps(plot.commands["memory"]) and set(helps(validate)) == {"dpi", "size", "width"}


def test_a_file_whose_every_record_is_refused_exits_3_saying_so(tmp_path):
    """Every record refused (malformed lines, records with a hole) printed tables of misses and exited 0; a script
    saw no difference from a scored file. Now the tables, then one line, exit 3 (as a batch whose every line is an
    error, or a sweep with no legal point); -o still holds the rows, and --plot has no point to draw (walk of
    2026-12-08)."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    runs = tmp_path / "bad.jsonl"
    runs.write_text('{"id": "a",\n{"id": 2}\n')
    result = CliRunner().invoke(main, ["validate", str(runs), "-o", str(tmp_path / "rows.csv"), "--plot",
                                       str(tmp_path / "v.png")])
    assert result.exit_code == 3, result.output
    last = result.output.strip().splitlines()[-1]
    assert last == (f"no record of {runs} could be predicted: 2 of 2 refused, each named above; "
                    f"{tmp_path / 'rows.csv'} holds them, --plot not drawn (exit 3)")
    assert (tmp_path / "rows.csv").exists() and not (tmp_path / "v.png").exists()
    one = tmp_path / "one.jsonl"
    one.write_text('{"id": "a",\n' + data_lines("runs_dev_small.jsonl", 1)[0] + "\n")
    assert CliRunner().invoke(main, ["validate", str(one)]).exit_code == 0     # one answered: scored, exit 0
