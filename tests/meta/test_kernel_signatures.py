"""Kernels take a few named bundles, not long argument lists: no function in kernels/ has more than 12 parameters."""

import ast
from pathlib import Path

import numpy as np

import fastmodel.kernels
from fastmodel.kernels.args import EvalOptions, PlanCodes, ProgramArrays, make_eval_options, make_program_arrays

KERNELS = Path(fastmodel.kernels.__file__).resolve().parent
MAX_PARAMETERS = 12


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> int:
    a = node.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def long_signatures(source: str, filename: str) -> list[str]:
    """'file:line name (n parameters)' of every function or lambda in ``source`` with more than MAX_PARAMETERS."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            n = parameter_count(node)
            if n > MAX_PARAMETERS:
                name = getattr(node, "name", "<lambda>")
                found.append(f"{filename}:{node.lineno} {name} ({n} parameters)")
    return found


def test_no_kernel_takes_more_than_12_parameters():
    files = sorted(KERNELS.rglob("*.py"))
    assert len(files) >= 10 and (KERNELS / "madmax" / "evaluate.py") in files  # the real kernels folder
    offenders = [hit for path in files for hit in long_signatures(path.read_text(), path.name)]
    assert not offenders, "kernel functions with more than 12 parameters (pass bundles, kernels/args.py): " + \
        "; ".join(offenders)


def test_the_check_sees_long_signatures():
    source = ("def ok(" + ", ".join(f"a{i}" for i in range(12)) + "): pass\n"
              "def outer():\n    def inner(" + ", ".join(f"b{i}" for i in range(12)) + ", *rest): pass\n"
              "f = lambda " + ", ".join(f"c{i}" for i in range(11)) + ", *, k, **kw: 0\n")
    assert long_signatures(source, "x.py") == ["x.py:3 inner (13 parameters)", "x.py:4 <lambda> (13 parameters)"]


def test_bundles_have_fixed_dtypes():
    """Fields get one dtype whatever the caller passes, so numba compiles one signature per kernel."""
    program = make_program_arrays([0, 1], [3, 4], [0, 2], [False, True], [0, 0, 1], [0], [], [], [], [],
                                  [0], [2], [1], np.int64(2))
    assert isinstance(program, ProgramArrays)
    assert [a.dtype for a in program[:-1]] == [np.int8, np.int32, np.int8, np.bool_] + [np.int32] * 9
    assert type(program.n_streams) is int
    options = make_eval_options(np.True_, 1, 0, np.int64(5), 3)
    assert isinstance(options, EvalOptions)
    assert [type(v) for v in options] == [bool, float, bool, float, float]
    assert PlanCodes._fields[0] == "family"


def test_engine_builds_the_bundles_once_per_program_with_fixed_types():
    from fastmodel.kernels.madmax.layout import F_DDP_GRAD_SHARDED, STRAT_NONE, STRATEGY_CODES
    from fastmodel.madmax.engine import eval_options, plan_codes
    from fastmodel.madmax.lowering.graph import StructureKey, lower
    from fastmodel.semantics import get_semantics

    key = StructureKey("dlrm-transformer", "pretrain", ("ddp",), ("mp", "ddp"), 4, transformer=("tp", "fsdp"),
                       num_bottom_layers=2, num_top_layers=2)
    semantics = get_semantics("madmax")
    plan = plan_codes(key, semantics)
    assert all(type(v) is int for v in plan)  # scalars only: one numba type, nothing the parallel pass refuses
    assert (plan.num_dense, plan.num_emb, plan.num_tr) == (1, 2, 2)
    assert (plan.dense_code0, plan.dense_code1) == (STRATEGY_CODES["ddp"], STRAT_NONE)
    assert (plan.emb_code0, plan.emb_code1) == (STRATEGY_CODES["mp"], STRATEGY_CODES["ddp"])
    assert (plan.tr_code0, plan.tr_code1) == (STRATEGY_CODES["tp"], STRATEGY_CODES["fsdp"])
    sharded = get_semantics("default")
    assert sharded.ddp_grad_sharded_layer != semantics.ddp_grad_sharded_layer
    assert {plan.flags, plan_codes(key, sharded).flags} == {0, 1 << F_DDP_GRAD_SHARDED}
    program = lower(key)
    assert program.kernel_arrays is program.kernel_arrays  # built once per Program
    np.testing.assert_array_equal(program.kernel_arrays.dep_idx, program.dep_idx)
    options = eval_options(program, semantics, mask_infeasible=True, extrapolate=False)
    assert options == (False, float(semantics.memory_weight_factor), True, float(program.num_compute_ops),
                       float(program.num_comm_ops))


def test_parallel_and_serial_passes_agree_bit_for_bit():
    """The threaded pass (taken from PARALLEL_MIN_ROWS rows) gets the same bundles as the serial one."""
    import fastmodel
    from fastmodel.kernels.madmax.layout import N_RESULTS
    from fastmodel.madmax.engine import evaluate_into
    from fastmodel.madmax.lowering.config import param_row, structure_key

    for model, task, plan in (("llama2-70b", "llm-pretrain", "fsdp/ddp"), ("dlrm-a", "dlrm-pretrain", "ddp/mp")):
        config = fastmodel.make_config(model, "dc-a", task, "madmax", plan=plan)
        table = np.repeat(param_row(config)[:, None], 600, axis=1)
        outs = []
        for min_rows in (1, 10**9):  # parallel, then serial
            out = np.full((N_RESULTS, 600), -1.0)
            evaluate_into(structure_key(config), config.semantics, table, np.zeros(600, dtype=np.int8), out, 0,
                          True, True, min_rows)
            outs.append(out)
        assert np.isfinite(outs[0]).any()
        np.testing.assert_array_equal(outs[0], outs[1])
