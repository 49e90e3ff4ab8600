"""The registry (fastmodel/registry/): every variable declared once with its dims, dtype, units, direction and
engines; one name per concept across engines, older names as aliases; statuses with messages; the kernels'
indices derived, never typed twice."""

import numpy as np
import pytest
import xarray as xr

from fastmodel import registry
from fastmodel.io.aliases import resolve, with_aliases, without_aliases
from fastmodel.registry import ENGINES, VARIABLES, dataset_variables
from fastmodel.registry.variables import ENGINE_NAMES, NOT_COMPUTED, SHARED


def test_each_variable_names_exactly_the_engines_that_produce_it():
    listed: dict[str, set] = {}
    for engine, module in ENGINES.items():
        for result in module.RESULTS:
            listed.setdefault(result.name, set()).add(engine)
            assert engine in result.engines, (engine, result.name)
    for name, engines in listed.items():
        assert set(VARIABLES[name].engines) == engines, name


def test_one_name_one_declaration_and_its_kind():
    """A name two engines produce is one Variable object (declared in registry/variables.py), with one unit and
    direction; dtypes and dims are ones the datasets know."""
    seen: dict[str, object] = {}
    for module in ENGINES.values():
        for result in module.RESULTS:
            assert seen.setdefault(result.name, result) is result, f"{result.name} declared twice"
            assert result.dtype in ("float64", "bool") and result.better in ("min", "max", "")
            assert result.units and result.description
        for var, rows in module.GROUPED:
            assert len(var.dims) == 1 and len(module.COORDS[var.dims[0]]) == len(rows)
    assert {name for name, r in seen.items() if len(r.engines) > 1} == set(SHARED)
    assert registry.ALIASES == {"iteration_time": "step_time"}
    assert not set(registry.ALIASES) & set(VARIABLES)       # an alias never names another variable


def test_statuses_carry_messages_and_every_engine_can_mark_points_not_computed():
    for engine in ENGINE_NAMES:
        found = registry.statuses(engine)
        assert found[0].name == "ok" and NOT_COMPUTED in found
        assert len({s.name for s in found}) == len(found) and all(s.message for s in found)
        attrs = registry.status_attrs(engine)
        assert attrs["flag_meanings"].split() == [s.name for s in found]


def test_kernel_indices_are_derived_from_the_registry():
    from fastmodel.kernels.lm import layout as lm_layout
    from fastmodel.kernels.madmax import layout as madmax_layout
    from fastmodel.kernels.serve import layout as serve_layout
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUSES

    for i, r in enumerate(ENGINES["lm"].RESULTS):
        assert getattr(lm_layout, "R_" + r.name.upper()) == i
    for i, r in enumerate(ENGINES["madmax"].RESULTS):
        assert getattr(madmax_layout, "R_" + r.name.upper()) == i
    for i, r in enumerate(SERVE_RESULTS):
        assert getattr(serve_layout, "S_" + r.name.upper()) == i
    for code, s in enumerate(SERVE_STATUSES):
        assert getattr(serve_layout, "ST_" + s.name.upper()) == code


def test_the_memory_rows_are_one_variable_with_a_memory_kind_dimension():
    grouped = {var.name: rows for var, rows in dataset_variables("lm")}
    assert grouped["memory"] == tuple(f"memory_{k}" for k in ENGINES["lm"].MEMORY_KINDS)
    assert "memory_weights" not in grouped and grouped["step_time"] == ("step_time",)


def test_aliases_repeat_the_data_and_files_keep_one_name():
    step = xr.Variable("x", np.arange(3.0), registry.attrs("step_time"))
    ds = with_aliases(xr.Dataset({"step_time": step}))
    assert np.shares_memory(ds.step_time.values, ds.iteration_time.values)     # a second name, no copy
    assert ds.iteration_time.attrs["alias_of"] == "step_time"
    assert list(without_aliases(ds).data_vars) == ["step_time"]
    old = with_aliases(xr.Dataset({"iteration_time": step}))                   # a file written before the rename
    assert float(old.step_time.sum()) == 3.0 and list(without_aliases(old).data_vars) == ["step_time"]
    assert resolve(["step_time"], "iteration_time") == "step_time"
    assert resolve(["iteration_time"], "step_time") == "iteration_time"
    assert registry.better("iteration_time") == "min" and registry.variable("iteration_time").units == "s"


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_best_ranks_only_fitting_points_where_the_engine_has_a_memory_model(engine):
    assert ENGINES[engine].RANK_ONLY_FITTING == (engine != "madmax")



def test_a_variable_of_another_engine_names_this_results_kin():
    """`best --by throughput`, `plot --var throughput` (MAD-Max's samples/s) on a real-world result name its
    tokens/s variables (io/aliases.variable_hint) instead of the nearest spelling ('time_recompute')."""
    import xarray as xr

    from fastmodel.io.aliases import variable_hint

    ds = xr.Dataset({"tokens_per_s": ("x", [1.0]), "tokens_per_s_per_gpu": ("x", [0.5]), "step_time": ("x", [2.0])})
    hint = variable_hint(ds, "throughput", list(ds.data_vars))
    assert hint == ": throughput (samples/s) is a variable of the madmax results; this one has tokens_per_s, " \
                   "tokens_per_s_per_gpu"
    assert variable_hint(ds, "step_tme", list(ds.data_vars)) == " (did you mean 'step_time'?)"


def test_a_misspelt_variable_of_another_engine_is_named_with_this_results_kin():
    """Hurried-user walk: `best --by thruput` on a real-world result said "unknown variable 'thruput'" and
    `plot heatmap --var thruput` suggested 'recompute' (a dimension): the registry name it misspells
    (throughput, ratio 0.82 >= 0.75) and this result's tokens/s variables. A misspelling of a variable the result
    has still gets that one."""
    import xarray as xr

    from fastmodel.io.aliases import variable_hint

    ds = xr.Dataset({"tokens_per_s": ("x", [1.0]), "step_time": ("x", [2.0])}, coords={"recompute": ("x", ["full"])})
    names = [*ds.data_vars, *ds.coords]
    assert variable_hint(ds, "thruput", names) == " (did you mean 'throughput'?): throughput (samples/s) is a " \
                                                  "variable of the madmax results; this one has tokens_per_s"
    assert variable_hint(ds, "tokens_per_sec", names) == " (did you mean 'tokens_per_s'?)"
    assert variable_hint(xr.Dataset({"step_time": ("x", [2.0])}), "thruput", ["step_time"]) == ""   # no kin
