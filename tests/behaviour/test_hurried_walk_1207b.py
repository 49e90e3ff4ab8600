"""The hurried user's second walk of 2026-12-07 (brief "walk": sweeps over fields the lowering reads, the serving
precision axis, ``serve --search``, ``calibrate``, ``plot``, ``validate``, ``batch``, ``specs``, ``best``). Each
case is a defect found on the walk, the message or status it now gives; no test here compiles a kernel at a new
signature (refusals before any evaluation, synthetic datasets, the pure functions the sweep calls)."""

import numpy as np
import pytest

from tests.suite_fixtures import cli, one_line_error

HEAD = 'model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'


def _sweep_file(tmp_path, axes: str, execution: str = ""):
    path = tmp_path / "s.toml"
    path.write_text(HEAD + (f"[execution]\n{execution}\n" if execution else "") + "[axes]\n" + axes + "\n")
    return path


def test_a_model_axis_that_needs_head_dim_names_head_dim(tmp_path):
    """Was ``axes.heads: 24 does not make a valid Llama 3.1 8B: required when hidden (4096) is not a multiple of
    heads (24)``: "required" of no field (the model validator's FieldValueError path was dropped)."""
    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nheads = [32, 24]')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "axes.heads: 24 does not make a valid Llama 3.1 8B: head_dim: required when hidden (4096) is not "
                   "a multiple of heads (24)")
    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nhidden = [4096, 4128]\nheads = [32, 64]')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "hidden = 4128, heads = 64 do not make a valid Llama 3.1 8B: head_dim: required when hidden")


def test_a_node_axis_of_whole_numbers_written_as_floats_or_a_log_range_is_read(tmp_path):
    """Was ``axes.num_nodes: every value must be a positive integer (got 1.0)`` for ``num_nodes = {start = 1,
    stop = 64, num = 7, scale = "log"}`` (a range's values are floats) and for ``[2.0]`` or ``[1e3]``, which
    ``micro_batch`` and the Python API's ``num_nodes`` take; 2.5 is still refused."""
    from fastmodel.sweeps.file import load_sweep_file

    for axis, nodes in (('{start = 1, stop = 64, num = 7, scale = "log"}', [1, 2, 4, 8, 16, 32, 64]),
                        ("[2.0, 1e3]", [2, 1000]), ("[4]", [4])):
        plan = load_sweep_file(str(_sweep_file(tmp_path, f'plan = ["tp8"]\nnum_nodes = {axis}')))
        values = next(a.values for a in plan.axes if a.name == "num_nodes")
        assert values.tolist() == nodes and all(isinstance(v, int) for v in values.tolist()), values
    for axis, shown in (("[1, 2.5]", "2.5"), ('["2"]', "'2'"), ("[0]", "0"), ("[true]", "True")):
        one_line_error(cli("sweep", _sweep_file(tmp_path, f"num_nodes = {axis}"), "-o", tmp_path / "o.nc"),
                       f"axes.num_nodes: every value must be a whole number of nodes >= 1 (got {shown})")


def test_a_time_breakdown_keeps_the_one_dimension_with_several_values(tmp_path):
    """A sweep over one cluster size (num_nodes of one value) and plans: ``plot breakdown r.nc --sel
    global_batch=2048`` was refused with 'fix the others with --sel: num_nodes, plan' (num_nodes has one value to
    fix), where ``--memory`` and ``plot memory`` drop dimensions of size one. The refusal now names only the
    dimensions with several values."""
    from tests.plot_data import synthetic_sweep

    path = tmp_path / "r.nc"
    synthetic_sweep().isel(num_nodes=[2]).to_netcdf(path, engine="scipy")
    result = cli("plot", "breakdown", path, "--sel", "global_batch=2048", "-o", tmp_path / "b.png")
    assert result.exit_code == 0 and (tmp_path / "b.png").exists(), result.output
    one_line_error(cli("plot", "breakdown", path, "-o", tmp_path / "c.png"),
                   "fix the others with --sel: global_batch, plan")


def _commands(command, path=()):
    import click

    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


def test_every_option_of_every_command_says_what_it_is_and_its_default():
    """``fastmodel serve --help`` listed --tp, --pp, --precision, --input-len, --output-len, --kv-cache-mem-fraction
    and --instances with a default and no word; ``sweep --unit-configs`` and ``plans --nodes`` (and the timelines')
    did not say what they are when left out. Every option now has help text; an option left out whose value the
    command decides says so."""
    import click

    from fastmodel.cli import main

    bare = [f"{name} {option.opts[0]}" for name, command in _commands(main) for option in command.params
            if isinstance(option, click.Option) and not (option.help or "").strip()]
    assert not bare, bare
    said = {name: {option.opts[0]: option.help for option in command.params if isinstance(option, click.Option)}
            for name, command in _commands(main)}
    for name, option in (("sweep", "--unit-configs"), ("plans", "--nodes"), ("plot timeline", "--nodes"),
                         ("plot memory-timeline", "--nodes")):
        assert "default" in said[name][option], (name, option, said[name][option])


def test_a_schedule_the_spec_refuses_at_a_vp_of_the_grid_is_a_status_not_another_schedule():
    """A grid crossing pipeline_schedule with vp: ('interleaved', vp 1) was status ok with 1F1B's step time
    (144.753 s, llama3.1-8b tp4.pp4 on 2 DGX H100), ('1f1b' or 'gpipe', vp 2) ok with the interleaved schedule's
    (144.461 s), ('dualpipe', vp 2) and ('zb_h1', vp 2) ok with numbers of schedules that run one stage per rank;
    ``run`` refuses each ('interleaved' needs vp > 1, '1f1b runs one stage per rank; vp > 1 needs an interleaved
    schedule'). They are now ``schedule_not_runnable`` points, the others unchanged; an [execution] schedule
    crossed with a vp axis likewise, and no stated schedule (interleaved exactly where vp > 1) keeps every point."""
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.lm import STATUS_CODES

    schedules = ["1f1b", "interleaved", "gpipe", "zb_h1", "dualpipe"]
    grid = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=2,
                    axes={"plan": ["tp4.pp4"], "pipeline_schedule": schedules, "vp": [1, 2]})
    refused = STATUS_CODES["schedule_not_runnable"]
    status = grid.status.sel(plan="tp4.pp4").transpose("pipeline_schedule", "vp").values.tolist()
    assert status == [[0, refused], [refused, 0], [0, refused], [0, refused], [0, refused]], status
    step = grid.step_time.sel(plan="tp4.pp4")
    assert np.isnan(step.sel(pipeline_schedule="interleaved", vp=1)) and np.isnan(step.sel(pipeline_schedule="1f1b",
                                                                                          vp=2))
    for schedule, vp in (("1f1b", 1), ("interleaved", 2), ("dualpipe", 1)):
        alone = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=2, axes={"plan": ["tp4.pp4"]},
                         execution={"pipeline_schedule": schedule, "vp": vp})
        assert float(step.sel(pipeline_schedule=schedule, vp=vp)) == float(alone.step_time.squeeze()), schedule
    for execution, want in (({"pipeline_schedule": "1f1b"}, [0, refused]),
                            ({"pipeline_schedule": "interleaved", "vp": 2}, [refused, 0]), ({}, [0, 0])):
        grid = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=2, execution=execution,
                        axes={"plan": ["tp4.pp4"], "vp": [1, 2]})
        assert grid.status.squeeze().values.tolist() == want, (execution, grid.status.values)


def test_the_specs_group_names_the_commands_it_has():
    """``fastmodel specs --help`` said 'List, show and describe spec files.'; ``fastmodel specs describe`` is no
    command ('No such command'); the JSON Schema is ``specs schema``. The group's line names its commands."""
    from fastmodel.cli import main

    line = main.commands["specs"].get_short_help_str(limit=200)
    assert "describe" not in line and all(name in line for name in main.commands["specs"].commands), line


def test_a_serving_sweep_reads_unit_strings_on_quantity_axes_as_a_training_sweep_does(tmp_path):
    """``hbm_bytes = ["80GB", "141 GB"]``, ``intra_bw = ["450 GB/s"]`` or ``serve_step_overhead_s = ["2ms"]`` in a
    serving sweep file were refused ('80GB' is not a non-negative number) where a training sweep reads them in SI
    units; a unit of the wrong kind is refused with the quantity's own reason."""
    from fastmodel.sweeps.file import load_sweep_file

    path = tmp_path / "serve.toml"
    head = 'model = "llama3.1-8b"\nsystem = "H200"\ntask = "serve-chat"\n[axes]\ntp = [1]\n'
    for axis, want in (('hbm_bytes = ["80GB", "141 GB"]', [80e9, 141e9]), ('intra_bw = ["450 GB/s", 900e9]',
                                                                          [450e9, 900e9]),
                       ('serve_step_overhead_s = ["2ms"]', [0.002])):
        path.write_text(head + axis + "\n")
        plan = load_sweep_file(str(path))
        values = next(a.values for a in plan.axes if a.name == axis.split(" ")[0])
        assert np.allclose(np.asarray(values, dtype=float), want, rtol=1e-12), (axis, values)
    path.write_text(head + 'hbm_bw = ["4.8 TB"]\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "axes.hbm_bw: unknown unit 'TB' for bytes/s; write e.g. '1555 GB/s' or 1555e9")


def test_an_slo_search_result_holds_no_numbers_at_the_points_it_marks_illegal(tmp_path):
    """``serve --search -o s.nc`` marked attention DP that does not divide the concurrency
    ``attention_dp_not_dividing`` but kept the point's TTFT, TPOT, throughput and ``fits_memory`` true, so ``fastmodel
    best s.nc --by tpot`` ranked such a point first (gpt-oss-120b on H200, fp8, 2 GPUs: tp1 pp1 ep1 attention_dp 2 at
    one request); every other illegal point of every engine (the kernel's, the disaggregated search's) holds NaN and
    fits_memory false. The marked points now hold NaN too; the printed search is unchanged."""
    import xarray as xr

    from fastmodel.registry.serve import SERVE_STATUS

    out = tmp_path / "s.nc"
    result = cli("serve", "--search", "-m", "gpt-oss-120b", "-d", "H200", "--ttft", "1", "--tpot", "0.03", "--gpus",
                 "2", "--search-precision", "fp8", "--search-concurrency", "4", "-o", out)
    assert result.exit_code == 0, result.output
    with xr.open_dataset(out) as ds:
        marked = ds.status.values == SERVE_STATUS["attention_dp_not_dividing"]
        assert marked.any()
        assert np.isnan(ds.tpot.values[marked]).all() and not ds.fits_memory.values[marked].any()
    top = cli("best", out, "--by", "tpot", "--top", "1")
    assert top.exit_code == 0 and "attention_dp_not_dividing" not in top.output, top.output


def test_a_module_list_axis_takes_the_module_names_the_execution_field_takes(tmp_path):
    """``recompute_modules = [["core_attn"], ["core_attn", "mlp"]]`` (the [execution] field's form, docs/usage.md)
    was refused: "['core_attn'] is not a number of bits"; only the column's bit sums (1, 17) were read. A list of
    module names is now that sum (its coordinate), a misspelt module is one line with the nearest name, and the
    sweep equals the one given as bits."""
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.sweeps.file import load_sweep_file

    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nrecompute_modules = [["core_attn"], ["core_attn", "mlp"]]',
                       'recompute = "selective"')
    plan = load_sweep_file(str(path))
    assert next(a.values for a in plan.axes if a.name == "recompute_modules").tolist() == [1, 17]
    execution = {"recompute": "selective"}
    names = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", execution=execution,
                     axes={"plan": ["tp8"], "recompute_modules": [["core_attn"], ["mlp", "core_attn"]]})
    bits = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", execution=execution,
                    axes={"plan": ["tp8"], "recompute_modules": [1, 17]})
    assert np.array_equal(names.step_time.values, bits.step_time.values)
    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nrecompute_modules = [["core_attn", "mpl"]]')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "axes.recompute_modules: unknown module 'mpl' (did you mean 'mlp'?); choose from core_attn, ")


def test_batch_cases_given_to_validate_or_calibrate_say_they_are_batch_cases(tmp_path):
    """Spec lines of ``fastmodel batch`` (model, system, task: tests/data/madmax_cases_dev.jsonl) given to ``validate``
    were refused as 'plan: required block missing', one per line, as if run records had lost their plan, and
    ``calibrate`` stopped on the same words; a serving record there says what it is and where it goes. A line with
    a task and no plan now says it is a batch case and goes to ``fastmodel batch``; ``calibrate`` names each as a
    miss and fits the run record beside them, as validate scores it (review12 mend: one bad line no longer stops
    calibrate)."""
    from tests.suite_fixtures import data_lines

    path = tmp_path / "cases.jsonl"
    # beside a run record (a file of batch cases only is one line: test_hurried_walk_1207e.py)
    path.write_text("\n".join(data_lines("madmax_cases_dev.jsonl", 2) + data_lines("runs_dev.jsonl", 1)) + "\n")
    said = "record: a batch case (model, system and task: a line of fastmodel batch), not a run record (RUNS.md"
    result = cli("validate", path)
    assert result.output.count(said) == 2, result.output
    result = cli("calibrate", path)
    assert result.exit_code == 0 and result.output.count(said) == 2, result.output
    assert "on 1 runs" in result.output


@pytest.mark.parametrize("command, output", [
    (("batch", "{missing}.jsonl", "-o"), "out.jsonl"), (("validate", "{missing}.jsonl", "-o"), "out.csv"),
    (("calibrate", "{missing}.jsonl", "-o"), "out.toml"), (("serve", "{missing}.jsonl", "-o"), "out.jsonl"),
    (("best", "{missing}.nc", "--by", "step_time", "--csv"), "out.csv"),
    (("plot", "heatmap", "{missing}.nc", "--x", "a", "--y", "b", "-o"), "out.png"),
    (("sweep", "{missing}.toml", "-o"), "out.nc")])
def test_a_misspelt_input_is_named_before_an_existing_output(tmp_path, command, output):
    """``fastmodel batch runs.jsnl -o out.jsonl`` with out.jsonl already there said 'out.jsonl exists; pass --force
    to replace it'; with --force it then said the input does not exist. Every command that checks its output
    before any work now names an input file that is not there first."""
    (tmp_path / output).touch()
    missing = tmp_path / "runz"
    args = [part.replace("{missing}", str(missing)) for part in command]
    one_line_error(cli(*args, tmp_path / output), f"{missing}.", "no such file")


@pytest.mark.parametrize("name, what", [("models/llama3.1-8b.toml", "model"), ("systems/dgx-h100.toml", "system"),
                                        ("systems/dc-a.toml", "system"), ("tasks/serve-chat.toml", "task")])
def test_a_spec_file_given_to_sweep_says_it_is_a_spec_not_a_sweep_file(tmp_path, name, what):
    """``fastmodel sweep specs/models/llama3.1-8b.toml -o x.nc`` said 'family: unknown key' (a system file: its
    first key); ``run -m`` of a sweep file already says it is one and where it goes. A file with none of a sweep
    file's keys (model, system, task, axes) now says what spec it is and where it goes."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "specs" / name      # the repository's specs/ (a fresh clone has
    # no fastmodel/specs: that link exists only in worktrees)
    one_line_error(cli("sweep", path, "-o", tmp_path / "x.nc"), f"a {what} spec, not a sweep file",
                   f"fastmodel run --{what} FILE")


@pytest.mark.parametrize("data, said", [("runs_dev.jsonl", "not a sweep file but a run record (RUNS.md); evaluate "
                                                           "it with fastmodel run -m FILE"),
                                        ("serve_dev_load.jsonl", "not a sweep file but a serving record"),
                                        ("madmax_cases_dev.jsonl", "not a sweep file but a batch case")])
def test_a_record_or_case_given_to_sweep_says_what_it_is(tmp_path, data, said):
    """A run record saved as r.json and given to ``fastmodel sweep`` said 'id: unknown key'; a batch case 'case:
    unknown key (did you mean 'task'?)'."""
    from tests.suite_fixtures import data_lines

    path = tmp_path / "r.json"
    path.write_text(data_lines(data, 1)[0])
    one_line_error(cli("sweep", path, "-o", tmp_path / "x.nc"), f"r.json: {said}")


def test_a_json_lines_file_given_to_sweep_points_at_the_commands_that_read_it(tmp_path):
    """``fastmodel sweep runs.jsonl -o x.nc`` said 'invalid TOML: Invalid statement (at line 1, column 1)'; run -m of
    a JSON-lines file already points at batch."""
    from tests.suite_fixtures import data_lines

    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(data_lines("runs_dev.jsonl", 2)) + "\n")
    one_line_error(cli("sweep", path, "-o", tmp_path / "x.nc"), "runs.jsonl: a JSON-lines file, not a sweep file",
                   "fastmodel batch")


def test_specs_show_of_a_name_under_the_wrong_kind_names_its_kind():
    """``fastmodel specs show dgx-h100 --kind model`` said only "no built-in model 'dgx-h100'"."""
    one_line_error(cli("specs", "show", "dgx-h100", "--kind", "model"),
                   "no built-in model 'dgx-h100'; it is a built-in system (--kind system)")
