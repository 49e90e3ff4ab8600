"""Hypothesis settings and "weird value" strategies shared by the fuzz tests (tests/behaviour/test_fuzz*.py)."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz_settings(max_examples: int):
    """Fixed seed, no example database, no deadline: CI runs the same bounded cases every time."""
    return settings(derandomize=True, database=None, deadline=None, max_examples=max_examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def weird(values: list):
    """Any integer or float (NaN and infinities included), short text, or one of ``values`` plus the JSON
    shapes no scalar field takes."""
    return st.one_of(
        st.integers(min_value=-(10**20), max_value=10**20),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([*values, True, False, None, "", "x", [], {}, [1, 2], {"a": 1}]),
        st.text(max_size=6),
    )
