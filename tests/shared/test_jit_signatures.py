"""kernels/jit.py: an lm kernel called from another kernel is compiled once per argument type, not once per
constant value (numba types a constant argument as a literal, ``Literal[int](8)``); other engines keep numba's
default. Two tiny kernels, not cached."""

import types

import numba
import pytest

from fastmodel.kernels import jit

pytestmark = pytest.mark.skipif(jit.INTERPRETED, reason="FASTMODEL_JIT=0: nothing compiles")


def _scaled(x, k):
    return x * k


def _kernel_of(engine_module: str):
    """``_scaled`` as a kernel of the module ``engine_module`` (the engine is read from the module's name)."""
    func = types.FunctionType(_scaled.__code__, {}, "_scaled")
    func.__module__ = engine_module
    return jit.njit(cache=False)(func)


LM = _kernel_of("fastmodel.kernels.lm.probe")
MADMAX = _kernel_of("fastmodel.kernels.madmax.probe")


@numba.njit(cache=False)
def _constants_lm(x, n):
    return LM(x, 8) + LM(x, 2) + LM(x, n)


@numba.njit(cache=False)
def _constants_madmax(x, n):
    return MADMAX(x, 8) + MADMAX(x, 2) + MADMAX(x, n)


def test_lm_kernel_compiles_once_for_constant_and_variable_arguments():
    # by hand: 1.5 x 8 + 1.5 x 2 + 1.5 x 3 = 12 + 3 + 4.5
    assert _constants_lm(1.5, 3) == 19.5
    assert [str(s) for s in LM.signatures] == ["(float64, int64)"]


def test_other_engines_keep_one_signature_per_constant():
    assert _constants_madmax(1.5, 3) == 19.5
    assert len(MADMAX.signatures) == 3        # Literal[int](8), Literal[int](2), int64
