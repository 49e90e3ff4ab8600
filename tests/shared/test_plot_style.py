"""The paper style (fastmodel/plot/style.py): figure sizes and --width, the colour-blind-safe cycle."""

import matplotlib.colors as mcolors
import pytest
from plot_data import synthetic_file, synthetic_sweep

import fastmodel.plot as P
from fastmodel.cli.common import WIDTH_RANGE as CLI_WIDTH_RANGE
from fastmodel.errors import FastmodelError
from fastmodel.plot import style as S
from tests.suite_fixtures import cli


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    return synthetic_file(tmp_path_factory)


def test_presets_keep_their_sizes_and_a_width_gets_the_same_height_rule():
    assert S.figure_size("single") == (3.5, 2.52)          # 3.5 x 0.72
    assert S.figure_size("double") == (7.16, 2.8)          # 7.16 x 0.72 = 5.16, capped at 2.8
    assert S.figure_size(3.3) == (3.3, 2.38)               # 3.3 x 0.72 = 2.376
    assert S.figure_size(7.0) == (7.0, 2.8)
    assert S.figure_size(3.3, 1.5) == (3.3, 1.5)
    assert S.figure_size((4, 3)) == (4.0, 3.0)


@pytest.mark.parametrize("width", [0.5, 25, float("nan"), float("inf")])
def test_a_width_out_of_range_is_one_line(width):
    with pytest.raises(FastmodelError, match=r"figure width must be between 1.5 and 20 inches"):
        S.figure_size(width)


def test_the_command_line_range_is_the_style_range():
    assert CLI_WIDTH_RANGE == S.WIDTH_RANGE


def test_lines_cycle_okabe_ito(result_file):
    import xarray as xr

    ds = xr.open_dataset(result_file, engine="scipy")
    fig, ax = P.scaling(ds, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048}, title="t")
    lines = [line for line in ax.get_lines() if str(line.get_gid()).startswith("line:")]
    assert [mcolors.to_hex(line.get_color()).upper() for line in lines] == \
        [c.upper() for c in S.CYCLE[:len(lines)]]
    assert fig.get_suptitle() == "t" and ax.get_title() == ""   # over the figure, clear of the legend's title
    assert ax.get_xlabel() == "num nodes"


@pytest.mark.parametrize("kind, args", [
    ("heatmap", ["--x", "num_nodes", "--y", "plan", "--var", "throughput", "--sel", "global_batch=2048"]),
    ("scaling", ["--x", "num_nodes", "--var", "throughput", "--hue", "plan", "--sel", "global_batch=2048"]),
    ("pareto", ["--x", "iteration_time", "--y", "throughput"]),
])
def test_width_sets_the_figure_width(result_file, tmp_path, monkeypatch, kind, args):
    import fastmodel.plot

    widths = []
    real = fastmodel.plot.save
    monkeypatch.setattr(fastmodel.plot, "save", lambda fig, path, dpi: (widths.append(fig.get_size_inches()),
                                                                          real(fig, path, dpi))[1])
    out = tmp_path / "fig.pdf"
    result = cli("plot", kind, result_file, *args, "--width", "3.3", "-o", out, "--dpi", "80")
    assert result.exit_code == 0, result.output
    assert widths[0][0] == pytest.approx(3.3)
    result = cli("plot", kind, result_file, *args, "-o", tmp_path / "fig2.pdf", "--dpi", "80")
    assert widths[1][0] == pytest.approx(3.5)     # the --size single preset of these commands


def test_bad_width_is_one_line_exit_2(result_file, tmp_path):
    out = tmp_path / "fig.png"
    result = cli("plot", "heatmap", result_file, "--x", "num_nodes", "--y", "plan", "--sel", "global_batch=2048",
                 "--width", "0.5", "-o", out)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "--width" in lines[0] and "1.5" in lines[0], result.output
    assert not out.exists()


def test_pdf_and_svg_bytes_do_not_depend_on_the_run(result_file, tmp_path):
    """Two runs of the same command give the same bytes (no dates, fixed SVG ids)."""
    for suffix in ("pdf", "svg"):
        outs = [tmp_path / f"{k}.{suffix}" for k in "ab"]
        for out in outs:
            result = cli("plot", "scaling", result_file, "--x", "num_nodes", "--var", "throughput", "--hue", "plan",
                         "--sel", "global_batch=2048", "-o", out)
            assert result.exit_code == 0, result.output
        assert outs[0].read_bytes() == outs[1].read_bytes(), suffix


def test_pdf_and_svg_keep_text_as_text(tmp_path):
    """Journals (IEEE PDF eXpress, ACM) reject Type 3 fonts: PDF text is embedded TrueType (fonttype 42, a Type0
    font over a CIDFontType2), SVG text stays <text> elements (svg.fonttype 'none'), so labels stay editable."""
    import re

    assert S.PAPER_RC["pdf.fonttype"] == 42 and S.PAPER_RC["svg.fonttype"] == "none"
    fig, _ = P.heatmap(synthetic_sweep(), x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048})
    P.save(fig, tmp_path / "f.pdf")
    P.save(fig, tmp_path / "f.svg")
    subtypes = set(re.findall(rb"/Subtype\s*/(\w+)", (tmp_path / "f.pdf").read_bytes()))
    assert b"CIDFontType2" in subtypes and b"Type3" not in subtypes, subtypes
    svg = (tmp_path / "f.svg").read_text()
    assert "<text" in svg and "throughput [samples/s]" in svg


def test_scaling_lines_differ_in_colour_marker_or_style():
    from fastmodel.plot.scaling import MARKERS, line_style

    looks = [(S.CYCLE[k % len(S.CYCLE)], MARKERS[k % len(MARKERS)], line_style(k)) for k in range(160)]
    assert len(set(looks)) == 160


def _log_axis(lo, hi):
    fig, ax = S.new_axes("single")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    return ax.yaxis


def test_a_log_axis_of_many_decades_labels_powers_of_ten_alike():
    axis = _log_axis(1e-5, 1e3)                       # 8 decades: was '1e-05', '0.0001', ..., '1,000'
    fmt = S.unit_formatter(1.0, axis)
    assert [fmt(v, 0) for v in (1e-5, 1e-4, 1.0, 1e3)] == ["$10^{-5}$", "$10^{-4}$", "$10^{0}$", "$10^{3}$"]
    assert fmt(3e-4, 0) == ""
    axis = _log_axis(1.0, 1e3)                        # 3 decades: plain numbers
    assert [S.unit_formatter(1.0, axis)(v, 0) for v in (1.0, 1e3)] == ["1", "1,000"]
    assert S.unit_formatter(1e3)(2e6, 0) == "2,000"   # no axis: the old formatter


def test_minor_labels_only_where_majors_are_too_few():
    axis = _log_axis(15, 150)                         # one decade, one major tick (100) in view
    fmt = S.log_minor_formatter(axis)
    assert [fmt(v, 0) for v in (20, 30, 40, 50, 200)] == ["20", "30", "", "50", "200"]
    assert S.log_minor_formatter(_log_axis(1, 1e3))(20, 0) == ""    # three decades: majors suffice


def test_default_titles_say_model_and_system():
    from fastmodel.plot.data import subject

    ds = synthetic_sweep()
    ds.attrs.update(model='{"name": "LLaMA2-70B", "num_layers": 80}', system='{"name": "dc-a"}')
    assert subject(ds) == "LLaMA2-70B on dc-a"
    assert subject(ds.assign_attrs(system="")) == "LLaMA2-70B"
    fig, ax = P.pareto(ds, "iteration_time", "throughput")
    assert ax.get_title() == "LLaMA2-70B on dc-a"
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048})
    assert ax.get_title() == "LLaMA2-70B on dc-a: global_batch=2048 samples"
    fig, ax = P.pareto(ds, "iteration_time", "throughput", title="")
    assert ax.get_title() == ""


def test_default_titles_say_task_and_semantics_too():
    """A reviewer reads from the title what was modelled: the task and, when not the default, the semantics
    (MAD-Max's exact semantics give other numbers than the real-world model)."""
    from fastmodel.plot.data import subject

    ds = synthetic_sweep().assign_attrs(model='{"name": "LLaMA2-70B"}', system='{"name": "dc-a"}',
                                        task='{"name": "llm-pretrain", "kind": "pretrain"}',
                                        semantics='{"name": "madmax"}')
    assert subject(ds) == "LLaMA2-70B on dc-a, llm-pretrain, madmax semantics"
    fig, ax = P.heatmap(ds, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048})
    assert ax.get_title() == "LLaMA2-70B on dc-a, llm-pretrain, madmax semantics: global_batch=2048 samples"
    real = ds.assign_attrs(task="", fastmodel_task="llm-pretrain", semantics="default")   # a real-world result
    assert subject(real) == "LLaMA2-70B on dc-a, llm-pretrain"


def test_sizes_in_bytes_are_shown_in_binary_units_as_the_memory_figures():
    """A memory heatmap's colour bar read 'GB' beside the memory figures' and `run`'s GiB: one paper, two units.
    Hand values: 85,899,345,920 B = 80 x 2^30 -> 80 GiB; 25e9 B/s stays 25 GB/s (rates are decimal)."""
    assert S.display_unit("bytes", [80 * 2**30]) == (2**30, "GiB")
    assert S.fmt_quantity(80 * 2**30, "bytes") == "80 GiB"
    assert S.fmt_quantity(512 * 2**20, "bytes") == "512 MiB"
    assert S.fmt_quantity(25e9, "B/s") == "25 GB/s"
    ds = synthetic_sweep()
    fig, _ = P.heatmap(ds, x="num_nodes", y="plan", var="memory_per_device", sel={"global_batch": 2048})
    colorbar = fig.axes[-1]
    assert colorbar.get_ylabel().endswith("[GiB]")
    assert colorbar.yaxis.get_major_formatter()(80 * 2**30, 0) == "80"    # ticks in GiB, the data in bytes
