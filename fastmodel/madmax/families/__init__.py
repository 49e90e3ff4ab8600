"""Model families of the MAD-Max engine: one module per family, registered here.

Each module defines its spec class and a :class:`~fastmodel.madmax.families.base.Family`
(components, parameter-column traits, structure fields, lowering, kernel code,
degree limits and rules). Adding a family = its module + one line in ``_MODULES``
(+ a kernel family code if its costs are new). The real-world model's
``family = "lm"`` is a separate engine (fastmodel/lm/spec.py).
"""

from __future__ import annotations

from typing import Union

from fastmodel.madmax.families import dlrm, dlrm_moe, dlrm_transformer, llm, llm_moe, vit
from fastmodel.madmax.families.base import Family

#: registration: one line per family module, in the order families are listed to users
_MODULES = (llm, llm_moe, vit, dlrm, dlrm_moe, dlrm_transformer)

FAMILIES: dict[str, Family] = {module.FAMILY.name: module.FAMILY for module in _MODULES}
#: family name -> spec class
MODEL_FAMILIES: dict[str, type] = {name: family.spec for name, family in FAMILIES.items()}
#: any family's spec (a type for annotations and pydantic)
ModelSpec = Union[tuple(MODEL_FAMILIES.values())]  # noqa: UP007 (a Union built from the registry)
#: the reference's model ``type`` -> family name
REFERENCE_NAMES: dict[str, str] = {family.reference_name: name for name, family in FAMILIES.items()}


def family_of(model_or_name) -> Family:
    """The :class:`Family` of a spec or a family name (KeyError for an unknown name)."""
    return FAMILIES[getattr(model_or_name, "family", model_or_name)]


__all__ = ["FAMILIES", "MODEL_FAMILIES", "REFERENCE_NAMES", "Family", "ModelSpec", "family_of"]
