"""Inputs a hurried user produces: each is one line and exit 2 (or one error status), never a crash."""

import json
import os
import stat

import pytest
from click.testing import CliRunner

import fastmodel
import fastmodel.madmax.spec.loader
from fastmodel.errors import FastmodelError
from fastmodel.io.atomic import atomic_write
from tests.suite_fixtures import cli, data_lines, one_line_error


@pytest.mark.parametrize("plan, text", [("tp0,ddp/mp", "degree 0"), ("tp3,ddp/mp", "does not divide the 128"),
                                        ("tp,ddp128/mp", "implied")])
def test_bad_degrees(plan, text):
    one_line_error(cli("run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain", "--plan", plan), text)


@pytest.mark.parametrize(
    "args, text",
    [
        (["run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp", "--semantics", "madmx"], "did you mean 'madmax'"),
        (["run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp", "--plann", "x"], "--plan"),
        (["run", "-m", "llama2-70b", "-s", "dc-a"], "--task"),
        (["bogus"], "No such command"),
        (["specs", "list", "systems"], "did you mean 'system'"),
        (["run", "-m", "dc-a", "-s", "dc-a", "-t", "llm-pretrain-fsdp"], "'dc-a' is a built-in system"),
        (["run", "-m", "llama2-70b", "-s", "dc-a", "-t", "train-llm"], "task 'train-llm' (did you mean 'llm-pretrain'?)"),
    ],
)
def test_usage_errors_are_one_line(args, text):
    one_line_error(cli(*args), text)


def test_group_without_command_prints_help():
    result = cli("specs")
    assert result.exit_code == 0 and "list" in result.output


def test_plan_error_names_task_source(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\nkind = "pretrain"\nglobal_batch = 2048\nplan = "tp,ddp/mpp"\n')
    one_line_error(cli("run", "-m", "llama2-70b", "-s", "dc-a", "-t", str(path)), f"{path}: task.plan: illegal plan")


def test_non_utf8_and_empty_files(tmp_path):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    one_line_error(cli("run", "-m", str(binary), "-s", "dc-a", "-t", "llm-pretrain-fsdp"), "not UTF-8")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    one_line_error(cli("run", "-m", str(empty), "-s", "dc-a", "-t", "llm-pretrain-fsdp"), "empty")


def test_builtin_name_wins_over_a_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dc-a").write_text("garbage = 1\n")
    assert cli("run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp").exit_code == 0


def test_strict_types():
    base = {"name": "t", "kind": "finetune", "global_batch": 2048}
    for bad in ({"freeze_emb": "yes"}, {"freeze_emb": 1}, {"global_batch": "2048"}, {"global_batch": 2048.0}):
        with pytest.raises(FastmodelError):
            fastmodel.madmax.spec.loader.load_task({**base, **bad})


def test_numpy_integers_are_node_counts():
    import numpy as np

    ds = fastmodel.evaluate("llama-7b", "dc-a", "llm-pretrain-fsdp", num_nodes=np.int64(4))
    assert float(ds.iteration_time) > 0


def test_batch_lines_that_used_to_crash(tmp_path):
    lines = [
        {"case": "plan-int", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": 5},
        {"case": "plan-list", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": ["fsdp", "ddp"]},
        {"case": "sem", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain-fsdp",
         "semantics": {"llm_fsdp_backward": "x"}},
        {"case": "fam", "model": {"family": ["llm"]}, "system": "dc-a", "task": "llm-pretrain-fsdp"},
        {"case": "zero", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp0,ddp/mp"},
        {"case": "ok", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain-fsdp"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join([json.dumps(x).encode() for x in lines] + [b"\xff\xfe", "\ufeff".encode() +
                                json.dumps(lines[-1]).encode()]) + b"\n")
    out = tmp_path / "out.jsonl"
    assert cli("batch", str(src), "-o", str(out)).exit_code == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["status"].startswith("error: ") for r in records] == [True] * 5 + [False, True, False]
    assert records[6]["status"] == "error: line is not UTF-8 text"
    assert all("internal error" not in r["status"] for r in records)


def test_output_paths(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp"}) + "\n")
    one_line_error(cli("batch", str(src), "-o", str(tmp_path / "nodir" / "out.jsonl")), "cannot write")
    # permissions are kept, a symlink stays a symlink, a special file is written, not replaced
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")        # plain text, not JSON lines: another kind, kept even with --force
    one_line_error(cli("batch", str(src), "-o", str(target), "--force"), "not the JSON/JSONL output")
    target.write_text('{"old": 1}\n')
    os.chmod(target, 0o644)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert cli("batch", str(src), "-o", str(link), "--force").exit_code == 0
    assert link.is_symlink() and "iteration_time" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    with atomic_write(os.devnull) as handle:
        handle.write("x")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_overlapped_comm_never_negative():
    from fastmodel.testing import dev_cases

    case = next(c for c in dev_cases("LLM") if c["case"] == "dev-0048-LLM-inference-fsdp+tp-mp")
    ds = fastmodel.evaluate(case["model"], case["system"], case["task"])
    assert float(ds.overlapped_comm) >= 0.0 and float(ds.exposed_comm) >= 0.0


@pytest.mark.parametrize("option, value", [("--kv-cache-mem-fraction", "nan"), ("--spec-acceptance", "nan"),
                                           ("--kv-cache-mem-fraction", "-nan")])
def test_nan_is_not_inside_a_range(option, value):
    """NaN compares false with both bounds, so click's FloatRange let it through to a misleading 'no_kv_room' or
    'not_finite' status; it is the option's one-line usage error."""
    args = ["serve", "-m", "llama3.1-8b", "-d", "H100", "--concurrency", "4", option, value]
    if option == "--spec-acceptance":
        args += ["--spec-tokens", "3"]
    one_line_error(cli(*args), f"Invalid value for '{option}'")


def test_batch_record_with_a_block_that_is_not_an_object(tmp_path):
    """A serving or run record whose block is not an object ("serve": "tp4", "model": []) is named as such, as
    'run -m' names it; the batch used to read it as a MAD-Max case and say "unknown key 'id'"."""
    serving = {"id": "x", "model": {"name": "m"}, "system": {"gpu": "H100"}, "serve": "tp4"}
    run_record = {"id": "y", "model": [], "system": {"gpu": "H100"}, "plan": {"tp": 8}}
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in (serving, run_record)) + "\n")
    out = tmp_path / "out.jsonl"
    assert cli("batch", str(src), "-o", str(out)).exit_code == 3       # both lines errors: exit 3, output written
    statuses = [json.loads(x)["status"] for x in out.read_text().splitlines()]
    assert "serving record's serve block must be an object" in statuses[0], statuses
    assert "run record's model block must be an object" in statuses[1], statuses


@pytest.mark.parametrize("model", ["llama3.1-70b", "llama2-70b"])
def test_a_misspelt_system_kind_is_named(tmp_path, model):
    """kind = "clustr" said 'a MAD-Max system' (real-world model) or 'system.kind: unknown field (did you mean
    'node'?)' (MAD-Max model); it is the kind, with the nearest one."""
    path = tmp_path / "s.toml"
    path.write_text('name = "x"\nkind = "clustr"\n')
    one_line_error(cli("run", "-m", model, "-s", str(path), "-t", "llm-pretrain"),
                   "system.kind: unknown kind 'clustr' (did you mean 'cluster'?)")


@pytest.mark.parametrize("command", [["run"], ["plot", "memory-timeline", "-o", "never.png"]])
@pytest.mark.parametrize("margin", ["1e300", "inf", "1e7"])
def test_margin_above_the_hbm(command, margin, tmp_path):
    """A margin past the HBM (or past the float range once in bytes) is one line naming it, never "inf GiB"."""
    with CliRunner().isolated_filesystem(temp_dir=tmp_path):
        result = cli(*command, "-m", "llama3-70b", "-s", "dgx-h100", "--nodes", "4", "-t", "llm-pretrain",
                     "--memory-margin", margin)
        one_line_error(result, "not below")
        assert "inf GiB" not in result.output or margin == "inf", result.output
        assert not os.path.exists("never.png")


def test_margin_above_the_hbm_api():
    from fastmodel.lm.api import memory_timeline

    with pytest.raises(FastmodelError, match="not below the HBM"):
        memory_timeline("llama3-70b", "dgx-h100", "llm-pretrain", num_nodes=4, memory_margin=1e300)


@pytest.mark.parametrize("field, value", [("hbm_bytes", 80), ("hbm_bw_bytes_s", 3.35)])
def test_serve_record_hbm_in_gb(field, value, tmp_path):
    """A serving record's HBM given in GB (TB/s) where bytes (bytes/s) are expected: one line naming the field."""
    line = data_lines("serve_dev_load.jsonl", 1)[0]
    record = json.loads(line)
    record["system"][field] = value
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    one_line_error(cli("serve", str(path)), f"system.{field}")
    assert "not GB" in cli("serve", str(path)).output


def test_calibrate_serving_records(tmp_path):
    """calibrate on a file of serving records says so, and what it accepts, in one line."""
    with CliRunner().isolated_filesystem(temp_dir=tmp_path):
        result = cli("calibrate", os.path.join(os.path.dirname(__file__), "../data/serve_dev_load.jsonl"),
                     "-o", "cal.toml")
        one_line_error(result, "serving records")
        assert "run records" in result.output and not os.path.exists("cal.toml")


def test_batch_calibration_on_serving_records(tmp_path):
    """batch --calibration on a file of serving records only: the results, and a warning that it applied to
    no line (a calibration fits run records)."""
    cal = tmp_path / "cal.toml"
    assert cli("calibrate", "tests/data/runs_dev_small.jsonl", "-o", str(cal), "--folds", "0").exit_code == 0
    serving = tmp_path / "s.jsonl"
    serving.write_text(data_lines("serve_dev_load.jsonl", 1)[0] + "\n")
    result = cli("batch", serving, "--calibration", cal, "-o", tmp_path / "o.jsonl")
    assert result.exit_code == 0, result.output
    assert "warning: --calibration applied to no line" in result.output, result.output


@pytest.mark.parametrize("where, text", [("/etc/hostname/x", "Not a directory"),
                                         ("/nonexistent-h2/dir/x", "no such directory")])
def test_unwritable_output(where, text):
    """An output under a regular file or in a missing directory: one line, exit 2, nothing written (root can
    write anywhere else, so these are the unwritable paths a test can make)."""
    if not os.path.isfile("/etc/hostname"):
        pytest.skip("no /etc/hostname")
    for args in (["sweep", "specs/sweeps/llama2_70b_plans.toml", "-o", where + ".nc"],
                 ["validate", "tests/data/runs_dev_small.jsonl", "-o", where + ".csv"],
                 ["batch", "tests/data/runs_dev_small.jsonl", "-o", where + ".jsonl"],
                 ["calibrate", "tests/data/runs_dev_small.jsonl", "-o", where + ".toml"]):
        one_line_error(cli(*args), "cannot write: " + text)
    assert not os.path.exists("/nonexistent-h2")


def test_output_checked_before_the_spec(tmp_path):
    """sweep, batch and validate all check the output before reading the input (cheap, no work lost): an
    existing output and a bad input report the output first, the same way in each."""
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = not [ toml")
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_text("{not json\n")
    for name, args in (("o.nc", ["sweep", str(bad)]), ("o.csv", ["validate", str(bad_jsonl)]),
                       ("o.jsonl", ["batch", str(bad_jsonl)])):
        out = tmp_path / name
        out.write_text("x")
        one_line_error(cli(*args, "-o", str(out)), "exists")


@pytest.mark.parametrize("name, remark", [
    ("mtp_depth", ""), ("num_speculative_tokens", ""), ("speculative_num_steps", ""),
    ("speculative_num_draft_tokens", "; SGLang counts the verified token too: spec_tokens = "
                                     "speculative_num_draft_tokens - 1 at --speculative-eagle-topk 1")])
def test_serve_record_mtp_depth_named(name, remark, tmp_path):
    """An engine's name for the draft depth (MTP) in a serving record points at serve.spec_tokens: vLLM's
    num_speculative_tokens and SGLang's speculative_num_steps are the same count; SGLang's
    speculative_num_draft_tokens counts the verified token too (steps + 1 at top-k 1), and the hint says so."""
    record = json.loads(data_lines("serve_dev_load.jsonl", 1)[0])
    record["serve"][name] = 3
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    one_line_error(cli("serve", str(path)),
                   f"serve.{name}: unknown field (the schema calls it 'spec_tokens'{remark})")


@pytest.mark.parametrize("mode, gpus, text", [("disagg", "1", "disagg needs --gpus 2 or more"),
                                              ("disag", "8", "(did you mean 'disagg'?)")])
def test_search_disagg_pools_that_do_not_add_up(mode, gpus, text):
    """--mode disagg on one GPU (no room for two pools) and a mode typo: one line, not '0 configurations fit'."""
    one_line_error(cli("serve", "-m", "llama3.1-8b", "-d", "h100", "--search", "--ttft", "2s", "--tpot", "50ms",
                       "--mode", mode, "--gpus", gpus), text)


@pytest.mark.parametrize("command", ["validate", "calibrate", "serve"])
def test_binary_file_as_records(command, tmp_path):
    """A figure (or any binary file) given where JSON lines are read: one line naming the file and the first byte
    that is not UTF-8, exit 2 (it was a UnicodeDecodeError traceback in validate and calibrate)."""
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    one_line_error(cli(command, str(path)), f"{path}: not UTF-8 text (byte 0x89 at offset 0)")


def test_validate_a_file_with_no_json_line(tmp_path):
    """validate counts a malformed line among records as a miss (issue 26), but a file of which not one line is
    JSON is not a file of runs: one line, exit 2, instead of empty tables and exit 0."""
    text = tmp_path / "notes.jsonl"
    text.write_text("step time 1.4 s\nmfu 40%\n")
    one_line_error(cli("validate", str(text)), f"{text}:1: invalid JSON: Expecting value; not one line of the file "
                                               "is JSON, so it holds no run records")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("step time 1.4 s\n" + data_lines("runs_dev_small.jsonl", 1)[0] + "\n")
    result = cli("validate", str(mixed))
    assert result.exit_code == 0 and f"refused (a miss): {mixed}:1: invalid JSON" in result.output


def test_best_by_a_dimension_and_its_csv_message(tmp_path):
    """best --by plan names plan a dimension to filter on (was "unknown variable 'plan'", as if the result had
    none); --csv onto a file of another kind says "CSV table" (was "the CSV CSV this command writes")."""
    from plot_data import synthetic_sweep

    result = tmp_path / "out.nc"
    synthetic_sweep().to_netcdf(result, engine="scipy")
    one_line_error(cli("best", str(result), "--by", "plan"),
                   "--by plan is a dimension of the result (filter on it, e.g. --where plan=...), not a variable to "
                   "rank by; variables: ")
    text = tmp_path / "notes.csv"
    text.write_text("notes\n")
    bad = cli("best", str(result), "--by", "throughput", "--csv", str(text), "--force")
    one_line_error(bad, "not the CSV table this command writes")
    assert text.read_text() == "notes\n"


def test_a_fractional_micro_batch_in_a_sweep_file_is_named(tmp_path):
    """micro_batch = [1.5] ran to "every point of the sweep is illegal or infeasible: 100% batch_not_divisible"."""
    path = tmp_path / "s.toml"
    path.write_text('model = "llama3-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nmicro_batch = [1.5]\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "out.nc"),
                   f"{path}: axes.micro_batch: every value must be a whole number (got 1.5)")


@pytest.mark.parametrize("plan, said", [('"al"', "axes.plan: 'al' is no mesh (did you mean 'all'?)"),
                                        ('["tp8", "TP8"]', "axes.plan: duplicate mesh 'tp8'")])
def test_a_misspelt_or_repeated_plan_axis_is_named(tmp_path, plan, said):
    """plan = "al" said "'al' is not a degree like tp8"; a repeated mesh was "duplicate mesh", not which."""
    path = tmp_path / "s.toml"
    path.write_text(f'model = "llama3-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nplan = {plan}\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "out.nc"), f"{path}: {said}")


def test_the_all_plan_keyword_is_read_whatever_its_case():
    """Second review: plan = "ALL" was refused with "did you mean 'all'?"."""
    from fastmodel.lm.loader import load_cluster, load_lm_model
    from fastmodel.lm.sweep_file import _axes

    model, cluster = load_lm_model("llama3-8b"), load_cluster("dgx-h100")
    assert _axes("s.toml", {"plan": "ALL"}, model, cluster) == _axes("s.toml", {"plan": " all"}, model, cluster) \
        == _axes("s.toml", {"plan": "all"}, model, cluster)


def test_a_model_axis_of_a_real_world_sweep_says_one_model_per_file(tmp_path):
    """[axes] model = [...] (a MAD-Max sweep axis) was "unknown axis (did you mean 'num_nodes'?)"."""
    path = tmp_path / "s.toml"
    path.write_text('model = "llama3-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\n'
                    'model = ["llama3-8b", "llama3-70b"]\n')
    one_line_error(cli("sweep", path, "-o", tmp_path / "out.nc"), f"{path}: axes.model: a real-world sweep takes one "
                   "model (the file's model key; MAD-Max sweeps take a model axis)")
