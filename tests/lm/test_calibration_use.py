"""--calibration on run, batch, sweep and the Python API (issue 13): the overlay reaches the parameter table,
datasets record it, mismatched devices / tiers are warned about, bad files are one-line errors.

Hand derivations (kernels/roofline.py, docs/model.md §11.3): every memory-bound kernel takes
``bytes / (HBM bw x hbm_eff)`` with no constant term, so ``time_memory_bound`` and ``time_optimizer`` are
exactly proportional to ``1 / hbm_eff``: halving hbm_eff doubles them. ``step_overhead_s`` is added once to
the step time, so setting it to S (built-in 0) adds exactly S seconds to ``step_time``.
"""

import hashlib
import json
import warnings
from pathlib import Path

import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel import sweep
from fastmodel.api import evaluate
from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.io.batch import run_batch
from fastmodel.lm.api import evaluate_lm, evaluate_record
from fastmodel.lm.calibrate import read_calibration
from fastmodel.lm.calibrate.use import CalibrationWarning

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
H100_HBM_EFF = 0.80          # specs/devices/h100-sxm.toml
A100_HBM_EFF = 0.85          # specs/devices/a100-sxm.toml

HEADER = """[calibration]
format = 2
fitted_on = "hand.jsonl"
fitted_at = "2026-11-30T00:00:00Z"
"""


def write(tmp_path, body: str, name: str = "cal.toml") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body)
    return path


@pytest.fixture()
def h100_half_hbm(tmp_path):
    """H100 HBM efficiency halved, both network tiers set to their built-in values (no tier warning),
    a 2 s framework overhead."""
    return write(tmp_path, f"""
[device."H100-SXM-80GB"]
hbm_eff = {H100_HBM_EFF / 2}
intra.eff = 0.8
inter.eff = 0.85

[framework]
step_overhead_s = 2.0
""")


@pytest.fixture(scope="module")
def a100_record():
    line = next(line for line in RUNS.read_text().splitlines()
                if '"A100-SXM4-80GB"' in line and '"n_gpus": 8,' in line)
    return json.loads(line)


def test_evaluate_lm_applies_the_calibration_as_derived_by_hand(h100_half_hbm):
    base = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)     # both tiers and the device are covered
        cal = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=h100_half_hbm)
    assert float(cal.time_memory_bound) == pytest.approx(2 * float(base.time_memory_bound), rel=1e-12)
    assert float(cal.time_optimizer) == pytest.approx(2 * float(base.time_optimizer), rel=1e-12)
    assert float(cal.time_gemm) >= float(base.time_gemm)     # GEMMs: max(compute, memory) roofline
    assert float(base.time_memory_bound) > 0
    assert cal.attrs["calibration"] == "cal.toml"
    assert cal.attrs["calibration_sha256"] == hashlib.sha256(h100_half_hbm.read_bytes()).hexdigest()
    assert json.loads(cal.attrs["calibration_values"]) == {
        "framework.step_overhead_s": 2.0, 'device."H100-SXM-80GB".hbm_eff': 0.40,
        'device."H100-SXM-80GB".intra.eff': 0.8, 'device."H100-SXM-80GB".inter.eff': 0.85}
    assert "calibration" not in base.attrs


def test_a_stack_table_slows_every_kernel_of_its_framework_only(tmp_path, a100_record):
    # the built-in execution spec names framework "Megatron-Core": stack "megatron-core"
    path = write(tmp_path, '[stack."megatron-core"]\ncompute_eff = 0.8\n')
    base = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8")
    with pytest.warns(CalibrationWarning, match=r'no \[device."H100-SXM-80GB"\] table'):
        cal = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=path)
    for name in ("time_gemm", "time_attention", "time_memory_bound", "time_optimizer"):
        assert float(cal[name]) == pytest.approx(float(base[name]) / 0.8, rel=1e-12), name
    assert float(cal.step_time) > float(base.step_time)
    assert json.loads(cal.attrs["calibration_values"]) == {'stack."megatron-core".compute_eff': 0.8}
    # a run record of another (or no) framework keeps the modelled speed, and is told so
    with pytest.warns(CalibrationWarning, match=r"no \[stack\]|no \[stack\.") as caught:
        other = evaluate_record(a100_record, calibration=path)
    assert any("calibrated stacks: megatron-core" in str(w.message) for w in caught)
    assert float(other.step_time) == float(evaluate_record(a100_record).step_time)


def test_step_overhead_adds_exactly_its_seconds(tmp_path):
    path = write(tmp_path, "[framework]\nstep_overhead_s = 2.0\n")
    base = evaluate("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8")
    with pytest.warns(CalibrationWarning, match=r'no \[device."H100-SXM-80GB"\] table'):
        cal = evaluate("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=path)
    assert float(cal.step_time) == pytest.approx(float(base.step_time) + 2.0, rel=1e-12)


def test_a_calibration_object_works_like_its_file(h100_half_hbm):
    from_file = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=h100_half_hbm)
    cal = read_calibration(h100_half_hbm)
    from_object = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=cal)
    assert float(from_object.step_time) == float(from_file.step_time)
    assert from_object.attrs["calibration_sha256"] == from_file.attrs["calibration_sha256"]


def test_evaluate_record_applies_the_calibration_for_its_device(tmp_path, a100_record):
    path = write(tmp_path, f'[device."A100"]\nhbm_eff = {A100_HBM_EFF / 2}\nintra.eff = 0.77\n')   # an alias
    base = evaluate_record(a100_record)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        cal = evaluate_record(a100_record, calibration=path)
    assert float(cal.time_memory_bound) == pytest.approx(2 * float(base.time_memory_bound), rel=1e-12)
    assert json.loads(cal.attrs["calibration_values"]) == {'device."A100-SXM4-80GB".hbm_eff': 0.425,
                                                          'device."A100-SXM4-80GB".intra.eff': 0.77}
    assert "calibrated" in cal.attrs["notes"]


def test_sweep_applies_the_calibration_to_every_point_and_axes_still_win(h100_half_hbm):
    axes = {"num_nodes": [1, 2], "plan": ["tp8", "tp4.pp2"]}
    base = sweep("llama3-8b", "dgx-h100", "llm-pretrain", axes)
    cal = sweep("llama3-8b", "dgx-h100", "llm-pretrain", axes, calibration=h100_half_hbm)
    assert (cal.time_memory_bound.values == pytest.approx(2 * base.time_memory_bound.values, rel=1e-12))
    assert cal.step_time.values.shape == (2, 2) and cal.attrs["calibration"] == "cal.toml"
    # an axis over a fitted column sets it per point, over the calibration
    swept = sweep("llama3-8b", "dgx-h100", "llm-pretrain", {"hbm_eff": [H100_HBM_EFF]}, calibration=h100_half_hbm)
    plain = sweep("llama3-8b", "dgx-h100", "llm-pretrain", {"hbm_eff": [H100_HBM_EFF]})
    assert float(swept.time_memory_bound[0]) == pytest.approx(float(plain.time_memory_bound[0]), rel=1e-12)


def test_mismatched_device_and_tier_are_warned_and_left_physical(tmp_path):
    a100_only = write(tmp_path, '[device."A100-SXM4-80GB"]\nhbm_eff = 0.5\n')
    base = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8")
    with pytest.warns(CalibrationWarning) as caught:
        cal = evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", calibration=a100_only)
    assert [str(w.message) for w in caught] == [
        f'{a100_only}: no [device."H100-SXM-80GB"] table (calibrated devices: A100-SXM4-80GB); the efficiencies '
        "of H100-SXM-80GB keep their physical values"]
    assert float(cal.step_time) == float(base.step_time)
    no_tiers = write(tmp_path, '[device."H100-SXM-80GB"]\nhbm_eff = 0.5\n', "tiers.toml")
    with pytest.warns(CalibrationWarning, match=r"sets no value of the inter network tier used here "
                                                r"\(inter.eff, inter.latency_s\); it keeps its physical values"):
        evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", num_nodes=2,
                    calibration=write(tmp_path, '[device."H100-SXM-80GB"]\nintra.eff = 0.7\n', "intra.toml"))
    with pytest.warns(CalibrationWarning, match="intra and inter network tiers"):
        evaluate_lm("llama3-8b", "dgx-h100", "llm-pretrain", plan="tp8", num_nodes=2, calibration=no_tiers)


def test_a_madmax_model_refuses_a_calibration(h100_half_hbm):
    with pytest.raises(SpecError, match="calibration: applies to the real-world model"):
        evaluate("llama2-70b", "dc-a", "llm-pretrain", semantics="madmax", plan="fsdp", calibration=h100_half_hbm)
    with pytest.raises(SpecError, match="calibration: applies to the real-world model"):
        sweep("llama2-70b", "dc-a", "llm-pretrain", {"num_nodes": [16]}, semantics="madmax",
              calibration=h100_half_hbm)


def test_python_batch_calibrates_run_record_lines(tmp_path, a100_record):
    path = write(tmp_path, "[framework]\nstep_overhead_s = 3.0\n")
    line = json.dumps(a100_record)
    (base,) = run_batch([line])
    with pytest.warns(CalibrationWarning, match=r'no \[device."A100-SXM4-80GB"\] table'):
        (cal,) = run_batch([line], calibration=path)
    assert cal["status"] == "ok"
    assert cal["iteration_time"] == pytest.approx(base["iteration_time"] + 3.0, rel=1e-12)


# --- the command line ----------------------------------------------------------------------------------------

def test_cli_run_applies_and_names_the_calibration(h100_half_hbm):
    runner = CliRunner()
    args = ["run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-p", "tp8", "--json"]
    base = json.loads(runner.invoke(main, args).stdout)
    result = runner.invoke(main, [*args, "--calibration", str(h100_half_hbm)])
    assert result.exit_code == 0, result.output
    cal = json.loads(result.stdout)
    assert cal["time_memory_bound"] == pytest.approx(2 * base["time_memory_bound"], rel=1e-12)
    assert cal["calibration_sha256"] == hashlib.sha256(h100_half_hbm.read_bytes()).hexdigest()
    assert "calibration cal.toml" in cal["title"]


def test_cli_run_record_with_a_calibration(tmp_path, a100_record):
    record = tmp_path / "run.json"
    record.write_text(json.dumps(a100_record))
    cal = write(tmp_path, '[device."H100-SXM-80GB"]\nhbm_eff = 0.5\n')
    result = CliRunner().invoke(main, ["run", "-m", str(record), "--calibration", str(cal)])
    assert result.exit_code == 0, result.output
    assert "calibration cal.toml" in result.stdout
    assert result.stderr.strip() == (f'warning: {cal}: no [device."A100-SXM4-80GB"] table (calibrated devices: '
                                     "H100-SXM-80GB); the efficiencies of A100-SXM4-80GB keep their physical values")


@pytest.mark.parametrize("body, expected", [
    ('[device."H100-SXM-80GB"]\nhbm_eff = 2.0\n', 'device."H100-SXM-80GB".hbm_eff: 2 is outside [0.05, 1]'),
    ('[device."H100-SXM-80GB"]\nhbm_ef = 0.5\n', "hbm_ef: unknown field (did you mean 'hbm_eff'?)"),
    ('[stack."megatron-core"]\ncompute_ef = 0.9\n',
     "stack.\"megatron-core\".compute_ef: unknown field (did you mean 'compute_eff'?)"),
    ('[stack."nemo"]\ncompute_eff = 0.9\n', 'stack."nemo": not a stack profile'),
    ('[stack."megatron_core"]\ncompute_eff = 0.9\n', "not a stack profile (did you mean 'megatron-core'?)"),
    ('[stack."default:LLM.c 2"]\ncompute_eff = 0.9\n', 'stack."default:LLM.c 2": after \'default:\' the framework '
                                                       'text lower case without versions or parentheses: write '
                                                       '"default:llm.c"'),
    ('[stack."megatron-core"]\ncompute_eff = 3.0\n',
     'stack."megatron-core".compute_eff: 3 is outside [0.5, 2]'),
])
@pytest.mark.parametrize("command", [
    ["run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain"],
    ["batch", "-"],
])
def test_cli_bad_calibration_is_one_line_exit_2(tmp_path, body, expected, command):
    path = write(tmp_path, body)
    result = CliRunner().invoke(main, [*command, "--calibration", str(path)], input="")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {path}: ")
    assert expected in result.stderr


def test_cli_run_refuses_a_calibration_for_the_madmax_model(h100_half_hbm):
    result = CliRunner().invoke(main, ["run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain",
                                       "--semantics", "madmax", "--calibration", str(h100_half_hbm)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --calibration: applies to the real-world model")


def test_cli_batch_calibrates_run_records(tmp_path, a100_record):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(a100_record) + "\n")
    cal = write(tmp_path, f'[device."A100-SXM4-80GB"]\nhbm_eff = {A100_HBM_EFF / 2}\nintra.eff = 0.77\n'
                          "[framework]\nstep_overhead_s = 3.0\n")
    runner = CliRunner()
    base = json.loads(runner.invoke(main, ["batch", str(cases)]).stdout)
    result = runner.invoke(main, ["batch", str(cases), "--calibration", str(cal)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["status"] == "ok" and got["iteration_time"] > base["iteration_time"] + 3.0
    assert result.stderr.splitlines()[0].startswith(f"calibration {cal}: fitted on hand.jsonl")
    assert "warning" not in result.stderr


def test_cli_sweep_of_real_world_specs_applies_the_calibration(tmp_path, h100_half_hbm):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama3-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'
                          '[axes]\nnum_nodes = [1, 2]\nplan = ["tp8", "tp4.pp2"]\n')
    runner = CliRunner()
    for name, extra in (("base.nc", []), ("cal.nc", ["--calibration", str(h100_half_hbm)])):
        result = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(tmp_path / name), *extra])
        assert result.exit_code == 0, result.output
    with xr.open_dataset(tmp_path / "base.nc") as base, xr.open_dataset(tmp_path / "cal.nc") as cal:
        assert cal.time_memory_bound.values == pytest.approx(2 * base.time_memory_bound.values, rel=1e-12)
        assert cal.attrs["calibration_sha256"] == hashlib.sha256(h100_half_hbm.read_bytes()).hexdigest()
        assert "calibration" not in base.attrs
        base_values = base.time_memory_bound.values
    # a streamed store records the calibration too, and refuses to resume under another one
    result = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(tmp_path / "x.zarr"),
                                  "--calibration", str(h100_half_hbm)])
    assert result.exit_code == 0, result.output
    with xr.open_zarr(tmp_path / "x.zarr") as store:
        assert store.time_memory_bound.values == pytest.approx(2 * base_values, rel=1e-12)
    result = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(tmp_path / "x.zarr"), "--resume"])
    assert result.exit_code == 2
    result = runner.invoke(main, ["sweep", "llama3.1_70b_serving", "-o", str(tmp_path / "s.nc"),
                                  "--calibration", str(h100_half_hbm)])
    assert result.exit_code == 2 and "not to serving" in result.stderr


def test_cli_sweep_of_madmax_specs_refuses_a_calibration(tmp_path, h100_half_hbm):
    result = CliRunner().invoke(main, ["sweep", "llama2_70b_plans", "-o", str(tmp_path / "o.nc"),
                                       "--calibration", str(h100_half_hbm)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --calibration: applies to the real-world model")


def test_cli_validate_warns_about_devices_the_calibration_does_not_cover(tmp_path):
    cal = write(tmp_path, '[device."H100-SXM-80GB"]\nhbm_eff = 0.5\nintra.eff = 0.8\ninter.eff = 0.85\n')
    result = CliRunner().invoke(main, ["validate", str(RUNS), "--calibration", str(cal)])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [f'warning: {cal}: no [device."{name}"] table (calibrated devices: H100-SXM-80GB); the '
                      f"efficiencies of {gpu} keep their physical values"
                      for name, gpu in (("A100-SXM4-40GB", "A100-SXM4-40GB"), ("A100-SXM4-80GB", "A100-SXM4-80GB"))]


def test_one_device_spelt_two_ways_is_warned_once(tmp_path):
    """Records that spell one GPU two ways ("H100" and "H100-SXM-80GB") get one line for it, the tiers of both."""
    from fastmodel.lm.calibrate import read_calibration
    from fastmodel.lm.calibrate.use import mismatches

    cal = read_calibration(write(tmp_path, '[device."A100-SXM4-80GB"]\nhbm_eff = 0.5\n'))
    lines = mismatches(cal, {"H100": {"intra"}, "H100-SXM-80GB": {"inter"}})
    assert len(lines) == 1 and 'no [device."H100-SXM-80GB"] table' in lines[0]
    tiers = read_calibration(write(tmp_path, '[device."H100-SXM-80GB"]\nhbm_eff = 0.5\n', "h100.toml"))
    (line,) = mismatches(tiers, {"H100": {"intra"}, "H100-SXM-80GB": {"inter"}})
    assert "intra and inter network tiers" in line
