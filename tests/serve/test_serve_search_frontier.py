"""The SLO search's frontier and rows (fastmodel/serve/search_frontier.py: ``_frontier``, ``_rows``;
docs/model_serving.md §S17): a hand-checked frontier, and the search's answer equal to one read point by point from its sweep."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.plot.pareto import pareto_mask
from fastmodel.serve.search import X, Y, _frontier, slo_search


def test_frontier_by_hand():
    """Both axes maximised. (3, 9), (6, 7) and (8, 2) are non-dominated; (1, 9) loses to (3, 9) (same y, more x);
    (4, 7) to (6, 7); (2, 5) to (4, 7); (8, 1) to (8, 2); the two (6, 7)s are equal and do not dominate each
    other, so both stay; NaN and inf points are never on it (nor dominate)."""
    x = np.array([1.0, 4.0, 6.0, 8.0, 2.0, 8.0, 6.0, np.nan, np.inf, 3.0])
    y = np.array([9.0, 7.0, 7.0, 2.0, 5.0, 1.0, 7.0, 50.0, 50.0, 9.0])
    assert sorted(_frontier(x, y).tolist()) == [2, 3, 6, 9]
    assert _frontier(np.array([np.nan]), np.array([1.0])).size == 0
    assert _frontier(np.zeros(0), np.zeros(0)).size == 0


def test_frontier_equals_the_full_sort_on_random_ties():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        x, y = rng.integers(-2, 6, n).astype(float), rng.integers(0, 6, n).astype(float)
        assert sorted(_frontier(x, y).tolist()) == np.flatnonzero(pareto_mask(x, y, "max", "max")).tolist()


def _reference(result):
    """The answer read one grid point at a time from the search's sweep (its definition, docs §S17)."""
    ds = result.dataset
    dims = list(ds.status.dims)
    ok = (ds.status.values == 0) & ds.fits_memory.values & ds.within_budget.values.astype(bool)
    slo = ds.meets_slo.values.astype(bool)

    def row(index):
        r = {d: ds[d].values[i].item() for d, i in zip(dims, index)}
        r.update({k: float(ds[k].values[index]) for k in ("ttft", "tpot", X, Y, "memory_per_device")})
        r["meets_slo"] = bool(slo[index])
        r["mode"] = "agg"
        return r

    points = list(zip(*np.nonzero(ok)))
    xs = np.array([ds[X].values[i] for i in points])
    ys = np.array([ds[Y].values[i] for i in points])
    frontier = sorted((row(p) for p, on in zip(points, pareto_mask(xs, ys, "max", "max")) if on),
                      key=lambda r: r[X])
    feasible = [p for p in points if slo[p]]
    best = row(max(feasible, key=lambda p: ds[Y].values[p])) if feasible else None
    return frontier, best


@pytest.mark.parametrize("model,device,gpus,precisions,concurrency", [
    ("llama3.1-70b", "H200", 8, ("bf16", "fp8"), None),                       # README's example
    ("llama3.1-8b", "H100", 16, ("bf16", "fp8", "int4"), range(1, 97)),
])
def test_search_answer_equals_the_point_by_point_reading(model, device, gpus, precisions, concurrency):
    extra = {} if concurrency is None else {"concurrency": concurrency}
    result = slo_search(model, device, input_len=1024, output_len=1024, ttft=1.0, tpot=0.05, gpus=gpus,
                        precisions=precisions, **extra)
    frontier, best = _reference(result)
    assert result.frontier == frontier and result.best == best and len(frontier) > 3
    assert [type(v) for v in result.best.values()] == [type(v) for v in best.values()]
    assert result.evaluated == int(((result.dataset.status.values == 0) & result.dataset.fits_memory.values
                                    & result.dataset.within_budget.values.astype(bool)).sum())


def test_search_concurrency_sweeps_every_concurrency_to_n(tmp_path):
    out = tmp_path / "s.nc"
    run = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "1",
                                    "--tpot", "50ms", "--gpus", "2", "--search-concurrency", "5", "-o", str(out)])
    assert run.exit_code == 0, run.output
    assert xr.load_dataset(out).batch_size.values.tolist() == [1, 2, 3, 4, 5]
    alone = CliRunner().invoke(main, ["serve", "-m", "llama3.1-8b", "--concurrency", "4", "--search-concurrency", "5"])
    assert alone.exit_code != 0 and "apply to --search only" in alone.output
    with pytest.raises(SpecError, match="at least 1"):
        slo_search("llama3.1-8b", "H100", input_len=128, output_len=128, ttft=1, tpot=1, concurrency=[0, 4])
