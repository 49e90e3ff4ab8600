"""fastmodel validate: the real-world model against the 65 dev runs, next to constant-MFU baselines."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.lm.records import read_records
from fastmodel.lm.validate import baseline_step_time, group_scores, rows, score

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = DATA / "runs_dev.jsonl"
PINNED = DATA / "runs_dev_predictions.json"


@pytest.fixture(scope="module")
def table():
    return rows(read_records(RUNS))


def test_per_row_predictions_are_pinned(table):
    """Regression pin of every dev run's predicted step time (regenerate with
    ``python tests/data/pin_runs_dev.py`` when the model changes on purpose, and say why in the commit)."""
    pinned = json.loads(PINNED.read_text())
    assert {row["id"] for row in table} == set(pinned)
    for row in table:
        assert row["predicted_step_time_s"] == pytest.approx(pinned[row["id"]], rel=1e-9), row["id"]


def test_baseline_is_the_constant_mfu_formula_by_hand():
    record = read_records(RUNS)[0]             # GPT-22B, 8 A100s, 4 x 2048 tokens per step
    flops = record.measured["flops_per_token_std"]
    expected = flops * 4 * 2048 / (8 * 312e12 * 0.4)
    assert baseline_step_time([record], np.array([flops]), 0.4)[0] == pytest.approx(expected, rel=1e-12)


def test_scores_by_hand():
    s = score(np.array([0.1, -0.3, 0.2]))
    assert (s.n, s.mape, s.median, s.bias) == (3, pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.0))


def test_model_beats_both_baselines_overall(table):
    (_, model, b40, b50), = group_scores(table, None)
    assert model.n == 65
    assert model.mape < b40.mape and model.mape < b50.mape
    assert model.median < 0.10


def test_cli_prints_tables_writes_rows_and_figure(tmp_path):
    out, fig = tmp_path / "rows.csv", tmp_path / "fig.png"
    result = CliRunner().invoke(main, ["validate", str(RUNS), "-o", str(out), "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    for heading in ("step time by all runs", "by source", "by gpu", "by parallelism_kind", "by tier",
                    "MFU.40 MAPE", "MFU.50 MAPE"):
        assert heading in result.output
    with open(out) as handle:
        assert len(list(csv.DictReader(handle))) == 65
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_to_overwrite_its_input_and_reports_bad_lines(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text(RUNS.read_text())
    result = CliRunner().invoke(main, ["validate", str(runs), "-o", str(runs)])
    assert result.exit_code == 2 and "also an input" in result.output
    assert runs.read_text() == RUNS.read_text()



def test_a_malformed_line_is_a_miss_and_the_file_is_still_scored(tmp_path):
    """Issue 26: validate never stops a file for one record. Invalid JSON and a value of the wrong type are
    each named on stderr with file:line and the field, and counted as misses beside the runs it scores."""
    good = RUNS.read_text().splitlines()[:2]
    wrong_type = json.loads(good[1])
    wrong_type["system"]["hbm_bytes"] = "80GB"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], "{not json", json.dumps(wrong_type)]) + "\n")
    result = CliRunner().invoke(main, ["validate", str(bad)])
    assert result.exit_code == 0, result.output
    assert "refused (a miss): " + f"{bad}:2: invalid JSON" in result.stderr
    assert f"{bad}:3: system.hbm_bytes: Input should be a valid number (got '80GB')" in result.stderr
    all_line = next(line for line in result.stdout.splitlines() if line.startswith("all "))
    assert all_line.split()[1:3] == ["1", "2"]     # one run answered, two misses
    # the invalid line gives no gpu, parallelism kind or tier: its row says so instead of a blank group name
    lines = result.stdout.splitlines()
    for table in ("gpu", "parallelism_kind", "tier"):
        start = lines.index(f"step time by {table}")
        rows = lines[start + 2:lines.index("", start)]
        assert rows[0].split()[:4] == ["(not", "given)", "0", "1"], (table, rows)


def _runs_with_one_refused(tmp_path, n_good=3):
    """A copy of the first dev runs plus one run the model refuses (an unknown plan field)."""
    good = RUNS.read_text().splitlines()[:n_good]
    bad = json.loads(good[0])
    bad["id"] = "refused-one"
    bad["plan"]["pipeline_shape"] = "zigzag"
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([*good, json.dumps(bad)]) + "\n")
    return path, [json.loads(line)["id"] for line in good]


def test_a_refused_record_is_named_and_counted_as_a_miss(tmp_path):
    path, _ = _runs_with_one_refused(tmp_path)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "refused (a miss):" in result.stderr and "plan.pipeline_shape: unknown field" in result.stderr
    all_line = next(line for line in result.stdout.splitlines() if line.startswith("all "))
    n, miss = all_line.split()[1:3]
    assert (n, miss) == ("3", "1")
    hits = float(all_line.split()[6].rstrip("%"))
    assert hits <= 75.0                     # 3 answered of 4: the refused run is a miss in the hit rate


def test_a_value_outside_a_parsed_list_is_a_miss_too(tmp_path):
    """A choice outside a list that the lowering parses (``model.position_embedding``'s first word) is refused
    like a literal outside its list: a miss in ``validate``, one line naming the field and the nearest kind."""
    record = json.loads((DATA / "runs_fsdp_public.jsonl").read_text().splitlines()[0])
    record["model"]["position_embedding"] = "rotory"
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(record) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 3, result.output     # its one record refused: nothing scored (cli/validate.py)
    assert "refused (a miss):" in result.stderr and "model.position_embedding: 'rotory'" in result.stderr
    assert "did you mean 'rotary'?" in result.stderr


def test_heldout_scores_each_group_twice_from_the_split_file(tmp_path):
    path, ids = _runs_with_one_refused(tmp_path)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"files": {"mixed.jsonl": [ids[0], "refused-one"]}}))
    result = CliRunner().invoke(main, ["validate", str(path), "--heldout", str(split)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    dev = next(line for line in lines if line.startswith("all [dev]")).split()
    held = next(line for line in lines if line.startswith("all [held-out]")).split()
    assert (dev[2], dev[3]) == ("2", "0") and (held[2], held[3]) == ("1", "1")


def test_heldout_without_a_split_for_the_file_is_one_line_exit_2(tmp_path):
    path, _ = _runs_with_one_refused(tmp_path)
    (tmp_path / "heldout.json").write_text(json.dumps({"files": {"other.jsonl": []}}))
    result = CliRunner().invoke(main, ["validate", str(path), "--heldout"])   # default: heldout.json beside RUNS
    assert result.exit_code == 2
    assert "files.mixed.jsonl: no held-out split for mixed.jsonl" in result.output


def test_the_frozen_split_holds_out_a_fifth_of_every_dev_file():
    split = json.loads((DATA / "heldout.json").read_text())["files"]
    for name, ids in split.items():
        every = {json.loads(line)["id"] for line in (DATA / name).read_text().splitlines() if line.strip()}
        assert set(ids) <= every, name
        assert 0.1 <= len(ids) / len(every) <= 0.25, name


def test_group_summary_is_the_printed_line_by_hand():
    """fastmodel.validate's run scores (lm.validate.group_summary, what each report line prints): n answered,
    misses (refused or not finite), MAPE, median, bias, the hit rate over every record and each baseline's MAPE."""
    from fastmodel.lm.validate import GROUP_KEYS, group_summary, summaries

    def row(status, error, b40, split="dev"):
        return {"source": "s", "stack": "k", "gpu": "H100", "parallelism_kind": "p", "tier": "t", "status": status,
                "error": error, "baseline_mfu0.40_error": b40, "baseline_mfu0.50_error": b40 / 2, "split": split}

    table = [row("ok", 0.1, 0.4), row("ok", -0.5, -0.2), row("refused", np.nan, np.nan), row("ok", 0.2, 0.0, "held-out")]
    line = group_summary(table[:3], None)["all"]
    assert (line["n"], line["miss"]) == (2, 1)
    assert line["mape"] == pytest.approx(0.3) and line["median"] == pytest.approx(0.3)
    assert line["bias"] == pytest.approx(-0.2) and line["hit_rate"] == pytest.approx(1 / 3)
    assert line["baseline_mfu0.40_mape"] == pytest.approx(0.3) and line["baseline_mfu0.50_mape"] == pytest.approx(0.15)
    refused_only = group_summary([table[2]], "gpu")["H100"]
    assert (refused_only["n"], refused_only["miss"], refused_only["hit_rate"]) == (0, 1, 0.0)
    assert np.isnan(refused_only["mape"])
    lines = summaries(table, by_split=True)
    assert len(lines) == (1 + len(GROUP_KEYS)) * 2
    held = next(x for x in lines if x["key"] == "gpu" and x["split"] == "held-out")
    assert (held["group"], held["n"], held["mape"]) == ("H100", 1, pytest.approx(0.2))
