"""A calibration's ``[stack."NAME"]`` tables apply on the devices of the runs they were fitted on
(``fastmodel.lm.calibrate.stack_tables``; docs/calibration.md, "A stack's values apply on the devices of its
runs"): one stack on one GPU scales that GPU's kernels with the software's, so its runs identify the pair."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import tomllib

from fastmodel.errors import SpecError
from fastmodel.lm.calibrate import Calibration, apply_calibration, parse_calibration
from fastmodel.lm.calibrate.fit import fit
from fastmodel.lm.calibrate.overlay import to_toml
from fastmodel.lm.calibrate.use import applied, mismatches
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
A100, H100 = "A100-SXM4-80GB", "H100-SXM-80GB"
HEADER = {"format": 2, "fitted_on": "x", "fitted_at": "now"}


@pytest.fixture(scope="module")
def fms():
    """The dev runs' fms-fsdp rows: Llama 2 7B-70B on 96 H100s and on 128 A100s (four each)."""
    runs = sorted((r for r in read_records(RUNS) if r.stack == "fms-fsdp"), key=lambda r: r.id)
    assert {r.gpu for r in runs} == {A100, H100}
    return runs


def test_a_scoped_stack_table_applies_on_its_devices_only(fms):
    # "H100" is an alias of the H100-SXM-80GB device file: the scope is kept by the canonical name
    cal = parse_calibration({"calibration": HEADER,
                             "stack": {"fms-fsdp": {"compute_eff": 0.8, "devices": ["H100"]}}})
    assert cal.stack_devices == {"fms-fsdp": (H100,)}
    assert cal.values_for(H100, "fms-fsdp") == {"stack_compute_eff": 0.8}
    assert cal.values_for(A100, "fms-fsdp") == {}
    for r in apply_calibration(fms, cal):
        assert r.columns[C["stack_compute_eff"]] == (0.8 if r.gpu == H100 else 1.0), r.id
    # a table that names no devices applies on every device (format-2 files written before the scope)
    unscoped = parse_calibration({"calibration": HEADER, "stack": {"fms-fsdp": {"compute_eff": 0.8}}})
    assert unscoped.stack_devices == {} and unscoped.values_for(A100, "fms-fsdp") == {"stack_compute_eff": 0.8}


@pytest.mark.parametrize("devices", ["H100", [], [""], [3]])
def test_a_bad_devices_field_names_its_path(devices):
    with pytest.raises(SpecError) as error:
        parse_calibration({"calibration": HEADER, "stack": {"fms-fsdp": {"compute_eff": 0.8, "devices": devices}}})
    assert 'stack."fms-fsdp".devices' in str(error.value) and "non-empty list of device names" in str(error.value)


def test_the_scope_round_trips_through_toml():
    cal = Calibration(header=HEADER, stacks={"fms-fsdp": {"stack_compute_eff": 0.81}},
                      stack_devices={"fms-fsdp": (A100, H100)})
    text = to_toml(cal)
    assert f'[stack."fms-fsdp"]\ndevices = ["{A100}", "{H100}"]\ncompute_eff = 0.81' in text
    back = parse_calibration(tomllib.loads(text))
    assert back.stacks == cal.stacks and back.stack_devices == cal.stack_devices


def test_a_stack_fitted_on_one_gpu_reaches_no_other_gpu(fms):
    """Synthetic H100 runs made by the model with the stack at 0.8 of the modelled kernel speed: the fit (no
    pull) recovers 0.8 and writes it for H100 alone; the A100 runs of the same stack keep the modelled speed
    (before the scope they took 0.8: in the half split of the dev runs that took them from 5.4% to 16.4%)."""
    h100 = [r for r in fms if r.gpu == H100]
    table = np.stack([r.columns for r in h100], axis=1).copy()
    table[C["stack_compute_eff"]] = 0.8
    steps = evaluate_table(table)["step_time"]
    runs = [dataclasses.replace(r, measured={"step_time_s": float(s)}) for r, s in zip(h100, steps)]
    result = fit(runs, prior=0.0)
    stack = next(p for p in result.parameters if p.stack == "fms-fsdp" and p.column == "stack_compute_eff")
    assert stack.fitted and stack.value == pytest.approx(0.8, rel=1e-2) and stack.devices == (H100,)
    cal = result.calibration()
    assert cal.stack_devices == {"fms-fsdp": (H100,)}
    a100 = [r for r in fms if r.gpu == A100]
    for before, after in zip(a100, apply_calibration(a100, cal)):
        assert after.columns[C["stack_compute_eff"]] == before.columns[C["stack_compute_eff"]] == 1.0
    software = [("PyTorch FSDP (fms-fsdp)", None)]
    assert not any(k.startswith("stack.") for k in applied(cal, [A100], software))
    assert 'stack."fms-fsdp".compute_eff' in applied(cal, [H100, A100], software)
    lines = mismatches(cal, {A100: {"intra", "inter"}}, software)
    assert any(f'[stack."fms-fsdp"] applies on {H100}' in line and f"not on {A100}" in line for line in lines)


def test_the_report_names_the_devices_a_stack_value_applies_on(fms):
    from fastmodel.lm.calibrate.report import parameter_table

    h100 = [dataclasses.replace(r, measured={"step_time_s": 1.1 * float(s)}) for r, s in zip(
        [r for r in fms if r.gpu == H100],
        evaluate_table(np.stack([r.columns for r in fms if r.gpu == H100], axis=1))["step_time"])]
    result = fit(h100, prior=0.0)
    line = next(t for t in parameter_table(result).splitlines() if t.startswith('stack."fms-fsdp".compute_eff'))
    assert line.endswith(f"pinned by the runs; applies on {H100}")
