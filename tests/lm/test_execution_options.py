"""An execution option is its registry column and its use in kernels/lm (docs/architecture.md): ExecutionSpec
derives a field for every column marked ``option``, run records and the lowering take it by name."""

import pytest
from pydantic import ValidationError

from fastmodel.lm.execution import ExecutionSpec, option_fields, with_options
from fastmodel.registry.lm import COLUMNS, Column

#: an option of each kind, as a helper adding one would declare it in registry/lm.py
FLAG = Column("ep_overlap_demo", "1", 0, "1: a demo flag.", "plan", 0, 1, False, "flag")
NUMBER = Column("share_demo", "1", 0.25, "A demo share.", "plan", 0, 1, False, "number")
CODE = Column("precision", "code", 0, "A coded column (its names come from CODE_TABLES).", "plan", 0, 1, False,
              "code")


def test_each_kind_of_option_gets_its_field_type_and_bounds():
    spec = with_options(ExecutionSpec, [FLAG, NUMBER])
    assert spec.model_fields["ep_overlap_demo"].default is None          # the stack decides, else the column
    assert spec(ep_overlap_demo=True, share_demo=0.5).ep_overlap_demo is True
    with pytest.raises(ValidationError):
        spec(share_demo=1.5)                                             # the column's bounds
    with pytest.raises(ValidationError):
        spec(ep_overlap_demo="yes")                                      # strict, as every field
    fields = option_fields([FLAG, NUMBER, CODE])
    assert set(fields) == {"ep_overlap_demo", "share_demo", "precision"}
    assert "fp8" in str(fields["precision"][0]) and "bf16" in str(fields["precision"][0])


def test_a_field_declared_by_hand_wins_and_unmarked_columns_add_nothing():
    assert with_options(ExecutionSpec, [CODE]) is ExecutionSpec           # precision is declared by hand
    assert with_options(ExecutionSpec, [c for c in COLUMNS if not c.option]) is ExecutionSpec
    marked = [c.name for c in COLUMNS if c.option]
    assert set(marked) <= set(ExecutionSpec.model_fields)                # the registry's options are fields


def test_a_fused_accumulation_and_an_accumulation_pass_are_refused_together():
    """docs/model.md §11.46: both would charge the main-gradient traffic twice; the refusal names grad_accum_bytes.
    Either alone, or grad_accum_bytes = 0 beside the fusion, is a valid execution."""
    with pytest.raises(ValidationError, match="main-gradient traffic would be charged twice") as info:
        ExecutionSpec(wgrad_fused_accumulation=True, grad_accum_bytes=6.0)
    assert info.value.errors()[0]["ctx"]["error"].path == ("grad_accum_bytes",)
    for fine in ({"wgrad_fused_accumulation": True, "grad_accum_bytes": 0.0}, {"grad_accum_bytes": 6.0},
                 {"wgrad_fused_accumulation": False, "grad_accum_bytes": 6.0}, {"wgrad_fused_accumulation": True}):
        ExecutionSpec(**fine)
