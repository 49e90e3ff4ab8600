"""fastmodel.lm.loader: a cluster's num_nodes override from the Python API."""

import math

import pytest

import fastmodel
from fastmodel.errors import SpecError
from fastmodel.lm.loader import load_cluster


@pytest.mark.parametrize("nodes", [math.nan, math.inf, -math.inf])
def test_a_non_finite_node_count_is_a_spec_error(nodes):
    """``fastmodel.evaluate(..., num_nodes=float("nan"))`` raised ValueError "cannot convert float NaN to integer"
    (inf: OverflowError) from ``int(num_nodes)``; the MAD-Max loader and every other count say SpecError."""
    with pytest.raises(SpecError, match=r"system\.num_nodes: must be a positive integer"):
        load_cluster("dgx-h100", nodes)
    with pytest.raises(SpecError, match=r"system\.num_nodes"):
        fastmodel.evaluate("llama3.1-8b", "dgx-h100", "llm-pretrain", plan="tp2", num_nodes=nodes)


def test_a_whole_float_node_count_still_overrides_the_cluster():
    assert load_cluster("dgx-h100", 2.0).num_nodes == 2
