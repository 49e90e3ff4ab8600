"""Checks for fastmodel results, importable by the test suite and by users.

Two kinds of helper, in the spirit of ``xarray.testing``:

- **Reference matching.** :func:`assert_matches_reference` compares a result
  with the output of the MAD-Max reference implementation for the same inputs
  (the ``expected`` object of a case line of ``tests/data/*.jsonl``, see
  ``tests/data/README.md``): 1e-9 relative on every value, exposed and
  overlapped communication to 1e-9 x the iteration time, the same number of ops
  on each stream. :func:`dev_cases` and :func:`illegal_cases` read the case files.
- **Invariants** that hold for every legal configuration of every family, plan
  and task kind, whatever the numbers (docs/model.md §7):
  :func:`invariant_violations` lists the broken ones, :func:`assert_invariants`
  raises. They take anything indexable by result-variable name: the dict of
  :func:`fastmodel.madmax.engine.evaluate_configs`, a JSON record of ``fastmodel
  batch``, or an ``xarray.Dataset`` (0-d from :func:`fastmodel.evaluate`, or a
  sweep grid, whose non-``ok`` points are skipped).

No pytest dependency: failures are ``AssertionError`` with a one-line reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

#: reference ``expected`` key -> fastmodel result variable
EXPECTED_TO_VARIABLE: dict[str, str] = {
    "iteration_time_s": "step_time",
    "throughput_qps": "throughput",
    "t_gemm_s": "time_gemm",
    "t_emb_s": "time_emb",
    "t_all2all_s": "time_all2all",
    "t_allreduce_s": "time_allreduce",
    "t_allgather_s": "time_allgather",
    "t_reducescatter_s": "time_reducescatter",
    "emb_cap_per_device": "weight_memory_emb",
    "transformer_cap_per_device": "weight_memory_dense",   # LLM, LLM_MoE, ViT
    "mlp_cap_per_device": "weight_memory_dense",           # DLRM, DLRM_MoE
    "global_bs": "global_batch",
    "eff_flops": "eff_flop_per_s",
}

#: environment variable naming a folder with the reference case files
DATA_ENV = "FASTMODEL_REFERENCE_DATA"


def reference_data_dir() -> Path:
    """The folder of the reference case files: ``$FASTMODEL_REFERENCE_DATA``, else ``tests/data``
    of the source checkout this package was imported from."""
    env = os.environ.get(DATA_ENV)
    folder = Path(env) if env else Path(__file__).resolve().parent.parent / "tests" / "data"
    if not folder.is_dir():
        raise FileNotFoundError(f"no reference case folder at {folder}; set {DATA_ENV} to the folder that holds "
                                "madmax_cases_dev.jsonl (tests/data of a fastmodel checkout)")
    return folder


def read_cases(name: str | os.PathLike) -> list[dict]:
    """Case lines of a JSONL file: a path, or a file name inside :func:`reference_data_dir`."""
    path = Path(name)
    if not path.is_file():
        path = reference_data_dir() / name
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def dev_cases(model_type: str | None = None) -> list[dict]:
    """Reference cases with expected outputs, optionally of one MAD-Max model type (``"LLM"``, ``"DLRM"``...)."""
    cases = read_cases("madmax_cases_dev.jsonl")
    return [c for c in cases if model_type is None or c["model"]["type"] == model_type]


def illegal_cases(model_type: str | None = None) -> list[dict]:
    """Inputs the reference rejects, each with the ``rule`` it breaks."""
    cases = read_cases("madmax_cases_illegal.jsonl")
    return [c for c in cases if model_type is None or c["model"].get("type") == model_type]


def assert_matches_reference(result: Mapping[str, Any], expected: Mapping[str, Any], case: str,
                             rtol: float = 1e-9) -> None:
    """``rtol`` relative on every value; exposed/overlapped to ``rtol`` x iteration time; same op counts."""
    for key, name in EXPECTED_TO_VARIABLE.items():
        if key not in expected:  # the dense-part key differs per family
            continue
        got, want = float(result[name]), float(expected[key])
        assert abs(got - want) <= rtol * abs(want), f"{case}: {name} {got!r} != {want!r} (rtol {rtol})"
    scale = float(expected["iteration_time_s"])
    for key, name in (("exposed_comm_s", "exposed_comm"), ("overlapped_comm_s", "overlapped_comm")):
        got, want = float(result[name]), float(expected[key])
        assert abs(got - want) <= rtol * scale, f"{case}: {name} {got!r} != {want!r} (tolerance {rtol} x iteration time)"
    assert int(result["num_compute_ops"]) == expected["n_comp_traces"], f"{case}: compute op count"
    assert int(result["num_comm_ops"]) == expected["n_comm_traces"], f"{case}: communication op count"


# --- invariants ---------------------------------------------------------------

_COMM_PARTS = ("time_all2all", "time_allreduce", "time_allgather", "time_reducescatter")


def _legal(results: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Flat float arrays of every variable, restricted to legal, evaluated points (a variable given under an
    older name, ``iteration_time``, counts as its one name, ``step_time``)."""
    from fastmodel.io.aliases import resolve

    given = {name: resolve(results, name) for name in (
        "step_time", "throughput", "global_batch", "forward_time", "time_gemm", "time_emb", *_COMM_PARTS,
        "time_compute", "time_comm", "exposed_comm", "overlapped_comm", "weight_memory_dense", "weight_memory_emb",
        "weight_memory", "memory_per_device", "hbm_capacity", "fits_memory", "num_compute_ops", "num_comm_ops")}
    names = [name for name, key in given.items() if key in results]

    def flat(name: str) -> np.ndarray:
        value = results[given[name]]
        if hasattr(value, "broadcast_like"):  # xarray: a swept input (global_batch) is a coordinate
            time = results[given["step_time"]]
            value = value.broadcast_like(time).transpose(*time.dims)
        return np.asarray(value, dtype=float).reshape(-1)

    arrays = {name: flat(name) for name in names}
    keep = np.ones_like(arrays["step_time"], dtype=bool)
    if "status" in results:  # a sweep grid: illegal and infeasible points carry NaN by design
        status = np.asarray(results["status"])
        keep = (status == 0).reshape(-1) if status.dtype.kind in "iub" else (status == "ok").reshape(-1)
    return {name: value[keep] for name, value in arrays.items()}


def invariant_violations(results: Mapping[str, Any], rtol: float = 1e-9) -> list[str]:
    """Names of the invariants ``results`` breaks (empty when all hold).

    Each holds by construction of the model (docs/model.md §7), for every
    family, plan and task kind:

    - parts sum to totals: time_compute = time_gemm + time_emb, time_comm = the
      four collective times, weight_memory = dense + embedding weights;
    - exposed_comm = step_time - time_compute >= 0 and
      overlapped_comm = time_comm - exposed_comm >= 0;
    - each stream is serial and neither is ever idle while the other waits on
      nothing, so max(time_compute, time_comm) <= step_time <=
      time_compute + time_comm;
    - throughput x step_time = global_batch;
    - 0 < forward_time <= step_time;
    - fits_memory is 1 exactly when memory_per_device <= hbm_capacity;
    - every value is finite and there is at least one compute op.
    """
    r = _legal(results)
    t = r["step_time"]
    scale = rtol * np.maximum(np.abs(t), 1e-300)
    bad: list[str] = []

    def check(name: str, ok: np.ndarray) -> None:
        if not np.all(ok):
            first = int(np.flatnonzero(~np.asarray(ok, dtype=bool))[0])
            bad.append(f"{name} (first at legal point {first} of {ok.size})")

    check("all values finite", np.all([np.isfinite(v) for v in r.values()], axis=0))
    check("time_compute = time_gemm + time_emb", np.abs(r["time_compute"] - r["time_gemm"] - r["time_emb"]) <= scale)
    comm = sum(r[name] for name in _COMM_PARTS)
    check("time_comm = sum of the collective times", np.abs(r["time_comm"] - comm) <= scale)
    check("exposed_comm = step_time - time_compute",
          np.abs(r["exposed_comm"] - (t - r["time_compute"])) <= scale)
    check("exposed_comm >= 0", r["exposed_comm"] >= 0.0)
    check("overlapped_comm = time_comm - exposed_comm",
          np.abs(r["overlapped_comm"] - (r["time_comm"] - r["exposed_comm"])) <= scale)
    check("overlapped_comm >= 0", r["overlapped_comm"] >= 0.0)
    check("step_time >= time_compute", t >= r["time_compute"] - scale)
    check("step_time >= time_comm", t >= r["time_comm"] - scale)
    check("step_time <= time_compute + time_comm", t <= r["time_compute"] + r["time_comm"] + scale)
    check("throughput x step_time = global_batch",
          np.abs(r["throughput"] * t - r["global_batch"]) <= rtol * r["global_batch"])
    check("0 < forward_time <= step_time", (r["forward_time"] > 0.0) & (r["forward_time"] <= t + scale))
    if "weight_memory" in r:
        check("weight_memory = dense + embedding weights",
              np.abs(r["weight_memory"] - r["weight_memory_dense"] - r["weight_memory_emb"])
              <= rtol * np.abs(r["weight_memory"]))
    if "fits_memory" in r:
        check("fits_memory = (memory_per_device <= hbm_capacity)",
              (r["fits_memory"] == 1.0) == (r["memory_per_device"] <= r["hbm_capacity"]))
    if "num_compute_ops" in r:
        check("at least one compute op", r["num_compute_ops"] >= 1)
    return bad


def assert_invariants(results: Mapping[str, Any], where: str = "", rtol: float = 1e-9) -> None:
    """Raise ``AssertionError`` naming every invariant ``results`` breaks (see :func:`invariant_violations`)."""
    bad = invariant_violations(results, rtol)
    assert not bad, f"{where + ': ' if where else ''}broken invariants: " + "; ".join(bad)
