"""What ``fastmodel run`` prints for one configuration or record, whichever engine made it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunReport:
    """One evaluation as a report a person reads (``text``) and its JSON twin (``record``); ``ok`` is False
    when the engine could not evaluate it (the text then says why, and the command exits 2)."""

    text: str
    record: dict = field(default_factory=dict)
    ok: bool = True
