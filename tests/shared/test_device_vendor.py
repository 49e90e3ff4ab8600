"""The device files' ``vendor`` (fastmodel/spec/devices.py ``vendor_code``, registry column ``vendor``): every built-in
device file states it, MI300X is AMD and every other file NVIDIA, and a missing or misspelled vendor is a one-line
SpecError naming the file, the field and the choices (the spec loader's nearest-name rule)."""

from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.registry.lm_lowprec import VENDORS
from fastmodel.spec.devices import device_table, device_vendor, vendor_code

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - python < 3.11
    import tomli as tomllib

DEVICES = Path(__file__).resolve().parents[2] / "specs" / "devices"


def test_every_device_file_states_its_vendor():
    files = sorted(DEVICES.glob("*.toml"))
    assert len(files) >= 12
    stated = {f.stem: tomllib.loads(f.read_text()).get("vendor") for f in files}
    assert stated.pop("mi300x") == "amd"
    assert set(stated.values()) == {"nvidia"}, stated


def test_vendor_codes_reach_the_column_table():
    assert device_table()["mi300x"]["vendor"] == VENDORS["amd"] == 1
    assert device_table()["h100"]["vendor"] == VENDORS["nvidia"] == 0
    assert device_vendor("AMD-MI300X") == "amd" and device_vendor("B300") == "nvidia"
    assert device_vendor("no-such-gpu") == "nvidia"          # no device file: the registry default


@pytest.mark.parametrize("value, reason", [
    (None, "specs/devices/x.toml: vendor: missing; write one of nvidia, amd"),
    ("nvidai", "specs/devices/x.toml: vendor: unknown vendor 'nvidai' (did you mean 'nvidia'?); choose one of "
               "nvidia, amd"),
    (3, "specs/devices/x.toml: vendor: unknown vendor 3; choose one of nvidia, amd"),
])
def test_a_missing_or_unknown_vendor_is_one_line(value, reason):
    with pytest.raises(SpecError) as err:
        vendor_code(value, "specs/devices/x.toml")
    assert str(err.value) == reason


def test_vendor_names_are_case_blind():
    assert vendor_code("AMD") == 1 and vendor_code("NVIDIA") == 0
