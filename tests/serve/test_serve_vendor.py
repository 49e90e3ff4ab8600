"""Serving engines by device vendor (docs/model_serving.md S56; fastmodel/serve/profiles.py ``ENGINE_VENDORS``,
``VENDOR_DEFAULT_ENGINE``; kernels/serve/evaluate.py ``check``): TensorRT-LLM runs on NVIDIA GPUs only, so the
default engine on an AMD device (MI300X) is vLLM at its newest version, an explicit TensorRT-LLM there is one line
(exit 2) for one evaluation and the status ``engine_not_on_device`` in a sweep; NVIDIA devices keep TensorRT-LLM."""

import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.registry.serve import SERVE_STATUS_NAMES
from fastmodel.serve.api import evaluate, sweep
from fastmodel.serve.profiles import KNOWN_VERSIONS, default_engine_note, engine_choice, profile_columns
from fastmodel.serve.search import engine_list

REFUSAL = ("TensorRT-LLM runs on NVIDIA GPUs only and MI300X is an AMD device; choose vllm or sglang "
           "(docs/model_serving.md S56)")


def test_the_default_engine_follows_the_vendor():
    assert engine_choice(None, vendor="amd") == ("vllm", None, [default_engine_note("amd")])
    assert "TensorRT-LLM, the default engine, does not run on an AMD device; the vLLM profile" in \
        default_engine_note("amd")
    assert engine_choice(None)[0] == engine_choice(None, vendor="nvidia")[0] == "trtllm"
    assert engine_list(None, "MI300X") == ["vllm"] and engine_list(None, "H100") == ["trtllm"]


@pytest.mark.parametrize("name", ["TensorRT-LLM", "trtllm", "TensorRT-LLM 1.0.0rc3"])
def test_tensorrt_llm_on_mi300x_is_refused_in_one_line(name):
    with pytest.raises(SpecError) as err:
        engine_choice(name, "--engine", None, vendor="amd", device="MI300X")
    assert str(err.value) == f"--engine: {REFUSAL}"
    with pytest.raises(SpecError, match="runs on NVIDIA GPUs only"):
        engine_list(name, "MI300X")
    assert engine_choice(name, vendor="amd")[0] == "trtllm"          # no device: a sweep marks the point instead
    for other in ("vllm", "SGLang 0.5.6.post2"):
        assert engine_choice(other, vendor="amd", device="MI300X")[0] in ("vllm", "sglang")


def test_the_profile_states_whether_the_engine_is_nvidia_only():
    for engine, versions in KNOWN_VERSIONS.items():
        for version in (None, *versions):
            assert profile_columns(engine, version, 192 * 2**30)["engine_nvidia_only"] == (engine == "trtllm")


def test_a_sweep_marks_tensorrt_llm_on_mi300x_and_runs_the_rest():
    grid = sweep("llama3.1-8b", device=["H100", "MI300X"], engine="trtllm", batch_size=[1, 8])
    names = [SERVE_STATUS_NAMES[int(c)] for c in grid.status.values.ravel()]
    assert names == ["ok", "ok", "engine_not_on_device", "engine_not_on_device"]
    vllm = sweep("llama3.1-8b", device=["H100", "MI300X"], engine="vllm", batch_size=[1, 8])
    assert set(vllm.status.values.ravel().tolist()) == {0}


def test_the_default_engine_is_chosen_per_device_in_one_sweep():
    """A device axis crossing the vendors prices each device under its own default engine: the grid's values are
    the single evaluations' under TensorRT-LLM (H100) and vLLM (MI300X)."""
    grid = sweep("llama3.1-8b", device=["H100", "MI300X"], batch_size=[1, 64])
    assert default_engine_note("nvidia") in grid.attrs["notes"] and default_engine_note("amd") in grid.attrs["notes"]
    for device, engine in (("H100", "trtllm"), ("MI300X", "vllm")):
        for b in (1, 64):
            alone = evaluate("llama3.1-8b", device, engine=engine, batch_size=b)
            point = grid.sel(device=device, batch_size=b).squeeze()
            assert float(point.tpot) == pytest.approx(alone["tpot"], rel=1e-12)
            assert float(point.ttft) == pytest.approx(alone["ttft"], rel=1e-12)
    assert evaluate("llama3.1-8b", "MI300X", batch_size=1)["tpot"] == \
        evaluate("llama3.1-8b", "MI300X", engine="vllm", batch_size=1)["tpot"]
    with pytest.raises(SpecError, match="engine: TensorRT-LLM runs on NVIDIA GPUs only"):
        evaluate("llama3.1-8b", "MI300X", engine="trtllm", batch_size=1)


def test_the_cli_refuses_tensorrt_llm_on_mi300x_and_notes_the_default():
    runner = CliRunner()
    run = runner.invoke(main, ["serve", "--model", "llama3.1-8b", "--device", "MI300X", "--engine", "TensorRT-LLM"])
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert REFUSAL in run.output
    run = runner.invoke(main, ["serve", "--model", "llama3.1-8b", "--device", "MI300X"])
    assert run.exit_code == 0, run.output
    assert "the vLLM profile at its newest version is used (docs/model_serving.md S56)" in run.output


def test_a_record_takes_the_vendors_default_and_keeps_a_stated_engine_for_the_kernel():
    """A serving record without a ``framework`` on an AMD GPU takes vLLM's profile with the note; one that names
    TensorRT-LLM keeps its profile, whose ``engine_nvidia_only`` the kernel turns into ``engine_not_on_device``."""
    from fastmodel.serve.profiles import record_engine

    hbm = 192 * 2**30
    engine, version, notes = record_engine(None, "amd")      # the engine whose profile_columns the record lowers with
    assert (engine, version) == ("vllm", None) and notes == [default_engine_note("amd")]
    assert record_engine(None)[:2] == ("trtllm", None)       # NVIDIA: unchanged
    assert profile_columns(*record_engine("TensorRT-LLM 1.2.0rc2", "amd")[:2], hbm)["engine_nvidia_only"] == 1.0


def test_a_record_without_framework_on_an_amd_gpu_lowers_as_the_vendors_default_engine_record():
    """Review MED: the profile of a framework-less MI300X record was vLLM's, its engine-dependent kernel columns
    (act_quant_inputs, fp4_act, the MoE and query-quantization kernels) TensorRT-LLM's; one engine sets both now.
    The record is a dev Qwen3-235B FP8 row moved to MI300X: without a framework it lowers to the same columns as
    the same record naming vLLM (newest version), its notes aside."""
    import json
    from pathlib import Path

    from fastmodel.serve.records import lower_serve_record

    line = Path(__file__).parents[1].joinpath("data", "serve_dev_load.jsonl").read_text().splitlines()[0]
    data = json.loads(line)
    data["system"] = {"gpu": "MI300X", "n_gpus": data["system"]["n_gpus"], "gpus_per_node": 8}
    bare = lower_serve_record({k: v for k, v in data.items() if k != "framework"})
    named = lower_serve_record({**data, "framework": "vLLM"})
    assert (bare.columns == named.columns).all()
    assert any("does not run on an AMD device" in note for note in bare.notes)


def test_a_serving_sweep_file_notes_every_devices_default_engine():
    """Review LOW: a sweep file's device axis [H100, MI300X] noted the first device's default engine only, while
    MI300X ran vLLM's profile; the plan's notes now hold each vendor's, as the API's sweep does."""
    from fastmodel.serve.models import serving_model
    from fastmodel.serve.spec import load_serve_task
    from fastmodel.serve.sweep_plan import ServeSweepPlan

    name, columns, notes = serving_model("llama3.1-8b")
    plan = ServeSweepPlan(name, columns, "H100", load_serve_task("serve-chat"),
                          {"device": ["H100", "MI300X"], "batch_size": [1]}, notes=notes)
    assert plan.run_notes == [default_engine_note("nvidia"), default_engine_note("amd")]
