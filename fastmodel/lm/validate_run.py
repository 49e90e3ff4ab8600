"""``fastmodel.validate`` of run records (RUNS.md): read, predict, score (``fastmodel.lm.validate``) into a
``fastmodel.analysis.validation.Validation``; ``fastmodel validate RUNS.jsonl`` prints the same object."""

from __future__ import annotations

import warnings
from typing import Any

from fastmodel.analysis.validation import Validation, refused_lines, source_of


def validation(runs: Any, ids: set[str] | None = None, calibration: Any = None) -> Validation:
    """The validation of the run records of ``runs`` (a JSONL path or a list of dicts): every record predicted (a
    refused one a row with status ``refused``), ``ids`` the held-out ids (None: no split), ``calibration`` (a TOML
    path or ``Calibration``) applied after the measurements are read."""
    from fastmodel.analysis.splits import mark_split
    from fastmodel.errors import SpecError
    from fastmodel.lm.records import is_batch_case, read_records, with_measurements
    from fastmodel.lm.validate import (
        format_report,
        refused_rows,
        rows,
        skipped_lines,
        summaries,
        without_impossible_meshes,
    )

    source = source_of(runs)
    refused: list = []
    records = without_impossible_meshes(read_records(runs, refused), refused)
    if not records and refused and all(is_batch_case(item.raw) for item in refused):   # another kind of file
        lines = "the one line is a batch case" if len(refused) == 1 else f"all {len(refused):,} lines are batch cases"
        raise SpecError(source, "record", f"no line is a run record: {lines} (model, system and task: lines of "
                                          "fastmodel batch, not RUNS.md run records); batch cases go to fastmodel batch")
    messages = refused_lines(refused)
    described = None
    if records:
        records, skipped = with_measurements(records, source)   # measured is read only here
        messages += skipped
    if calibration is not None:     # nothing fitted is applied unless asked for
        records, described, lines = _calibrated(records, calibration)
        messages += lines
    table = (rows(records) if records else []) + refused_rows(refused)
    messages += [f"warning: {source}: {line}" for line in skipped_lines(table)
                 if not line.split(": ")[1].startswith("refused")]
    if ids is not None:
        mark_split(table, ids)
    return Validation("runs", table, summaries(table, ids is not None), messages, described,
                      format_report(table, ids is not None))


def _calibrated(records: list, calibration: Any) -> tuple[list, str, list[str]]:
    """(the records with the calibration's values, its description, one ``warning: ...`` line per mismatch of
    the calibration and the records' devices, tiers and stacks, each also warned as a CalibrationWarning)."""
    from fastmodel.lm.calibrate import apply_calibration
    from fastmodel.lm.calibrate.overlay import as_calibration
    from fastmodel.lm.calibrate.use import CalibrationWarning, mismatches, record_software, tiers_used

    cal = as_calibration(calibration)
    seen: dict[str, set] = {}
    for record in records:
        seen.setdefault(record.gpu, set()).update(tiers_used(record.columns))
    lines: list[str] = []
    for line in mismatches(cal, seen, {record_software(r) for r in records}):
        text = " ".join(str(line).split())
        if f"warning: {text}" not in lines:
            lines.append(f"warning: {text}")
            warnings.warn(text, CalibrationWarning, stacklevel=4)
    return apply_calibration(records, cal), cal.describe(), lines
