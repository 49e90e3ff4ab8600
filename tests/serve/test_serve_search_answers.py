"""What a user does with ``fastmodel serve --search`` and its result (issue 24 item 6): ``best`` ranks only the
points within the search's GPU budget, as ``plot pareto`` draws them (one predicate,
``fastmodel.analysis.best.within_budget``); fastmodel/serve/search.py, docs/model_serving.md §S17."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.serve.search import X, slo_search

#: a small search: 2 GPUs (tp and pp 1 or 2: tp2 pp2 needs 4, over the budget), concurrency 1..4
SMALL = dict(input_len=1024, output_len=128, ttft=0.5, tpot=0.03, gpus=2, concurrency=(1, 2, 3, 4))
ARGS = ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--gpus", "2", "--search-concurrency", "4",
        "--input-len", "1024", "--output-len", "128"]


@pytest.fixture(scope="module")
def small():
    return slo_search("llama3.1-8b", "H100", **SMALL).dataset


def test_best_ranks_only_the_points_within_the_search_gpu_budget(small):
    """tp2 pp2 (4 GPUs) has the most tokens/s per user of the grid and is over the 2-GPU budget: best ranked it
    first. The points best ranks are the ones plot pareto draws (status ok, fitting, within the budget)."""
    from fastmodel.analysis.best import best
    from fastmodel.plot.serving import answers

    ds = small
    over = ~ds.within_budget.values.astype(bool)
    assert over.any() and np.nanmax(np.where(over, ds[X].values, np.nan)) > np.nanmax(np.where(over, np.nan,
                                                                                                ds[X].values))
    table = best(ds, X, top=10**6)
    assert (table.tp * table.pp * table.attention_dp <= 2).all()
    assert len(table) == int(answers(ds).sum())
    assert table.attrs["budget_filter"] == {"applied": True, "dropped": int(over.sum()), "of": int(over.size),
                                            "gpus": 2}
    mine = best(ds, X, top=10**6, where=["!within_budget"])      # the user's own filter on it replaces the rule
    assert (mine.tp * mine.pp == 4).all() and not mine.attrs["budget_filter"]["applied"]


def test_best_on_a_written_search_says_what_it_left_out(tmp_path):
    out = tmp_path / "s.nc"
    assert CliRunner().invoke(main, [*ARGS, "--ttft", "0.5", "--tpot", "30ms", "-o", str(out)]).exit_code == 0
    run = CliRunner().invoke(main, ["best", str(out), "--by", X, "--top", "3"])
    assert run.exit_code == 0, run.output
    rows = run.stdout.splitlines()[1:]
    assert len(rows) == 3 and all(" 2   2 " not in row for row in rows)
    assert "only configurations within the search's GPU budget (2 GPUs): dropped 8 of 32" in run.stderr
    plain = xr.Dataset({"status": ("x", np.zeros(2, np.int8)), "v": ("x", [1.0, 2.0])})    # no search: no rule
    from fastmodel.analysis.best import best

    assert best(plain, "v").attrs["budget_filter"]["applied"] is False
