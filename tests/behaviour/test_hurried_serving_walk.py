"""The hurried user's walk through serving sweep files, serving validation, figures of serving results and
calibration on tiny inputs (session 2026-12-06g): each test is a case that was silent or wrong before."""

import os

import pytest

from tests.suite_fixtures import cli, one_line_error

SERVE_SWEEP = 'model = "llama3.1-70b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\ntp = [4]\n'


def _sweep(tmp_path, axes: str):
    (tmp_path / "s.toml").write_text(SERVE_SWEEP + axes)
    return cli("sweep", tmp_path / "s.toml", "-o", tmp_path / "s.nc")


@pytest.mark.parametrize("axes, field, reason", [
    # the task's spec_acceptance default, 0, rejected every draft: a slower TPOT than without them, silently
    ("spec_tokens = [0, 3]\nconcurrency = [8]\n", "axes.spec_tokens", "give spec_acceptance too"),
    # a column's bound named the column, not the axis it came from
    ("kv_cache_mem_fraction = [0]\n", "axes.kv_cache_mem_fraction", "0 is outside [0.01, 1]"),
    # 'did you mean engine_nvidia_only?': the engine is the task's field, one per sweep
    ('engine = ["vllm", "trtllm"]\n', "axes.engine", "not an axis: the serving task's engine field"),
])
def test_a_serving_sweep_refuses_what_it_would_ignore_in_one_line(tmp_path, axes, field, reason):
    one_line_error(_sweep(tmp_path, axes), f"s.toml: {field}: ", reason)
    assert not (tmp_path / "s.nc").exists()


@pytest.mark.parametrize("load", ["concurrency = [8]\n", "", "batch_size = [8]\n"])
def test_a_serving_sweep_with_drafts_their_acceptance_and_a_load_runs(tmp_path, load):
    """The legal form of the cases above, at a concurrency, serve-chat's static batch (whose TPOT was the same
    with and without the drafts, unmodelled, then refused) and a static-batch axis: the drafts at acceptance 0.7
    shorten TPOT, at 0 lengthen it (each draft is verified and rejected: docs/model_serving.md S18)."""
    import xarray as xr

    result = _sweep(tmp_path, "spec_tokens = [0, 3]\nspec_acceptance = [0.0, 0.7]\n" + load)
    assert result.exit_code == 0, result.output
    with xr.open_dataset(tmp_path / "s.nc") as ds:
        tpot = ds.tpot.squeeze()
        off = float(tpot.sel(spec_tokens=0, spec_acceptance=0.7))
        assert float(tpot.sel(spec_tokens=3, spec_acceptance=0.7)) < off
        assert float(tpot.sel(spec_tokens=3, spec_acceptance=0.0)) > off
        assert float(tpot.sel(spec_tokens=0, spec_acceptance=0.0)) == off


def test_a_serving_task_with_drafts_and_no_acceptance_is_named(tmp_path):
    """A task file's spec_tokens is named as the task's field."""
    (tmp_path / "t.toml").write_text('name = "t"\nkind = "serve"\ninput_len = 128\noutput_len = 16\n'
                                     'concurrency = 4\nspec_tokens = 2\n')
    (tmp_path / "s.toml").write_text(SERVE_SWEEP.replace('"serve-chat"', '"t.toml"'))
    one_line_error(cli("sweep", tmp_path / "s.toml", "-o", tmp_path / "s.nc"),
                   "s.toml: task.spec_tokens: give spec_acceptance too")


def _serving_records(tmp_path, *measured):
    """serve_dev_load.jsonl's first record once per ``measured`` block, ids r0, r1, ..."""
    import json

    from tests.suite_fixtures import data_lines

    base = json.loads(data_lines("serve_dev_load.jsonl", 1)[0])
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({**base, "id": f"r{i}", "measured": m}) + "\n" for i, m in enumerate(measured)))
    return base["measured"], path


def test_validate_names_a_serving_measured_block_it_cannot_score(tmp_path):
    """A measured block with none of ttft_s, tpot_s, output_tokens_per_s (``{}``, a per-GPU throughput) was left out
    of every table without a word, and ``tpot`` beside ``ttft_s`` was dropped silently: the first is skipped by
    name (as a run record without step_time_s is), the second is a warning; the ``naive`` column of the
    throughput table, which has no baseline, reads '-' (it read 'nan%')."""
    from tests.suite_fixtures import data_lines

    real = _serving_records(tmp_path, {})[0]
    blocks = [{"ttft_s": real["ttft_s"], "tpot_s": real["tpot_s"]}, {"ttft_s": real["ttft_s"], "tpot": 0.01},
              {}, {"output_tokens_per_s_per_gpu": 900.0}, {"output_tokens_per_s": 900.0}]
    _, path = _serving_records(tmp_path, *blocks)
    result = cli("validate", path)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"warning: {path}:2: measured.tpot: not read (did you mean 'tpot_s'?)" in lines
    assert f"skipped: {path}:3: measured: none of ttft_s, tpot_s, output_tokens_per_s" in lines
    assert f"skipped: {path}:4: measured: none of ttft_s, tpot_s, output_tokens_per_s; has " \
           "'output_tokens_per_s_per_gpu' (did you mean 'output_tokens_per_s'?)" in lines
    assert "nan%" not in result.output
    all_rows = [line.split() for line in lines if line.startswith("all ")]
    assert [row[1] for row in all_rows] == ["2", "1", "1"]      # ttft_s by r0, r1; tpot_s by r0; throughput by r4
    assert all_rows[2][-1] == "-"
    one_line_error(cli("validate", _serving_records(tmp_path, {"tpot": 0.01})[1]),
                   "no serving record carries measured", "measured: none of", "'tpot' (did you mean 'tpot_s'?)")
    # a run record among serving records stays refused (a miss), not skipped for its step_time_s
    _, path = _serving_records(tmp_path, blocks[0])
    path.write_text(path.read_text() + data_lines("runs_dev.jsonl", 1)[0] + "\n")
    result = cli("validate", path)
    assert f"refused (a miss): {path}:2: record: not a serving record" in result.output, result.output
    assert "skipped" not in result.output


@pytest.fixture(scope="module")
def serving_over_memory(tmp_path_factory):
    """Llama 3.1 70B on H100 (serve-chat, BF16), tp 2, 4 x batch 1, 1024: both fit at batch 1, neither at 1024
    (the sweep's own count: 2 of 4 over memory), every point status ok. (tp 1, about 131 GiB of weights, is no
    longer in it: no KV room for one request, no_kv_room since mend18, a static batch as the load modes.)"""
    folder = tmp_path_factory.mktemp("serving")
    (folder / "s.toml").write_text(SERVE_SWEEP.replace("tp = [4]", "tp = [2, 4]\nbatch_size = [1, 1024]"))
    result = cli("sweep", folder / "s.toml", "-o", folder / "s.nc")
    assert "2 of 4 configurations legal and feasible (fit in memory), 2 legal but over memory" in result.output, \
        result.output
    return folder / "s.nc"


def test_a_figure_of_a_serving_result_leaves_out_points_over_memory(serving_over_memory, tmp_path):
    """A heatmap or scaling figure of a serving result drew points over HBM as answers and boxed one as the best
    (a 70B model on one H100), while best refused them and the Pareto figure left them out: the serving status has
    no does_not_fit code, so the figure's copy now gets one (as a real-world training result's points over HBM are
    folded); --include-oom draws them, as best --include-oom ranks them."""
    import numpy as np
    import xarray as xr

    from fastmodel.analysis.margin import fit_view
    from fastmodel.plot.data import prepare
    from fastmodel.registry import status_names

    with xr.open_dataset(serving_over_memory) as ds:
        ds = ds.load()
    fits = ds.fits_memory.squeeze().transpose("tp", "batch_size").values.astype(bool)
    assert (ds.status == 0).all() and fits.sum() == 2
    da, status = prepare(ds, "tpot", keep=("tp", "batch_size"))
    names = status_names(status)
    codes = status.transpose("tp", "batch_size").values
    assert names[-1] == "does_not_fit" and list(status.attrs["flag_values"]) == list(range(len(names)))
    assert ((codes == 0) == fits).all() and (codes[~fits] == names.index("does_not_fit")).all()
    assert "does_not_fit" not in status_names(ds.status)           # the result itself is left as it was
    _, status = prepare(fit_view(ds, include_oom=True), "tpot", keep=("tp", "batch_size"))
    assert (status == 0).all()
    assert np.isfinite(da.where(status == 0)).all()
    result = cli("plot", "heatmap", serving_over_memory, "--x", "batch_size", "--y", "tp", "--var", "tpot",
                 "-o", tmp_path / "h.png")
    assert result.exit_code == 0, result.output
    result = cli("plot", "pareto", serving_over_memory, "--include-oom", "-o", tmp_path / "p.png")
    assert result.exit_code == 0 and "left out" not in result.output, result.output
    one_line_error(cli("plot", "heatmap", serving_over_memory, "--x", "batch_size", "--y", "tp", "--var", "tpot",
                       "--memory-margin", "2", "-o", tmp_path / "m.png"), MISSING_HBM)


#: a serving result's memory margin: it records memory_per_device but not the HBM capacity (no hbm_bytes attr)
MISSING_HBM = ("--memory-margin: this serving result records memory_per_device but not its device's HBM capacity "
               "(no hbm_bytes attribute)")


@pytest.mark.parametrize("command, options", [
    (("best",), ("--by", "tpot")),
    (("plot", "pareto"), ()),
    (("plot", "scaling"), ("--x", "tp", "--var", "tpot")),
])
def test_a_memory_margin_on_a_serving_result_names_what_it_lacks(serving_over_memory, tmp_path, command, options):
    """--memory-margin on a serving result said 'applies to real-world training results' (plots) or 're-run the
    sweep with this version' (best; a re-run records no more): a serving sweep's attrs hold no hbm_bytes, so
    HBM - margin has no HBM; every command names what is missing and the filter that works on what it has."""
    import xarray as xr

    with xr.open_dataset(serving_over_memory) as ds:
        assert "memory_per_device" in ds and "hbm_bytes" not in ds.attrs
    where = () if command[0] == "best" else ("-o", tmp_path / "f.png")
    result = cli(*command, serving_over_memory, *options, "--memory-margin", "2", *where)
    one_line_error(result, MISSING_HBM, "--where memory_per_device<BYTES")


def test_calibrate_refuses_a_run_given_twice(tmp_path):
    """A runs file concatenated with itself (cat a.jsonl a.jsonl): the copy counted as a second run toward the
    two-runs-per-parameter rule, and the 2-fold cross-validation put one copy in each fold, so the report called
    a fit on the run itself 'cross-validated' (stack compute_eff fitted on one run, after 0.0%). Now one line
    naming both lines; a record without an id, given twice, likewise; two different runs without ids are fine."""
    import json

    import fastmodel as fm
    from tests.suite_fixtures import data_lines

    line = data_lines("runs_dev.jsonl", 1)[0]
    path = tmp_path / "runs.jsonl"
    path.write_text(line + "\n" + line + "\n")
    run_id = json.loads(line)["id"]
    one_line_error(cli("calibrate", path, "-o", tmp_path / "cal.toml"),
                   f"{path}:2: id: '{run_id}' is the id of {path}:1 too; a run is fitted once")
    assert not (tmp_path / "cal.toml").exists()
    run = {k: v for k, v in json.loads(line).items() if k != "id"}
    with pytest.raises(fm.FastmodelError, match=r"^runs\[1\]: the same record \(no id\) as runs\[0\] too"):
        fm.calibrate([run, run], folds=0)
    other = {**run, "plan": {**run["plan"], "micro_batch": 2, "global_batch": 4, "grad_accum": 2}}
    assert fm.calibrate([run, other], folds=0) is not None


SEARCH = ("serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "2s", "--tpot", "50ms", "--gpus", "1",
          "--search-concurrency", "2")


@pytest.mark.parametrize("given, named", [
    (["--json"], "--json"),                        # printed the text table: a pipe into a JSON reader broke
    (["--tp", "2"], "--tp"), (["--pp", "2"], "--pp"),
    (["--batch-size", "4"], "--batch-size"), (["--concurrency", "4"], "--concurrency"),
    (["--max-throughput"], "--max-throughput"), (["--instances", "2"], "--instances"),
    (["--kv-cache-mem-fraction", "0.5"], "--kv-cache-mem-fraction"), (["--moe-tp", "2"], "--moe-tp"),
    (["--tp", "1", "--json"], "--tp, --json"),     # a value equal to the default is still a choice it ignores
])
def test_search_refuses_the_one_configuration_options_it_would_ignore(given, named):
    """Each of these ran the very same search, its frontier and best configuration unchanged, without a word."""
    one_line_error(cli(*SEARCH, *given), f"error: {named}: not read by --search")


def test_gpus_without_search_is_refused_as_the_other_search_options_are():
    """--gpus has a default (8), so a plain serve with --gpus 4 ran one configuration on tp 1 silently."""
    run = cli("serve", "-m", "llama3.1-8b", "-d", "H100", "--batch-size", "1", "--gpus", "4")
    one_line_error(run, "error: --gpus given without --search", "apply to --search only")
    assert "--ttft" not in run.output       # the flag given, not all six search options
    assert cli(*SEARCH).exit_code == 0


@pytest.mark.parametrize("axes, message", [
    ({"plan": None}, "axes.plan: None; give a list"),                       # was TypeError: not iterable
    ({1: [1]}, "axes: an axis name is a string, e.g. 'num_nodes' (got 1)"),   # was AttributeError: .lower
    ({"plan": ["tp2"], "num_nodes": {1, 2}}, "axes.num_nodes: a set, which has no order"),
])
def test_python_sweep_axes_of_the_wrong_kind_are_one_line(axes, message):
    import fastmodel as fm

    with pytest.raises(fm.FastmodelError) as error:
        fm.sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes=axes)
    assert str(error.value).startswith(message) and "\n" not in str(error.value), str(error.value)


def test_python_sweep_reads_a_generator_axis_as_its_list():
    """A generator (``(n for n in ...)``, ``map``) was refused as 'every value must be a whole number of nodes
    (got <generator ...>)'; it is the list it yields, as a range or an array is."""
    import fastmodel as fm

    kw = dict(model="llama3.1-8b", system="dgx-h100", task="llm-pretrain")
    made = fm.sweep(**kw, axes={"plan": ["tp2"], "num_nodes": (n for n in (1, 2))})
    listed = fm.sweep(**kw, axes={"plan": ["tp2"], "num_nodes": [1, 2]})
    assert list(made.num_nodes.values) == [1, 2]
    assert (made.step_time == listed.step_time).all()


def test_serving_evaluate_names_the_load_keyword_a_typo_meant():
    """serve.api.evaluate(concurency=3) said 'did you mean intra_latency?': concurrency and max_throughput are
    keywords of columns(), not columns, and were not among the choices."""
    from fastmodel.errors import SpecError
    from fastmodel.serve.api import evaluate

    for typo, meant in (("concurency", "concurrency"), ("max_througput", "max_throughput"),
                        ("kv_precison", "kv_precision")):
        with pytest.raises(SpecError, match=rf"^{typo}: unknown column \(did you mean '{meant}'\?\)$"):
            evaluate("llama3.1-70b", "H100", tp=4, **{typo: 1})


def test_a_serving_task_takes_the_precisions_its_axis_takes(tmp_path):
    """A task's precision = "fp4" (or "mxfp4") was refused ("Input should be 'bf16', ... (did you mean 'fp8'?)")
    while a precision axis, serve --precision and records take it; the task's value now gives the axis's result."""
    import xarray as xr

    (tmp_path / "t.toml").write_text('name = "t"\nkind = "serve"\ninput_len = 128\noutput_len = 16\n'
                                     'concurrency = 4\nprecision = "fp4"\n')
    sweep = 'model = "llama3.1-70b"\nsystem = "B200"\ntask = "t.toml"\n[axes]\ntp = [4]\n'
    tpot = []
    for name, axes in (("task", ""), ("axis", 'precision = ["fp4"]\n')):
        (tmp_path / f"{name}.toml").write_text(sweep + axes)
        result = cli("sweep", tmp_path / f"{name}.toml", "-o", tmp_path / f"{name}.nc")
        assert result.exit_code == 0, result.output
        with xr.open_dataset(tmp_path / f"{name}.nc") as ds:
            tpot.append(float(ds.tpot.values.ravel()[0]))
    assert tpot[0] == tpot[1]


def test_calibrate_prior_cv_on_too_few_runs_says_it_fell_back(tmp_path):
    """--prior cv on one run printed 'pull toward physical values: 1, chosen by 3-fold cross-validation': below 2 x 3
    runs no fold is scored and the pull is cv's fallback, 1; the report (and the file's objective) now say so."""
    from tests.suite_fixtures import data_lines

    path = tmp_path / "runs.jsonl"
    path.write_text(data_lines("runs_dev.jsonl", 1)[0] + "\n")
    result = cli("calibrate", path, "--prior", "cv", "-k", "0")
    assert result.exit_code == 0, result.output
    assert "pull toward physical values: 1, cv's fallback below 6 runs, too few for 3-fold cross-validation" \
        in result.output
    assert "chosen by 3-fold" not in result.output


def test_best_names_the_values_of_a_dimension_a_filter_misses(serving_over_memory):
    """best --where tp=3 on a grid of tp 1, 2, 4 said 'no configuration passes the filters', as if the other
    filters had removed everything; it names the dimension's values, as a text coordinate's miss does."""
    one_line_error(cli("best", serving_over_memory, "--by", "tpot", "--where", "tp=3"),
                   "error: --where: tp=3 is not in the data; values: 2, 4")
    assert cli("best", serving_over_memory, "--by", "tpot", "--where", "tp=4.0").exit_code == 0
    one_line_error(cli("best", serving_over_memory, "--by", "tpot", "--where", "tp=4", "--where", "tpot<1ms"),
                   "no configuration passes the filters")


def test_a_time_breakdown_of_a_serving_result_says_what_to_plot(serving_over_memory, tmp_path):
    """plot breakdown of a serving result listed MAD-Max's missing step components (exposed_comm, time_emb, ...);
    it says a breakdown draws training steps and names the serving variables to plot, as --memory does."""
    one_line_error(cli("plot", "breakdown", serving_over_memory, "--sel", "tp=4", "-o", tmp_path / "b.png"),
                   "breakdown draws training steps", "prefill_gemm ... decode_comm: plot one with --var NAME")


@pytest.mark.parametrize("name, value", [("FASTMODEL_JIT", "false"), ("FASTMODEL_JIT", " 0"),
                                         ("FASTMODEL_COMPILE_NOTE", "yes")])
def test_a_fastmodel_setting_the_kernels_would_misread_is_one_line(monkeypatch, name, value):
    """kernels/jit.py reads FASTMODEL_JIT == "0" and FASTMODEL_COMPILE_NOTE in ("0", "1"): FASTMODEL_JIT=false ran
    the compiled kernels and FASTMODEL_COMPILE_NOTE=yes the terminal test, without a word."""
    monkeypatch.setenv(name, value)
    one_line_error(cli("specs", "list", "model"), f"error: {name}={value!r}: give 0 (", "or unset it")
    monkeypatch.setenv(name, "0")
    assert cli("specs", "list", "model").exit_code == 0


def test_a_scaling_figure_with_nothing_to_draw_is_one_line(serving_over_memory, tmp_path):
    """plot scaling of a selection whose every point is left out (batch 1024: over memory at both tp) wrote an empty
    axes, y from -0.04 to 0.04, with 'left out 2 of 2 points': it is refused in one line naming why, and with
    --include-oom the points over memory are drawn."""
    args = ("plot", "scaling", serving_over_memory, "--x", "tp", "--var", "tpot", "--sel", "batch_size=1024")
    one_line_error(cli(*args, "-o", tmp_path / "s.png"),
                   "tpot: no point of this selection has a result to draw (left out 2 of 2 points: 2 does_not_fit); "
                   "--include-oom draws the points over memory")
    assert not (tmp_path / "s.png").exists()
    assert cli(*args, "--include-oom", "-o", tmp_path / "s.png").exit_code == 0


def test_the_python_api_refuses_a_fastmodel_jit_it_would_misread():
    """The API reads FASTMODEL_JIT where every kernel loads (kernels/jit.py): ``false`` ran the compiled kernels
    without a word from the Python API, which the CLI check does not reach; now the first kernel import refuses it."""
    import subprocess
    import sys

    code = "import fastmodel.kernels.jit"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))     # this tree's fastmodel
    env = {**os.environ, "FASTMODEL_JIT": "false", "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == ("ValueError: FASTMODEL_JIT='false': give 0 (kernels "
                                                    "interpreted) or 1 (compiled, the default), or unset it")
    env["FASTMODEL_JIT"] = "0"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0
