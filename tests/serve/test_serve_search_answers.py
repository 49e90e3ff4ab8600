"""What a user does with ``fastmodel serve --search`` and its result (issue 24 item 6): ``best`` ranks only the
points within the search's GPU budget, as ``plot pareto`` draws them (one predicate,
``fastmodel.analysis.best.within_budget``); fastmodel/serve/search.py, docs/model_serving.md §S17."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.registry.serve import SERVE_STATUS
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
    # every point fits in HBM: no "only plans that fit: dropped 0 of N" line (said only when one was dropped,
    # as the GPU-budget line is)
    assert "only plans that fit" not in run.stderr and run.stderr.count("\n") == 1
    plain = xr.Dataset({"status": ("x", np.zeros(2, np.int8)), "v": ("x", [1.0, 2.0])})    # no search: no rule
    from fastmodel.analysis.best import best

    assert best(plain, "v").attrs["budget_filter"]["applied"] is False


def test_slos_no_point_meets_are_one_line_exit_1_and_the_sweep_still_written(tmp_path):
    """grep's rule: no match exits 1 (bad input stays 2). The line names the SLOs and the closest point per SLO:
    the best TTFT and the best TPOT among the points that fit, each with its layout and its other latency."""
    result = slo_search("llama3.1-8b", "H100", **{**SMALL, "ttft": 0.001, "tpot": 0.0005})
    ds = result.dataset
    fit = (ds.status.values == 0) & ds.fits_memory.values & ds.within_budget.values
    assert result.best is None and result.feasible == 0 and result.evaluated == int(fit.sum()) > 0
    assert result.closest["ttft"]["ttft"] == pytest.approx(ds.ttft.values[fit].min())
    assert result.closest["tpot"]["tpot"] == pytest.approx(ds.tpot.values[fit].min())
    out = tmp_path / "s.nc"
    run = CliRunner().invoke(main, [*ARGS, "--ttft", "1ms", "--tpot", "0.5ms", "-o", str(out)])
    assert run.exit_code == 1, run.output
    [line] = run.stdout.splitlines()
    ttft, tpot = result.closest["ttft"], result.closest["tpot"]
    assert line == (f"no configuration meets TTFT <= 1 ms and TPOT <= 0.5 ms (of {result.evaluated} that fit): the "
                    f"best TTFT found is {ttft['ttft'] * 1e3:.1f} ms (agg trtllm {ttft['precision']} tp{ttft['tp']} "
                    f"pp{ttft['pp']} ep1 adp1 k0 at concurrency {ttft['batch_size']}, TPOT {ttft['tpot'] * 1e3:.2f} "
                    f"ms), the best TPOT {tpot['tpot'] * 1e3:.2f} ms (agg trtllm {tpot['precision']} tp{tpot['tp']} "
                    f"pp{tpot['pp']} ep1 adp1 k0 at concurrency {tpot['batch_size']}, TTFT {tpot['ttft'] * 1e3:.1f} "
                    "ms)")
    assert xr.load_dataset(out).meets_slo.sum() == 0 and f"wrote {out}" in run.stderr    # the frontier is still useful
    met = CliRunner().invoke(main, [*ARGS, "--ttft", "0.5", "--tpot", "30ms"])
    assert met.exit_code == 0 and "best meeting the SLOs" in met.stdout
    help_text = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    assert "exits 1 when no configuration meets the SLOs" in help_text


@pytest.mark.parametrize("kwargs, python, flag", [
    (dict(ttft=-2.0), "ttft: -2 s: an SLO must be a positive duration", "--ttft: -2 s: an SLO must be"),
    (dict(tpot="fast"), "tpot: cannot read 'fast'", "--tpot: cannot read 'fast'"),
    (dict(modes="split"), "modes: choose agg, disagg or both (got 'split')", "--mode: choose agg, disagg or both"),
    (dict(modes="disagg", gpus=1), "modes: disagg needs gpus=2 or more (a prefill pool and a decode pool), got "
     "gpus=1", "--mode: disagg needs --gpus 2 or more (a prefill pool and a decode pool), got --gpus 1"),
    (dict(concurrency=(0, 4)), "concurrency: values must be at least 1", None),
    (dict(spec_tokens=(0, 3)), "spec_acceptance: speculative decoding (spec_tokens=1 or more) needs", None),
    (dict(spec_acceptance=1.5), "spec_acceptance: an acceptance rate is between 0 and 1", None),
    (dict(ep=(0,)), "ep: values must be at least 1", None),
    (dict(engine="tgi"), "engine: unknown engine 'tgi'", "--engine: unknown engine 'tgi'"),
])
def test_search_errors_name_the_python_argument_from_python_and_the_flag_from_the_cli(kwargs, python, flag):
    """Called from Python, an error of the SLO search names the argument (``modes``, ``gpus=1``); the command line
    names its flags (``--mode``, ``--gpus 1``): cli/common.py:flag_names translates, as the CLI re-raises an
    API's error with its own names elsewhere (cli/execution.py, cli/plot.py)."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError) as error:
        slo_search("llama3.1-8b", "H100", **{**SMALL, **kwargs})
    assert str(error.value).startswith(python) and "--" not in str(error.value), str(error.value)
    if flag is None:
        return
    cli = {"ttft": ["--ttft", "-2s", "--tpot", "30ms"], "tpot": ["--ttft", "1s", "--tpot", "fast"],
           "modes": ["--ttft", "1s", "--tpot", "30ms", "--mode", str(kwargs.get("modes"))],
           "engine": ["--ttft", "1s", "--tpot", "30ms", "--engine", "tgi"]}[next(iter(kwargs))]
    args = [a if a != "2" or kwargs.get("gpus") != 1 else "1" for a in ARGS]     # --gpus 1 where asked
    run = CliRunner().invoke(main, [*args, *cli])
    assert run.exit_code == 2 and run.stderr.startswith("error: " + flag), run.output



def test_a_heatmap_of_a_search_marks_the_points_over_its_gpu_budget(small):
    """plot heatmap of a search (pp=2: tp2 needs 4 GPUs of a 2-GPU budget) boxed tp2 as the best cell; the points
    over the budget are marked ``over_gpu_budget`` (the name plot pareto's legend gives them), as a heatmap marks
    the points over memory, and the best cell is one within the budget."""
    import matplotlib

    matplotlib.use("Agg")
    from fastmodel.plot.data import prepare
    from fastmodel.plot.heatmap import heatmap

    sel = {"precision": "fp8", "pp": 2}
    da, status = prepare(small, X, sel, keep=("tp", "batch_size"))
    from fastmodel.registry import status_names

    over = status.values == status_names(status).index("over_gpu_budget")
    assert (over == (da.tp.values[:, None] == 2)).all()
    fig, ax = heatmap(small, "tp", "batch_size", var=X, sel=sel)
    [box] = [p for p in ax.patches if p.get_gid() == "best"]
    assert box.get_xy()[0] == -0.5           # the tp=1 column
    # the legend names them as what they are, legal plans over the budget (was "illegal: over_gpu_budget")
    groups = {c.get_label(): len(c.get_paths()) for c in ax.collections if c.get_gid() == "missing"}
    assert groups == {"over the GPU budget": int(over.sum())}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"over the GPU budget ({int(over.sum())} cells)" in legend and not any("illegal" in t for t in legend)


def test_best_on_a_search_shows_each_rows_ttft_and_whether_it_meets_the_slos(small):
    """Ranked by tokens/s per GPU, the top rows of a search carried TPOT but neither TTFT nor ``meets_slo``: the
    user could not tell the answer from a row that misses the TTFT target. A result of no search is unchanged."""
    from fastmodel.analysis.best import best

    table = best(small, "output_tokens_per_s_per_gpu", top=5)
    assert {"ttft", "tpot", "meets_slo"} <= set(table.columns)
    for _, row in table.iterrows():
        assert bool(row.meets_slo) == (row.ttft <= 0.5 and row.tpot <= 0.03)
    plain = small.drop_vars(["within_budget", "meets_slo"])
    assert "ttft" not in best(plain, "output_tokens_per_s_per_gpu", top=5).columns


@pytest.mark.parametrize("gpus", ["4", 2.5, None, True])
def test_the_gpu_budget_is_a_whole_number_from_python(gpus):
    """gpus="4" or None was a bare TypeError ('<=' not supported); 2.5 ran as 2 and True as 1."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError, match=rf"^gpus: a whole number of GPUs, at least 1 \(got {gpus!r}\)$"):
        slo_search("llama3.1-8b", "H100", **{**SMALL, "gpus": gpus})
    assert slo_search("llama3.1-8b", "H100", **{**SMALL, "gpus": np.int64(1)}).dataset.attrs["slo_gpus"] == 1


def test_an_unknown_precision_names_the_argument():
    """review9 #8: precisions=("fp3",) said "precision: unknown value 'fp3'", a name slo_search has no argument
    for; every other bad argument names its own (the CLI's Choice refuses it first)."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError, match=r"^precisions: unknown value 'fp3'; choose one of bf16, fp16, fp8, .* "
                                        r"\(did you mean 'fp8'\?\)$"):
        slo_search("llama3.1-8b", "H100", **{**SMALL, "precisions": ("bf16", "fp3")})


@pytest.mark.parametrize("kwargs, said", [
    (dict(precisions=()), "precisions: no precision named; choose one or more of bf16, fp16, fp8"),
    (dict(engine=[]), "engine: no engine named; give trtllm, vllm or sglang, or leave engine out (None)"),
    (dict(engine=""), "engine: no engine named; give trtllm, vllm or sglang, or leave engine out (None)"),
    (dict(concurrency=[]), "concurrency: no value given; give one or more, e.g. [1, 2, 4]"),
    (dict(ep=[]), "ep: no value given; give one or more, e.g. [1, 2, 4]"),
    (dict(spec_tokens=()), "spec_tokens: no value given; give one or more, e.g. [0, 3]"),
])
def test_an_empty_choice_list_is_one_line_naming_the_argument(kwargs, said):
    """precisions=() said "precision: unknown value None"; engine=[] ran the default engine as if left out;
    concurrency=[] said "values must be at least 1", of no value."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError) as error:
        slo_search("llama3.1-8b", "H100", **{**SMALL, **kwargs})
    assert str(error.value).startswith(said), str(error.value)


@pytest.mark.parametrize("modes, said", [
    (",", "modes: no mode named; choose agg, disagg or both"),
    ("agg,dis", "modes: choose agg, disagg or both (got 'dis') (did you mean 'disagg'?)"),
])
def test_modes_from_python_split_on_commas_as_the_cli_does(modes, said):
    """review10 #2: modes="," said "choose agg, disagg or both (got ,)" and "agg,disagg", the spelling --mode
    takes, was refused as one unknown name with a wrong hint."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError) as error:
        slo_search("llama3.1-8b", "H100", **{**SMALL, "modes": modes})
    assert str(error.value) == said, str(error.value)
    spelled = slo_search("llama3.1-8b", "H100", **{**SMALL, "modes": "agg, agg"})
    listed = slo_search("llama3.1-8b", "H100", **{**SMALL, "modes": ("agg",)})
    assert spelled.dataset.equals(listed.dataset)


@pytest.fixture(scope="module")
def pools():
    """The small search on 4 GPUs with its disaggregated pools too."""
    return slo_search("llama3.1-8b", "H100", **{**SMALL, "gpus": 4, "precisions": ("fp8",)}, modes=("agg", "disagg"))


def test_best_ranks_a_search_s_disaggregated_points_by_their_disagg_variables(pools):
    """``best --by disagg_*`` said "one value per prefill_tp, ... (not one per configuration)": the pools' grid is
    ranked as a result of its own, under the aggregated grid's rules: only points that are legal, fit and are
    within the GPU budget (pools of prefill_workers x prefill_tp + decode_workers x decode_tp <= 4 GPUs), best
    first by the registry's direction; the rows carry the pools' TTFT, meets_slo and status."""
    from fastmodel.analysis.best import best

    ds = pools.dataset
    Yd = "disagg_output_tokens_per_s_per_gpu"
    table = best(ds, Yd, top=10**6)
    assert list(table.columns[:8]) == ["engine", "precision", "spec_tokens", "prefill_tp", "prefill_workers",
                                       "decode_tp", "decode_workers", "batch_size"]
    assert {Yd, "disagg_ttft", "disagg_tpot", "disagg_meets_slo", "disagg_status"} <= set(table.columns)
    assert "status" not in table.columns and "tp" not in table.columns
    used = table.prefill_workers * table.prefill_tp + table.decode_workers * table.decode_tp
    assert (used <= 4).all() and (table.disagg_status == "ok").all()
    ranked = (ds.disagg_status.values == 0) & ds.disagg_fits_memory.values
    assert len(table) == int(ranked.sum()) and (np.diff(table[Yd].values) <= 0).all()
    over = ds.disagg_status.values == SERVE_STATUS["pools_over_budget"]
    assert over.any() and np.isnan(ds[Yd].values[over]).all()       # the pools over the budget hold no value
    assert table.attrs["budget_filter"] == {"applied": True, "dropped": 0, "of": len(table), "gpus": 4}
    for _, row in table.iterrows():
        assert bool(row.disagg_meets_slo) == (row.disagg_ttft <= 0.5 and row.disagg_tpot <= 0.03)
    # the best meeting the SLOs is the search's own answer among its pools; TPOT ranks least first
    top = best(ds, Yd, top=1, where=["disagg_meets_slo"])
    assert top[Yd].iloc[0] == np.nanmax(np.where(ds.disagg_meets_slo.values, ds[Yd].values, np.nan))
    alone = slo_search("llama3.1-8b", "H100", **{**SMALL, "gpus": 4, "precisions": ("fp8",)}, modes=("disagg",))
    assert {k: top[k].iloc[0] for k in top.columns[:8]} == {k: alone.best[k] for k in top.columns[:8]}
    tpot = best(ds, "disagg_tpot", top=3, where=["disagg_status=ok", "disagg_fits_memory"], include_oom=True)
    assert tpot.disagg_tpot.iloc[0] == np.nanmin(np.where(ranked, ds.disagg_tpot.values, np.nan))
    assert "disagg_fits_memory" in tpot.columns and tpot.attrs["units"]["disagg_tpot"] == "s"


def test_cli_best_by_a_disagg_variable_and_an_unknown_one(tmp_path):
    """On a written search: ``--by disagg_tpot`` ranks the pools; an unknown --by is one line naming the nearest
    variable, exit 2, on a search with pools and on one without them."""
    out, agg = tmp_path / "s.nc", tmp_path / "agg.nc"
    args = [*ARGS, "--ttft", "0.5", "--tpot", "30ms"]
    assert CliRunner().invoke(main, [*args, "--mode", "agg,disagg", "-o", str(out)]).exit_code == 0
    run = CliRunner().invoke(main, ["best", str(out), "--by", "disagg_tpot", "--top", "2"])
    assert run.exit_code == 0, run.output
    header, *rows = run.stdout.splitlines()
    assert header.split()[:9] == ["engine", "precision", "spec_tokens", "prefill_tp", "prefill_workers", "decode_tp",
                                  "decode_workers", "batch_size", "disagg_tpot"] and len(rows) == 2
    run = CliRunner().invoke(main, ["best", str(out), "--by", "disagg_tpt"])
    assert run.exit_code == 2 and run.stderr == "error: unknown variable 'disagg_tpt' (did you mean 'disagg_tpot'?)\n"
    assert CliRunner().invoke(main, [*args, "-o", str(agg)]).exit_code == 0
    run = CliRunner().invoke(main, ["best", str(agg), "--by", "disagg_tpot"])
    assert run.exit_code == 2 and run.stderr == "error: unknown variable 'disagg_tpot' (did you mean 'tpot'?)\n"


def test_cli_best_by_a_disagg_variable_says_the_pools_rule_and_names_the_pools_coordinates(tmp_path):
    """``best --by disagg_*`` drops the pools that do not fit by ``disagg_fits_memory`` and says so for pools (it
    said "only plans that fit ... (memory_per_device over usable HBM)"); ``--where tp=2`` there names the pools'
    coordinates, nearest first (it said "filter on unknown variable 'tp'" and nothing more)."""
    out = tmp_path / "s.nc"
    # 4,096-token prompts: a TP-1 FP8 worker holds one request's KV but not four (ok, disagg_fits_memory false);
    # the BF16 TP-1 pools hold none (no_kv_room since mend18: dropped by their status, not by this rule)
    search = ["serve", "--search", "-m", "llama3.1-70b", "-d", "H100", "--gpus", "2", "--search-concurrency", "4",
              "--mode", "agg,disagg", "--ttft", "2s", "--tpot", "100ms", "--input-len", "4096", "--output-len",
              "1024", "-o", str(out)]
    assert CliRunner().invoke(main, search).exit_code == 0
    run = CliRunner().invoke(main, ["best", str(out), "--by", "disagg_tpot", "--top", "1"])
    assert run.exit_code == 0, run.output
    assert run.stderr.startswith("only pools that fit: dropped 1 of 4 pools (disagg_fits_memory false: ")
    assert "memory_per_device" not in run.stderr
    run = CliRunner().invoke(main, ["best", str(out), "--by", "disagg_tpot", "--where", "tp=2"])
    assert run.exit_code == 2 and run.stderr.startswith("error: filter on unknown variable 'tp': ranking by a "
                                                        "disagg_* variable ranks the disaggregated pools, whose ")
    assert run.stderr.rstrip().endswith("(nearest: prefill_tp, decode_tp)")
    assert CliRunner().invoke(main, ["best", str(out), "--by", "disagg_tpot", "--where", "prefill_tp=1"]).exit_code == 0
