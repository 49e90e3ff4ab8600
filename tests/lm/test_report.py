"""fastmodel/lm/report.py: the report of one real-world configuration says what it assumed."""

from pathlib import Path

from fastmodel.lm.report import run_one
from fastmodel.spec.devices import device_table

SYSTEMS = Path(__file__).parents[2] / "specs" / "systems"


def test_a_cluster_without_a_device_file_says_it_runs_generic_efficiencies(tmp_path):
    """A user's cluster naming a GPU with no specs/devices file runs on the registry's generic (H100-era)
    efficiencies: the report says so under its title; the built-in MI300X has a file and gets no note."""
    text = (SYSTEMS / "mi300x.toml").read_text().replace('gpu = "MI300X"', 'gpu = "MI250X"')
    custom = tmp_path / "mi250x.toml"
    custom.write_text(text)
    assert "mi250x" not in device_table()
    report = run_one("llama3-8b", str(custom), "llm-pretrain", plan="tp8")
    assert report.text.splitlines()[1] == "note: no built-in device file for 'MI250X': generic efficiencies"
    assert report.record["notes"] == ["no built-in device file for 'MI250X': generic efficiencies"]
    built_in = run_one("llama3-8b", "mi300x", "llm-pretrain", plan="tp8")
    assert "note:" not in built_in.text and "notes" not in built_in.record


def test_run_memory_margin_is_best_s_margin():
    """run --memory-margin GIB (A6, issue 23 item 5): the plan fits when memory_per_device <= HBM - margin, the
    report says which margin; a bad value is one line naming it as typed; MAD-Max and serving refuse it."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    runner = CliRunner()
    base = ["run", "-m", "llama3-8b", "-s", "mi300x", "-t", "llm-pretrain", "-p", "tp8"]
    small = runner.invoke(main, [*base, "--memory-margin", "5"])
    assert small.exit_code == 0 and "(fits in HBM 192.0 GiB less the 5.0 GiB --memory-margin)" in small.output
    big = runner.invoke(main, [*base, "--memory-margin", "191.9", "--json"])
    assert big.exit_code == 0 and '"fits_memory": 0.0' in big.output and '"memory_margin": ' in big.output
    for bad, said in (("-5", "--memory-margin: -5 GiB is negative"), ("nan", "'nan' is not a number"),
                      ("192", "--memory-margin: 192 GiB is not below the HBM of 192.0 GiB")):
        result = runner.invoke(main, [*base, "--memory-margin", bad])
        assert result.exit_code == 2 and result.output.count("\n") == 1 and said in result.output, result.output
    madmax = runner.invoke(main, ["run", "-m", "dlrm-a", "-s", "zionex", "-t", "dlrm-pretrain",
                                  "--memory-margin", "5"])
    assert madmax.exit_code == 2 and "not to MAD-Max semantics" in madmax.output, madmax.output


def test_an_illegal_plan_of_a_task_file_names_the_file_and_field(tmp_path):
    """Walk of issues 22-23: a task file's mesh that does not multiply out (EP 32 under TP 2 x DP 16 with etp = tp
    = 2: 64 expert ranks on 32 GPUs) said only "plan 'tp2.ep32': illegal plan ..."; it names the file and the
    field, as MAD-Max tasks do. A --plan of the user is not the file's and keeps its own label."""
    import pytest

    from fastmodel.errors import PlanError

    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nkind = "pretrain"\nglobal_batch = 256\nplan = "tp2.ep32"\n')
    with pytest.raises(PlanError, match=r"^.*t\.toml: task\.plan: illegal plan \(experts_not_divisible\): etp = tp "
                                        r"= 2 \(plan etp unset\) x ep = 32 = 64 does not divide tp x cp x dp = "
                                        r"2 x 1 x 16 = 32") as raised:
        run_one("qwen3-30b-a3b", "dgx-h100", str(task), num_nodes=4)
    assert str(raised.value).startswith(f"{task}: task.plan: ")
    with pytest.raises(PlanError, match=r"^plan 'tp2\.ep3': illegal plan \(experts_not_divisible\)"):
        run_one("qwen3-30b-a3b", "dgx-h100", str(task), num_nodes=4, plan="tp2.ep3")
    assert run_one("qwen3-30b-a3b", "dgx-h100", str(task), num_nodes=4, plan="tp2.ep32.etp1").ok


def test_a_model_file_whose_experts_the_plan_does_not_split_is_named_with_its_field(tmp_path):
    """Audit 22.B2: ``fastmodel run -m e100.toml -p tp2.ep32.etp1`` (100 routed experts) named no file; the model
    file is at fault, so the line names it, the field and the rule, exit 2 (run, batch and the Python API alike)."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.spec.loader import builtin_text

    model = tmp_path / "e100.toml"
    model.write_text(builtin_text("model", "qwen3-30b-a3b").replace("moe_experts = 128", "moe_experts = 100"))
    said = (f"{model}: model.moe_experts, plan 'tp2.ep32.etp1': illegal plan (experts_not_divisible): "
            "model.moe_experts = 100 is not divisible by plan ep = 32")
    result = CliRunner().invoke(main, ["run", "-m", str(model), "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes",
                                       "4", "-p", "tp2.ep32.etp1"])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {said}"), result.output
    assert len(result.stderr.strip().splitlines()) == 1
    import pytest

    import fastmodel
    from fastmodel.errors import PlanError

    with pytest.raises(PlanError) as raised:
        fastmodel.evaluate(str(model), "dgx-h100", "llm-pretrain", plan="tp2.ep32.etp1", num_nodes=4)
    assert str(raised.value).startswith(said)


def test_a_run_record_report_names_its_stack_and_what_picked_it():
    """A run record is evaluated under the stack profile its explicit ``stack`` names, else the one its
    ``framework`` text parses to (docs/model.md §11.8): the report says which, since "NeMo 24.09" and
    "Megatron-LM" name different profiles (megatron-core, megatron-2021) and an unknown text takes ``default``."""
    import json

    from fastmodel.lm.report import run_record
    from tests.suite_fixtures import data_lines

    record = json.loads(data_lines("runs_dev.jsonl", 1)[0])
    assert record["stack"] == "megatron-2021"
    named = run_record(record)
    assert named.text.splitlines()[1] == "stack                megatron-2021 (the record's stack)"
    assert named.record["stack"] == "megatron-2021"
    for framework, stack in (("NeMo 24.09", "megatron-core"), ("TorchTitan", "torchtitan"), ("FooTrainer 3.1", "default")):
        parsed = run_record({k: v for k, v in record.items() if k != "stack"} | {"framework": framework})
        line = next(line for line in parsed.text.splitlines() if line.startswith("stack "))
        assert line == f"stack                {stack} (from framework {framework!r})"
        assert parsed.record["stack"] == stack
    bare = run_record({k: v for k, v in record.items() if k not in ("stack", "framework")})
    assert "stack                default (no framework)" in bare.text.splitlines()
    assert bare.text.splitlines()[1] == ("note: no framework and no stack: profile 'default' (registry defaults) "
                                         "assumed (give the record's framework text or stack)")   # one line, not two


def test_run_and_run_record_lower_their_configuration_once(monkeypatch):
    """The report's numbers and its "memory by pipeline stage" table come from one lowering: ``run_record`` calls
    ``lower_record`` once, ``run_one`` without a calibration ``point_columns`` once (a calibrated run lowers through
    the sweep path and once more for the table); the table's peak stage is the report's memory_per_device."""
    import json

    from fastmodel.lm import records, sweep
    from fastmodel.lm.report import run_record
    from tests.suite_fixtures import data_lines

    calls = []
    for module, name in ((records, "lower_record"), (sweep, "point_columns")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    record = next(r for r in map(json.loads, data_lines("runs_dev.jsonl", 100)) if r["plan"].get("pp", 1) > 1)
    for run, lowering in ((lambda: run_record(record, "runs_dev.jsonl"), "lower_record"),
                          (lambda: run_one("llama3.1-70b", "dgx-h100", "llm-pretrain", plan="tp8.pp4", num_nodes=8),
                           "point_columns")):
        report = run()
        assert calls == [lowering], calls
        calls.clear()
        stages = report.record["memory_by_stage"]
        peak = stages["stages"][stages["memory_peak_stage"]]["memory_per_device"]
        assert abs(peak - report.record["memory_per_device"]) <= 1e-9 * peak


def test_a_run_of_vp_unknown_says_the_vp_its_stack_gave_and_why(tmp_path):
    """Leftover of the last stop: a run record of vp "unknown" printed "note: vp unknown: N (rule)" under its title,
    and ``fastmodel run`` of the same point in specs said nothing of the vp it used. Llama 3.1 405B (126 layers),
    Meta internal, tp8.pp4: (126 + 2) / 4 = 32 by hand (Llama 3 paper sec. 3.3.2), one line, the record's wording;
    a stated vp has no such line."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.lm.records import lower_record
    from tests.lm.test_vp_unknown_pp import _record

    want = ("vp unknown: 32 ((layers + 2) / pp = 32: one layer per virtual stage, the embedding and the loss in the "
            "first and last chunks (Llama 3 paper sec. 3.3.2))")
    assert want in lower_record(_record("tp8.pp4")).notes          # the record path's line
    task = tmp_path / "t.toml"             # the record's batch: 768 sequences over dp 12
    task.write_text('name = "t"\nkind = "pretrain"\nglobal_batch = 768\n')
    execution = {"framework": "Meta internal", "vp": "unknown"}
    report = run_one("llama3.1-405b", "dgx-h100", str(task), plan="tp8.pp4", num_nodes=48, execution=execution)
    assert report.text.splitlines()[1] == f"note: {want}" and report.record["notes"] == [want]
    stated = run_one("llama3.1-405b", "dgx-h100", str(task), plan="tp8.pp4", num_nodes=48,
                     execution={"framework": "Meta internal", "vp": 32, "uneven_stages": True})
    assert "vp unknown" not in stated.text
    result = CliRunner().invoke(main, ["run", "-m", "llama3.1-405b", "-s", "dgx-h100", "-t", str(task), "--nodes",
                                       "48", "-p", "tp8.pp4", "-x", 'framework="Meta internal"', "-x", "vp=unknown"])
    assert result.exit_code == 0 and result.output.count("vp unknown") == 1 and f"note: {want}\n" in result.output
