"""The hurried user's walk of 2026-12-07 (docs/usage.md "The hurried user's walk"): filters that keep nothing,
Ctrl-C after a command's output is whole. Each is one line and a documented exit code, never a crash; no test
here compiles a kernel (synthetic datasets, interpreted subprocesses)."""

import numpy as np
import pytest
import xarray as xr

from fastmodel.analysis.best import where_mask
from fastmodel.errors import SweepError
from tests.suite_fixtures import cli, one_line_error


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """A two-point result written as a sweep's .nc: step times 3 s and 5 s, 40 GB and 60 GB per device."""
    ds = xr.Dataset({"step_time": ("num_nodes", [3.0, 5.0], {"units": "s"}),
                     "memory_per_device": ("num_nodes", [40e9, 60e9], {"units": "bytes"}),
                     "status": ("num_nodes", np.array([0, 0], dtype=np.int8), {"flag_meanings": "ok illegal"})},
                    coords={"num_nodes": [1, 2]})
    path = tmp_path_factory.mktemp("best") / "r.nc"
    ds.to_netcdf(path, engine="scipy")
    return ds, path


def test_a_bare_number_on_a_variable_in_bytes_that_keeps_nothing_says_its_unit(result):
    """``best --where memory_per_device<80`` (meaning 80 GB) compared with 80 bytes and said only "no configuration
    passes the filters"; ``plot pareto`` said "no point has finite step_time and memory_per_device". The filter that
    keeps nothing is named, with the unit a bare number was read in."""
    ds, path = result
    one_line_error(cli("best", path, "--by", "step_time", "--where", "memory_per_device<80"),
                   "error: no configuration passes the filters: memory_per_device<80 keeps none (memory_per_device "
                   "is in bytes, so a bare 80 is 80 bytes; give a unit, e.g. 80GiB)")
    assert cli("best", path, "--by", "step_time", "--where", "memory_per_device<80GB").exit_code == 0
    with pytest.raises(SweepError, match=r"step_time>4000 keeps none \(step_time is in seconds, so a bare 4000 is "
                                         r"4000 seconds; give a unit, e.g. 4000ms\)$"):
        where_mask(ds, ["step_time>4000"])     # 4000 ms keeps the 5 s point
    with pytest.raises(SweepError, match=r"passes the filters: step_time<2 keeps none$"):
        where_mask(ds, ["step_time<2"])        # 2 ms keeps none too: no unit hint (review17 F4)
    with pytest.raises(SweepError, match=r"passes the filters: step_time<2s keeps none$"):
        where_mask(ds, ["step_time<2s"])       # a number with its unit: nothing to add
    with pytest.raises(SweepError, match=r"each keeps some points, but no point passes all of num_nodes=1, "
                                         r"step_time>4$"):
        where_mask(ds, ["num_nodes=1", "step_time>4"])
    assert where_mask(ds, ["step_time>4"]).values.tolist() == [False, True]


def test_a_pareto_figure_names_the_filter_that_keeps_nothing(result, tmp_path):
    _, path = result
    figure = tmp_path / "p.png"
    one_line_error(cli("plot", "pareto", path, "--x", "step_time", "--y", "memory_per_device", "--where",
                       "memory_per_device<80", "-o", figure), "memory_per_device<80 keeps none (memory_per_device is in bytes")
    assert not figure.exists()


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_while_python_tears_down_after_the_command_changes_nothing(signal_name):
    """Ctrl-C (or ``timeout``'s SIGTERM) in the 0.1-0.3 s after ``done: ...`` / ``wrote out.csv``, while Python
    tears down, killed the process by the signal without a line (exit 130 in the shell, 124 under ``timeout``):
    the output was whole but the status said otherwise. The console entry ignores both once the command has
    ended, so the status is the command's. Here the signal arrives in an atexit callback (interpreted, no kernel)."""
    import os
    import subprocess
    import sys

    code = ("import atexit, os, signal, sys\n"
            "sys.argv = ['fastmodel', 'specs', 'list', 'device']\n"
            "from fastmodel.cli import entry\n"
            f"atexit.register(lambda: os.kill(os.getpid(), signal.{signal_name}))\n"
            "entry()\n")
    env = dict(os.environ, FASTMODEL_JIT="0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr)
    assert "h100" in done.stdout.lower()


def test_ctrl_c_after_an_output_is_written_says_it_is_whole(tmp_path, capsys):
    """Ctrl-C after ``validate -o rows.csv`` renamed its file into place, while it printed its tables (or after a
    sweep's .zarr store got its last unit, during the summary), said a bare ``interrupted`` (exit 130): whole or
    not written, the user could not tell. The line names what was written whole beside what was not."""
    from fastmodel.cli.common import friendly
    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import check_output, claim_output

    table, figure = tmp_path / "rows.csv", tmp_path / "fig.png"

    @friendly
    def command():
        with claim_output(str(table), "csv", what="table"), atomic_write(table) as handle:
            handle.write("a,b\n1,2\n")
        check_output(str(figure), "png", what="figure")
        raise KeyboardInterrupt           # Ctrl-C while the command prints its summary

    with pytest.raises(SystemExit) as stop:
        command()
    assert stop.value.code == 130
    assert capsys.readouterr().err == f"interrupted: {table} written whole; {figure} not written\n"
    assert table.read_text() == "a,b\n1,2\n" and not figure.exists()


def test_ctrl_c_during_the_summary_of_a_zarr_sweep_says_the_store_is_whole(tmp_path, monkeypatch):
    """The .zarr store is complete once its last unit is written; a Ctrl-C during the summary line that follows
    said a bare ``interrupted``, though ``--resume`` had nothing left to do."""
    import fastmodel.cli.sweep as sweep_cli

    (tmp_path / "s.toml").write_text('model = "llama2-70b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                                     '[axes]\nnum_nodes = [2]\nplan = ["fsdp/ddp"]\n')

    def interrupted_summary(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_cli, "_done", interrupted_summary)
    store = tmp_path / "o.zarr"
    result = cli("sweep", tmp_path / "s.toml", "-o", store)
    assert result.exit_code == 130
    assert result.output.splitlines()[-1] == f"interrupted: {store} written whole", result.output
    assert result.output.startswith("1 configuration in 1 unit (")        # was "1 configurations"


def test_a_batch_case_with_a_misspelt_key_is_not_read_as_a_run_record(tmp_path):
    """``{"model": "llama2-70b", "system": "dc-a", "task": ..., "plan": "tp,ddp/mp", "nodes": 64}`` holds every
    block name of a run record (model, system, plan), so its misspelt ``num_nodes`` was reported as "model: a run
    record's model block must be an object (got 'llama2-70b')"; it is a case (it names a task), and the
    error names the key and the nearest one. A record whose plan is text still gets the record's reason."""
    import json

    from fastmodel.spec.detect import misshapen_record

    case = {"case": "c", "model": "llama2-70b", "system": "dc-a", "nodes": 64, "task": "llm-pretrain",
            "plan": "tp,ddp/mp"}
    assert misshapen_record(case) is None
    assert misshapen_record({"id": "r", "model": {}, "system": {}, "plan": "tp8", "measured": {}}) == \
        "plan: a run record's plan block must be an object (got 'tp8')"
    lines = tmp_path / "c.jsonl"
    lines.write_text(json.dumps(case) + "\n" + json.dumps({**case, "model": "llama3-70b", "system": "dgx-h100",
                                                           "plan": "tp8.pp4"}) + "\n")
    out = tmp_path / "o.jsonl"
    assert cli("batch", lines, "-o", out).exit_code == 3
    assert [json.loads(row)["status"] for row in out.read_text().splitlines()] == \
        ["error: unknown key 'nodes' (did you mean 'num_nodes'?)"] * 2


def test_resuming_another_engines_store_says_another_sweep_not_damaged(tmp_path):
    """``sweep llama2_70b_plans.toml -o lm_store.zarr --resume`` (the wrong sweep file for a complete real-world
    store) said "the sweep store is damaged (KeyError: 'throughput' not found ...); pass --force": the store was
    whole, and --force would have replaced it. The definition is compared before the variables are looked up."""
    madmax = tmp_path / "m.toml"
    madmax.write_text('model = "llama2-70b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                      '[axes]\nnum_nodes = [2]\nplan = ["fsdp/ddp"]\n')
    serving = tmp_path / "s.toml"
    serving.write_text('model = "llama3.1-8b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\ntp = [1]\n')
    store = tmp_path / "o.zarr"
    assert cli("sweep", serving, "-o", store).exit_code == 0
    one_line_error(cli("sweep", madmax, "-o", store, "--resume"),
                   f"error: {store}: the store was made by a different sweep definition; cannot resume it")


def test_a_record_of_the_other_kind_in_validate_is_a_miss_that_says_where_it_goes(tmp_path):
    """A file of training run records with a serving record appended (or the reverse) scores the first record's
    kind and counts the other as a miss; its reason said "serving records go to fastmodel serve, validate or batch"
    -- inside validate -- and the reverse only "not a serving record". Each now says it belongs in a file of its
    own and names the commands that read it."""
    from tests.suite_fixtures import data_lines

    runs, serving = data_lines("runs_dev_small.jsonl", 1), data_lines("serve_dev_load.jsonl", 1)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(runs + serving) + "\n")
    result = cli("validate", mixed)
    assert result.exit_code == 0, result.output
    assert (f"refused (a miss): {mixed}:2: record: a serving record (SERVE_RUNS.md) where training run records "
            "(RUNS.md) are read; serving records go to fastmodel serve, validate or batch, in a file of their own "
            "(validate scores the first record's kind)") in result.output
    mixed.write_text("\n".join(serving + runs) + "\n")
    result = cli("validate", mixed)
    assert result.exit_code == 0, result.output
    assert (f"refused (a miss): {mixed}:2: record: not a serving record but a training run record (RUNS.md); run "
            "records go to fastmodel run, validate, calibrate or batch, in a file of their own") in result.output


def test_vp_unknown_as_a_sweep_axis_says_where_it_goes():
    """``[execution] vp = "unknown"`` (the stack's rule) runs, but ``vp = ["unknown", 2]`` under [axes] said
    "'unknown' is not a number"; it says the value is one for the whole sweep, set in [execution]."""
    from fastmodel import sweep

    with pytest.raises(SweepError, match=r'^axes.vp: "unknown" \(the stack\'s rule\) is one value for the whole '
                                         r'sweep: set vp = "unknown" in \[execution\]'):
        sweep("llama3-70b", "dgx-h100", "llm-pretrain", {"num_nodes": [4], "plan": ["tp8.pp4"], "vp": ["unknown", 2]})


def test_a_real_world_model_on_a_madmax_system_is_not_sent_to_the_madmax_semantics(tmp_path):
    """``run -m llama3-70b -s dc-a`` said the real-world model needs a cluster "or semantics 'madmax'", and
    ``--semantics madmax`` then refused the real-world model; a sweep of a MAD-Max model on a cluster said the same
    of 'madmax' / 'madmax-fixed'. Each says which kind of spec pairs with which, a way that runs."""
    one_line_error(cli("run", "-m", "llama3-70b", "-s", "dc-a", "-t", "llm-pretrain", "--nodes", "4", "-p", "tp8"),
                   "error: dc-a: system.kind: a MAD-Max system; the real-world model (a family = \"lm\" model) needs a "
                   "kind = \"cluster\" spec (e.g. dgx-h100; 'fastmodel specs list system'), and a MAD-Max system a "
                   "MAD-Max model (e.g. llama2-70b)")
    sweep = tmp_path / "s.toml"
    sweep.write_text('model = "llama2-70b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [4]\n')
    result = cli("sweep", sweep, "-o", tmp_path / "s.nc")
    one_line_error(result, "model.family: 'llm' is a MAD-Max model; the real-world model (a kind = \"cluster\" "
                           "system) needs a family = \"lm\" spec", "and a MAD-Max model a MAD-Max system (e.g. dc-a)")
    assert "semantics" not in result.output


def test_the_python_sweeps_plan_axis_reads_all_as_the_sweep_file_does():
    """``fastmodel.sweep(..., {"plan": "al"})`` said "'al' is not a degree like tp8, pp4, ...", and ``"ALL"`` the
    same, where a sweep file's ``plan = "al"`` names 'all' and takes "ALL" as the keyword."""
    from fastmodel import sweep

    with pytest.raises(SweepError, match=r"""^axes.plan: 'al' is no mesh \(did you mean 'all'\?\): "all" or a list"""):
        sweep("llama3-70b", "dgx-h100", "llm-pretrain", {"num_nodes": [4], "plan": "al"})
    assert sweep("llama3-70b", "dgx-h100", "llm-pretrain", {"num_nodes": [4], "plan": " ALL"}).sizes["plan"] > 1


@pytest.mark.parametrize("head, key, said", [
    ('model = "llama3-70b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n', "micro_batch = 2",
     "micro_batch: unknown key: not a top-level key but an execution field, under [execution] or an axis, under "
     "[axes]"),
    ('model = "llama3.1-8b"\nsystem = "H100"\ntask = "serve-chat"\n', 'engine = "vllm"',
     "engine: unknown key: not a top-level key but a field of the serving task, in its file or an inline task "
     "table (task = {name = \"t\", kind = \"serve\", ...})"),
])
def test_a_field_at_the_top_of_a_sweep_file_says_where_it_goes(tmp_path, head, key, said):
    """``micro_batch = 2`` or ``engine = "vllm"`` at the top of a sweep file said "unknown key" and no more (no
    top-level key is near it); it names the table the field belongs to. A misspelt top-level key keeps its
    nearest key."""
    sweep = tmp_path / "s.toml"
    sweep.write_text(f"{head}{key}\n[axes]\ntp = [1]\n")
    one_line_error(cli("sweep", sweep, "-o", tmp_path / "s.nc"), f"error: {sweep}: {said}")
    sweep.write_text(f'{head}descripton = "x"\n[axes]\ntp = [1]\n')
    one_line_error(cli("sweep", sweep, "-o", tmp_path / "s.nc"), "descripton: unknown key (did you mean 'description'?)")


def test_a_serving_sweep_of_fp4_on_hopper_says_it_runs_weight_only(tmp_path):
    """``fastmodel serve --precision fp4 -d H100`` and ``serve --search`` note that FP4 weights run weight-only on
    a GPU without FP4 tensor cores (docs/model_serving.md S12); a sweep of precision = ["fp4", "bf16"] x device =
    ["H100", "B200"] said nothing. It notes it once per such device, on stderr and in the result's notes."""
    import xarray as xr

    sweep, out = tmp_path / "s.toml", tmp_path / "s.nc"
    sweep.write_text('model = "llama3.1-8b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\nprecision = ["fp4", '
                     '"bf16"]\ndevice = ["H100", "B200"]\n')
    result = cli("sweep", sweep, "-o", out)
    assert result.exit_code == 0, result.output
    note = "fp4 on H100 (no FP4 tensor cores): weight-only, dequantised into 16-bit GEMMs"
    assert f"note: {note}\n" in result.output and "on B200" not in result.output
    with xr.open_dataset(out) as ds:
        assert note in ds.attrs["notes"]


def test_ctrl_c_after_the_search_sweep_is_written_does_not_say_it_was_not(tmp_path, monkeypatch):
    """``serve --search -o search.nc`` checks its output, then writes it atomically; a Ctrl-C after the rename,
    while it printed ``wrote search.nc``, said "interrupted: search.nc not written" -- beside the whole file."""
    import click

    echoed = click.echo

    def echo(message=None, *args, **kwargs):
        if str(message).startswith("wrote "):
            raise KeyboardInterrupt
        return echoed(message, *args, **kwargs)

    monkeypatch.setattr(click, "echo", echo)
    out = tmp_path / "search.nc"
    result = cli("serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "2s", "--tpot", "50ms", "--gpus",
                 "1", "--search-precision", "bf16", "--search-concurrency", "2", "-o", out)
    assert result.exit_code == 130
    assert result.output.splitlines()[-1] == f"interrupted: {out} written whole", result.output
    assert out.exists()


def test_a_baseline_plan_illegal_everywhere_shown_is_named_as_such():
    """``plot heatmap ... --relative-to tp8.pp5`` where tp8.pp5 is illegal at every point of the selection said
    "step_time_gain has no finite value ...; is an input it needs missing, e.g. a price, TDP or train_samples for
    cost and energy?"; it names the baseline and asks for one that is legal there."""
    from fastmodel.plot.data import PlotError, prepare

    ds = xr.Dataset({"step_time": (("num_nodes", "plan"), [[2.0, np.nan], [1.0, np.nan]], {"units": "s"})},
                    coords={"num_nodes": [1, 2], "plan": ["tp8.pp4", "tp8.pp5"]})
    with pytest.raises(PlotError, match=r"^--relative-to tp8.pp5: plan=tp8.pp5 has no finite step_time in this "
                                        r"selection \(illegal or infeasible at every point shown\); compare with a "
                                        r"plan that is legal here$"):
        prepare(ds, "step_time", relative_to="tp8.pp5")
    gain, _ = prepare(ds, "step_time", relative_to="tp8.pp4")
    assert float(gain.sel(num_nodes=1, plan="tp8.pp4")) == 1.0


def test_a_jsonl_file_given_to_plot_memory_timeline_names_that_command(tmp_path):
    """``plot memory-timeline -m runs.jsonl`` said "'fastmodel run' takes one record (.json) or spec"."""
    lines = tmp_path / "runs.jsonl"
    lines.write_text('{"id": "a"}\n{"id": "b"}\n')
    one_line_error(cli("plot", "memory-timeline", "-m", lines, "-o", tmp_path / "m.png"),
                   "'fastmodel plot memory-timeline' takes one record (.json) or spec")
    one_line_error(cli("run", "-m", lines), "'fastmodel run' takes one record (.json) or spec")


def test_serve_help_says_a_bare_slo_is_seconds():
    """``--ttft 2000`` (meaning ms) reads as 2000 s with a note; the help said only "e.g. 2s or 500ms"."""
    text = " ".join(cli("serve", "--help").output.split())
    assert "TTFT target, e.g. 2s or 500ms (a number without a unit is seconds)" in text
    assert "TPOT target, e.g. 50ms (a number without a unit is seconds)" in text
