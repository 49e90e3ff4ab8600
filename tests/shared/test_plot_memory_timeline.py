"""The memory-timeline figure: memory over one step per pipeline rank, by kind, with the HBM lines."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import FastmodelError, SpecError
from fastmodel.plot.memory_timeline import memory_timeline, panel_stages

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def record():
    """A Megatron-LM run on 8 B200 (pp 2): the first line of runs_dev_b200.jsonl."""
    return json.loads((DATA / "runs_dev_b200.jsonl").read_text().splitlines()[0])


def test_panels_stack_to_each_moment_and_draw_hbm(record):
    from fastmodel import engines

    data = engines.memory_timeline(record=record)
    fig, axes = memory_timeline(data)
    assert len(axes) == len(data.stages) == 2
    for ax, stage in zip(axes, data.stages):
        top = max(np.max(c.get_paths()[0].vertices[:, 1]) for c in ax.collections)
        assert top == pytest.approx(stage.totals.max() / 2**30, rel=1e-9)
        lines = {line.get_gid(): line.get_ydata()[0] for line in ax.get_lines()}
        assert lines["hbm"] == pytest.approx(data.hbm_bytes / 2**30)
        assert lines["usable"] < lines["hbm"]
    custom = engines.memory_timeline(record=record, memory_margin=10 * 2**30)
    assert custom.usable_bytes == pytest.approx(custom.hbm_bytes - 10 * 2**30)


def test_panel_choice():
    assert panel_stages(3) == [0, 1, 2]
    assert panel_stages(16) == [0, 5, 10, 15]


def test_bad_margin_and_serving_are_errors(record):
    from fastmodel import engines

    with pytest.raises(FastmodelError, match="memory_margin"):   # run's and best's check (a SweepError)
        engines.memory_timeline(record=record, memory_margin=-1.0)
    serving = json.loads((DATA / "serve_dev_load.jsonl").read_text().splitlines()[0])
    with pytest.raises(SpecError, match="serving record"):
        engines.memory_timeline(record=serving)


def test_cli(record, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    runner = CliRunner()
    out = tmp_path / "memory.png"
    result = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    bad = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(tmp_path / "b.png"),
                               "--memory-margin", "-1"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "--memory-margin: -1 GiB is negative" in bad.output
    # above the HBM: named as the option and the value as typed, as the negative one (it said "memory_margin: 900.0")
    big = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(tmp_path / "c.png"),
                               "--memory-margin", "900"])
    assert big.exit_code == 2 and big.output.count("\n") == 1, big.output
    assert "error: --memory-margin: 900 GiB is not below the HBM of " in big.output, big.output
    assert not (tmp_path / "c.png").exists()


def test_specs_take_an_execution_as_evaluate_does(record):
    """Walk of issues 22-23: the API drew specs only under the default execution (a DualPipe or fully recomputed
    timeline of a built-in model needed a hand-written record). ``execution=`` runs them as ``fastmodel.evaluate``
    does: the highest moment over the ranks (plus nothing: overhead is a kind) is evaluate's memory_per_device
    under the same execution; beside a record it is refused."""
    import fastmodel
    from fastmodel import engines

    specs = {"model": "qwen3-30b-a3b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp2.pp4.ep8",
             "num_nodes": 8}
    peaks = {}
    for recompute in ("selective", "full"):
        data = engines.memory_timeline(**specs, execution={"recompute": recompute})
        peaks[recompute] = max(stage.totals.max() for stage in data.stages)
        ds = fastmodel.evaluate(specs["model"], specs["system"], specs["task"], plan=specs["plan"],
                                num_nodes=specs["num_nodes"], execution={"recompute": recompute})
        assert peaks[recompute] == pytest.approx(float(ds.memory_per_device), rel=1e-9)
    assert peaks["full"] < 0.75 * peaks["selective"]     # full recompute keeps one layer input per layer
    fig, axes = memory_timeline(**specs, execution={"pipeline_schedule": "dualpipe", "moe_a2a_overlap": "dualpipe"})
    assert len(axes) == 4
    with pytest.raises(SpecError, match="execution: a run record executes as its plan block says"):
        engines.memory_timeline(record=record, execution={"recompute": "full"})
