"""What a run keeps free: the default margin of ``fits_memory`` (docs/model_memory.md "What a run keeps free: the
default margin (issue 23)"), derived by hand.

The default margin is the plan's own allocator cache, ``allocator_cache_fraction x memory_allocated``: when a device
allocation fails, PyTorch's caching allocator frees its whole free segments and retries, and what it cannot give back
(free blocks split from segments that still hold a live tensor) is part of ``reserved - allocated``. A plan fits when
``memory_per_device + allocator_cache_fraction x memory_allocated <= HBM``, i.e. ``memory_reserved + overhead <= HBM``.
A device column ``usable_hbm_fraction`` > 0 (set by the user) replaces the rule with ``f x HBM``; serving keeps its
0.95 (``SERVE_USABLE_HBM_FRACTION``).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.analysis.margin import default_margin_bytes, usable_attrs
from fastmodel.kernels.lm.evaluate import usable_hbm_bytes
from fastmodel.kernels.serve.evaluate import usable_fraction
from fastmodel.lm.records import lower_record
from fastmodel.lm.validate import rows
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import COLUMNS
from fastmodel.registry.serve import SERVE_USABLE_HBM_FRACTION

DATA = Path(__file__).resolve().parents[1] / "data"
GIB = 2**30
H100_HBM = 84943715697  # specs/devices/h100-sxm.toml: 79.11 GiB CUDA-visible
A100_40_HBM = 42412802048  # specs/devices/a100-sxm4.toml: 39.50 GiB CUDA-visible


def _row(hbm: float, cache: float = 0.05, fraction: float = 0.0) -> np.ndarray:
    row = np.array([c.default for c in COLUMNS], dtype=np.float64)
    row[C["hbm_bytes"]], row[C["allocator_cache_fraction"]], row[C["usable_hbm_fraction"]] = hbm, cache, fraction
    return row


def _record(record_id: str, name: str = "runs_dev.jsonl"):
    for line in (DATA / name).read_text().splitlines():
        data = json.loads(line)
        if data["id"] == record_id:
            return lower_record(data)
    raise KeyError(record_id)


def test_the_registry_leaves_usable_hbm_fraction_unset():
    """0 = not set: the allocator-cache rule for training; the column no longer carries an unsourced 0.95."""
    column = next(c for c in COLUMNS if c.name == "usable_hbm_fraction")
    assert column.default == 0.0 and column.lo == 0.0 and column.hi == 1.0
    assert next(c for c in COLUMNS if c.name == "allocator_cache_fraction").default == 0.05


def test_default_usable_hbm_of_one_h100_plan_by_hand():
    """An H100 plan with 70 GiB allocated keeps 0.05 x 70 = 3.5 GiB free: 79.11 - 3.5 = 75.61 GiB usable (the
    former 5 % of the HBM kept 3.96 GiB free, 75.15 usable)."""
    row = _row(H100_HBM)
    allocated = 70 * GIB
    assert usable_hbm_bytes(row, allocated) == pytest.approx(84943715697 - 3.5 * GIB, rel=1e-15)
    assert default_margin_bytes(row, allocated) == pytest.approx(3.5 * GIB, rel=1e-15)
    assert (H100_HBM - usable_hbm_bytes(row, allocated)) / GIB == pytest.approx(3.5, rel=1e-12)
    # a small plan keeps little free: 10 GiB allocated -> 0.5 GiB margin, not 3.96
    assert default_margin_bytes(row, 10 * GIB) == pytest.approx(0.5 * GIB, rel=1e-15)


def test_one_rule_picks_a_configuration_s_margin():
    """``row_margin_bytes``, what the memory timeline and the per-stage table apply: without a margin the plan's own
    allocator cache (0.05 x 70 GiB = 3.5 GiB), a given one as it is (6 GiB), and one at or above the row's HBM
    (79.11 GiB) refused in one line, as ``run --memory-margin`` refuses it (``user_margin_bytes``)."""
    from fastmodel.analysis.margin import TypedMargin, row_margin_bytes, user_margin_bytes
    from fastmodel.errors import SweepError

    row = _row(H100_HBM)
    assert row_margin_bytes(row, 70 * GIB) == pytest.approx(3.5 * GIB, rel=1e-15)
    assert row_margin_bytes(row, 70 * GIB, 6 * GIB) == user_margin_bytes(6 * GIB, H100_HBM) == 6 * GIB
    typed = TypedMargin(80 * GIB)
    typed.typed = "80"
    for margin, said in ((80 * GIB, "memory_margin: 80.0 GiB"), (typed, "--memory-margin: 80 GiB"),
                         (-1.0, "memory_margin: -1.0 bytes is negative")):
        with pytest.raises(SweepError, match=said):
            row_margin_bytes(row, 70 * GIB, margin)


def test_a_set_usable_hbm_fraction_replaces_the_rule():
    """A user's usable_hbm_fraction (device file or spec) still rules: 0.9 x 79.11 GiB, whatever is allocated."""
    row = _row(H100_HBM, fraction=0.9)
    for allocated in (1 * GIB, 70 * GIB):
        assert usable_hbm_bytes(row, allocated) == pytest.approx(0.9 * 84943715697, rel=1e-15)
        assert default_margin_bytes(row, allocated) == pytest.approx(0.1 * 84943715697, rel=1e-12)
    assert usable_attrs(row) == {"usable_hbm_bytes": pytest.approx(0.9 * 84943715697)}
    assert usable_attrs(_row(H100_HBM)) == {"memory_margin_rule": "allocator_cache"}


def test_serving_keeps_its_share():
    """Serving does not take the training rule: 0.95 when the column is unset, the user's value when set."""
    assert SERVE_USABLE_HBM_FRACTION == 0.95
    assert usable_fraction(_row(H100_HBM)) == 0.95
    assert usable_fraction(_row(H100_HBM, fraction=0.8)) == 0.8


def test_aws_fsdp_gpt3_175b_by_hand():
    """Held-out aws-fsdp-gpt3-175b-s512-n128 (A100 40GB, PyTorch 1.10 FSDP: no expandable segments, so the cache
    bound applies in full): memory_per_device = allocated + overhead; the margin is 0.05 x allocated, and the
    plan is over by memory_per_device + margin - 39.50 GiB."""
    record = _record("aws-fsdp-gpt3-175b-s512-n128")
    [row] = rows([record])
    allocated, per_device = row["memory_allocated"], row["memory_per_device"]
    margin = 0.05 * allocated
    assert row["memory_reserved"] - allocated == pytest.approx(margin, rel=1e-12)
    assert row["fits_memory"] is bool(per_device + margin <= A100_40_HBM)
    over = (per_device + margin - A100_40_HBM) / GIB
    assert over == pytest.approx(0.29, abs=0.01)  # 37.92 + 1.87 - 39.50 (docs: "0.29 over"; 0.09 before FSDP1's
    # flat-gradient copy, docs/model_memory.md "PyTorch FSDP1 on A100 40 GB: measured peaks")
    assert row["fits_memory"] is False
    # under the former 5 % of the HBM (37.52 GiB usable) it would be 0.39 over; the two margins differ by
    # 0.05 x (HBM - allocated)
    assert (per_device - 0.95 * A100_40_HBM) / GIB == pytest.approx(0.39, abs=0.02)


def test_a_plan_over_the_hbm_does_not_fit():
    """The rule is a memory model, not a pass: a plan whose allocated bytes alone exceed the HBM never fits, and
    one within the cache of the HBM does not either."""
    row = _row(H100_HBM)
    assert 80 * GIB > usable_hbm_bytes(row, 80 * GIB)
    per_device = 76.0 * GIB  # 75.5 allocated + 0.5 overhead: 76.0 + 0.05 x 75.5 = 79.78 > 79.11
    assert per_device > usable_hbm_bytes(row, 75.5 * GIB)
    assert 74.0 * GIB <= usable_hbm_bytes(row, 73.5 * GIB)  # 74.0 + 3.675 = 77.675 <= 79.11


def test_a_set_usable_fraction_below_a_tenth_is_refused_as_a_reserve_typed_by_mistake():
    """Review MEDIUM 2: 0 now means "not set", so the column's bound is [0, 1]; a user who types 0.05 meaning "keep 5 %
    free" would get 5 % usable and every plan "does not fit". 0 and [0.1, 1] are taken; (0, 0.1) is one line."""
    from fastmodel.errors import SweepError
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.validators import column_problem

    column = COLUMNS[C["usable_hbm_fraction"]]
    assert column_problem(column, 0.0) is None and column_problem(column, 0.1) is None
    assert column_problem(column, 0.95) is None and column_problem(column, 1.0) is None
    assert "FILL" in column_problem(column, 0.05) and "--memory-margin" in column_problem(column, 0.05)
    assert column_problem(column, 1.5) is not None
    with pytest.raises(SweepError, match="axes.usable_hbm_fraction: 0.05 is the share of HBM a plan may FILL"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"usable_hbm_fraction": [0.9, 0.05]})


def test_a_madmax_result_refuses_a_margin_naming_its_own_rule():
    """best --memory-margin on a MAD-Max result said 're-run the sweep with this version' (a re-run records no
    HBM either: MAD-Max fits by its 3 x weights rule); it names that rule and the filter that works."""
    import fastmodel
    from fastmodel.analysis.best import best
    from fastmodel.analysis.margin import gib_margin
    from fastmodel.errors import SweepError

    ds = fastmodel.sweep("llama2-70b", "dc-a", "llm-pretrain", axes={"num_nodes": [16], "plan": ["fsdp/ddp"]},
                         semantics="madmax")
    assert ds.attrs["fastmodel_engine"] == "madmax" and "hbm_bytes" not in ds.attrs
    with pytest.raises(SweepError, match=r"^--memory-margin: applies to real-world training results; a MAD-Max "
                                         r"result fits by its 3 x weights rule .*--where memory_per_device<BYTES"):
        best(ds, "throughput", memory_margin=gib_margin("2"))
