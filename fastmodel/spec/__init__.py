"""Specs: what is modelled (a model, a system or cluster, a task, an execution).

One module per spec kind (``model``, ``system``, ``task``, ``lm``, ``serve``;
``network``: the tiers both system kinds describe their network with),
units in spec files (``quantity``), the built-in device files by name (``devices``), reading files, built-in names and dicts
(``loader``, ``lm_loader``, ``madmax_format``) and JSON Schemas (``schema``).
The built-in spec *files* are the separate data package ``fastmodel.specs``.
Nothing is imported here, so ``import fastmodel.spec`` loads no pydantic.
"""
