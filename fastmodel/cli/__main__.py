"""``python -m fastmodel.cli``: the ``fastmodel`` command."""

from fastmodel.cli import entry

entry()
