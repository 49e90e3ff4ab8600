"""Columns serving refuses (``fastmodel/serve/training_columns.py``; review12 #4, h-mend15). ``moe_grouped_gemm``
is Megatron-Core's choice between TEGroupedMLP and SequentialMLP (docs/model.md §11.57); no serving engine runs
SequentialMLP, so ``evaluate(..., moe_grouped_gemm=0)`` changed TPOT silently. Every column no serving kernel
reads (``recompute``, ``micro_batch``, FSDP and optimizer options ...) was accepted and changed nothing. Each is
refused in one line naming the field: by the API, a serving sweep file (axes, task, top level; exit 2) and
``fastmodel serve``. The list of unread columns is proved here against the kernels' source."""

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

import fastmodel.kernels
from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.registry.lm import COLUMNS
from fastmodel.serve.api import columns, evaluate, sweep
from fastmodel.serve.spec import TRAINING_COLUMNS
from fastmodel.serve.training_columns import SERVING_COUNTERPART, UNREAD_COLUMNS

TASK = """
model = "mixtral-8x7b"
system = "H100"
[task]
name = "t"
kind = "serve"
input_len = 512
output_len = 64
batch_size = 8
"""
SWEEP = TASK + "[axes]\nmoe_grouped_gemm = [0, 1]\n"
ENTRIES = ("fused.serve_grid", "fused._grid_rows", "fused.serve_serial", "fused.serve_parallel")


def _kernel_modules() -> dict[str, ast.Module]:
    root = Path(fastmodel.kernels.__file__).parent
    return {"fastmodel.kernels." + ".".join(p.relative_to(root).with_suffix("").parts): ast.parse(p.read_text())
            for p in root.rglob("*.py")}


def _columns_serving_kernels_name() -> set[str]:
    """Every ``C_<COLUMN>`` named by a function reachable from the serving drivers (calls and references followed
    through ``from fastmodel.kernels... import`` across modules) or by a module-level statement of a module they
    live in: an over-count of what serving reads, never an under-count."""
    modules = _kernel_modules()
    functions, imports = {}, {}
    for name, tree in modules.items():
        imports[name] = {alias.asname or alias.name: (node.module, alias.name) for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fastmodel.kernels")
                         for alias in node.names}
        functions.update({(name, node.name): node for node in tree.body if isinstance(node, ast.FunctionDef)})

    def resolve(module, name, depth=0):
        if (module, name) in functions:
            return module, name
        if name in imports.get(module, {}) and depth < 10:
            return resolve(*imports[module][name], depth + 1)
        return None

    todo = [("fastmodel.kernels.serve." + e.split(".")[0], e.split(".")[1]) for e in ENTRIES]
    seen, named = set(), set()
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        for node in ast.walk(functions[key]):
            if isinstance(node, ast.Name):
                if node.id.startswith("C_"):
                    named.add(node.id[2:].lower())
                if (found := resolve(key[0], node.id)) is not None:
                    todo.append(found)
    for module in {m for m, _ in seen}:
        named |= {n.id[2:].lower() for stmt in modules[module].body if not isinstance(stmt, (ast.Import, ast.ImportFrom))
                  for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id.startswith("C_")
                  and not isinstance(stmt, ast.FunctionDef)}
    assert len(seen) > 100, seen        # the walk reached the evaluation, not only the drivers
    return named


def test_the_refused_columns_are_exactly_those_no_serving_kernel_names():
    named = _columns_serving_kernels_name()
    assert {"tp", "batch_size", "input_len", "hbm_bw", "moe_grouped_gemm"} <= named     # the walk sees reads
    unread = [c.name for c in COLUMNS if c.name not in named]
    assert sorted(UNREAD_COLUMNS) == sorted(unread)
    assert len(set(UNREAD_COLUMNS)) == len(UNREAD_COLUMNS)
    assert set(TRAINING_COLUMNS) == {"moe_grouped_gemm", *UNREAD_COLUMNS}


def test_each_counterpart_is_a_column_serving_reads():
    named = _columns_serving_kernels_name()
    for column, counterpart in SERVING_COUNTERPART.items():
        assert column in UNREAD_COLUMNS and counterpart in named and counterpart not in TRAINING_COLUMNS


def test_every_reason_is_one_line():
    assert all(reason and "\n" not in reason for reason in TRAINING_COLUMNS.values())
    assert "serving's is 'batch_size'" in TRAINING_COLUMNS["micro_batch"]
    assert TRAINING_COLUMNS["recompute"].startswith("a training option that no serving kernel reads")


@pytest.mark.parametrize("call", [evaluate, columns])
def test_the_api_refuses_moe_grouped_gemm_naming_it(call):
    with pytest.raises(SpecError) as error:
        call("mixtral-8x7b", "H100", batch_size=8, moe_grouped_gemm=0)
    assert error.value.field == "moe_grouped_gemm"
    assert "SequentialMLP" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("call, given", [(evaluate, {"recompute": "full"}), (columns, {"micro_batch": 2}),
                                         (sweep, {"sharding": ["fsdp"]}), (sweep, {"comm_sm_share": 0.1})])
def test_the_api_refuses_a_column_serving_never_reads(call, given):
    with pytest.raises(SpecError) as error:
        call("llama3.1-8b", "H100", **given, **({} if call is sweep else {"batch_size": 8}))
    name = next(iter(given))
    assert error.value.field == name and error.value.reason == TRAINING_COLUMNS[name]


def test_a_serving_sweep_axis_of_moe_grouped_gemm_is_refused_with_exit_2(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SWEEP)
    run = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "s.nc")])
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "axes.moe_grouped_gemm" in lines[0] and "serving" in lines[0], run.stderr
    assert not (tmp_path / "s.nc").exists()


@pytest.mark.parametrize("text, field", [
    (TASK + '[axes]\nrecompute = ["full"]\n', "axes.recompute"),          # was accepted: one point, no effect
    (TASK + 'micro_batch = 2\n[axes]\ntp = [1]\n', "task.micro_batch"),   # was "unknown field (did you mean ...)"
    ('recompute = "full"\n' + TASK + "[axes]\ntp = [1]\n", "recompute"),  # was "an axis, under [axes]"
])
def test_a_serving_sweep_file_refuses_a_training_column_naming_file_and_field(tmp_path, text, field):
    path = tmp_path / "s.toml"
    path.write_text(text)
    run = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "s.nc")])
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"s.toml: {field}: " in lines[0], run.stderr
    assert "no serving kernel reads" in lines[0]
    assert not (tmp_path / "s.nc").exists()


def test_fastmodel_serve_says_a_training_option_is_one():
    run = CliRunner().invoke(main, ["serve", "-m", "llama3.1-8b", "--batch-size", "8", "--micro-batch", "2"])
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "'--micro-batch'" in lines[0] and "no serving kernel reads" in lines[0]
    assert "'batch_size'" in lines[0]
    typo = CliRunner().invoke(main, ["serve", "-m", "llama3.1-8b", "--recompte", "full"])
    assert typo.exit_code == 2 and "no serving kernel" not in typo.stderr      # a misspelling stays click's
