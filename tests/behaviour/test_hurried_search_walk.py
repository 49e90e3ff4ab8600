"""A hurried user's walk through ``serve --search``, ``plot pareto`` and ``best`` on its result (issue 24 item 6):
each slip is one line naming what to give, exit 2 (fastmodel/cli/serve_search.py, fastmodel/serve/search.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fastmodel.cli import main

ARGS = ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--gpus", "2", "--search-concurrency", "2"]


@pytest.mark.parametrize("args, line", [
    ([], "error: --search needs --ttft and --tpot (e.g. --ttft 2s --tpot 50ms)"),
    (["--ttft", "2s"], "error: --search needs --tpot (e.g. --ttft 2s --tpot 50ms)"),
    (["--ttft", "2s", "--tpot", ""], "error: --tpot: '' gives no duration; write e.g. --ttft 2s --tpot 50ms"),
    (["--ttft", " ", "--tpot", "50ms"], "error: --ttft: ' ' gives no duration; write e.g. --ttft 2s --tpot 50ms"),
    (["--ttft", "2s", "--tpot", "50ms", "--mode", ""], "error: --mode: no mode named; choose agg, disagg or both"),
    (["--ttft", "2s", "--tpot", "50ms", "--mode", ","], "error: --mode: no mode named; choose agg, disagg or both"),
    (["--ttft", "2s", "--tpot", "50ms", "--ep", ""], "error: Invalid value for '--ep': '' names no number; give "
     "whole numbers, comma-separated, e.g. 1,2,4"),
    (["--ttft", "2s", "--tpot", "50ms", "--spec-tokens", ","], "error: Invalid value for '--spec-tokens': ',' names "
     "no number; give whole numbers, comma-separated, e.g. 1,2,4"),
])
def test_slips_are_one_line_naming_what_to_give(args, line):
    run = CliRunner().invoke(main, [*ARGS, *args])
    assert run.exit_code == 2 and run.stderr.splitlines()[0].startswith(line), run.output
    assert len(run.stderr.splitlines()) == 1, run.stderr


def test_without_a_model_the_search_says_so_first():
    run = CliRunner().invoke(main, ["serve", "--search", "--ttft", "2s", "--tpot", "50ms"])
    assert run.exit_code == 2 and run.stderr == "error: --search needs --model (e.g. -m llama3.1-8b)\n", run.output


@pytest.mark.parametrize("ttft, tpot, said", [("2s", "50ms", "TTFT <= 2000 ms and TPOT <= 50 ms"),
                                              ("0.05", "0.05", "TTFT <= 50 ms and TPOT <= 50 ms"),
                                              ("50 ms", "50 ms", "TTFT <= 50 ms and TPOT <= 50 ms")])
def test_slo_spellings_read_as_durations(ttft, tpot, said):
    run = CliRunner().invoke(main, [*ARGS, "--ttft", ttft, "--tpot", tpot])
    assert run.exit_code == 0 and said in run.stdout, run.output
