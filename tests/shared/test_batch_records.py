"""Run records and serving records through batch and run, detected by content (issues 10 and 12)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.io.batch import run_batch
from fastmodel.lm.api import evaluate_record

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
SERVE = {"id": "s1", "model": {"name": "Llama-3.1-8B", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32,
                               "kv_heads": 8, "head_dim": 128, "vocab": 128256, "ffn_kind": "swiglu3",
                               "moe_experts": 0, "moe_topk": 0},
         "system": {"gpu": "H100-SXM-80GB", "n_gpus": 1, "gpus_per_node": 8, "peak_flops_bf16": 989e12,
                    "peak_flops_fp8": 1979e12, "hbm_bytes": 85899345920, "hbm_bw_bytes_s": 3.35e12,
                    "intra_node_bw_bytes_s_per_gpu": 450e9, "inter_node_bw_bytes_s_per_gpu": 50e9},
         "serve": {"tp": 1, "pp": 1, "ep": 1, "precision": "bf16", "kv_precision": "bf16", "input_len": 128,
                   "output_len": 128, "batch_size": 8}}


def test_batch_reads_run_records_like_run():
    lines = RUNS.read_text().splitlines()[:6]
    records = list(run_batch(lines + ['{"model": {"layers": 1}, "system": {}, "plan": {"tp": 1}}']))
    assert [r["status"] for r in records[:6]] == ["ok"] * 6
    assert "model.hidden" in records[6]["status"]
    for line, record in zip(lines, records):
        alone = evaluate_record(json.loads(line))
        assert record["iteration_time"] == float(alone.step_time)          # the step time under the usual key
        assert record["memory_per_device"] == float(alone.memory_per_device)
        assert record["mfu"] == float(alone.mfu)


def test_batch_reads_serving_records_and_mixes_kinds():
    lines = [json.dumps(SERVE), '{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", '
             '"plan": "tp,ddp/mp", "num_nodes": 16}', RUNS.read_text().splitlines()[0]]
    records = list(run_batch(lines))
    assert [r["status"] for r in records] == ["ok"] * 3
    assert records[0]["id"] == "s1" and records[0]["tpot"] > 0 and records[0]["ttft"] > 0
    assert records[1]["plan"] == "tp8,ddp16/mp128" and records[1]["iteration_time"] > 0
    assert records[2]["step_time"] == records[2]["iteration_time"]


def test_run_reads_a_serving_record(tmp_path):
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(SERVE))
    result = CliRunner().invoke(main, ["run", "-m", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["status"] == "ok" and data["tpot"] == pytest.approx(data["e2e_latency"] / 128, rel=0.2)


def test_batch_evaluates_every_input_kind_in_one_file_as_run_does(tmp_path):
    """One line of each kind README lists: a MAD-Max spec, a real-world spec, a run record, a serving record."""
    from fastmodel.lm.api import config_values

    real = {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp8.pp4", "num_nodes": 16}
    lines = ['{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp,ddp/mp", '
             '"num_nodes": 16}', json.dumps(real), RUNS.read_text().splitlines()[0], json.dumps(SERVE)]
    records = list(run_batch(lines))
    assert [r["status"] for r in records] == ["ok"] * 4, records
    alone = config_values("llama3.1-70b", "dgx-h100", "llm-pretrain", plan="tp8.pp4", num_nodes=16)
    assert records[1]["iteration_time"] == alone["step_time"] and records[1]["plan"] == "tp8.pp4"
    assert records[1]["mfu"] == alone["mfu"] and records[1]["memory_per_device"] == alone["memory_per_device"]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["batch", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["status"] for line in result.stdout.splitlines()] == ["ok"] * 4


def test_real_world_spec_lines_give_run_s_one_line_reasons():
    bad = [{"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp3"},
           {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-finetune"},
           {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain", "semantics": "madmax"},
           {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain", "plann": "tp8"}]
    records = list(run_batch([json.dumps(line) for line in bad]))
    assert "devices_not_divisible" in records[0]["status"]
    assert "task.kind" in records[1]["status"] and "pretraining" in records[1]["status"]
    assert "semantics 'default'" in records[2]["status"]
    assert "unknown key 'plann'" in records[3]["status"] and "'plan'" in records[3]["status"]


def test_an_execution_field_at_the_top_of_a_line_says_where_it_goes():
    """"micro_batch": 2 beside "model" said only "unknown key 'micro_batch'"; it names the execution block, and a
    key with no near match lists the keys a line takes."""
    base = {"model": "llama3.1-70b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp8.pp4"}
    records = list(run_batch([json.dumps({**base, "micro_batch": 2}), json.dumps({**base, "zzz": 1})]))
    assert "an execution field: write \"execution\": {\"micro_batch\": ...}" in records[0]["status"], records[0]
    assert "a line takes case, execution, model, num_nodes, plan, semantics, system, task" in records[1]["status"]


def test_a_line_carries_only_its_engine_s_variables_and_tables_the_union_of_the_kinds_present(tmp_path):
    """A run record's line holds the real-world model's variables (no MAD-Max key set to null), a MAD-Max line
    MAD-Max's, a serving line serving's; CSV and Parquet take the union of the columns of the kinds present."""
    pq = pytest.importorskip("pyarrow.parquet")
    import csv

    from fastmodel.io.batch import engine_outputs

    madmax = '{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp,ddp/mp", "num_nodes": 16}'
    lines = [madmax, RUNS.read_text().splitlines()[0], json.dumps(SERVE)]
    records = list(run_batch(lines))
    labels = (["plan"], ["id"], ["id", "limiting_pool"])    # a serving line: which pool limits a disagg record
    for record, engine, label in zip(records, ("madmax", "lm", "serve"), labels):
        assert list(record) == ["case", "status", *label, *engine_outputs(engine)[0]], engine
        # null only where the engine has no value (MAD-Max: no train_samples, price or TDP in these specs; an
        # aggregated serving record: no limiting pool)
        assert {k for k, v in record.items() if v is None} <= {"train_time", "gpu_hours", "cost", "energy",
                                                               "limiting_pool"}
    assert "tokens_per_s" not in records[0] and "exposed_comm" not in records[1] and "step_time" not in records[2]
    assert records[1]["memory_weights"] > 0 and records[1]["iteration_time"] == records[1]["step_time"]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    for name in ("out.csv", "out.parquet"):
        assert CliRunner().invoke(main, ["batch", str(source), "-o", str(tmp_path / name)]).exit_code == 0
    with open(tmp_path / "out.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    union = list(dict.fromkeys(key for record in records for key in record))
    # one fixed order: case, status, the kinds' columns in claim order, the engines' results in registry order
    assert list(rows[0]) == list(table[0]) and sorted(rows[0]) == sorted(union)
    assert list(rows[0])[:5] == ["case", "status", "id", "limiting_pool", "plan"] and list(rows[0])[5] == "step_time"
    for record, row, entry in zip(records, rows, table):
        for key in union:
            value = record.get(key)
            assert entry[key] == (str(value) if key == "case" else value), key
            assert row[key] == ("" if value is None else str(value) if not isinstance(value, float) else row[key])
    only_madmax = tmp_path / "madmax.jsonl"
    only_madmax.write_text(madmax + "\n")
    assert CliRunner().invoke(main, ["batch", str(only_madmax), "-o", str(tmp_path / "m.csv")]).exit_code == 0
    with open(tmp_path / "m.csv", newline="") as handle:
        assert next(csv.reader(handle)) == ["case", "status", "plan", *engine_outputs("madmax")[0]]


def test_an_illegal_plan_in_batch_says_what_run_says():
    """Walk of issues 22-23: batch gave an illegal plan the status's generic text ("experts not divisible by ep,
    or etp x ep does not divide tp x cp x dp"), run its degrees; both now give run's reason, for records and spec
    lines: a record's expert mesh of etp 2 x ep 8 = 16 on tp x cp x dp = 1 x 1 x 8, a spec line's EP 32 under
    tp = etp = 2 on 32 GPUs."""
    lines = (RUNS.parent / "runs_dev_b200.jsonl").read_text().splitlines()
    record = next(json.loads(line) for line in lines if json.loads(line)["model"].get("moe_experts"))
    record["plan"]["etp"] = 2
    spec = {"model": "qwen3-30b-a3b", "system": "dgx-h100", "task": "llm-pretrain", "num_nodes": 4, "plan": "tp2.ep32"}
    got = [r["status"] for r in run_batch([json.dumps(record), json.dumps(spec)])]
    assert got[0] == ("error: plan: illegal plan (experts_not_divisible): plan etp = 2 x ep = 8 = 16 does not divide "
                      "tp x cp x dp = 1 x 1 x 8 = 8 (the expert mesh etp x ep x edp refolds the attention mesh)")
    assert got[1].endswith("etp = tp = 2 (plan etp unset) x ep = 32 = 64 does not divide tp x cp x dp = 2 x 1 x 16 "
                           "= 32 (the expert mesh etp x ep x edp refolds the attention mesh)"), got[1]


def test_batch_under_madmax_semantics_makes_a_run_record_line_an_error_row_as_run_refuses_it(tmp_path):
    """``batch --semantics madmax`` evaluated a mixed file's run-record lines silently with the real-world model,
    while ``run -m RECORD --semantics madmax`` refuses: such a line is now an error row naming the reason (a record
    is a real-world measurement); the MAD-Max line beside it is evaluated under the preset."""
    lines = ['{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp,ddp/mp", '
             '"num_nodes": 16}', RUNS.read_text().splitlines()[0]]
    records = list(run_batch(lines, semantics="madmax"))
    assert records[0]["status"] == "ok" and records[0]["iteration_time"] > 0
    assert records[1]["status"].startswith("error: semantics: a measured-run record, evaluated by the real-world model "
                                           "('default'), not under 'madmax'")
    assert records[1].get("iteration_time") is None or records[1]["iteration_time"] != records[1]["iteration_time"]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["batch", str(path), "--semantics", "madmax"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["status"] == "ok" and rows[1]["status"].startswith("error: semantics: a measured-run record")
    assert [r["status"] for r in run_batch(lines)] == ["ok", "ok"]        # under default both evaluate


def test_batch_under_madmax_semantics_makes_a_serving_record_line_an_error_row_too():
    """h-polish2 leftover (review11 #13): a serving record's line under ``--semantics madmax`` was evaluated
    silently by the serving model, while a run record's gives an error row; it gives one of the same kind now, and
    evaluates under default."""
    serve = (RUNS.parent / "serve_dev_load.jsonl").read_text().splitlines()[0]
    madmax = '{"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": "tp,ddp/mp", "num_nodes": 16}'
    records = list(run_batch([madmax, serve], semantics="madmax"))
    assert records[0]["status"] == "ok"
    assert records[1]["status"] == ("error: semantics: a serving record, evaluated by the serving model, not under "
                                    "'madmax', which is the MAD-Max model only; the MAD-Max presets take MAD-Max specs")
    assert [r["status"] for r in run_batch([madmax, serve])] == ["ok", "ok"]
