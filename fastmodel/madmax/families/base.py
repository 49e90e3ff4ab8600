"""The description of one model family, and what every family module declares.

A family module (``fastmodel/madmax/families/<name>.py``) defines the family's spec
class and one :class:`Family` object; ``fastmodel/madmax/families/__init__.py``
registers it with one line. Everything family-specific on the Python side is
read from that object: the spec class, the plan components, which parameter
columns it fills (``traits``, matched against ``registry.madmax.COLUMNS[...].needs``),
the structure-key fields, the lowering, the kernels' integer family code,
degree limits and family rules, finetuning fields, the reference's type name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Family:
    """One model family (docs/architecture.md, "Model families")."""

    #: the ``family`` value of its spec files, e.g. ``"llm"``
    name: str
    #: the MAD-Max reference's model ``type``, e.g. ``"LLM"`` (fastmodel/madmax/spec/madmax_format.py)
    reference_name: str
    #: the pydantic spec class
    spec: type
    #: the kernels' integer family code (``kernels/madmax/layout.py`` ``FAMILY_*``): which cost formulas apply
    kernel_code: int
    #: plan components in plan-string order: ``("dense", "emb")`` or ``("dense", "emb", "transformer")``
    components: tuple[str, ...]
    #: parameter-column traits it fills from its spec (a column whose ``needs`` is one of them)
    traits: tuple[str, ...]
    #: the op graph of a structure key (``fastmodel.madmax.lowering.graph.lower`` dispatches here)
    lower: Callable[[Any], Any]
    #: an example plan for error messages
    plan_example: str
    #: per plan component, (spec paths whose sum bounds its pp degree, spec path bounding its tp degree or None)
    degree_limits: dict[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    #: family legality rules beyond the plan-shape ones (status names of ``registry.madmax.STATUSES``)
    rules: tuple[str, ...] = ()
    #: finetuning fields of the task that apply (``freeze_*``, ``min_frozen_layer``)
    freeze_fields: tuple[str, ...] = ()
    #: the ``Semantics`` field choosing the FSDP backward variant of its transformer layers
    fsdp_backward_field: str = "llm_fsdp_backward"
    #: a sample is a sequence of ``seq_len`` tokens (reports show tokens/s)
    sample_is_sequence: bool = False
    #: columns computed from other spec fields: ``derive(get) -> {column: value}`` (``get`` reads a spec path)
    derive_columns: Callable[[Callable[[str], Any]], dict[str, Any]] | None = None

    @property
    def has_transformer_component(self) -> bool:
        """Plans of this family have a third component, the transformer layers (``MLP/EMB/TRANSFORMER``)."""
        return "transformer" in self.components

    def structure_fields(self, model) -> dict[str, int]:
        """Layer counts that shape the op graph (fields of the ``StructureKey``); 0 where the family has none."""
        return {"num_layers": getattr(model, "num_layers", 0),
                "num_bottom_layers": getattr(model, "num_bottom_layers", 0),
                "num_top_layers": getattr(model, "num_top_layers", 0)}
