"""Timeline: one bar per op of the real LLaMA2-70B FSDP schedule (the MAD-Max engine's door lays it out,
``fastmodel.engines.timeline``), exposed time = the engine's exposed_comm."""

import numpy as np
import pytest

import fastmodel
import fastmodel.plot as P
from fastmodel import engines
from fastmodel.plot.data import PlotError


def schedule(config):
    """The MAD-Max step of ``config`` op by op (a ``fastmodel.schedule.timeline.Timeline``)."""
    return engines.timeline(config)


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


def _area(ax, prefix="ops:"):
    """Seconds drawn per gid: bar widths, or in a dense window each column's width x its share of the row."""
    from fastmodel.plot.timeline import BAR_HEIGHT

    return {gid: float(np.sum(boxes[:, 2] * boxes[:, 3]) / BAR_HEIGHT) for gid, boxes in _bars(ax, prefix).items()}


def test_one_bar_per_op_and_busy_time_per_category(config, result):
    """The full iteration (803 ops, most narrower than a pixel) is dense: each category takes the area of its
    busy time, the waits the engine's exposed_comm; a window where ops are wide draws one bar per op."""
    fig, ax = P.timeline(config)
    sched = schedule(config)
    assert len(sched.names) == 803 and sched.rows == ("compute", "comm.")
    area = _area(ax)
    for gid, seconds in area.items():
        _, row, name = gid.split(":")
        on = (sched.row == sched.rows.index(row)) & (sched.kind == sched.kinds.index(name))
        np.testing.assert_allclose(seconds, float(result[f"time_{name}"]) if name in ("gemm", "emb")
                                   else np.sum(sched.end[on] - sched.start[on]), rtol=1e-6)
    assert _area(ax, "exposed")["exposed"] == pytest.approx(float(result.exposed_comm), rel=1e-6)
    title = ax.get_title(loc="left")
    assert "step 7.28 s" in title and "exposed comm. 1.68 s" in title
    assert "(23.0% of the step)" in title  # 1,676.89 / 7,275.72 ms (README's report), the denominator named
    lo, hi = 1.0, 1.02
    _, ax = P.timeline(config, window=(lo, hi))
    bars = _bars(ax)
    inside = (sched.end > lo) & (sched.start < hi)
    assert sum(len(b) for b in bars.values()) == int(inside.sum()) >= 5
    for gid, boxes in bars.items():
        _, row, name = gid.split(":")
        on = inside & (sched.row == sched.rows.index(row)) & (sched.kind == sched.kinds.index(name))
        assert len(boxes) == int(on.sum())
        clipped = np.minimum(sched.end[on], hi) - np.maximum(sched.start[on], lo)
        np.testing.assert_allclose(boxes[:, 2].sum(), clipped.sum(), rtol=1e-9)


def test_aggregate_merges_ops_closer_than_a_pixel(config):
    """``aggregate`` draws merged bars (never the dense columns): fewer bars than ops, the busy time kept."""
    sched = schedule(config)
    _, ax_agg = P.timeline(config, aggregate=True)
    agg = _bars(ax_agg)
    gap = sched.total / 1000
    assert sum(len(b) for b in agg.values()) < 0.8 * len(sched.names)
    for gid, boxes in agg.items():
        _, row, name = gid.split(":")
        on = (sched.row == sched.rows.index(row)) & (sched.kind == sched.kinds.index(name))
        merged = int(on.sum()) - len(boxes)
        busy = float(np.sum(sched.end[on] - sched.start[on]))
        assert busy - 1e-9 <= boxes[:, 2].sum() <= busy + merged * gap
        assert boxes[:, 0].min() == sched.start[on].min()


def test_window_draws_only_overlapping_ops(config, tmp_path):
    sched = schedule(config)
    fig, ax = P.timeline(config, window=(0.0, 0.1))
    inside = (sched.end > 0.0) & (sched.start < 0.1)
    assert sum(_area(ax).values()) == pytest.approx(float(np.sum(np.minimum(sched.end[inside], 0.1)
                                                                 - sched.start[inside])), rel=1e-6)
    assert ax.get_xlim() == (0.0, 0.1)
    P.save(fig, tmp_path / "t.svg")
    svg = (tmp_path / "t.svg").read_text()
    assert "time [ms]" in svg and "GEMM" in svg and "allgather" in svg and "compute" in svg


def test_exposed_intervals_are_compute_idle_time(config):
    sched = schedule(config)
    idle = sched.waits()
    busy = np.sum((sched.end - sched.start)[sched.row == sched.wait_row])
    assert np.diff(idle, axis=1).sum() + busy == pytest.approx(sched.total, rel=1e-12)


def test_bad_window(config):
    with pytest.raises(PlotError, match="after the step ends"):
        P.timeline(config, window=(100.0, 200.0))
    with pytest.raises(PlotError, match="window must be"):
        P.timeline(config, window=(0.5, 0.1))


def test_a_window_not_finite_or_too_wide_to_tick_is_refused(config, tmp_path):
    """`--window 0:1e308` made matplotlib's tick locator overflow (RuntimeWarnings on stderr), `0:1e999` (inf)
    raised a traceback: both are one line; the widest window allowed draws without a warning. The reach: the
    locator's largest step is 10 x steps[1] = 20 of its scale 10^floor(log10(span / nbins)) <= span."""
    import warnings

    from fastmodel.plot.timeline import MAX_WINDOW_SPAN_S, TICK_STEP_REACH
    from tests.suite_fixtures import cli, one_line_error

    assert TICK_STEP_REACH == 10 * 2 and MAX_WINDOW_SPAN_S * 20 <= np.finfo(float).max
    with pytest.raises(PlotError, match=r"^window must be finite seconds \(got 0.0:inf\)$"):
        P.timeline(config, window=(0.0, float("inf")))
    with pytest.raises(PlotError, match=r"^window 0:1e\+308 s spans more than the time axis can tick \(at most "
                       r"8\.99e\+306 s\)$"):
        P.timeline(config, window=(0.0, 1e308))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, _ = P.timeline(config, window=(0.0, MAX_WINDOW_SPAN_S))
        P.save(fig, tmp_path / "wide.png")
    args = ["plot", "timeline", "-m", "llama3.1-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "1", "-o",
            tmp_path / "t.png", "--window"]
    one_line_error(cli(*args, "0:1e999"), "window must be finite seconds (got 0.0:inf)")
    one_line_error(cli(*args, "0:1e308"), "spans more than the time axis can tick")


def test_the_title_gives_each_time_in_its_own_unit():
    """The exposed time was written in the step's unit: 'step 5.62 s; exposed comm. 0.0171 s'. Hand values:
    17.1 ms of 5.62 s = 0.30 %."""
    from fastmodel.plot.timeline import step_note

    assert step_note(5.62, 0.0171) == "step 5.62 s; exposed comm. 17.1 ms (0.3% of the step)"
    assert step_note(7.28, 1.68) == "step 7.28 s; exposed comm. 1.68 s (23.1% of the step)"
    assert step_note(0.0, 0.0) == ""
