"""A calibration evaluates the model through one door, so what it fits is what it reports (mend18 item 4).

``FASTMODEL_JIT`` is read once per process (kernels/jit.py ``INTERPRETED``), so a calibrate run cannot interpret
some kernels and run others compiled unless a module calls a kernel's ``py_func`` or a kernel of its own: no module
of fastmodel/lm/calibrate does; every evaluation goes through ``fastmodel.lm.engine.evaluate_table``. That door
takes the parallel entry for tables of ``PARALLEL_MIN_ROWS`` configurations or more (the fit's runs x candidates
tables) and the serial one below (the report's ``validate.rows``, the held-out predictions): the two must give the
same bits for the same configuration, or the fitted optimum would be reported at another error."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from fastmodel.lm import engine
from fastmodel.lm.records import read_records

CALIBRATE = Path(__file__).resolve().parents[2] / "fastmodel" / "lm" / "calibrate"
RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"


def test_no_calibrate_module_calls_a_kernel_but_through_the_engine():
    for path in sorted(CALIBRATE.glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert "py_func" not in names, path.name
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert not {m for m in modules if m.startswith(("fastmodel.kernels", "numba"))}, path.name


def test_a_fit_sized_table_and_a_report_sized_one_give_the_same_bits():
    """Eight dev runs: alone (serial entry, 8 rows) and tiled past ``PARALLEL_MIN_ROWS`` (parallel entry), as the
    fit's candidate tables tile them; every result of every run is the same float."""
    records = read_records(RUNS)[:8]
    small = np.stack([r.columns for r in records], axis=1)
    copies = engine.PARALLEL_MIN_ROWS // small.shape[1] + 1
    big = np.asfortranarray(np.tile(small, (1, copies)))
    assert small.shape[1] < engine.PARALLEL_MIN_ROWS <= big.shape[1]
    alone, tiled = engine.evaluate_table(small), engine.evaluate_table(big)
    assert np.isfinite(alone["step_time"]).all()
    for name, values in alone.items():
        for k in range(copies):
            np.testing.assert_array_equal(tiled[name][k * small.shape[1]:(k + 1) * small.shape[1]], values,
                                          err_msg=name)
