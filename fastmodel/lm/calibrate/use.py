"""Using a calibration where configurations are evaluated (``run``, ``batch``, ``sweep``, the Python API).

- ``overlay``: a parameter table with the calibration's values for its device.
- ``attrs``: what a dataset records about the calibration (file name, sha256 of its content, the values applied).
- ``check``: a calibration that does not cover the evaluated device, or a network tier the evaluation uses,
  is reported as a :class:`CalibrationWarning` (one line): those values keep their physical (built-in) values.
  A warning, not an error: a calibration may name several devices and a batch may mix devices; the
  evaluation is still right, only uncalibrated where the warning says.
- ``cli_warnings``: prints those warnings as ``warning: ...`` lines on stderr (the CLI).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from fastmodel.lm.calibrate.overlay import (
    DEVICE_FIELDS,
    FRAMEWORK_FIELDS,
    STACK_FIELDS,
    Calibration,
    canonical_device,
    overlay_columns,
    stack_key,
)
from fastmodel.lm.calibrate.stack_tables import applies
from fastmodel.registry.lm import COLUMN_INDEX as C

#: an evaluation's software: (framework text, explicit stack name), either may be None
Software = tuple[str | None, str | None]


def record_software(record) -> Software:
    """A run record's (``fastmodel.lm.records.RunRecord``) software: its framework text and explicit stack, as
    ``overlay.record_stack_key`` keys them."""
    return record.raw.get("framework"), record.raw.get("stack")

TIERS = {"intra": ("intra_eff", "intra_latency"), "inter": ("inter_eff", "inter_latency")}


class CalibrationWarning(UserWarning):
    """A calibration leaves part of an evaluation at its physical values (device or tier not calibrated)."""


def overlay(columns: np.ndarray, cal: Calibration | None, gpu: str, framework: str | None = None,
            stack: str | None = None) -> np.ndarray:
    """A copy of ``columns`` (a column vector, or a table columns-first) with ``cal``'s values for ``gpu``
    and the software stack of ``framework`` and ``stack`` (``overlay.stack_key``)."""
    if cal is None:
        return columns
    return overlay_columns(columns, cal.values_for(gpu, stack_key(framework, stack)))


def tiers_used(columns: np.ndarray) -> set[str]:
    """Network tiers a column vector or table (columns first) communicates over."""
    table = np.asarray(columns, dtype=np.float64).reshape(len(columns), -1)
    n_gpus, domain = table[C["n_gpus"]], table[C["domain_size"]]
    used = set()
    if np.any(np.minimum(domain, n_gpus) > 1):
        used.add("intra")
    if np.any(n_gpus > domain):
        used.add("inter")
    return used


def applied(cal: Calibration, gpus: Iterable[str], software: Iterable[Software] = ()) -> dict[str, float]:
    """The calibration values applied to runs on ``gpus`` with ``software`` ((framework, stack) pairs), by
    the calibration file's field path."""
    out = {f"framework.{FRAMEWORK_FIELDS[c]}": v for c, v in cal.framework.items()}
    devices = {canonical_device(g) for g in gpus}
    for device in sorted(devices):
        for column, value in cal.devices.get(device, {}).items():
            out[f'device."{device}".{DEVICE_FIELDS[column]}'] = value
    for stack in sorted({s for s in (stack_key(*pair) for pair in software) if s is not None}):
        if not any(applies(cal.stack_devices, stack, d) for d in devices):
            continue
        for column, value in cal.stacks.get(stack, {}).items():
            out[f'stack."{stack}".{STACK_FIELDS[column]}'] = value
    return out


def attrs(cal: Calibration | None, gpus: Iterable[str], software: Iterable[Software] = ()) -> dict[str, str]:
    """Dataset attrs recording the calibration (none without one)."""
    if cal is None:
        return {}
    return {"calibration": Path(cal.source).name if cal.source else "(in memory)",
            "calibration_sha256": cal.fingerprint(),
            "calibration_values": json.dumps(applied(cal, gpus, software))}


def mismatches(cal: Calibration, tiers_by_gpu: Mapping[str, set[str]],
               software: Iterable[Software] = ()) -> list[str]:
    """One line per evaluated device the calibration does not cover, per tier used it sets nothing for, and
    (when it has ``[stack]`` tables) per evaluated (framework, stack) whose stack key it has no table for."""
    name = cal.source or "calibration (in memory)"
    lines = []
    by_device: dict[str, set[str]] = {}      # one line per device, however the records spell it ("H100", "H100-SXM-80GB")
    for gpu, tiers in tiers_by_gpu.items():
        by_device.setdefault(canonical_device(gpu), set()).update(tiers)
    tiers_by_gpu = by_device
    if cal.stacks:
        have = ", ".join(sorted(cal.stacks))
        for framework, explicit in sorted(set(software), key=str):
            stack = stack_key(framework, explicit)
            if stack is None:
                lines.append(f"{name}: the evaluation names no framework, so no [stack] table applies "
                             f"(calibrated stacks: {have}); its kernels keep their modelled speed")
            elif stack not in cal.stacks:
                named = f"framework {framework!r}" if framework else f"stack {explicit!r}"
                lines.append(f"{name}: no [stack.\"{stack}\"] table for {named} (calibrated "
                             f"stacks: {have}); its kernels keep their modelled speed")
            else:
                lines += [f"{name}: [stack.\"{stack}\"] applies on {', '.join(cal.stack_devices[stack])} (the devices "
                          f"of the runs it was fitted on), not on {gpu}: its kernels keep their modelled speed there"
                          for gpu in sorted(tiers_by_gpu)
                          if not applies(cal.stack_devices, stack, gpu)]
    for device in sorted(tiers_by_gpu):       # canonical names already (by_device)
        table = cal.devices.get(device)
        if table is None:
            have = ", ".join(sorted(cal.devices)) or "none"
            lines.append(f"{name}: no [device.\"{device}\"] table (calibrated devices: {have}); the efficiencies "
                         f"of {device} keep their physical values")
            continue
        bare = [tier for tier in TIERS if tier in tiers_by_gpu[device] and not any(c in table for c in TIERS[tier])]
        if bare:
            fields = ", ".join(f"{tier}.eff, {tier}.latency_s" for tier in bare)
            lines.append(f"{name}: device.\"{device}\" sets no value of the {' and '.join(bare)} network "
                         f"tier{'s' if len(bare) > 1 else ''} used here ({fields}); "
                         f"{'they keep their' if len(bare) > 1 else 'it keeps its'} physical values")
    return lines


def check(cal: Calibration | None, tiers_by_gpu: Mapping[str, set[str]], stacklevel: int = 3,
          software: Iterable[Software] = ()) -> None:
    """Warn (:class:`CalibrationWarning`) about every mismatch of ``cal`` and the evaluated devices, tiers and
    software stacks."""
    if cal is None:
        return
    for line in mismatches(cal, tiers_by_gpu, software):
        warnings.warn(line, CalibrationWarning, stacklevel=stacklevel)


def not_for_madmax(calibration) -> None:
    """A calibration given for a MAD-Max-model evaluation: a SpecError (it has no fitted columns)."""
    if calibration is not None:
        from fastmodel.errors import SpecError

        raise SpecError(None, "calibration", "applies to the real-world model (family = \"lm\" specs and run "
                                             "records); the MAD-Max model has no fitted efficiencies")


@contextlib.contextmanager
def cli_warnings():
    """Print calibration warnings raised inside as one ``warning: ...`` line each on stderr; pass any other
    warning on as it was.

    The others are re-issued only after the recording context is left: re-issued inside it, each would be
    recorded again into the list being read, and the loop would never end (issue 25 item 2)."""
    import click

    recorder = warnings.catch_warnings(record=True)
    caught = recorder.__enter__()
    try:
        warnings.simplefilter("always", CalibrationWarning)
        yield
    finally:
        recorder.__exit__(None, None, None)
        seen = set()
        for w in caught:
            if issubclass(w.category, CalibrationWarning):
                text = " ".join(str(w.message).split())
                if text not in seen:
                    seen.add(text)
                    click.echo(f"warning: {text}", err=True)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
