"""One value per argument of the serving API's ``evaluate`` (``fastmodel.serve.api.evaluate``).

A list, tuple, set, range or numpy array of more than zero dimensions where one configuration takes a scalar is a
SpecError naming the argument and pointing at ``fastmodel.serve.api.sweep``, which takes such lists as axes (a
``precision=["bf16", "fp8"]`` used to end in ``TypeError: unhashable type``, a ``device=["H100"]`` in a nearest name
of the list's text). A 0-d numpy array (``np.array(8)``) is its one value, as a numpy scalar already is.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fastmodel.errors import SpecError
from fastmodel.spec.quantity import count_suffix_hint

SEQUENCES = (list, tuple, set, frozenset, range, np.ndarray)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def one_value(name: str, value: Any) -> Any:
    """``value`` itself, a 0-d array's item, or a SpecError for a sequence (the sweep that takes it)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if not isinstance(value, SEQUENCES):
        return value
    kind = type(value).__name__
    if name == "model":
        hint = "evaluate each model in its own call, or sweep one model's axes with fastmodel.serve.api.sweep"
    else:
        hint = f"to compare several, sweep them: fastmodel.serve.api.sweep(model, device, {name}=[...])"
    raise SpecError(None, name, f"one value per evaluate() call, got a {kind} {_shown(value)}; {hint}")


def one_value_kwargs(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with each value checked by :func:`one_value` (a mapping ``model`` of columns stays one)."""
    return {name: one_value(name, value) for name, value in arguments.items()}


def one_value_arguments(model: Any, device: Any, engine: Any, kwargs: Mapping[str, Any]) -> tuple:
    """(model, device, engine, kwargs) of ``evaluate``, each through :func:`one_value`."""
    one = one_value_kwargs(dict(model=model, device=device, engine=engine, **kwargs))
    return one.pop("model"), one.pop("device"), one.pop("engine"), one


def no_number(value: Any) -> str:
    """The reason a column's value that is no number is refused, with the count hint of ``"8k"``."""
    return f"expected a number, got {value!r}{count_suffix_hint(value)}"
