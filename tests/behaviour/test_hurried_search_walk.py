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


@pytest.mark.parametrize("flag, python", [("--attention-dp", "attention_dp"), ("--ep", "ep")])
def test_a_layout_wider_than_the_gpu_budget_is_bad_input(flag, python):
    """--attention-dp 4 with --gpus 2: every instance needs 4 GPUs or more, so no point was within the budget and
    the search said "none of the 64 configurations searched fits", exit 1, as if the SLOs were to blame (--ep 8:
    every point ep_not_dividing, exit 3). One line naming the flag and the budget, exit 2."""
    from fastmodel.errors import SpecError
    from fastmodel.serve.search import slo_search

    run = CliRunner().invoke(main, ["serve", "--search", "-m", "mixtral-8x7b", "-d", "H100", "--gpus", "2",
                                    "--search-concurrency", "2", "--ttft", "2s", "--tpot", "50ms", flag, "4,8"])
    assert run.exit_code == 2 and run.stderr == (f"error: {flag}: 4 is over the GPU budget: an instance has tp x "
                                                 "attention_dp x pp GPUs, at most --gpus 2\n"), run.output
    with pytest.raises(SpecError, match=rf"^{python}: 4 is over the GPU budget: .* at most gpus=2$"):
        slo_search("mixtral-8x7b", "H100", input_len=128, output_len=128, ttft=2, tpot=0.05, gpus=2,
                   concurrency=[2], **{python: [4, 8]})
