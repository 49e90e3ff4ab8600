"""What ``fastmodel.validate`` returns (:class:`Validation`) and what both engines' validations share: the runs'
name, the held-out ids, whether the records are serving records.

``fastmodel.validate`` (fastmodel/api.py) tells the records apart by content as the command does and hands them to
``fastmodel.lm.validate_run.validation`` or ``fastmodel.serve.validate.validation``; ``fastmodel validate`` echoes
the result's ``messages`` on stderr, prints its ``report`` and writes its ``rows`` with ``-o``. So the Python
numbers are the command's, not a second computation of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from fastmodel.errors import NotThereError, SpecError, checked_arguments, nearest


@dataclass(frozen=True)
class Validation:
    """What ``fastmodel validate`` computes: ``kind`` (``runs`` or ``serving``); ``rows``, one dict per record as
    ``validate -o rows.csv`` writes them (id, groups, ``status`` -- ``ok``, ``not_finite`` or ``refused`` --, measured,
    predicted, ``error`` = predicted / measured - 1, the baselines' errors, ``notes`` holding a refused record's
    reason; ``split`` with a held-out split); ``scores``, one dict per line of the printed tables (``metric``,
    ``key``, ``group``, ``split``, ``n``, ``miss``, ``mape``, ``median``, ``bias``, ``hit_rate`` and the
    baselines' MAPE: ``baseline_mfu0.40_mape`` / ``baseline_mfu0.50_mape`` for runs, ``naive_mape`` for serving);
    ``messages``, the lines the command prints on stderr (refused and skipped records, calibration warnings);
    ``calibration``, the applied calibration's one-line description; ``report``, the tables as printed."""
    kind: str
    rows: list[dict]
    scores: list[dict]
    messages: list[str] = field(default_factory=list)
    calibration: str | None = None
    report: str = ""

    @checked_arguments
    def score(self, group: str = "all", key: str | None = None, split: str | None = None,
              metric: str | None = None) -> dict:
        """The ``scores`` line of ``group`` of ``key`` (None: all records) in ``split`` (default: ``all``, or
        ``dev`` with a held-out split) for ``metric`` (default: the first scored, ``step_time`` for runs; serving:
        ``ttft_s``, ``tpot_s`` or ``output_tokens_per_s``); otherwise a ``NotThereError`` (a FastmodelError and a
        KeyError) naming the first of these that matches no line, what there is, and the nearest."""
        by_split = any(row.get("split") for row in self.rows)
        split = split or ("dev" if by_split else "all")
        metric = metric or next((line["metric"] for line in self.scores), "step_time")
        for line in self.scores:
            if (line["metric"], line["key"], line["group"], line["split"]) == (metric, key, group, split):
                return line
        raise NotThereError(f"no score for metric={metric!r}, key={key!r}, group={group!r}, split={split!r}: "
                            + self._not_there(metric=metric, key=key, group=group, split=split))

    def _not_there(self, **given) -> str:
        """The first of ``given`` (in order) that no line holding the ones before it has: its values there."""
        lines = self.scores
        for name, value in given.items():
            there = [line for line in lines if line[name] == value]
            if not there:
                have = sorted({str(line[name]) for line in lines})
                return f"{name} {value!r} is none of {', '.join(have) or '(no score)'}{nearest(str(value), have)}"
            lines = there
        return "no line of that combination"

    def __str__(self) -> str:
        return "\n".join(([self.calibration] if self.calibration else []) + [self.report])


def source_of(runs: Any) -> str:
    return str(runs) if isinstance(runs, (str, os.PathLike)) else "runs"


def heldout_of(runs: Any, heldout: Any) -> set[str] | None:
    """The held-out ids: ``True`` reads heldout.json beside ``runs`` (``--heldout``), a path a split file
    (``--heldout SPLIT.json``), a set / list of ids those ids; None or False: no split."""
    from fastmodel.analysis.splits import heldout_ids, split_file_for

    if type(heldout).__module__ == "numpy" and getattr(heldout, "ndim", None) == 0:
        heldout = heldout.item()            # np.bool_(True) from a notebook: True
    if heldout is None or heldout is False:
        return None
    if isinstance(heldout, (set, frozenset, list, tuple)):
        return {str(i) for i in heldout}
    if heldout is not True and not isinstance(heldout, (str, os.PathLike)):
        raise SpecError(None, "heldout", "expected True (heldout.json beside runs), a split file's path or a set "
                        f"of held-out ids, got {type(heldout).__name__}")
    if not isinstance(runs, (str, os.PathLike)):
        raise SpecError(None, "heldout", "a split file lists ids by the runs file's name; for a list of records "
                        "give the held-out ids (a set)")
    given = "" if heldout is True else str(heldout)
    return heldout_ids(split_file_for(runs, given), runs, not given)


def is_serving(runs: Any) -> bool:
    """Whether ``runs`` (a path or a list of dicts) holds serving records: its first record is one (content
    detection, as ``fastmodel validate`` tells them apart)."""
    from fastmodel.spec.detect import is_serve_record
    from fastmodel.spec.records import first_record

    if isinstance(runs, (str, os.PathLike)):
        return is_serve_record(first_record(runs))
    if not isinstance(runs, (list, tuple)):
        raise SpecError(None, "runs", "expected a JSON-lines file's path or a list of records (dicts), got "
                        f"{type(runs).__name__}")
    return next((is_serve_record(r) for r in runs if isinstance(r, dict)), False)


def refused_lines(refused: list) -> list[str]:
    """One line per record the engine refused (a miss in the scores)."""
    return [f"refused (a miss): {item.reason}" for item in refused]
