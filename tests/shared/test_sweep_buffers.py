"""fastmodel/sweeps/buffers.py: the in-memory sweep's result matrix."""

import mmap

import numpy as np
import pytest

from fastmodel.sweeps.buffers import ADVISE_MIN_BYTES, result_matrix


def test_a_large_matrix_is_a_writable_c_ordered_float64_mapping_of_its_own():
    rows, points = 36, ADVISE_MIN_BYTES // 8 // 36 + 1000
    out = result_matrix(rows, points)
    assert out.shape == (rows, points) and out.dtype == np.float64 and out.flags.c_contiguous
    assert out.flags.writeable
    out[:, -1] = np.arange(rows)
    out[-1, 0] = 2.5
    assert out[-1, 0] == 2.5 and out[5, -1] == 5.0
    if getattr(mmap, "MADV_NOHUGEPAGE", None) is not None:
        owner = _owner(out)
        assert isinstance(owner, mmap.mmap)          # the advised mapping, kept alive by the array
        assert len(owner) == rows * points * 8


def _owner(array):
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


def test_a_small_or_empty_matrix_is_a_plain_array():
    assert result_matrix(3, 4).base is None
    empty = result_matrix(36, 0)
    assert empty.shape == (36, 0)


@pytest.mark.parametrize("points", [0, 7])
def test_views_outlive_the_name(points):
    view = result_matrix(2, ADVISE_MIN_BYTES // 16 + points)[1]
    view[:] = 1.0                                       # the mapping stays valid through the view
    assert view.sum() == view.size
