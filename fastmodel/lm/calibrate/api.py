"""Fit a calibration to measured run records as one object: ``fastmodel.calibrate`` (fastmodel/api.py) returns its
calibration, ``fastmodel calibrate`` prints its report and writes its TOML text, so both give the same calibration."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from fastmodel.errors import FastmodelError, SpecError
from fastmodel.lm.calibrate.overlay import Calibration

LOSSES = ("soft_l1", "linear")


@dataclass(frozen=True)
class Fitted:
    """A calibration fitted to runs: the overlay (header included; as read back from its TOML text, so its values
    are the file's), its TOML text as ``-o`` writes it, the
    report ``fastmodel calibrate`` prints and the lines it prints on stderr (records skipped or left out)."""
    calibration: Calibration
    toml: str
    report: str
    messages: list[str]


def _prior(prior: Any) -> float | str:
    """``prior`` as the fit takes it: 'cv', 'auto' or a finite number >= 0 (a one-line error otherwise)."""
    if prior in ("cv", "auto"):
        return prior
    try:
        weight = float(prior)
    except (TypeError, ValueError):
        weight = -1.0
    if isinstance(prior, bool) or not (math.isfinite(weight) and weight >= 0):
        raise SpecError(None, "prior", f"must be a finite number >= 0, 'cv' or 'auto', got {prior!r}")
    return weight


def _digest(runs: Any) -> str:
    """sha256 of the runs file's bytes; of a list, of its records as JSON lines (keys sorted)."""
    import hashlib
    import json
    from pathlib import Path

    if isinstance(runs, (str, os.PathLike)):
        return hashlib.sha256(Path(runs).read_bytes()).hexdigest()
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in runs)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (``np.int64(0)`` -> ``0``); anything else as it is."""
    return value.item() if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 else value


def fit_runs(runs: Any, folds: int | None = None, loss: str = "soft_l1", prior: Any = "auto",
             seed: int = 0) -> Fitted:
    """Fit the calibration of ``runs`` (a JSON-lines path or a list of run-record dicts; serving records are
    refused by the caller, which can tell them apart) as ``fastmodel calibrate`` does (see its --help and
    docs/calibration.md); writes nothing. A bad argument is a SpecError naming it (``folds``, ``loss``, ``prior``,
    ``seed``; the command names its flag, ``cli/common.flag_names``)."""
    import datetime

    from fastmodel import __version__
    from fastmodel.analysis.validation import source_of
    from fastmodel.lm.calibrate.fit import calibrate as fit
    from fastmodel.lm.calibrate.fit import objective_text
    from fastmodel.lm.calibrate.overlay import FORMAT, apply_calibration, parse_calibration, to_toml, tomllib
    from fastmodel.lm.calibrate.report import cross_validate, format_report, toml_annotations
    from fastmodel.lm.records import read_records, with_measurements
    from fastmodel.lm.validate import group_scores, rows, without_impossible_meshes

    folds, seed, prior = (_plain(value) for value in (folds, seed, prior))    # np.int64(0) from a notebook: 0
    if loss not in LOSSES:
        raise SpecError(None, "loss", f"must be one of {', '.join(LOSSES)}, got {loss!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(None, "seed", f"must be a whole number >= 0, got {seed!r}")
    prior = _prior(prior)
    source = source_of(runs)
    refused: list = []     # an expert mesh no framework builds is fitted on no more than validate scores it
    records = without_impossible_meshes(read_records(runs, refused), refused)    # (review11 #1; a malformed line: a miss)
    if refused and not records:
        raise FastmodelError(f"{source}: no run record can be predicted; nothing to calibrate (the first of "
                             f"{len(refused)} refused: {refused[0].reason})")
    records, messages = with_measurements(records, source)   # measured is read only here
    messages[:0] = [f"warning: refused, left out of the fit: {item.reason}" for item in refused]
    _distinct_ids(records)
    records = _finite_records(records, source, messages)
    if folds is None:
        folds = min(5, len(records)) if len(records) >= 2 else 0
    if isinstance(folds, bool) or not isinstance(folds, int) or (folds and not 2 <= folds <= len(records)):
        raise SpecError(None, "folds", f"must be 0 or between 2 and the number of runs ({len(records)}), got {folds}")
    result = fit(records, loss=loss, prior=prior, seed=seed)
    before, after = rows(records), rows(apply_calibration(records, result.calibration()))
    cv = cross_validate(records, folds, loss=loss, prior=prior, seed=seed) if folds else None
    report = format_report(result, before, after, cv, folds)

    def mape(table):
        return round(group_scores(table, None)[0][1].mape, 6)

    header = {
        "format": FORMAT, "fitted_on": source if source != "runs" else f"runs (a list of {len(runs)} records)",
        "runs": len(records), "sha256": _digest(runs),
        "fitted_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fastmodel": __version__,
        "objective": objective_text(loss, prior=result.prior) + (f", {result.prior_rule}" if result.prior_rule else ""),
        "step_time_mape_before": mape(before), "step_time_mape_after": mape(after),
    }
    if result.selection:     # below 10 runs: the factors leave-one-out kept and dropped, with its costs
        header["selection"] = "; ".join(result.selection)
    if cv:
        header.update(folds=folds, cv_step_time_mape=mape(cv))
    comments, notes = toml_annotations(result)
    text = to_toml(result.calibration(header), comments, notes, result.precision_names)
    # the calibration as the file holds it (its values at the TOML's precision), so that calibration=the object
    # predicts as --calibration the file does
    return Fitted(parse_calibration(tomllib.loads(text), ""), text, report, messages)


def _distinct_ids(records: list) -> None:
    """A run given twice (one id on two lines: a file concatenated with itself) is a one-line error: it counted as
    two runs toward the rule that a parameter needs two runs, and its copies sat in two cross-validation folds,
    each predicting the other (calibrate fitted a parameter on one run and reported its CV error as held out)."""
    import json

    first: dict[str, str] = {}
    for record in records:       # a record without an id: the same record twice
        key = record.id or json.dumps(record.raw, sort_keys=True, default=str)
        if key in first:
            what = f"id: {record.id!r} is the id of" if record.id else "the same record (no id) as"
            raise FastmodelError(f"{record.where}: {what} {first[key]} too; a run is fitted once (remove the copy, "
                                 "or give each run its own id)")
        first[key] = record.where


def _finite_records(records: list, source: str, messages: list[str]) -> list:
    """The records ``validate`` scores (a finite prediction at physical values); a warning line in ``messages``
    names each one left out, a one-line error when none is left."""
    from fastmodel.lm.validate import rows, skipped_lines

    table = rows(records)
    messages += [f"warning: {source}: {line.replace('the scores', 'the fit')}" for line in skipped_lines(table)]
    kept = [record for record, row in zip(records, table) if row["status"] == "ok"]
    if not kept:
        raise FastmodelError(f"{source}: no run record can be predicted; nothing to calibrate")
    return kept


def write_fitted(fitted: Fitted, output: str, runs: Any, force: bool = False) -> None:
    """Write the fitted calibration's TOML text to ``output`` (atomically; an existing file only with ``force``,
    and only a TOML file; never onto the runs file)."""
    from fastmodel.io.outputs import claim_output
    from fastmodel.lm.calibrate.overlay import write_calibration

    inputs = (runs,) if isinstance(runs, (str, os.PathLike)) else ()
    with claim_output(output, "toml", inputs=inputs, force=force, what="calibration"):
        write_calibration(fitted.toml, output)
