"""The hurried user's leftovers (walk of 2026-12-06): units on the command line, plots of illegal points, sweeps
whose every point is illegal, output suffixes. Each is one line and a documented exit code, never a crash."""

import pytest

from fastmodel.errors import SweepError
from fastmodel.plot.readable import legend_label
from tests.suite_fixtures import cli, one_line_error


def test_a_margin_in_another_binary_unit_is_read_as_its_gib():
    """``--memory-margin 8TiB`` was "not a number": 8 TiB = 8 x 1024 GiB = 8192 GiB, and 512 MiB = 0.5 GiB; the
    check against the HBM names the GiB and the text as typed. ``8TB`` keeps its hint (8e12 / 2^30 = 7451 GiB)."""
    from fastmodel.analysis.margin import check_below_hbm, gib_margin

    assert gib_margin("8TiB") == 8192 * 2**30 and gib_margin(" 1.5 tib ") == 1536 * 2**30
    assert gib_margin("512MiB") == 0.5 * 2**30 and gib_margin("1048576KiB") == 2**30
    big = gib_margin("8TiB")
    with pytest.raises(SweepError, match=r"^--memory-margin: 8192 GiB \(8TiB\) is not below the HBM of 80.0 GiB"):
        check_below_hbm(big, 80 * 2**30, big)
    assert check_below_hbm(gib_margin("8GiB"), 80 * 2**30, gib_margin("8GiB")) == 8 * 2**30
    with pytest.raises(SweepError, match=r"'8TB' is in TB, the option in GiB \(8TB = 7451 GiB\)"):
        gib_margin("8TB")
    with pytest.raises(SweepError, match="-1024 GiB is negative"):
        gib_margin("-1TiB")
    with pytest.raises(SweepError, match="is negative"):
        gib_margin("-1e400TiB")
    with pytest.raises(SweepError, match="'nanTiB' is not a number"):
        gib_margin("nanTiB")


def test_a_margin_of_8_tib_on_the_command_line_is_above_the_hbm(tmp_path):
    """The command line says the margin is above the device's HBM (one line, exit 2), as it does for 1e7 GiB."""
    figure = tmp_path / "never.png"
    result = cli("plot", "memory-timeline", "-o", figure, "-m", "llama3-70b", "-s", "dgx-h100", "--nodes", "4",
                 "-t", "llm-pretrain", "--memory-margin", "8TiB")
    one_line_error(result, "--memory-margin: 8192 GiB (8TiB) is not below the HBM of")
    assert not figure.exists()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A small MAD-Max-shaped result (tests/plot_data.py) written as netCDF."""
    from plot_data import synthetic_file

    return synthetic_file(tmp_path_factory)


def test_best_csv_with_another_suffix_is_written_as_csv_and_says_so(synthetic, tmp_path):
    """``best --csv x.txt`` wrote CSV and said nothing; a suffix that says nothing of the format (.txt, none) is
    written as CSV with the line ``wrote x.txt (CSV; the name does not end in .csv)``, as validate -o does; a
    suffix naming another format (.json, .parquet) stays refused in one line before any work, as every writer does
    (fastmodel/io/outputs.py); x.csv says ``wrote x.csv``."""
    text = tmp_path / "x.txt"
    result = cli("best", synthetic, "--by", "throughput", "--top", "2", "--csv", text)
    assert result.exit_code == 0 and f"wrote {text} (CSV; the name does not end in .csv)" in result.stderr
    assert text.read_text().startswith("num_nodes,")
    plain = tmp_path / "x.csv"
    result = cli("best", synthetic, "--by", "throughput", "--top", "2", "--csv", plain)
    assert result.exit_code == 0 and f"wrote {plain}\n" in result.stderr and "does not end" not in result.stderr
    for name in ("x.json", "x.parquet"):
        one_line_error(cli("best", synthetic, "--by", "throughput", "--csv", tmp_path / name),
                       f"a {name[1:]} name, but this command writes CSV here; name the table .csv")
        assert not (tmp_path / name).exists()
    rows = tmp_path / "rows.dat"
    result = cli("validate", "tests/data/runs_dev_small.jsonl", "-o", rows)
    assert result.exit_code == 0 and f"wrote {rows} (CSV; the name does not end in .csv)" in result.stderr


@pytest.mark.parametrize("text, expected", [("25MB", 25e6), ("25MiB", 25 * 2**20), ("25 MB", 25e6),
                                            ("25 MiB", 25 * 2**20), ("1.5 GB", 1.5e9), ('"25 MB"', 25e6)])
def test_a_set_value_with_its_unit_needs_no_toml_quotes(text, expected):
    """``-x 'collective_bucket_bytes=25 MB'`` was "not a TOML value" (it needed TOML's quotes, "25 MB"); a number, a
    space and a unit is read as the bytes field reads it in a file, the same as 25MB (25e6 B) and 25MiB
    (25 x 2^20 B)."""
    from fastmodel.cli.execution import read_execution
    from fastmodel.lm.loader import load_execution

    fields = read_execution(None, (f"collective_bucket_bytes={text}",), "lm")
    assert load_execution(fields).collective_bucket_bytes == expected


def test_a_list_of_bare_words_is_read_as_docs_usage_writes_it():
    """docs/usage.md writes a list as ``[core_attn, mlp]``; it was "not a TOML value" (TOML wants the quotes)."""
    from fastmodel.cli.execution import read_execution

    for text in ("[core_attn, mlp]", "[core_attn,mlp,]", '["core_attn", "mlp"]'):
        assert read_execution(None, (f"recompute_modules={text}",), "lm") == {"recompute_modules": ["core_attn", "mlp"]}


@pytest.mark.parametrize("text, hint", [
    ("pipeline_schedule=dual pipe", """quote a text with spaces for TOML inside the shell's quotes: -x 'pipeline_schedule="dual pipe"'"""),
    ("recompute_modules=moe, mlp", """write a list in brackets, in the shell's quotes: -x 'recompute_modules=["moe", "mlp"]'"""),
])
def test_a_set_value_that_is_not_toml_names_the_quoting(text, hint):
    """Text with spaces that is not a quantity stays refused, in one line that says how to quote it."""
    result = cli("run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-x", text)
    one_line_error(result, "is not a TOML value", hint)


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_a_sweep_whose_every_point_is_illegal_is_written_and_exits_3(tmp_path, suffix):
    """plan = ["tp3", "tp5"] on 8 GPUs: neither degree divides the 8 devices (devices_not_divisible at both points).
    The .nc sweep exited 2 and wrote nothing (the .zarr one exited 2 after writing its store); illegal points stay
    in the grid with their status code, so the grid is written, one line names the most common status with its
    reason, and the exit status is 3 (spec errors stay 2; docs/usage.md)."""
    import xarray as xr

    from fastmodel.cli.sweep import NO_LEGAL_POINT_EXIT
    from fastmodel.io.store import is_sweep_store

    path, out = tmp_path / "s.toml", tmp_path / f"out{suffix}"
    path.write_text('model = "llama3-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nplan = ["tp3", "tp5"]\n')
    result = cli("sweep", path, "-o", out)
    assert result.exit_code == NO_LEGAL_POINT_EXIT == 3, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("every point is illegal or infeasible: devices_not_divisible (100% of 2 points: n_gpus is not a "
                    f"multiple of tp x pp x cp); {out} holds the grid, each point's reason in its status variable "
                    "(exit 3)"), result.stderr
    assert "Traceback" not in result.output and "error:" not in result.output
    ds = xr.open_zarr(out) if suffix == ".zarr" else xr.open_dataset(out)
    names = ds["status"].attrs["flag_meanings"].split()
    assert [names[int(code)] for code in ds["status"].values.ravel()] == ["devices_not_divisible"] * 2
    assert suffix == ".nc" or is_sweep_store(out)
    assert not list(tmp_path.glob(".out*"))      # no temporary file left: the .nc was renamed whole


def test_a_python_sweep_whose_every_point_is_illegal_says_why():
    """fastmodel.sweep's SweepError gave only the status shares ("100% devices_not_divisible"); it now says what
    the command's line says: the most common status, its share of the points and its reason."""
    import fastmodel

    with pytest.raises(SweepError) as error:
        fastmodel.sweep("llama3-8b", "dgx-h100", "llm-pretrain", axes={"plan": ["tp3", "tp5"]})
    assert str(error.value) == ("every point of the sweep is illegal or infeasible: devices_not_divisible (100% of "
                                "2 points: n_gpus is not a multiple of tp x pp x cp)")


@pytest.fixture(scope="module")
def serving_grid():
    """Llama 3.1 70B, FP8 on H100 and A100 (no FP8 peak: every A100 point illegal), tp 1 and 8, batch 1 and 256,
    8k input: tp1 cannot hold 70 GB of FP8 weights and a KV cache in 80 GB."""
    from fastmodel.serve.api import sweep

    return sweep("llama3.1-70b", device=["H100", "A100"], precision="fp8", tp=[1, 8], batch_size=[1, 256],
                 input_len=8192, output_len=256, load_mode="concurrency")


def test_a_serving_frontier_says_which_points_it_left_out_and_why(serving_grid, tmp_path):
    """The serving Pareto figure dropped points that are no answer (no_fp8, no_kv_room, over memory) silently; its
    legend now says how many and why, counted here by hand from the grid's status and fits_memory, and `plot
    pareto` prints the same line."""
    from fastmodel.plot.serving import serving_pareto
    from fastmodel.registry import status_names

    ds = serving_grid
    names = status_names(ds["status"])
    codes = ds["status"].values.ravel()
    fits = (ds["fits_memory"].broadcast_like(ds["status"]).transpose(*ds["status"].dims).values.ravel() > 0)
    expected: dict = {}
    for code, fit in zip(codes, fits):
        if code != 0 or not fit:
            reason = names[code] if code != 0 else "does_not_fit"
            expected[reason] = expected.get(reason, 0) + 1
    assert expected.get("no_fp8") == codes.size // 2            # every A100 point
    fig, ax = serving_pareto(ds, curve="device")
    parts = ", ".join(f"{n} {r}" for r, n in sorted(expected.items(), key=lambda item: (-item[1], item[0])))
    assert ax.left_out == f"left out {sum(expected.values())} of {codes.size} points: {parts}"
    legend = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    assert legend_label(fig, ax.left_out) in legend and ax.left_out.startswith(legend_label(fig, ax.left_out))
    result_file = tmp_path / "serve.nc"
    from fastmodel.io.aliases import without_aliases

    without_aliases(ds).to_netcdf(result_file, engine="scipy")
    result = cli("plot", "pareto", result_file, "-o", tmp_path / "p.png")
    assert result.exit_code == 0 and ax.left_out in result.stderr, result.output
    filtered = cli("plot", "pareto", result_file, "--where", "tp=8", "-o", tmp_path / "w.png")
    assert filtered.exit_code == 0 and "filtered_by_where" in filtered.stderr, filtered.output


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Llama 3.1 70B on 16 DGX H100 (HBM 79.11 GiB), four plans, status ok at each (no only_fitting): tp8.pp4 at
    40.9 GiB and tp4.pp4 at 74.7 fit; tp8 at 77.9 is over the default margin (its allocator cache), dp at 574.5
    over the HBM; dp is the fastest (98 s a step) and tp8 the next-to-slowest."""
    from fastmodel.io.aliases import without_aliases
    from fastmodel.lm.sweep import lm_sweep

    ds = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16,
                  axes={"plan": ["tp8.pp4", "tp4.pp4", "tp8", "dp"]})
    path = tmp_path_factory.mktemp("plans") / "plans.nc"
    without_aliases(ds).to_netcdf(path, engine="scipy")
    return ds, path


def test_a_training_frontier_leaves_out_plans_over_memory_and_says_so(plans):
    """The Pareto figure ignored the status: dp, 574 GiB on a 79 GiB device, stood on the step-time frontier as
    the fastest plan. It is left out now as the heatmap leaves it (plot.data.visible after over_memory), with the
    count and reason in the legend."""
    from fastmodel.plot import pareto

    ds, _ = plans
    assert list(ds.fits_memory.values) == [True, True, False, False]
    fig, ax = pareto(ds, "step_time", "tokens_per_s_per_gpu")
    assert set(ax.frontier.plan) == {"tp8.pp4", "tp4.pp4"}
    assert ax.frontier.attrs["left_out"] == "left out 2 of 4 points: 2 does_not_fit"
    # the legend says it whole where it fits, else its count (the whole line: the attrs and stderr)
    assert legend_label(fig, ax.frontier.attrs["left_out"]) in [t.get_text() for legend in fig.legends
                                                                  for t in legend.get_texts()]


def test_plot_commands_take_best_s_memory_margin_and_include_oom(plans, tmp_path):
    """plot heatmap / scaling / pareto lacked --memory-margin and --include-oom (best has them), memory and breakdown
    --memory-margin. Same semantics: a plan fits when memory_per_device <= HBM - margin (79.11 - 10 = 69.11 GiB
    leaves only tp8.pp4; a margin of 0 lets tp8's 77.9 GiB in); --include-oom draws the plans over memory too."""
    from fastmodel.analysis.margin import fit_view, gib_margin
    from fastmodel.plot import pareto
    from fastmodel.plot.memory import memory_bars

    ds, path = plans
    plans_of = {}
    for name, view in (("oom", fit_view(ds, include_oom=True)), ("10", fit_view(ds, gib_margin("10"))),
                       ("0", fit_view(ds, gib_margin("0")))):
        _, ax = pareto(view, "step_time", "tokens_per_s_per_gpu")
        plans_of[name] = (set(ax.frontier.plan), ax.frontier.attrs["left_out"])
    assert plans_of["oom"][0] == {"tp8.pp4", "tp4.pp4", "tp8", "dp"} and plans_of["oom"][1] == ""
    assert plans_of["10"] == ({"tp8.pp4"}, "left out 3 of 4 points: 3 does_not_fit")
    assert plans_of["0"] == ({"tp8.pp4", "tp4.pp4", "tp8"}, "left out 1 of 4 points: 1 does_not_fit")
    assert list(ds.fits_memory.values) == [True, True, False, False]          # the result itself is left alone
    fig, ax = memory_bars(fit_view(ds, gib_margin("10")))
    assert "usable HBM 69 GiB" in [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    front = cli("plot", "pareto", path, "--x", "step_time", "--y", "tokens_per_s_per_gpu", "--include-oom",
                "-o", tmp_path / "p.png")
    assert front.exit_code == 0 and " dp " in front.stdout and "left out" not in front.stderr, front.output
    for args in (["scaling", "--x", "plan", "--var", "tokens_per_s_per_gpu", "--memory-margin", "0"],
                 ["scaling", "--x", "plan", "--var", "tokens_per_s_per_gpu", "--include-oom"],
                 ["memory", "--memory-margin", "10GiB"], ["breakdown", "--memory", "--memory-margin", "10"]):
        result = cli("plot", args[0], path, *args[1:], "-o", tmp_path / f"{args[0]}.png", "--force")
        assert result.exit_code == 0, (args, result.output)
    one_line_error(cli("plot", "heatmap", path, "--x", "plan", "--y", "plan", "--memory-margin", "8TiB", "-o",
                       tmp_path / "h.png"), "--memory-margin: 8192 GiB (8TiB) is not below the HBM of 79.1 GiB")


def test_the_fit_options_refuse_a_result_of_another_memory_model(synthetic, tmp_path):
    """A MAD-Max result's fit is its 3 x weights rule: --include-oom and --memory-margin are one line there."""
    for option in (["--include-oom"], ["--memory-margin", "8"]):
        one_line_error(cli("plot", "scaling", synthetic, "--x", "num_nodes", "--sel", "global_batch=2048", "--hue",
                           "plan", *option, "-o", tmp_path / "s.png"),
                       f"{synthetic}: {option[0]}: applies to real-world training results")


def test_a_serving_frontier_over_ttft_keeps_the_fastest_first_tokens(serving_grid, tmp_path):
    """`plot pareto SEARCH.nc --x ttft` took the frontier max-max, the slowest first tokens, and --x-dir min was
    ignored on the serving path. The direction now comes from the variable (ttft: lower is better) or --x-dir;
    the frontier is the non-dominated set of the answers (status ok, fitting), checked by pareto_mask here."""
    import numpy as np

    from fastmodel.plot.pareto import pareto_mask
    from fastmodel.plot.serving import serving_pareto

    fig, ax = serving_pareto(serving_grid, curve="device", x="ttft")
    part = serving_grid.sel(device="H100")
    ok = (part.status == 0) & (part.fits_memory > 0)
    xs, ys = part.ttft.where(ok).values.ravel(), part.output_tokens_per_s_per_gpu.where(ok).values.ravel()
    mask = pareto_mask(xs, ys, "min", "max")
    assert sorted(ax.frontiers["H100"][0]) == sorted(xs[mask])
    assert ax.get_xlabel() == "ttft (lower is better) [s]"
    forced = serving_pareto(serving_grid, curve="device", x="ttft", x_dir="max")[1]
    assert sorted(forced.frontiers["H100"][0]) == sorted(xs[pareto_mask(xs, ys, "max", "max")])
    assert not np.array_equal(sorted(forced.frontiers["H100"][0]), sorted(xs[mask]))


def test_the_serving_search_walk(serving_grid, tmp_path):
    """serve --search and plot pareto as a hurried user: `--ttft 2 s` unquoted left 's' as RECORDS and said "give
    RECORDS or --model, not both"; `--engine ''` (or ',') ran the default engine without its note; `--label` on a
    serving frontier was ignored. Each is one line now."""
    one_line_error(cli("serve", "--search", "-m", "llama3.1-8b", "--ttft", "2", "s", "--tpot", "50ms"),
                   "(RECORDS is 's': a unit a space split from its number? write --ttft 2s, or quote it: --ttft '2 s')")
    one_line_error(cli("serve", "-m", "llama3.1-8b", "absent.jsonl"), "(RECORDS is 'absent.jsonl', which is no file)")
    for given in ("", ","):
        one_line_error(cli("serve", "--search", "-m", "llama3.1-8b", "--ttft", "2s", "--tpot", "50ms", "--engine",
                           given), f"--engine {given!r}: no engine named")
    from fastmodel.io.aliases import without_aliases

    path = tmp_path / "serve.nc"
    without_aliases(serving_grid).to_netcdf(path, engine="scipy")
    one_line_error(cli("plot", "pareto", path, "--label", "tp", "-o", tmp_path / "p.png"),
                   "--label: the serving frontier labels each point")
    assert not (tmp_path / "p.png").exists()


def test_a_serving_frontier_with_no_answer_says_why(serving_grid):
    """A search where nothing fits (llama3.1-405b on one GPU) said only "no point of the sweep is legal"; the line
    now ends with the count and reasons: on the A100 every point is no_fp8 (2 tp x 2 batch sizes = 4)."""
    from fastmodel.plot.data import PlotError
    from fastmodel.plot.serving import serving_pareto

    with pytest.raises(PlotError, match=r"for a tp frontier: left out 4 of 4 points: 4 no_fp8$"):
        serving_pareto(serving_grid, curve="tp", sel={"device": "A100"})


def test_search_says_what_a_weight_only_precision_means_as_serve_does():
    search = ("serve", "--search", "-m", "llama3.1-8b", "--ttft", "2s", "--tpot", "50ms", "--gpus", "1",
              "--search-concurrency", "2")
    fp4 = cli(*search, "-d", "H100", "--search-precision", "fp4")
    assert fp4.exit_code == 0 and fp4.output.count("fp4 on H100 (no FP4 tensor cores): weight-only") == 1
    fp8 = cli(*search, "-d", "A100", "--search-precision", "fp8", "--engine", "vllm")
    assert fp8.exit_code == 0 and "fp8 on A100 (no FP8 tensor cores): weight-only" in fp8.output
    native = cli(*search, "-d", "H100", "--search-precision", "fp8")
    assert native.exit_code == 0 and "weight-only" not in native.output


def test_search_refuses_the_one_configuration_precisions_it_would_ignore():
    """--search sweeps --search-precision with each precision's default KV cache (FP8 with fp8, fp4 or mxfp4
    weights: it said "fp8 or fp4", without mxfp4); --precision and --kv-precision were silently ignored there."""
    search = ("serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "2s", "--tpot", "50ms", "--gpus",
              "1", "--search-concurrency", "2")
    for given in (["--kv-precision", "bf16"], ["--precision", "fp8"]):
        one_line_error(cli(*search, *given), "--search sweeps --search-precision",
                       "(FP8 with fp8, fp4 or mxfp4 weights)")     # serve.precisions.FP8_KV_DEFAULT, mxfp4 included
    assert cli(*search).exit_code == 0
