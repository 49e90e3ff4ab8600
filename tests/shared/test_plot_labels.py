"""Point labels of the Pareto figures sit off the frontier line and off each other (readable.place_labels): the
label boxes as drawn (renderer extents) are tested against the drawn frontier path, on a small case where a
label written to one fixed side of its point (the old rule) crosses the line."""

import numpy as np
import xarray as xr

import fastmodel.plot as P
from fastmodel.plot.readable import LABEL_OFFSETS_PT, display_path, labels_left_out, place_labels


def _boxes(fig, texts):
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts if t.get_visible()]


def _assert_clear(fig, texts, lines):
    fig.draw_without_rendering()
    boxes = _boxes(fig, texts)
    paths = [display_path(line) for line in lines]
    assert boxes, "no label shown"
    for i, box in enumerate(boxes):
        assert not any(p.intersects_bbox(box, filled=False) for p in paths), texts[i].get_text()
        assert not any(box.overlaps(other) for other in boxes[i + 1:])


def _staircase():
    """Eight plans on the frontier of (step time min, throughput max), a rising staircase of small steps (about
    8 pt across and 5 pt up beside 30 pt x 7 pt labels), and one far dominated plan that widens the axes."""
    plans = [f"tp8.pp{k}" for k in range(8)] + ["dp"]
    time = xr.DataArray(np.r_[1.0 + 0.03 * np.arange(8), 2.0], dims="plan", coords={"plan": plans},
                        attrs={"units": "s", "long_name": "step time"})
    rate = xr.DataArray(np.r_[2000.0 + 100 * np.arange(8), 100.0], dims="plan", coords={"plan": plans},
                        attrs={"units": "samples/s", "long_name": "throughput"})
    return xr.Dataset({"iteration_time": time, "throughput": rate})


def test_pareto_labels_do_not_cross_the_frontier_or_each_other():
    fig, ax = P.pareto(_staircase(), "iteration_time", "throughput", title="")
    texts = [t for t in ax.texts if t.get_gid() == "frontier-label"]
    (line,) = [g for g in ax.lines if g.get_gid() == "frontier-line"]
    _assert_clear(fig, texts, [line])
    shown = sum(t.get_visible() for t in texts)
    assert shown + ax.labels_left_out == len(texts) == 8
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    assert (labels_left_out(ax.labels_left_out, 8) in legend) if ax.labels_left_out else "left out (no" not in legend


def test_the_old_fixed_offset_crosses_the_line_on_this_case():
    """The case is one the rule must solve: every label at (3, 3) pt, the old place, crosses the staircase."""
    fig, ax = P.pareto(_staircase(), "iteration_time", "throughput", title="")
    texts = [t for t in ax.texts if t.get_gid() == "frontier-label"]
    (line,) = [g for g in ax.lines if g.get_gid() == "frontier-line"]
    for text in texts:
        text.set_visible(True)
        text.xyann = LABEL_OFFSETS_PT[0]
        text.set_horizontalalignment("left")
        text.set_verticalalignment("bottom")
    fig.draw_without_rendering()
    path = display_path(line)
    assert any(path.intersects_bbox(box, filled=False) for box in _boxes(fig, texts))


def test_place_labels_hides_a_label_with_no_room_and_counts_it():
    """A label on a point inside a dense zig-zag: every offset crosses a segment, so it is hidden and counted
    (2 labels, one placed by hand-free rules, the zig-zag through the second's every candidate box)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 3))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    xs = np.linspace(0, 10, 400)
    (line,) = ax.plot(xs, 5 + 4 * np.sin(xs * 40))   # a band 8 units tall, crossed every 0.08 units
    text = ax.annotate("a long label here", (5, 5), xytext=(3, 3), textcoords="offset points", fontsize=6)
    assert place_labels(fig, [text], [line]) == 1 and not text.get_visible()
    plt.close(fig)
    assert labels_left_out(1, 2) == "1 of 2 labels left out (no room)" and labels_left_out(0, 2) == ""


def _serving():
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    b = np.array(batches, dtype=float)
    per_user = np.stack([1000 / (1 + 0.05 * b), 1400 / (1 + 0.05 * b)])     # falls with the batch
    per_gpu = per_user * b / 8
    coords = {"precision": ["bf16", "fp8"], "batch_size": batches}
    dims = ("precision", "batch_size")
    return xr.Dataset({"output_tokens_per_s_per_user": (dims, per_user, {"units": "tokens/s"}),
                       "output_tokens_per_s_per_gpu": (dims, per_gpu, {"units": "tokens/s"}),
                       "status": (dims, np.zeros(per_user.shape, dtype=np.int8))}, coords=coords)


def test_serving_pareto_labels_do_not_cross_any_frontier_or_each_other():
    from fastmodel.plot.serving import serving_pareto

    fig, ax = serving_pareto(_serving(), "precision", title="")
    texts = [t for t in ax.texts if str(t.get_gid()).startswith("point-label-")]
    lines = [g for g in ax.lines if str(g.get_gid()).startswith("frontier-")]
    assert len(lines) == 2 and len(texts) == 16
    _assert_clear(fig, texts, lines)
    title = fig.legends[0].get_title().get_text()
    assert title == ("precision" if not ax.labels_left_out else f"precision\n{labels_left_out(ax.labels_left_out, 16)}")


def test_display_path_of_a_vertical_target_line_spans_the_axes():
    """The TPOT target (axvline: x in data, y in axes) is an obstacle where it is drawn, top to bottom."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(100, 200)
    line = ax.axvline(5.0)
    fig.draw_without_rendering()
    vertices = display_path(line).vertices
    np.testing.assert_allclose(vertices[:, 0], ax.transData.transform((5.0, 150))[0])
    np.testing.assert_allclose(sorted(vertices[:, 1]), [ax.bbox.y0, ax.bbox.y1])
    plt.close(fig)
