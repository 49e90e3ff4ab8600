"""Serving validation (fastmodel.serve.validate): what a closed-loop record's own measurements imply
(docs/model_serving.md S26)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.serve.records import lower_serve_record
from fastmodel.serve.validate import implied_running, rows
from tests.serve.test_serve_records import RECORD


def _measured(ttft, tpot):
    data = json.loads(json.dumps(RECORD))
    data["measured"] = {"ttft_s": ttft, "tpot_s": tpot}
    return data


def test_validate_reports_the_running_batch_a_records_measurements_imply():
    """Little's law on the closed loop (docs/model_serving.md S26): N requests finish at N / (TTFT + (O - 1) TPOT),
    each decodes for (O - 1) TPOT, so N (O - 1) TPOT / (TTFT + (O - 1) TPOT) decode at once."""
    serve = {"concurrency": 512, "output_len": 1024}
    # a vLLM H100 gpt-oss point at 512 in flight: 20 s to the first token, 4.7 ms per token -> about 99 decoding
    by_hand = 512 * 1023 * 0.0047 / (20.0 + 1023 * 0.0047)
    assert implied_running(serve, {"ttft_s": 20.0, "tpot_s": 0.0047}) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(99.0, abs=0.5)
    # no waiting at all (TTFT ~ 0): every request decodes
    assert implied_running(serve, {"ttft_s": 1e-9, "tpot_s": 0.01}) == pytest.approx(512, rel=1e-6)
    for missing in ({"ttft_s": 0.1}, {"tpot_s": 0.01}, {}):
        assert np.isnan(implied_running(serve, missing))
    assert np.isnan(implied_running({"batch_size": 8, "output_len": 128}, {"ttft_s": 0.1, "tpot_s": 0.01}))
    assert np.isnan(implied_running({"concurrency": 8, "output_len": 1}, {"ttft_s": 0.1, "tpot_s": 0.01}))
    # the validate row: the implied batch and the model's decode-only iteration there, below the one at N = 16
    # (RECORD measures TTFT 0.1 s and TPOT 10 ms over 255 steps: 16 x 2.55 / 2.65 = 15.4 decoding)
    low = _measured(2.55, 0.01)                  # half of N decoding: 8
    table = rows([lower_serve_record(RECORD), lower_serve_record(low)])
    assert table[0]["implied_running"] == pytest.approx(16 * 2.55 / 2.65, rel=1e-12)
    assert table[1]["implied_running"] == pytest.approx(8.0, rel=1e-12)
    naive_at_16 = (1 + table[0]["baseline_error_tpot_s"]) * 0.01
    assert table[1]["tpot_at_implied_running_s"] < naive_at_16
    assert table[0]["tpot_at_implied_running_s"] <= naive_at_16


def test_a_malformed_serving_line_is_a_miss_in_every_table(tmp_path):
    """A line that cannot be read (first in the file, so content detection must look past it) is a miss in
    the TTFT and TPOT tables; the records after it are still scored."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    good = (Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl").read_text().splitlines()[0]
    path = tmp_path / "serve.jsonl"
    path.write_text("{oops\n" + good + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"refused (a miss): {path}:1: invalid JSON" in result.stderr
    all_lines = [line for line in result.stdout.splitlines() if line.startswith("all ")]
    # n answered, miss refused: the same meaning as training's tables, and the same legend under them
    assert [line.split()[1:3] for line in all_lines[:2]] == [["1", "1"], ["1", "1"]]   # TTFT, TPOT
    assert "\nn: records answered; miss: records that measured the metric refused" in result.stdout
    # the unreadable line's groups are named, not blank, and not the defaults of a readable record (bf16,
    # aggregated): it gives no serve block to read them from
    groups = {line[:30].strip() for line in result.stdout.splitlines()[:20]}
    for group in ("gpu", "model", "precision", "mode"):
        assert f"{group}=(not given)" in groups and f"{group}=" not in groups, group
    assert "precision=bf16" not in groups and "mode=aggregated" in groups    # the good record is aggregated


@pytest.mark.parametrize("ttft, reason", [("173ms", "measured.ttft_s: "), (-1.0, "measured.ttft_s: "),
                                          (float("nan"), "measured.ttft_s: ")])
def test_an_unreadable_measurement_is_named_not_dropped(tmp_path, ttft, reason):
    """measured.ttft_s "173ms" (or -1, NaN) used to leave the record out of the TTFT table without a word; it is a
    refused record (a miss) naming the field."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "serve.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(_measured(ttft, 0.01)) + "\n")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"refused (a miss): {path}:2: {reason}" in result.stderr, result.stderr


def test_summaries_are_the_printed_cells_by_hand():
    """fastmodel.validate's serving scores: per metric, group and split, n records answered, misses
    (measured, no prediction), MAPE, bias, hit rate (within 25 % over n + miss) and the naive MAPE; a cell nobody
    measured is left out, as the report leaves it blank."""
    from fastmodel.serve.validate import GROUP_KEYS, cell_summary, summaries

    def row(error, naive, split, ttft=1.0):
        groups = {key: "g" for key in GROUP_KEYS}
        return {**groups, "split": split, "measured_ttft_s": ttft, "error_ttft_s": error,
                "baseline_error_ttft_s": naive, "measured_tpot_s": 0.0, "error_tpot_s": np.nan,
                "baseline_error_tpot_s": np.nan, "measured_output_tokens_per_s": 0.0,
                "error_output_tokens_per_s": np.nan, "baseline_error_output_tokens_per_s": np.nan}

    table = [row(0.1, -0.5, "dev"), row(-0.3, 0.5, "dev"), row(np.nan, np.nan, "dev"), row(0.2, 1.0, "held-out")]
    cell = cell_summary(table[:3], "ttft_s")
    assert (cell["n"], cell["miss"]) == (2, 1)       # n answered, as training's tables count (miss apart)
    assert cell["mape"] == pytest.approx(0.2) and cell["bias"] == pytest.approx(-0.1)
    assert cell["hit_rate"] == pytest.approx(1 / 3) and cell["naive_mape"] == pytest.approx(0.5)
    assert cell_summary(table, "tpot_s") is None
    lines = summaries(table, by_split=True)
    assert {line["metric"] for line in lines} == {"ttft_s"}
    assert len(lines) == (1 + len(GROUP_KEYS)) * 2        # every group ("g") in both splits
    held = next(line for line in lines if line["key"] is None and line["split"] == "held-out")
    assert (held["n"], held["mape"], held["naive_mape"]) == (1, pytest.approx(0.2), pytest.approx(1.0))
