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
