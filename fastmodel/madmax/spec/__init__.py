"""Specs of the MAD-Max engine: the family spec base (``model``), systems, tasks, the reference's JSON
formats (``madmax_format``) and JSON Schemas (``schema``). Nothing is imported here."""
