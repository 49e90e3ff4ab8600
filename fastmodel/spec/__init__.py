"""Spec machinery every engine shares; each engine's own spec kinds live in its wing (``fastmodel.madmax.spec``,
``fastmodel.lm.spec``, ``fastmodel.serve.spec``).

``loader`` (built-in names, TOML/JSON files and dicts, one-line errors), ``detect`` (what an input is, by its
content), ``quantity`` (units in spec files), ``network`` (the tiers both system kinds describe their network
with), ``devices`` (the built-in device files by name), ``columns`` (the real-world column vector by name),
``records`` and ``record_blocks`` (measured-run files and their typed blocks).
The built-in spec *files* are the separate data package ``fastmodel.specs``.
Nothing is imported here, so ``import fastmodel.spec`` loads no pydantic.
"""
