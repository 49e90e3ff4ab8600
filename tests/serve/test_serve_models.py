"""Models ``serve -m`` takes (fastmodel/serve/models.py): the built-in serving models and every family-"lm" spec,
read by one mapping (``serving_model``); features serving does not price are a note or a one-line refusal (§S40)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.serve.api import evaluate
from fastmodel.serve.models import serving_model
from tests.suite_fixtures import cli, one_line_error

DATA = Path(__file__).resolve().parents[1] / "data"


def _gpt_oss_record() -> dict:
    """The model block of the dev gpt-oss-120b records (serve_dev_load.jsonl), at -m's deployment."""
    line = next(x for x in (DATA / "serve_dev_load.jsonl").read_text().splitlines() if '"gpt-oss-120b"' in x)
    return {"id": "x", "model": json.loads(line)["model"], "system": {"gpu": "H200", "n_gpus": 2},
            "serve": {"tp": 2, "precision": "bf16", "input_len": 1024, "output_len": 128, "concurrency": 16}}


def test_serve_m_gpt_oss_120b_runs_and_its_model_is_the_dev_records_model():
    result = CliRunner().invoke(main, ["serve", "-m", "gpt-oss-120b", "-d", "H200", "--tp", "2", "--concurrency",
                                       "16", "--json"])
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in result.stdout.splitlines()]
    assert line["status"] == "ok" and line["fits_memory"]
    direct = evaluate("gpt-oss-120b", "H200", tp=2, concurrency=16)
    assert line["tpot"] == pytest.approx(direct["tpot"], rel=1e-12)
    # the same model columns as the dev record's model block lowered by the serving-record path
    from fastmodel.serve.records import lower_serve_record

    lowered = lower_serve_record(_gpt_oss_record()).columns
    _, columns, notes = serving_model("gpt-oss-120b")
    assert notes == []
    for c in COLUMNS:
        if c.group == "model" and c.name != "seq_len":
            assert columns.get(c.name, c.default) == lowered[COLUMN_INDEX[c.name]], c.name
    from fastmodel.serve.api import evaluate_record

    record = evaluate_record(_gpt_oss_record())
    for key in ("weight_memory", "kv_bytes_per_token", "memory_per_device"):
        assert line[key] == float(record[key]), key
    # by hand (HF openai/gpt-oss-120b config.json): per layer q 2880x64x64 + k, v 2 x 2880x8x64 + o 64x64x2880,
    # 128 experts x 3 x 2880 x 2880, router 2880 x 128, 2 RMSNorm 2 x 2880; embedding and LM head 201088 x 2880
    # each; 36 layers = 116.83e9 parameters (the model card's 116.83B), BF16 over TP 2
    layer = 2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64 + 128 * 3 * 2880 * 2880 + 2880 * 128 + 2 * 2880
    params = 36 * layer + 2 * 201088 * 2880
    assert params == pytest.approx(116.83e9, rel=1e-3)
    assert line["weight_memory"] == pytest.approx(2 * params / 2, rel=1e-3)
    # KV: 2 (K, V) x 36 layers x 8 KV heads x 64 x 2 B over TP 2 = 36,864 B per token and GPU
    assert line["kv_bytes_per_token"] == 2 * 36 * 8 * 64 * 2 / 2


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                  "llama4-maverick", "gpt-oss-120b"])
def test_every_built_in_moe_model_is_served(name):
    _, columns, _ = serving_model(name)
    assert columns["moe_experts"] > 0 and columns["moe_topk"] > 0 and "seq_len" not in columns
    out = evaluate(name, "H200", tp=8, ep=8, precision="fp8", concurrency=8)
    assert out["status"] == "ok" and out["tpot"] > 0


def test_mla_reaches_the_kernels():
    """DeepSeek-V3: the KV cache is the MLA latent, 61 x (512 + 64) x 1 B (FP8) per token on every TP rank (the
    latent is shared by the heads, so each rank holds all of it), not 2 x 61 x 128 x 128 / 8 B."""
    out = evaluate("deepseek-v3", "B200", tp=8, ep=8, precision="fp8", concurrency=1)
    assert out["kv_bytes_per_token"] == 61 * (512 + 64) * 1


def test_unpriced_columns_are_notes_and_a_model_serving_cannot_run_is_one_line(tmp_path):
    assert any("model.mtp_layers = 1" in note for note in serving_model("deepseek-v3")[2])
    text = (Path(__file__).resolve().parents[2] / "specs" / "models" / "mixtral-8x7b.toml").read_text()
    path = tmp_path / "dropping.toml"
    path.write_text(text + "\nmoe_capacity_factor = 1.25\n")
    result = CliRunner().invoke(main, ["serve", "-m", str(path), "--tp", "2"])   # 93 GB: no KV room on one H100
    assert result.exit_code == 0 and "note: Mixtral 8x7B: model.moe_capacity_factor = 1.25: " in result.stderr
    for model in ("vit-h", "gpt-oss-12b"):     # a MAD-Max (non-LM) model; a typo, with the nearest name
        refused = CliRunner().invoke(main, ["serve", "-m", model])
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "did you mean 'gpt-oss-120b'" in refused.output


def test_the_python_api_returns_the_notes_the_cli_prints():
    """serving_model's notes reach the Python API: evaluate's ``notes``, sweep's and a serving sweep plan's Dataset
    attrs (fastmodel.sweep), each "; "-joined and empty for a model without them; evaluate_record carries the
    lowering's notes, as the training engine's does."""
    from fastmodel.serve.api import evaluate_record, sweep
    from fastmodel.serve.profiles import default_engine_note
    from fastmodel.serve.records import lower_serve_record
    from fastmodel.serve.sweep_file import serve_plan

    notes = "; ".join(serving_model("deepseek-v3")[2])
    assert "model.mtp_layers = 1" in notes
    kw = dict(tp=8, ep=8, precision="fp8", input_len=128, output_len=16, engine="trtllm")
    assert evaluate("deepseek-v3", "H200", concurrency=1, **kw)["notes"] == notes
    assert evaluate("llama3.1-70b", "H200", tp=8, concurrency=1, engine="trtllm")["notes"] == ""
    assert sweep("deepseek-v3", device="H200", batch_size=[1, 2], **kw).attrs["notes"] == notes
    assert sweep("llama3.1-8b", device="H200", batch_size=[1, 2], engine="trtllm").attrs["notes"] == ""
    # without an engine, the default engine's note follows the model's (docs/model_serving.md S13)
    assert evaluate("llama3.1-70b", "H200", tp=8, concurrency=1)["notes"] == default_engine_note()
    specs = Path(__file__).resolve().parents[2] / "specs"
    plan = serve_plan(None, "deepseek-v3", "H200", "serve-chat", {"tp": [8], "ep": [8]}, specs)
    assert plan.dataset_attrs()["notes"] == f"{notes}; {default_engine_note()}" and "notes" not in plan.definition()
    assert plan.run_notes == [default_engine_note()]
    lowered = "; ".join(lower_serve_record(_gpt_oss_record()).notes)     # the device file's fill-ins
    assert "from the device file of H200" in lowered and evaluate_record(_gpt_oss_record()).attrs["notes"] == lowered


def test_list_models_shows_the_lm_moe_models():
    result = CliRunner().invoke(main, ["serve", "--list-models"])
    assert result.exit_code == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    for name in ("llama3.1-70b", "deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "gpt-oss-120b", "llama4-maverick"):
        assert name in names
    assert "vit-h" not in names


def test_a_misspelled_serving_model_is_answered_with_the_nearest_of_both_lists():
    """Hurried-user pass: `serve --model llama-3.1-8b` suggested the training spec 'llama-30b'."""
    result = CliRunner().invoke(main, ["serve", "--model", "llama-3.1-8b", "--concurrency", "4"])
    assert result.exit_code != 0
    assert "did you mean 'llama3.1-8b'?" in result.output


def test_a_madmax_model_is_refused_with_serving_s_models_not_the_madmax_semantics(tmp_path):
    """`serve -m llama2-70b` (a MAD-Max spec): the training engine's "or semantics 'madmax'" does not apply to
    serving, whose one line lists its own models; a sweep file names itself, then the model."""
    result = cli("serve", "-m", "llama2-70b", "--batch-size", "1")
    one_line_error(result, "llama2-70b: model.family: 'llm' is a MAD-Max model; serving models: llama3.1-8b")
    assert "semantics" not in result.output
    sweep = tmp_path / "s.toml"
    sweep.write_text('model = "llama2-70b"\nsystem = "H100"\ntask = "serve-chat"\n[axes]\ntp = [1, 2]\n')
    one_line_error(cli("sweep", sweep, "-o", tmp_path / "s.nc"), f"{sweep}: model: llama2-70b: model.family: 'llm'")
    assert not (tmp_path / "s.nc").exists()


def test_moe_tp_on_a_dense_model_is_refused_not_ignored():
    """The kernel's moe_tp rule reads routed experts only: on a dense model --moe-tp changed nothing, silently."""
    one_line_error(cli("serve", "-m", "llama3.1-8b", "--moe-tp", "3", "--batch-size", "1"),
                   "--moe-tp: llama3.1-8b is a dense model (no routed experts to split); leave it out")
    assert cli("serve", "-m", "mixtral-8x7b", "--tp", "2", "--moe-tp", "2", "--batch-size", "1").exit_code == 0


def _first_line(name: str) -> dict:
    return json.loads((Path(__file__).parents[1] / "data" / name).read_text().splitlines()[0])


@pytest.mark.parametrize("kind, said", [
    ("serve_record", "a serving record (SERVE_RUNS.md), not a model spec: evaluate it as RECORDS"),
    ("run_record", "a training run record (RUNS.md), not a model spec: 'fastmodel run -m FILE' evaluates it"),
    ("jsonl", "a JSON-lines file (one record per line), not a model spec: serving records go as RECORDS"),
    ("sweep", "a sweep file (it has [axes]): run it with 'fastmodel sweep FILE -o out.nc'"),
])
def test_another_input_given_as_the_model_is_named_as_what_it_is(tmp_path, kind, said):
    """`serve -m rec.json` said "model.id: unknown field (did you mean 'hidden'?) [and 17 more problems]", a
    .jsonl "invalid TOML: Invalid statement", a sweep file "model.model: unknown field": each is one line naming
    the file's kind and where it goes, as `run -m` names them."""
    if kind == "serve_record":
        path = tmp_path / "rec.json"
        path.write_text(json.dumps(_first_line("serve_dev_load.jsonl")))
    elif kind == "run_record":
        path = tmp_path / "run.json"
        path.write_text(json.dumps(_first_line("runs_dev.jsonl")))
    elif kind == "jsonl":
        path = tmp_path / "recs.jsonl"
        path.write_text(json.dumps(_first_line("serve_dev_load.jsonl")) + "\n")
    else:
        path = tmp_path / "sweep.toml"
        path.write_text('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [1]\n')
    one_line_error(cli("serve", "-m", path, "--batch-size", "1"), f"{path}: model: {said}")
    with pytest.raises(Exception, match="^" + str(path).replace("\\", "\\\\")):
        evaluate(str(path), "H100", batch_size=1)
