"""Figures readable at any size (issue 25 item 9), measured on the rendered figures: no two tick labels of an
axis overlap, no text is smaller than the minimum, legends sit outside the data, and a timeline window shows
every category present in it with the area of its time."""

import numpy as np
import pytest
import xarray as xr

import fastmodel.plot as P
from fastmodel.lm.sweep import lm_sweep
from fastmodel.plot.readable import GAP_PT, MIN_FONT_PT, crowded, visible_labels
from fastmodel.plot.timeline import BAR_HEIGHT, KIND_LABELS, timeline_figure


def _assert_readable(fig):
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = visible_labels(axis)
            boxes = sorted((b.x0, b.x1) if axis.axis_name == "x" else (b.y0, b.y1)
                           for b in (label.get_window_extent(renderer) for label in labels))
            gap = GAP_PT * fig.dpi / 72.0
            assert all(nxt[0] - cur[1] >= gap - 1e-6 for cur, nxt in zip(boxes, boxes[1:])), axis.axis_name
            assert not crowded(axis, renderer)
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_visible() and t.get_text()]
    assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT_PT


def test_a_heatmap_of_179_plans_thins_its_labels_instead_of_overlapping_them():
    plans = [f"tp{t}.pp{p}.cp{c}" for t in (1, 2, 4, 8) for p in (1, 2, 4, 5, 8, 10, 16) for c in (1, 2, 4, 8, 16, 32, 64)]
    plans = plans[:179]
    values = np.random.default_rng(0).uniform(100, 1000, (4, len(plans)))
    da = xr.DataArray(values, dims=("num_nodes", "plan"), coords={"num_nodes": [4, 8, 16, 32], "plan": plans},
                      name="tokens_per_s_per_gpu", attrs={"units": "tokens/s"})
    for size in ("single", "double"):
        fig, ax = P.heatmap(da, x="num_nodes", y="plan", size=size)
        _assert_readable(fig)
        shown = [t.get_text() for t in visible_labels(ax.yaxis)]
        assert 10 < len(shown) < len(plans) and shown[0] == plans[0]
        step = plans.index(shown[1])
        assert shown == plans[::step][:len(shown)]        # every k-th plan, in order
        suffix = {2: "nd", 3: "rd"}.get(step, "th")
        assert ax.get_ylabel() == f"plan (every {step}{suffix} labelled)"        # said, not silent
        assert len(ax.yaxis.get_minorticklocs()) + len(ax.yaxis.get_majorticklocs()) == len(plans)   # a tick each
        fig, ax = P.heatmap(da, x="plan", y="num_nodes", size=size)   # the long axis across: vertical, thinned
        _assert_readable(fig)
        assert {t.get_rotation() for t in visible_labels(ax.xaxis)} == {90.0}


def test_a_memory_figure_of_many_plans_keeps_its_fonts():
    ds = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16, axes={"plan": "all"})
    assert ds.sizes["plan"] > 100
    fig, ax = P.memory_bars(ds)
    _assert_readable(fig)
    assert all(t.get_fontsize() >= MIN_FONT_PT for t in ax.get_xticklabels())


def test_the_validation_legend_sits_outside_the_data():
    from fastmodel.plot.validation import predicted_vs_measured

    table = [{"measured_step_time_s": m, "predicted_step_time_s": m * (1 + e), "source": f"source {i % 7}"}
             for i, (m, e) in enumerate(zip(np.geomspace(0.5, 300, 40), np.linspace(-0.2, 0.2, 40)))]
    fig, ax = predicted_vs_measured(table)
    _assert_readable(fig)
    renderer = fig.canvas.get_renderer()
    legend = (fig.legends or [ax.get_legend()])[0].get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))


@pytest.fixture(scope="module")
def llama_timeline():
    from fastmodel import engines

    return engines.timeline(model="llama3.1-70b", system="dgx-h100", task="llm-pretrain", plan="tp8.pp4",
                            num_nodes=8)


def _drawn_seconds(ax, gid):
    boxes = [np.array([p.get_extents().bounds for p in c.get_paths()]) for c in ax.collections if c.get_gid() == gid]
    return float(sum(np.sum(b[:, 2] * b[:, 3]) for b in boxes) / BAR_HEIGHT)


def test_a_timeline_window_shows_every_category_in_it_with_its_time(llama_timeline):
    """The README's window: the first 3 s of a 266 s step, ops of ~1 ms. The waits for communication are a
    fifth of the window; each category in the window takes the area of its time there, legend included."""
    tl, lo, hi = llama_timeline, 0.0, 3.0
    fig, ax = timeline_figure(tl, window=(lo, hi))
    _assert_readable(fig)
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    for code, kind in enumerate(tl.kinds):
        on = tl.kind == code
        seconds = float(np.sum(np.clip(np.minimum(tl.end[on], hi) - np.maximum(tl.start[on], lo), 0.0, None)))
        drawn = sum(_drawn_seconds(ax, f"ops:{stream}:{kind}") for stream in tl.rows)
        assert drawn == pytest.approx(seconds, rel=1e-6, abs=1e-9), kind
        assert (KIND_LABELS[kind] in legend) == (seconds > 0), kind
    waits = tl.waits()
    waited = float(np.sum(np.clip(np.minimum(waits[:, 1], hi) - np.maximum(waits[:, 0], lo), 0.0, None)))
    assert waited > 0.15 * (hi - lo) and "exposed comm." in legend
    assert _drawn_seconds(ax, "exposed") == pytest.approx(waited, rel=1e-6)



def test_overlapping_point_labels_are_dropped_and_the_marker_stays_clear():
    from fastmodel.plot.readable import drop_overlapping
    from fastmodel.plot.style import new_axes

    fig, ax = new_axes("single")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    first = ax.annotate("tp=2, pp=1, b=256", (2, 5))
    on_top = ax.annotate("tp=2, pp=1, b=1024", (2.1, 5))     # the gallery's SLO figure printed these on each other
    apart = ax.annotate("tp=8, pp=1, b=1", (7, 1))
    under_star = ax.annotate("b=512", (5, 8), xytext=(0, 0), textcoords="offset points")
    kept = drop_overlapping(fig, [first, on_top, apart, under_star], markers=[(ax, (5, 8), 9.0)])
    assert kept == [first, apart]
    assert not on_top.get_visible() and not under_star.get_visible()


def test_the_validation_figure_labels_units_and_ticks_as_the_others():
    from fastmodel.plot.validation import predicted_vs_measured

    table = [{"measured_step_time_s": m, "predicted_step_time_s": m * 1.1, "source": f"source {i}"}
             for i, m in enumerate(np.geomspace(1.0, 100.0, 9))]
    fig, ax = predicted_vs_measured(table)
    fig.draw_without_rendering()
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("measured step time [s]", "predicted step time [s]")
    ticks = {t.get_text() for t in ax.get_xticklabels() if t.get_text()}
    assert {"1", "10", "100"} <= ticks                      # were 10^0, 10^1, 10^2
    first, ninth = ax.collections[1], ax.collections[9]     # the band, then one scatter per source
    assert np.allclose(first.get_facecolor(), ninth.get_facecolor())                  # 8 colours, 9 sources:
    assert not np.array_equal(first.get_paths()[0].vertices, ninth.get_paths()[0].vertices)   # told by marker
    assert ax.get_title(loc="left") == "9 runs, MAPE 10.0%"
    refused = table + [{"measured_step_time_s": 2.0, "predicted_step_time_s": None, "source": "source 0"}] * 2
    _, ax = predicted_vs_measured(refused)      # a refused run has no point; the title counts it
    assert ax.get_title(loc="left") == "9 runs, MAPE 10.0%; 2 without a prediction left out"


def test_an_axis_labelled_by_its_own_rule_is_not_thinned_again():
    """Review MEDIUM 4: make_readable thinned the memory timeline's chosen labels to 'every 2nd' under a rule
    that already said which were labelled. ``fixed`` axes keep their labels (fonts still raised); others thin."""
    from fastmodel.plot.readable import make_readable
    from fastmodel.plot.style import new_axes

    texts = [f"label {i}" for i in range(60)]
    for fixed in (False, True):
        fig, ax = new_axes("single")
        ax.set_xticks(range(60), texts, fontsize=3.0)
        ax.set_xlim(-0.5, 59.5)
        ax.set_xlabel("items")
        make_readable(fig, fixed=[ax.xaxis] if fixed else ())
        shown = [t.get_text() for t in visible_labels(ax.xaxis)]
        assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= MIN_FONT_PT
        assert (shown == texts and ax.get_xlabel() == "items") if fixed else \
            (len(shown) < 60 and ax.get_xlabel().startswith("items (every "))


@pytest.mark.parametrize("kind", ["heatmap", "scaling", "pareto", "breakdown"])
def test_a_long_title_wraps_at_the_figure_width(kind, tmp_path):
    """A title longer than the figure widened the saved file past its column (bbox 'tight' takes in all text):
    a 3.5 in heatmap was saved 4.7 in wide. Every title now breaks into lines at the figure's width."""
    from matplotlib.image import imread
    from plot_data import synthetic_sweep

    ds = synthetic_sweep()
    title = "LLaMA2-70B on dc-a, llm-pretrain (madmax semantics): global_batch=2048 samples, a caption"
    draw = {"heatmap": lambda: P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048},
                                         title=title),
            "scaling": lambda: P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048},
                                         title=title),
            "pareto": lambda: P.pareto(ds, "iteration_time", "throughput", title=title),
            "breakdown": lambda: P.breakdown(ds, sel={"num_nodes": 32, "global_batch": 2048, "plan": "fsdp/ddp"},
                                             title=title)}[kind]
    fig, _ = draw()
    width = fig.get_figwidth()
    P.save(fig, tmp_path / "t.png", dpi=100)
    saved = imread(tmp_path / "t.png").shape[1] / 100     # inches at 100 dpi
    assert saved <= width + 0.05, (saved, width)


def test_a_long_title_stays_clear_of_a_legend_beside_the_axes():
    """Wrapped at the figure's width, the memory figure's left title ran under the legend right of the axes; it
    wraps at the axes' width."""
    from fastmodel.plot.memory import memory_bars

    ds = lm_sweep("llama3.1-70b", "dgx-h100", "llm-pretrain", num_nodes=16,
                  axes={"plan": ["tp8.pp8", "tp8.pp4", "tp4.pp8"]}, execution={"recompute": "selective"})
    fig, ax = memory_bars(ds, title="Llama 3 70B on dgx-h100, llm-pretrain: recompute=selective, micro_batch=1, "
                                    "num_nodes=16")
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    title = ax._left_title.get_window_extent(renderer)
    assert title.height > 1.5 * ax._left_title.get_fontsize() * fig.dpi / 72     # two lines or more
    assert title.x1 <= ax.bbox.x1 + 1 and not title.overlaps(fig.legends[0].get_window_extent(renderer))


def test_a_thousand_rows_get_no_tick_each_where_ticks_would_merge():
    """1,000 rows on a 9 in axis are 0.65 pt apart: a minor tick for each drew a solid black bar beside the map.
    Ticks for every item are kept only while at least MIN_TICK_SPACING_PT apart (the 179-plan map: 3.6 pt)."""
    from fastmodel.plot.readable import MIN_TICK_SPACING_PT, _spacing_pt

    n = 1000
    da = xr.DataArray(np.random.default_rng(1).uniform(1, 2, (n, 4)), dims=("global_batch", "num_nodes"),
                      coords={"global_batch": np.arange(1, n + 1) * 16, "num_nodes": [4, 8, 16, 32]},
                      name="throughput", attrs={"units": "samples/s"})
    fig, ax = P.heatmap(da, x="num_nodes", y="global_batch", size="double", best=None)
    assert _spacing_pt(ax.yaxis, list(range(n))) < MIN_TICK_SPACING_PT
    assert len(ax.yaxis.get_minorticklocs()) == 0
    assert "labelled" in ax.get_ylabel() and 5 <= len(visible_labels(ax.yaxis)) <= 80
