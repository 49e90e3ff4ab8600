"""``fastmodel validate``'s memory tables: peak memory against the runs that publish it, and the runs that ran
but are predicted not to fit.

A run's ``measured.memory_gib`` is compared with ``memory_reserved`` when its ``memory_definition`` names the
reserved bytes and not the allocated ones (``torch.cuda.max_memory_reserved``), else with ``memory_allocated``
(``torch.cuda.max_memory_allocated``, what most frameworks log); ``measured.memory_reserved_gib``, where given,
with ``memory_reserved``. Every run in a measured-run file ran, so each one predicted ``does not fit``
(``fits_memory`` false, under the default margin) is a false "does not fit".
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.splits import SPLITS

GIB = 2.0 ** 30


def memory_fields(record, results: dict, i: int) -> dict:
    """The memory columns of one validation row: measured and predicted peak, their errors, fits_memory."""
    measured = record.measured
    definition = str(measured.get("memory_definition", "")).lower()
    reserved_def = "reserved" in definition and "allocated" not in definition
    predicted = results["memory_reserved" if reserved_def else "memory_allocated"][i] / GIB
    peak = float(measured.get("memory_gib") or np.nan)
    reserved = float(measured.get("memory_reserved_gib") or np.nan)
    return {"measured_memory_gib": peak, "predicted_memory_gib": predicted, "memory_error": predicted / peak - 1.0,
            "measured_reserved_gib": reserved, "predicted_reserved_gib": results["memory_reserved"][i] / GIB,
            "reserved_error": results["memory_reserved"][i] / GIB / reserved - 1.0,
            "fits_memory": bool(results["fits_memory"][i] > 0.5),
            "memory_allocated": results["memory_allocated"][i], "memory_reserved": results["memory_reserved"][i]}


def _score_line(label: str, errors: list[float]) -> str | None:
    e = np.asarray([x for x in errors if np.isfinite(x)], dtype=float)
    if e.size == 0:
        return None
    return (f"{label[:40]:40s} {e.size:4d} {100 * np.mean(np.abs(e)):6.1f}% {100 * np.mean(e):+6.1f}% "
            f"{100 * np.max(np.abs(e)):6.1f}%")


def format_memory(table: list[dict], by_split: bool = False) -> str:
    """The memory tables as text (empty when no row carries the memory columns)."""
    rows = [r for r in table if r.get("status") == "ok" and "fits_memory" in r]
    if not rows:
        return ""
    parts = [(split, [r for r in rows if r.get("split") == split]) for split in SPLITS] if by_split else [("", rows)]
    scores = [line for what, key in (("peak", "memory_error"), ("reserved", "reserved_error"))
              for split, members in parts
              if (line := _score_line(f"{what} [{split}]" if split else what, [r[key] for r in members]))]
    lines = []
    if scores:
        lines += ["", "peak memory per device (measured.memory_gib vs memory_allocated, or memory_reserved where the "
                  "run logs reserved bytes only)", f"{'group':40s} {'n':>4s} {'MAPE':>7s} {'bias':>7s} {'max':>7s}",
                  *scores]
    lines.append("")
    lines.append("runs that ran but are predicted not to fit (fits_memory false under the default margin)")
    for split, members in parts:
        misses = [r for r in members if not r["fits_memory"]]
        label = f" [{split}]" if split else ""
        lines.append(f"does not fit{label}: {len(misses)} of {len(members)} answered")
        lines += [f"  {r['id']}: {r['memory_per_device'] / GIB:.1f} GiB predicted" for r in misses]
    return "\n".join(lines)
