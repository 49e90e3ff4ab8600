"""Breakdown: stacked bars are the dataset's components (the registry's BREAKDOWN of its engine); the overlapped
bar sums to the step time."""

import numpy as np
import pytest
import xarray as xr
from plot_data import PLANS, synthetic_sweep

import fastmodel.plot as P
from fastmodel.plot.data import PlotError
from fastmodel.registry.madmax import BREAKDOWN

SERIALIZED, OVERLAPPED = BREAKDOWN.serialized, BREAKDOWN.overlapped


@pytest.fixture(scope="module")
def ds():
    return synthetic_sweep()


def _heights(ax):
    return {p.get_gid(): (p.get_y(), p.get_height()) for p in ax.patches if p.get_gid()}


def test_bars_equal_components_side_by_side(ds, tmp_path):
    plans = ["fsdp/ddp", "ddp/ddp"]
    fig, ax = P.breakdown(ds, sel={"num_nodes": 64, "global_batch": 2048, "plan": plans})
    bars = _heights(ax)
    point = ds.sel(num_nodes=64, global_batch=2048)
    for i, plan in enumerate(plans):
        row = point.sel(plan=plan)
        for kind, parts in (("Serialized", SERIALIZED), ("Overlapped", OVERLAPPED)):
            bottom = 0.0
            for part in parts:
                component = "exposed" if part == "exposed_comm" else part.removeprefix("time_")
                y, h = bars[f"{kind}:{component}:{i}"]
                assert y == pytest.approx(bottom) and h == pytest.approx(float(row[part]))
                bottom += h
            if kind == "Overlapped":
                assert bottom == pytest.approx(float(row.step_time), rel=1e-12)
            else:
                assert bottom == pytest.approx(float(row.time_gemm + row.time_emb + row.time_allreduce
                                                     + row.time_allgather + row.time_reducescatter))
    P.save(fig, tmp_path / "b.svg")
    svg = (tmp_path / "b.svg").read_text()
    for text in ("fsdp/ddp", "ddp/ddp", "ser.", "ovl.", "exposed comm.", "GEMM", "time per step [s]"):
        assert text in svg, text


def test_one_configuration_and_a_list_of_results(ds):
    one = ds.sel(num_nodes=32, global_batch=1024, plan="fsdp/ddp")
    fig, ax = P.breakdown(one)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Serialized", "Overlapped"]
    two = [ds.sel(num_nodes=32, global_batch=1024, plan=p) for p in PLANS[:2]]
    fig, ax = P.breakdown(two, labels=["A", "B"])
    assert len([p for p in ax.patches if p.get_gid()]) == 2 * (len(SERIALIZED) + len(OVERLAPPED))
    assert {t.get_text() for t in ax.texts} >= {"A", "B"}


def test_errors(ds):
    with pytest.raises(PlotError, match="fix the others with --sel"):
        P.breakdown(ds, sel={"num_nodes": 64})
    with pytest.raises(PlotError, match="for plan=ddp/ddp"):
        P.breakdown(ds, sel={"num_nodes": 16, "global_batch": 1024})
    with pytest.raises(PlotError, match="did you mean 'plan'"):
        P.breakdown(ds, sel={"plans": "fsdp/ddp"})
    assert np.isfinite(ds.iteration_time.sel(num_nodes=16, global_batch=1024, plan="fsdp/ddp"))


def test_many_configurations_without_a_result_are_one_short_line(ds):
    """Of 30 plans, 20 illegal: the error lists the first 12 and the count, not all 20 (a sweep's plan = "all"
    leaves hundreds), and says how to keep the others."""
    one = ds.sel(num_nodes=32, global_batch=1024, plan="fsdp/ddp", drop=True)
    plans = [f"p{i}" for i in range(30)]
    many = xr.concat([one] * 30, dim="plan").assign_coords(plan=plans)
    many["step_time"] = many.step_time.where(np.arange(30) >= 20)
    with pytest.raises(PlotError) as error:
        P.breakdown(many)
    assert str(error.value) == ("no result (illegal or does not fit) for plan=" + ", ".join(plans[:12])
                                + " ... (20 of 30); keep the others with --sel plan=VALUE (repeatable)")


def test_the_totals_sit_inside_the_axes_under_the_title():
    """A zero-height part stacked on top pinned the axis to the tallest bar: its total printed over the title."""
    ds = synthetic_sweep()
    ds.attrs.update(model='{"name": "LLaMA2-70B"}', system='{"name": "dc-a"}')
    fig, ax = P.breakdown(ds, sel={"num_nodes": 64, "global_batch": 2048, "plan": ["fsdp/ddp", "tp,ddp/mp"]})
    assert ax.get_title() == "LLaMA2-70B on dc-a: num_nodes=64, global_batch=2048 samples"   # what --sel fixed
    tallest = max(p.get_y() + p.get_height() for p in ax.patches)
    assert ax.get_ylim() == (0.0, pytest.approx(tallest * 1.14))
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    top = ax.get_window_extent(renderer).y1
    totals = [t for t in ax.texts if t.get_text() and t.xycoords == "data"]
    assert totals and all(t.get_window_extent(renderer).y1 <= top for t in totals)


def test_every_bar_without_a_result_names_the_statuses_and_no_others(ds):
    """Every configuration illegal said "keep the others with --sel plan=VALUE" though there was no other, and not
    why (walk of 2026-12-08); one of several illegal keeps the hint, with the status."""
    with pytest.raises(PlotError) as error:
        P.breakdown(ds, sel={"num_nodes": 16, "global_batch": 512, "plan": ["tp,ddp/mp", "ddp/ddp"]})
    assert str(error.value) == ("no result (illegal or does not fit) for plan=tp,ddp/mp, ddp/ddp (status "
                                "batch_not_divisible, does_not_fit)")
    with pytest.raises(PlotError) as error:
        P.breakdown(ds, sel={"num_nodes": 16, "global_batch": 512})
    assert str(error.value) == ("no result (illegal or does not fit) for plan=tp,ddp/mp, ddp/ddp (status "
                                "batch_not_divisible, does_not_fit); keep the others with --sel plan=VALUE (repeatable)")
