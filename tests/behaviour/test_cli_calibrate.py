"""`fastmodel calibrate` (fastmodel/cli/calibrate.py) on what a hurried user gives it: one line and exit 2, or a
fit of what there is."""

from tests.suite_fixtures import cli, data_lines, one_line_error


def test_no_run_is_one_line_and_an_existing_calibration_needs_force(tmp_path):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    one_line_error(cli("calibrate", empty), "none.jsonl: no run records in the file")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    (tmp_path / "cal.toml").write_text("[calibration]\n")
    one_line_error(cli("calibrate", runs, "-o", tmp_path / "cal.toml"), "cal.toml exists; pass --force to replace it")


def test_a_negative_seed_is_one_line(tmp_path):
    """numpy's generator takes non-negative seeds only: --seed -1 was a traceback (ValueError) after the runs were
    read; it is refused by the option itself."""
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(data_lines("runs_dev_small.jsonl", 2)) + "\n")
    one_line_error(cli("calibrate", runs, "--seed", "-1", "--folds", "0"), "Invalid value for '--seed': -1 is not in "
                   "the range x>=0")


def test_the_help_names_the_stack_parameters_it_fits():
    """calibrate fits per software stack too (overlay.STACK_FIELDS: the stack's share of the modelled kernel speed,
    compute_eff, and its host issue time, host_layer_s / host_op_s); --help listed the device and network values
    only, and never said that the report tells which parameters were left physical and why."""
    from fastmodel.lm.calibrate.overlay import STACK_FIELDS

    assert {"compute_eff", "host_layer_s"} <= set(STACK_FIELDS.values())
    text = " ".join(cli("calibrate", "--help").output.split())
    assert "per software stack" in text and "share of the modelled kernel speed" in text
    assert "host time to issue a layer" in text and "left physical with the reason" in text
