"""Timeline: one bar per op of the real LLaMA2-70B FSDP schedule, exposed time = the engine's exposed_comm."""

import numpy as np
import pytest

import fastmodel
import fastmodel.plot as P
from fastmodel.kernels.madmax.layout import CATEGORY_NAMES, STREAM_COMPUTE
from fastmodel.plot.data import PlotError
from fastmodel.plot.timeline import schedule


@pytest.fixture(scope="module")
def config():
    return fastmodel.make_config("llama2-70b", "dc-a", "llm-pretrain-fsdp", "madmax", num_nodes=256)


@pytest.fixture(scope="module")
def result(config):
    from fastmodel.madmax.api import evaluate_config

    return evaluate_config(config)


def _bars(ax, prefix="ops:"):
    return {c.get_gid(): np.array([p.get_extents().bounds for p in c.get_paths()]) for c in ax.collections
            if (c.get_gid() or "").startswith(prefix)}


def test_one_bar_per_op_and_busy_time_per_category(config, result):
    fig, ax = P.timeline(config)
    bars = _bars(ax)
    sched = schedule(config)
    assert sum(len(b) for b in bars.values()) == len(sched.names) == 803
    for gid, boxes in bars.items():
        _, stream, name = gid.split(":")
        on = (sched.stream == int(stream)) & (sched.category == CATEGORY_NAMES.index(name))
        assert len(boxes) == int(on.sum())
        np.testing.assert_allclose(boxes[:, 2].sum(), float(result[f"time_{name}"]) if name in ("gemm", "emb")
                                   else np.sum(sched.end[on] - sched.start[on]), rtol=1e-9)
    exposed = _bars(ax, "exposed")["exposed"]
    assert exposed[:, 2].sum() == pytest.approx(float(result.exposed_comm), rel=1e-9)
    title = ax.get_title(loc="left")
    assert "iteration 7.28 s" in title and "exposed comm. 1.68 s" in title
    assert "(23.0% of iteration)" in title  # 1,676.89 / 7,275.72 ms (README's report), the denominator named


def test_aggregate_merges_ops_closer_than_a_pixel(config):
    _, ax_ops = P.timeline(config)
    _, ax_agg = P.timeline(config, aggregate=True)
    ops, agg = _bars(ax_ops), _bars(ax_agg)
    assert set(ops) == set(agg)
    assert sum(len(b) for b in agg.values()) < 0.8 * sum(len(b) for b in ops.values())
    gap = schedule(config).iteration_time / 1000
    for gid in ops:
        merged = len(ops[gid]) - len(agg[gid])
        busy = ops[gid][:, 2].sum()
        assert busy - 1e-9 <= agg[gid][:, 2].sum() <= busy + merged * gap
        assert agg[gid][:, 0].min() == ops[gid][:, 0].min()


def test_window_draws_only_overlapping_ops(config, tmp_path):
    sched = schedule(config)
    fig, ax = P.timeline(config, window=(0.0, 0.1))
    inside = int(np.sum((sched.end >= 0.0) & (sched.start <= 0.1)))
    assert sum(len(b) for b in _bars(ax).values()) == inside < len(sched.names)
    assert ax.get_xlim() == (0.0, 0.1)
    P.save(fig, tmp_path / "t.svg")
    svg = (tmp_path / "t.svg").read_text()
    assert "time [ms]" in svg and "GEMM" in svg and "allgather" in svg and "compute" in svg


def test_exposed_intervals_are_compute_idle_time(config):
    sched = schedule(config)
    idle = sched.idle_compute()
    busy = np.sum((sched.end - sched.start)[sched.stream == STREAM_COMPUTE])
    assert np.diff(idle, axis=1).sum() + busy == pytest.approx(sched.iteration_time, rel=1e-12)


def test_bad_window(config):
    with pytest.raises(PlotError, match="after the iteration ends"):
        P.timeline(config, window=(100.0, 200.0))
    with pytest.raises(PlotError, match="window must be"):
        P.timeline(config, window=(0.5, 0.1))
