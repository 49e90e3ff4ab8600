"""``--execution FILE`` and ``-x/--set KEY=VALUE`` (fastmodel/cli/execution.py) on ``run``, ``plot timeline`` and
``plot memory-timeline``: walk of issues 22-23 (DeepSeek-V3 with pp > 1 could not say DualPipe from ``run``)."""

import json
from pathlib import Path

import pytest

from fastmodel.lm.api import config_values
from tests.suite_fixtures import cli

DATA = Path(__file__).resolve().parents[1] / "data"
DSV3 = ["-m", "deepseek-v3", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "128", "-p", "pp8.ep64"]
DUALPIPE = {"pipeline_schedule": "dualpipe", "uneven_stages": True, "moe_a2a_overlap": "dualpipe"}
SETS = ["-x", "pipeline_schedule=dualpipe", "-x", "uneven_stages=true", "-x", "moe_a2a_overlap=dualpipe"]


def _error(result) -> str:
    """The one error line of a refused command (exit 2)."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(next(line for line in (DATA / "runs_dev.jsonl").read_text().splitlines() if line.strip()))
    return str(path)


def test_a_dualpipe_run_via_set_is_the_python_api_point():
    """DeepSeek-V3 on pp8.ep64 under DualPipe from the command line: the same point fastmodel's Python API gives
    with execution=, and not the default schedule's (its bubble is DualPipe's closed form, not 1F1B's)."""
    result = cli("run", *DSV3, *SETS, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    want = config_values("deepseek-v3", "dgx-h100", "llm-pretrain", plan="pp8.ep64", num_nodes=128, execution=DUALPIPE)
    assert got["step_time"] == want["step_time"] and got["pipeline_bubble"] == want["pipeline_bubble"]
    assert got["title"].endswith("execution pipeline_schedule=dualpipe uneven_stages=true moe_a2a_overlap=dualpipe")
    plain = config_values(
        "deepseek-v3", "dgx-h100", "llm-pretrain", plan="pp8.ep64", num_nodes=128, execution={"uneven_stages": True}
    )
    assert plain["pipeline_bubble"] != want["pipeline_bubble"]


def test_set_wins_over_the_file(tmp_path):
    path = tmp_path / "exec.toml"
    path.write_text('[execution]\npipeline_schedule = "1f1b"\nuneven_stages = true\nmoe_a2a_overlap = "dualpipe"\n')
    both = cli("run", *DSV3, "--execution", path, "-x", "pipeline_schedule=dualpipe", "--json")
    only = cli("run", *DSV3, *SETS, "--json")
    assert both.exit_code == 0, both.output
    assert json.loads(both.output)["step_time"] == json.loads(only.output)["step_time"]
    # the file alone pairs DualPipe's overlap with 1F1B: refused, naming the file and the field
    line = _error(cli("run", *DSV3, "--execution", path))
    assert line.startswith(f"error: {path}: execution.moe_a2a_overlap: 'dualpipe' overlaps the all-to-all")


def test_a_typo_key_names_the_nearest_field(tmp_path):
    line = _error(cli("run", *DSV3, "-x", "pipeline_schedul=dualpipe"))
    assert line == "error: --set: execution.pipeline_schedul: unknown field (did you mean 'pipeline_schedule'?)"
    path = tmp_path / "exec.toml"
    path.write_text("[execution]\nmoe_dispatch = 'deepep'\n")
    line = _error(cli("run", *DSV3, "--execution", path))
    assert line.startswith(f"error: {path}: execution.moe_dispatch: unknown field (did you mean 'moe_dispatcher'")


@pytest.mark.parametrize(
    "item, expected",
    [
        ("micro_batch=abc", "error: --set: execution.micro_batch: "),
        ("pipeline_schedule=dualpip", "error: --set: execution.pipeline_schedule: "),
        ("micro_batch=[1,", "error: --set: execution.micro_batch: '[1,' is not a TOML value"),
        ("micro_batch={a = 1}", "error: --set: execution.micro_batch: '{a = 1}': a table"),
        ("micro_batch", "error: --set: 'micro_batch': expected KEY=VALUE"),
    ],
)
def test_a_bad_value_is_one_line(item, expected):
    assert _error(cli("run", *DSV3, "-x", item)).startswith(expected)


def test_a_file_with_an_unknown_table(tmp_path):
    path = tmp_path / "exec.toml"
    path.write_text("[execution]\nmicro_batch = 1\n[exection]\nmicro_batch = 2\n")
    line = _error(cli("run", *DSV3, "--execution", path))
    assert line == (
        f"error: {path}: exection: unknown table or key: an execution file holds one [execution] "
        "table (did you mean 'execution'?)"
    )
    path.write_text("micro_batch = 1\n")
    assert _error(cli("run", *DSV3, "--execution", path)).startswith(f"error: {path}: micro_batch: an execution field outside")
    path.write_text("[execution\n")
    assert _error(cli("run", *DSV3, "--execution", path)).startswith(f"error: {path}: not valid TOML")
    assert _error(cli("run", *DSV3, "--execution", tmp_path / "none.toml")).endswith("none.toml: no such file")


def test_refused_with_a_record_and_with_madmax_specs(record, tmp_path):
    line = _error(cli("run", "-m", record, "-x", "micro_batch=2"))
    assert line.startswith(f"error: --set: {record} is a measured-run record and its plan block states the execution")
    path = tmp_path / "exec.toml"
    path.write_text("[execution]\nmicro_batch = 2\n")
    assert _error(cli("run", "-m", record, "--execution", path)).startswith(f"error: --execution: {record} is a")
    madmax = ["-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp"]
    line = _error(cli("run", *madmax, "-x", "micro_batch=2"))
    assert line == (
        'error: --set: applies to real-world training models (family = "lm"), not to MAD-Max specs '
        "(the MAD-Max model has no execution spec)"
    )
    out = tmp_path / "t.png"
    assert _error(cli("plot", "timeline", "-m", record, "-x", "micro_batch=2", "-o", out)).startswith(
        f"error: --set: {record} is a measured-run record"
    )
    assert _error(cli("plot", "timeline", *madmax, "--execution", path, "-o", out)).startswith(
        "error: --execution: applies to real-world training models"
    )
    assert _error(cli("plot", "memory-timeline", "-m", record, "-x", "micro_batch=2", "-o", out)).startswith(
        f"error: --set: {record} is a measured-run record"
    )
    assert not out.exists()


def test_the_plots_of_one_configuration_take_the_execution(tmp_path):
    """plot timeline / memory-timeline draw the DualPipe step: its figure differs from the default schedule's."""
    small = ["-m", "qwen3-30b-a3b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "8", "-p", "tp2.pp2.ep8"]
    for command in ("timeline", "memory-timeline"):
        figures = []
        for extra in ([], ["-x", "pipeline_schedule=dualpipe"]):
            out = tmp_path / f"{command}{len(extra)}.svg"
            result = cli("plot", command, *small, *extra, "-o", out)
            assert result.exit_code == 0, result.output
            figures.append(out.read_text())
        assert figures[0] != figures[1], command
    assert _error(cli("plot", "timeline", *small, "-x", "pipeline_schedul=dualpipe", "-o", tmp_path / "x.png")) == (
        "error: --set: execution.pipeline_schedul: unknown field (did you mean 'pipeline_schedule'?)"
    )


def test_the_layers_refusal_names_the_option_run_now_has():
    """DeepSeek-V3's 61 layers on pp 8 without uneven stages: the reason points at run's own -x."""
    line = _error(cli("run", *DSV3, "-x", "pipeline_schedule=dualpipe"))
    assert "illegal plan (layers_not_divisible)" in line and "run's -x uneven_stages=true or --execution FILE" in line


def test_a_set_value_that_conflicts_with_a_valid_file_is_blamed_on_set(tmp_path):
    """Review L7: the file passes alone (DualPipe schedule and overlap); ``-x pipeline_schedule=1f1b`` breaks the pair,
    and the message blamed the file."""
    path = tmp_path / "exec.toml"
    path.write_text('[execution]\npipeline_schedule = "dualpipe"\nuneven_stages = true\nmoe_a2a_overlap = "dualpipe"\n')
    assert cli("run", *DSV3, "--execution", path, "--json").exit_code == 0
    line = _error(cli("run", *DSV3, "--execution", path, "-x", "pipeline_schedule=1f1b"))
    assert line.startswith("error: --set: execution.moe_a2a_overlap: 'dualpipe' overlaps the all-to-all"), line


@pytest.mark.parametrize("item, where", [
    ("num_nodes=0", "the cluster size is --nodes N"),
    ("tp=8", "the mesh is --plan, e.g. --plan tp8.pp4 (dp fills the cluster)"),
    ("dp=4", "dp fills the cluster: set --nodes and the --plan degrees"),
    ("global_batch=1e3", "the global batch is the task's"),
    ("seq_len=4096", "seq_len is the model's"),
])
def test_a_field_set_elsewhere_names_where(item, where):
    """Hurried-user walk: ``-x num_nodes=0`` said "unknown field", ``-x global_batch=1e3`` "did you mean
    'micro_batch'?": a cluster size, mesh degree, global batch or model column names its option or spec."""
    key = item.split("=")[0]
    line = _error(cli("run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-x", item))
    assert line.startswith(f"error: --set: execution.{key}: not an execution field: {where}"), line


def test_a_field_set_twice_is_refused():
    """``-x micro_batch=1 -x micro_batch=2`` ran micro_batch 2 silently; the same value twice still runs."""
    args = ["run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-x", "micro_batch=1"]
    line = _error(cli(*args, "-x", "micro_batch=2"))
    assert line == "error: --set: execution.micro_batch: given twice (1, then 2); give it once"
    assert cli(*args, "-x", "micro_batch=1").exit_code == 0


def test_a_byte_field_takes_its_unit_as_a_sweep_axis_does():
    """Hurried-user walk: ``-x collective_bucket_bytes=25MB`` was "Input should be a valid number" where the sweep
    axis of that column reads '25MB' (lm/sweep.py _axis_number); a bytes or bytes/s execution field now reads a
    unit string through the same parser (25 MB = 25e6 bytes, 10 GB/s = 1e10 bytes/s), a number stays as given."""
    from fastmodel.cli.execution import read_execution
    from fastmodel.lm.loader import load_execution

    got = load_execution(read_execution(None, ("collective_bucket_bytes=25MB", "param_fetch_bw=10GB/s"), "lm"))
    assert (got.collective_bucket_bytes, got.param_fetch_bw) == (25e6, 1e10)
    assert load_execution({"collective_bucket_bytes": 4096}).collective_bucket_bytes == 4096
    line = _error(cli("run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-x",
                      "collective_bucket_bytes=25Mb"))
    assert line == "error: --set: execution.collective_bucket_bytes: unknown unit 'Mb' for bytes; write e.g. " \
                   "'40 GB' or 40e9"


def test_a_fused_accumulation_beside_an_accumulation_pass_is_one_line_exit_2(tmp_path):
    """docs/model.md §11.46: the pair would charge the main-gradient traffic twice; from --set (the stack's fusion
    and the plan's pass, or both stated) and from an execution file, one line naming the source and the field."""
    dense = ["-m", "llama3.1-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "1"]
    line = _error(cli("run", *dense, "-x", "grad_accum_bytes=6"))
    assert "execution.grad_accum_bytes: a separate gradient-accumulation pass" in line
    assert line.endswith("(stack megatron-core sets one of the two)")
    line = _error(cli("run", *dense, "-x", "grad_accum_bytes=6", "-x", "wgrad_fused_accumulation=true"))
    assert line.startswith("error: --set: execution.grad_accum_bytes:") and "charged twice" in line
    path = tmp_path / "exec.toml"
    path.write_text("[execution]\ngrad_accum_bytes = 10\nwgrad_fused_accumulation = true\n")
    assert _error(cli("run", *dense, "--execution", path)).startswith(f"error: {path}: execution.grad_accum_bytes:")
    assert cli("run", *dense, "-x", "grad_accum_bytes=6", "-x", "wgrad_fused_accumulation=false").exit_code == 0


def test_a_sweep_files_refused_execution_names_the_file(tmp_path):
    """The lowering names its source; in a sweep that was the model ("Llama 3.1 8B: execution...") where the
    sweep file stated the execution (review 4 finding 9): one line naming the file, exit 2."""
    path = tmp_path / "a.toml"
    path.write_text('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'
                    '[execution]\ngrad_accum_bytes = 6\n[axes]\nplan = ["dp"]\n')
    line = _error(cli("sweep", path, "-o", tmp_path / "a.nc"))
    assert line.startswith(f"error: {path}: execution.grad_accum_bytes: a separate gradient-accumulation pass")
    assert not (tmp_path / "a.nc").exists()


@pytest.mark.parametrize("value, said", [("50%", "'50%': give a fraction, not a percentage (0.5)"),
                                         ("12.5 %", "'12.5 %': give a fraction, not a percentage (0.125)")])
def test_a_percentage_given_to_set_says_its_fraction(value, said):
    """``-x activation_offload=50%`` was told to quote the text (-x 'activation_offload="50%"'), which then was "not
    a valid number" (h-mend15's campaign); now the one line gives the fraction meant."""
    line = _error(cli("run", "-m", "llama3-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "8",
                      "-x", f"activation_offload={value}"))
    assert "--set: execution.activation_offload: " in line and said in line and "quote" not in line


@pytest.mark.parametrize("spec, said", [
    ("specs/sweeps/llama3_70b_h100_plans.toml", "a sweep file (it has [axes]), not an execution file (one [execution] "
     "table): run it with 'fastmodel sweep FILE -o out.nc', or copy its [execution] table alone into a file"),
    ("specs/sweeps/llama2_70b_plans.toml", "a sweep file (it has [axes]), not an execution file (one [execution] "
     "table): run it with 'fastmodel sweep FILE -o out.nc'"),
    ("specs/models/gpt-oss-20b.toml", "a model spec (family = \"lm\"), not an execution file (one [execution] table): "
     "give it as the model (-m)"),
    ("specs/systems/dgx-h100.toml", "a cluster spec (kind = \"cluster\"), not an execution file (one [execution] "
     "table): give it as the system (-s)"),
    ("specs/tasks/llm-pretrain.toml", "a task spec (kind = \"pretrain\"), not an execution file (one [execution] "
     "table): give it as the task (-t)"),
])
def test_another_spec_given_as_the_execution_file_is_named(spec, said):
    """A sweep file given to --execution said "description: unknown table or key: an execution file holds one
    [execution] table (did you mean 'execution'?)" (walk of 2026-12-08)."""
    path = Path(__file__).resolve().parents[2] / spec
    line = _error(cli("run", *DSV3, "--execution", path))
    assert line == f"error: {path}: {said}"


def test_execution_fields_without_their_table_say_to_add_it(tmp_path):
    path = tmp_path / "exec.toml"
    path.write_text("micro_batch = 1\nrecompute = \"full\"\n")
    line = _error(cli("run", *DSV3, "--execution", path))
    assert line == (f"error: {path}: micro_batch: an execution field outside the [execution] table; write "
                    "[execution] above the fields")



def test_a_record_or_json_lines_given_as_the_execution_file_is_named(record, tmp_path):
    """A JSON record given to --execution said "not valid TOML: Invalid statement (at line 1, column 1)"."""
    line = _error(cli("run", *DSV3, "--execution", record))
    assert line == (f"error: {record}: a training run record (RUNS.md), not an execution file (one [execution] "
                    "table): 'fastmodel run -m FILE' evaluates it with its plan block")
    lines = DATA / "runs_dev.jsonl"
    assert _error(cli("run", *DSV3, "--execution", lines)) == (
        f"error: {lines}: JSON lines, not an execution file (one [execution] table): training runs go to "
        "'fastmodel validate FILE' or 'batch', serving records to 'fastmodel serve FILE'")
    other = tmp_path / "x.json"
    other.write_text('{"a": 1}')
    assert _error(cli("run", *DSV3, "--execution", other)).endswith(
        "x.json: JSON, not an execution file: an execution file is TOML holding one [execution] table")
