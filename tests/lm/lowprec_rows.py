"""Registry rows for the low-precision tests: a row at a precision with columns set by name (the NVFP4 and
BF16-layer tests, docs/model.md §11.38, §11.39), and the sequence-parallel gather tests' row (docs/model.md §11.40,
§11.41): MLPerf GPT-3 175B's shape and TP (runs_dev.jsonl) with sequence parallelism on, at a precision, FP8 recipe
and compute capability."""

import numpy as np

from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import FP8_RECIPES, PRECISION_CODES, column_defaults

HOPPER, BLACKWELL = 9.0, 10.0
H, SEQ, MICRO, TP = 12288.0, 2048.0, 1.0, 4.0       # MLPerf GPT-3 175B's shape and TP (runs_dev.jsonl)


def precision_row(precision: str, **values) -> np.ndarray:
    """The registry's default row at ``precision`` (a PRECISION_CODES name), ``values`` setting columns by name."""
    row = np.array(column_defaults())
    row[C["precision"]] = PRECISION_CODES[precision]
    for name, value in values.items():
        row[C[name]] = value
    return row


def sp_row(precision: str = "bf16", recipe: str = "unstated", cc: float = HOPPER, regather: float | None = None,
           overhead: float | None = None, **values) -> np.ndarray:
    """A registry row with SP on; ``regather`` sets ``sp_wgrad_regather`` (§11.41; None: the default) and
    ``overhead`` ``collective_overhead_s`` (None: the default); ``values`` set other columns by name."""
    row = precision_row(precision)
    row[C["fp8_recipe"]] = FP8_RECIPES[recipe]
    row[C["compute_capability"]] = cc
    row[C["hidden"]], row[C["seq_len"]], row[C["micro_batch"]], row[C["tp"]] = H, SEQ, MICRO, TP
    row[C["sequence_parallel"]] = 1.0
    if regather is not None:
        row[C["sp_wgrad_regather"]] = regather
    if overhead is not None:
        row[C["collective_overhead_s"]] = overhead
    for name, value in values.items():
        row[C[name]] = value
    return row
