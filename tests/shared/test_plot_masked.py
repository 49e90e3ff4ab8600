"""A result whose ``status`` a ``ds.where(...)`` masked to NaN (``fastmodel/plot/masked.py``): the figures say
"masked (status NaN)" for those points, never a cast integer (-9223372036854775808) and never a RuntimeWarning;
all points masked is the one-line PlotError naming them."""
import warnings

import matplotlib
import numpy as np
import pytest

from fastmodel.plot.data import PlotError, reasons_of
from fastmodel.plot.masked import MASKED, MASKED_CODE, status_codes

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def served():
    from fastmodel.serve import api
    # llama3-70b on one A100 (tp 1) leaves no KV room at any batch; tp 2..8 fit: some refused, some ok
    return api.sweep("llama3-70b", device=["H100", "A100"], tp=[1, 2, 8], batch_size=[1, 64])


def test_status_codes_maps_nan_to_the_masked_code():
    import xarray as xr
    codes = status_codes(xr.DataArray(np.array([0.0, np.nan, 5.0])))
    assert codes.tolist() == [0, MASKED_CODE, 5]
    assert status_codes(xr.DataArray(np.int8(3))).tolist() == [3]


def test_reasons_name_the_masked_points():
    import xarray as xr
    status = xr.DataArray(np.array([0.0, np.nan, 1.0]), attrs={"flag_meanings": "ok illegal_tp"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = reasons_of(status, np.array([False, True, True]))
    assert got == [MASKED, "illegal_tp"]


def test_serving_pareto_of_some_points_masked_says_masked(served):
    from fastmodel.plot.serving import serving_pareto
    refused = int((served.status != 0).sum())
    assert 0 < refused < served.status.size
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, ax = serving_pareto(served.where(served.status == 0))
    assert f"{refused} {MASKED}" in ax.left_out and "-92233" not in ax.left_out
    assert set(ax.frontiers) == {"H100", "A100"}


def test_serving_pareto_of_every_point_masked_is_one_line(served):
    from fastmodel.plot.serving import serving_pareto
    with pytest.raises(PlotError) as err:
        serving_pareto(served.where(served.status == 99))
    n = served.status.size
    assert f"left out {n} of {n} points: {n} {MASKED}" in str(err.value)


def test_heatmap_of_a_masked_status_calls_them_no_result(served):
    from fastmodel.plot.heatmap import heatmap
    masked = served.where(served.status == 0).sel(device="A100")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fig, ax = heatmap(masked, x="tp", y="batch_size", var="output_tokens_per_s_per_gpu")
    legend = " ".join(t.get_text() for lg in [*fig.legends, ax.get_legend()] if lg for t in lg.get_texts())
    assert "-92233" not in legend and "illegal" not in legend


def test_the_statuses_left_out_name_a_masked_point():
    """``status_reasons`` (the breakdown's "(status ...)"): the non-ok codes' names in code order, a NaN status as
    masked; int(nan) raised ValueError in the breakdown's legend before."""
    import xarray as xr

    from fastmodel.plot.masked import status_reasons
    status = xr.DataArray(np.array([0.0, np.nan, 2.0, 2.0]), attrs={"flag_meanings": "ok first_degree product_ne"})
    assert status_reasons(status) == f"{MASKED}, product_ne"
    assert status_reasons(xr.DataArray(np.int8(0), attrs={"flag_meanings": "ok"})) == ""
