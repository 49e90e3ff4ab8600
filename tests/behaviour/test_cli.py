"""The command line, driven through click's runner (same process, real commands)."""

import json

import pytest

from fastmodel.testing import assert_matches_reference, dev_cases, illegal_cases
from tests.suite_fixtures import cli, data_lines, one_line_error

RUN = ["run", "--model", "llama2-70b", "--system", "dc-a", "--nodes", "256", "--task", "llm-pretrain-fsdp",
       "--semantics", "madmax"]


def test_run_report():
    result = cli(*RUN)
    assert result.exit_code == 0
    out = result.output
    for text in ("LLaMA2-70B", "2048 devices", "fsdp2048/ddp2048", "GEMM", "allgather", "exposed",
                 "step        7,275.72 ms", "throughput  281.48 samples/s", "weights"):
        assert text in out, text


def test_run_json():
    result = cli(*RUN, "--json")
    data = json.loads(result.output)
    assert data["plan"] == "fsdp2048/ddp2048"
    assert data["iteration_time"] == pytest.approx(7.2757, rel=1e-4)
    assert data["num_devices"] == 2048


def test_run_madmax_json_files(tmp_path):
    case = dev_cases("LLM")[0]
    paths = []
    for kind in ("model", "system", "task"):
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps(case[kind]))
        paths += [f"--{kind}", str(path)]
    result = cli("run", *paths, "--semantics", "madmax", "--json")
    assert result.exit_code == 0
    assert_matches_reference(json.loads(result.output), case["expected"], case["case"])


@pytest.mark.parametrize(
    "args, text",
    [
        (["run", "--model", "llama2-70c", "--system", "dc-a", "--task", "llm-pretrain-fsdp"], "did you mean 'llama2-70b'"),
        (["run", "--model", "llama2-70b", "--system", "dc-a", "--task", "llm-pretrain"], "--plan"),
        (["run", "--model", "llama2-70b", "--system", "dc-a", "--task", "llm-pretrain", "--plan", "tp4,ddp32/mp"],
         "first_degree"),
        (["run", "--model", "llama2-70b", "--system", "dc-a", "--task", "llm-pretrain", "--plan", "tp/"], "syntax"),
        (["run", "--model", "nofile.toml", "--system", "dc-a", "--task", "llm-pretrain"], "nofile.toml: no such file"),
    ],
)
def test_run_errors_are_one_line_exit_2(args, text):
    result = cli(*args)
    assert result.exit_code == 2
    assert text in result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_run_nodes_must_be_positive():
    assert cli(*RUN[:-4], "--nodes", "0", "--task", "llm-pretrain-fsdp").exit_code == 2


def test_batch_file(tmp_path):
    good = dev_cases("LLM")[:3]
    bad = illegal_cases("LLM")[:2]
    lines = [json.dumps(c) for c in good] + ["{not json", "", json.dumps({"model": "llama2-70b"})]
    lines += [json.dumps(c) for c in bad]
    lines.append(json.dumps({"case": "named", "model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain",
                             "plan": "tp,ddp/mp", "num_nodes": 4, "semantics": "default"}))
    src = tmp_path / "cases.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    result = cli("batch", str(src), "-o", str(out))
    assert result.exit_code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(lines)
    for record, case in zip(records[:3], good):
        assert record["status"] == "ok"
        assert_matches_reference(record, case["expected"], case["case"])
    assert records[3]["status"].startswith("error: invalid JSON") and records[3]["case"] == 4
    assert records[4]["status"] == "error: empty line"
    assert records[5]["status"] == "error: missing key 'system'"
    assert all(r["status"].startswith("error: ") for r in records[6:8])
    assert records[8]["case"] == "named" and records[8]["status"] == "ok" and records[8]["plan"] == "tp8,ddp4/mp32"
    assert not list(tmp_path.glob(".results.jsonl.*"))  # no temp file left behind


def test_batch_missing_input(tmp_path):
    result = cli("batch", str(tmp_path / "none.jsonl"))
    assert result.exit_code == 2 and "cannot read" in result.output


def test_specs_commands():
    listed = cli("specs", "list").output
    assert "llama2-70b" in listed and "dc-a" in listed and "llm-pretrain-fsdp" in listed
    shown = cli("specs", "show", "llama2-70b").output
    assert "hidden = 8192" in shown and "arXiv" in shown
    missing = cli("specs", "show", "llama2-70")
    assert missing.exit_code == 2 and "did you mean" in missing.output
    path = cli("specs", "show", "my_model.toml")      # a hurried user's own file: not a built-in name
    assert path.exit_code == 2 and path.output == ("error: my_model.toml: specs show prints a built-in spec "
                                                   "(fastmodel specs list), not a file; read the file itself\n")
    for kind in ("model", "system", "task"):
        schema = json.loads(cli("specs", "schema", kind).output)
        assert "properties" in (schema["$defs"]["LLMSpec"] if kind == "model" else schema)


def test_specs_schema_has_the_serving_task():
    """`specs schema` had no serving task kind (model, system, task: the training task's). serve-task prints the
    schema of the model load_serve_task validates against (ServeTaskSpec: every field, its default), each
    registry-bounded field with the column's units and bounds, and the built-in serving tasks validate against it
    while a task the loader refuses (an unknown key, input_len 0) fails it too."""
    from pathlib import Path

    import jsonschema

    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
    from fastmodel.serve.spec import ServeTaskSpec
    from fastmodel.spec.loader import tomllib  # tomli below Python 3.11

    result = cli("specs", "schema", "serve-task")
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert set(schema["properties"]) == set(ServeTaskSpec.model_fields)
    assert schema["properties"]["kind"]["const"] == "serve" and schema["additionalProperties"] is False
    assert schema["properties"]["precision"]["default"] == "bf16"
    length = COLUMNS[COLUMN_INDEX["input_len"]]
    assert schema["properties"]["input_len"]["units"] == length.units == "tokens"
    assert schema["properties"]["input_len"]["minimum"] == length.lo
    assert schema["properties"]["kv_cache_mem_fraction"] == {**schema["properties"]["kv_cache_mem_fraction"],
                                                             "default": 0.9, "units": "1", "maximum": 1}
    for name in ("serve-chat", "serve-offline"):
        jsonschema.validate(tomllib.loads(Path(f"specs/tasks/{name}.toml").read_text()), schema)
    good = {"name": "t", "kind": "serve", "input_len": 8, "output_len": 8}
    for bad in ({**good, "input_lenn": 8}, {**good, "input_len": 0}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    one_line_error(cli("specs", "schema", "serve"), "'serve' is not one of")


def test_specs_list_and_show_the_device_files():
    """The device files (specs/devices) are built-in specs too: listed with the GPU names each answers to, and
    shown by file name or by one of those names (B300's FP4 peak is 13.5 PFLOP/s dense in b300.toml); a name
    that is also a system shows the system unless --kind device says otherwise."""
    listed = cli("specs", "list", "device")
    assert listed.exit_code == 0 and listed.output.startswith("devices:\n")
    row = next(line for line in listed.output.splitlines() if line.split()[0] == "b300")
    assert "B300," in row and "HGX-B300" in row
    assert "devices:" in cli("specs", "list").output
    for name in ("b300", "B300", "hgx-b300"):
        shown = cli("specs", "show", name)
        assert shown.exit_code == 0 and "peak_flops_4 = 13.5e15" in shown.output, name
    assert "kind = \"cluster\"" in cli("specs", "show", "dgx-b200").output       # the system, not B200's file
    assert "names = [\"B200\"" in cli("specs", "show", "DGX-B200", "--kind", "device").output
    assert "kind = \"cluster\"" in cli("specs", "show", "mi300x").output
    assert "names = [\"MI300X\"" in cli("specs", "show", "mi300x", "--kind", "device").output
    missing = cli("specs", "show", "b400", "--kind", "device")
    assert missing.exit_code == 2 and missing.output.startswith("error: no built-in device 'b400'")
    assert len(missing.output.strip().splitlines()) == 1


def test_plans_command():
    out = cli("plans", "--system", "dc-a", "--nodes", "16").output.splitlines()
    assert len(out) == 52 and any("tp8,ddp16/mp128" in line for line in out)
    single = cli("plans", "--system", "dc-a", "--nodes", "1").output.splitlines()
    assert len(single) == 8
    three = cli("plans", "--system", "dc-a", "--nodes", "2", "--model", "dlrm-a-transformer").output.splitlines()
    assert len(three) == 13 * 4 * 13 and any("tp8,ddp2/mp16/fsdp16" in line for line in three)


def test_plans_of_a_madmax_model_on_a_real_world_cluster():
    """`plans` has no --semantics: the model-family refusal names the pairings this command takes instead."""
    result = cli("plans", "-s", "dgx-h100", "--nodes", "1", "-m", "llama2-70b")
    assert result.exit_code == 2 and result.output == (
        "error: llama2-70b: model.family: 'llm' is a MAD-Max model; dgx-h100 is a real-world cluster: pair it with a "
        "family = \"lm\" model (e.g. -m llama3.1-70b), or list a MAD-Max system's plans (e.g. -s dc-a)\n")


def test_sweep_and_best_commands(tmp_path):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                          '[axes]\nnum_nodes = [2, 4]\nplan = ["fsdp/ddp", "tp,ddp/mp"]\n')
    out = tmp_path / "r.nc"
    result = cli("sweep", str(sweep_file), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.exists() and not list(tmp_path.glob(".r.nc.*"))
    again = cli("sweep", str(sweep_file), "-o", str(out))
    assert again.exit_code == 2 and "--force" in again.output
    table = cli("best", str(out), "--by", "throughput", "--top", "2", "--csv", str(tmp_path / "t.csv"))
    assert table.exit_code == 0 and "plan" in table.output
    assert (tmp_path / "t.csv").read_text().startswith("num_nodes,plan,throughput")
    zarr_out = tmp_path / "r.zarr"
    assert cli("sweep", str(sweep_file), "-o", str(zarr_out), "--unit-configs", "1").exit_code == 0
    assert cli("best", str(zarr_out), "--by", "iteration_time", "--ascending").exit_code == 0
    resumed = cli("sweep", str(sweep_file), "-o", str(zarr_out), "--resume")
    assert resumed.exit_code == 0



def test_a_resumed_sweep_rates_only_the_configurations_it_evaluated(tmp_path):
    """review8 #3: on ``--resume`` the done line divided every configuration of the store by the run's seconds
    (1,754 configurations/s with none evaluated). Two of four one-configuration units marked not done: it says
    2 of 4 evaluated in this run and their rate; a whole store, 0 of 4 and no rate. The bar's rate leaves the
    store's units out too."""
    import io
    import re

    import zarr

    from fastmodel.sweeps import Progress

    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n'
                          '[axes]\nnum_nodes = [2, 4]\nplan = ["fsdp/ddp", "tp,ddp/mp"]\n')
    store = tmp_path / "r.zarr"
    first = cli("sweep", str(sweep_file), "-o", str(store), "--unit-configs", "1")
    assert first.exit_code == 0 and re.search(r"; [\d.]+ s, [\d,]+ configurations/s \(kernel", first.output)
    assert "resumed:" not in first.output
    done = zarr.open_group(str(store), mode="r+")["unit_done"]
    done[:2] = False
    again = cli("sweep", str(sweep_file), "-o", str(store), "--resume")
    assert again.exit_code == 0, again.output
    assert re.search(r"; resumed: 2 of 4 configurations evaluated in this run, [\d.]+ s, [\d,]+ configurations/s "
                     r"\(kernel loading and writing included\)\n", again.output), again.output
    whole = cli("sweep", str(sweep_file), "-o", str(store), "--resume")
    assert whole.exit_code == 0 and re.search(r"; resumed: 0 of 4 configurations evaluated in this run, [\d.]+ s\n",
                                              whole.output), whole.output
    stream = io.StringIO()
    bar = Progress(100, stream=stream, enabled=True, min_interval_s=0.0)
    bar.start -= 1.0                                   # a second has passed
    bar.skip(90)
    bar(10)
    assert (bar.done, bar.evaluated) == (100, 10)
    rate = int(re.search(r"([\d,]+) configs/s", stream.getvalue()).group(1).replace(",", ""))
    assert "100/100 configs" in stream.getvalue() and 9 <= rate <= 10


def test_resuming_what_is_no_sweep_store_is_refused_in_one_wording_by_the_cli_and_the_api(tmp_path):
    """``--resume`` onto a directory that is no sweep store: the CLI refuses before reading the sweep file, the
    Python API's resume when it opens the store; both say it as fastmodel/io/store.py ``nothing_to_resume``, each
    naming its own switch (overwrite=True, --force: cli/common.SHARED_FLAGS)."""
    from fastmodel.errors import SweepError
    from fastmodel.io.store import resume_flags

    plain = tmp_path / "other.zarr"
    plain.mkdir()
    said = f"{plain} is not a fastmodel sweep store, so there is nothing to resume; choose another output " \
        "(fastmodel never deletes it, even with --force)"
    one_line_error(cli("sweep", str(tmp_path / "absent.toml"), "-o", str(plain), "--resume"), said)
    with pytest.raises(SweepError) as refused:
        resume_flags(plain, {}, 1)
    assert str(refused.value) == said.replace("--force", "overwrite=True")


@pytest.mark.parametrize(
    "text, message",
    [
        ('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\nnum_nodez = [2]\n', "did you mean 'num_nodes'"),
        ('model = "llama-7b"\nsystem = "dc-a"\n[axes]\nplan = "all"\n', "task: required key missing"),
        ('modle = "llama-7b"\n', "did you mean 'model'"),
        ('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\nplan = ["tp8;ddp/mp"]\n', "cannot parse"),
    ],
)
def test_sweep_file_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = cli("sweep", str(path), "-o", str(tmp_path / "o.nc"))
    assert result.exit_code == 2 and message in result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_builtin_sweeps_load():
    from fastmodel.spec.loader import builtin_names
    from fastmodel.sweeps.file import load_sweep_file

    names = builtin_names("sweep")
    assert {"llama2_70b_plans", "llama2_70b_codesign"} <= set(names)
    engines = {load_sweep_file(name).engine for name in names}   # every engine's sweep files, one loader
    assert engines == {"madmax", "lm", "serve"}
    for name in names:
        assert load_sweep_file(name).num_configs > 0


def test_run_real_world_model_and_run_record(tmp_path):
    result = cli("run", "-m", "llama3.1-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "16", "--plan",
                 "tp8.pp4")
    assert result.exit_code == 0, result.output
    for text in ("step time", "MFU / HFU", "pipeline bubble", "exposed", "memory per device", "activations"):
        assert text in result.output, text
    record = data_lines("runs_dev.jsonl", 1)[0]
    path = tmp_path / "run.json"
    path.write_text(record)
    data = json.loads(cli("run", "-m", str(path), "--json").output)
    assert data["flops_per_token"] == pytest.approx(json.loads(record)["measured"]["flops_per_token_std"], rel=1e-3)
    assert data["step_time"] > 0


def test_run_real_world_errors_are_one_line():
    result = cli("run", "-m", "llama3.1-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--plan", "tp3")
    assert result.exit_code == 2 and "devices_not_divisible" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = cli("run", "-m", "llama3.1-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--semantics", "madmax")
    assert result.exit_code == 2 and "semantics 'default'" in result.output


def test_options_that_do_not_apply_are_refused_not_ignored(tmp_path):
    record = data_lines("runs_dev.jsonl", 1)[0]
    path = tmp_path / "run.json"
    path.write_text(record)
    for flags, name in ((("--plan", "tp8"), "--plan"), (("--nodes", "4"), "--nodes"), (("-s", "dgx-h100"), "--system"),
                        (("-t", "llm-pretrain"), "--task"), (("--semantics", "madmax"), "--semantics")):
        result = cli("run", "-m", str(path), *flags)
        assert result.exit_code == 2 and result.output.startswith(f"error: {name}:"), (flags, result.output)
        assert len(result.output.strip().splitlines()) == 1
    result = cli("run", "-m", "llama3.1-70b", "-s", "dgx-h100", "-t", "llm-finetune")
    assert result.exit_code == 2 and "task.kind" in result.output and "pretraining" in result.output
    for plan, reason in (("tp8.tp2", "tp is given twice"), ("", "empty plan")):
        result = cli("run", "-m", "llama3.1-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--plan", plan)
        assert result.exit_code == 2 and reason in result.output, (plan, result.output)
    result = cli("run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain", "-p", "tp,ddp/mp",
                 "--calibration", str(path))
    assert result.exit_code == 2


def test_serve_on_an_illegal_layout_is_an_error():
    result = cli("serve", "-m", "llama3.1-70b", "--tp", "3")
    assert result.exit_code == 2 and "heads_not_divisible" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sweep_output_suffix_in_upper_case_or_empty_is_one_line():
    """cli/sweep.py: `-o out.NC` names the lower-case name it means; `-o ''` shows the empty name quoted."""
    upper = cli("sweep", "llama2_70b_plans", "-o", "out.NC")
    assert upper.exit_code == 2 and "error: out.NC: the output must end in .zarr or .nc (lower case: out.nc)" in \
        upper.output
    empty = cli("sweep", "llama2_70b_plans", "-o", "")
    assert empty.exit_code == 2 and "error: '': the output must end in .zarr or .nc" in empty.output
