"""Hypothesis settings and "weird value" strategies shared by the fuzz tests (tests/behaviour/test_fuzz*.py)."""

import json

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


def leaf_paths(data: dict, prefix: tuple = ()):
    """Every path (tuple of keys) to a non-dict value of the nested dict ``data``."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from leaf_paths(value, (*prefix, key))
        else:
            yield (*prefix, key)


def mutate(data: dict, path: tuple, value, action: str) -> dict:
    """A deep copy of ``data`` with the field at ``path`` set to ``value`` (``"set"``), deleted (``"delete"``),
    renamed with a trailing ``s`` (``"typo"``), or joined by an unknown sibling ``bogus_field`` (``"extra"``)."""
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    if action == "delete":
        node.pop(path[-1], None)
    elif action == "typo":
        node[path[-1] + "s"] = node.pop(path[-1])
    elif action == "extra":
        node["bogus_field"] = value
    else:
        node[path[-1]] = value
    return data
