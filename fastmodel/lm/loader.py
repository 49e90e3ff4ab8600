"""Load the real-world specs (``family = "lm"`` models, ``kind = "cluster"`` systems, executions)
from built-in names, TOML/JSON paths, dicts or spec objects; errors name source, field and reason."""

from __future__ import annotations

import math
import numbers
from typing import Any

from fastmodel.errors import SpecError
from fastmodel.lm.spec import ClusterSpec, ExecutionSpec, LMSpec
from fastmodel.spec.detect import check_system_kind
from fastmodel.spec.loader import resolve_source, validate


def load_lm_model(spec: Any) -> LMSpec:
    """An LM spec; MAD-Max-family models are refused with a pointer to the real-world built-ins."""
    if isinstance(spec, LMSpec):
        return spec
    data, source = resolve_source(spec, "model")
    if isinstance(data, dict) and data.get("family", "lm") != "lm":
        raise SpecError(source, "model.family", f"{data.get('family')!r} is a MAD-Max model; the real-world model "
                        "(a kind = \"cluster\" system) needs a family = \"lm\" spec (e.g. llama3.1-70b; 'fastmodel "
                        "specs list model'), and a MAD-Max model a MAD-Max system (e.g. dc-a)")
    return validate(LMSpec, data, source, "model")


def load_cluster(spec: Any, num_nodes: int | None = None) -> ClusterSpec:
    """A cluster spec; ``num_nodes`` overrides its size."""
    if isinstance(spec, ClusterSpec):
        cluster = spec
    else:
        data, source = resolve_source(spec, "system")
        check_system_kind(data, source)
        if isinstance(data, dict) and data.get("kind") != "cluster":
            raise SpecError(source, "system.kind", "a MAD-Max system; the real-world model (a family = \"lm\" "
                            "model) needs a kind = \"cluster\" spec (e.g. dgx-h100; 'fastmodel specs list system'), "
                            "and a MAD-Max system a MAD-Max model (e.g. llama2-70b)")
        cluster = validate(ClusterSpec, data, source, "system")
    if num_nodes is not None:
        # a non-number, nan or inf raised TypeError/ValueError/OverflowError from int() (fm.evaluate(num_nodes=nan))
        if not _whole_positive(num_nodes):
            raise SpecError(None, "system.num_nodes", f"must be a positive integer (got {num_nodes!r})")
        cluster = cluster.model_copy(update={"num_nodes": int(num_nodes)})
    return cluster


def _whole_positive(value: Any) -> bool:
    """Whether ``value`` is a whole number >= 1 (an int, or a float such as 2.0); not a bool, string, nan or inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return False
    return int(value) == value and value >= 1


def load_execution(spec: Any) -> ExecutionSpec:
    """An execution spec from a dict or spec object (None: the defaults)."""
    if spec is None:
        return ExecutionSpec()
    if isinstance(spec, ExecutionSpec):
        return spec
    if not isinstance(spec, dict):
        raise SpecError(None, "execution", f"expected a dict of execution fields, got {type(spec).__name__}")
    return validate(ExecutionSpec, spec, None, "execution")
