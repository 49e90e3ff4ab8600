"""Memory by kind and by pipeline stage (issue 23 item 1): each pipeline rank's peak moment of the memory timeline.

The kernel reports the worst rank only (``memory`` by kind, ``memory_allocated``, ``memory_reserved``,
``memory_peak_stage``; kernels/lm/evaluate.py ``evaluate_row``). The memory timeline
(``fastmodel/lm/memory_timeline.py`` ``stage_memory``) composes every moment of every rank from the same kernel
terms, so its largest moment per rank is that rank's kernel peak (``tests/lm/test_memory_stages.py``). This module
takes, per rank, that largest moment, by kind, and applies the kernel's rules to it (docs/model_memory.md
"Memory by pipeline stage (report)"):

- ``memory_allocated`` = every kind but ``overhead`` (``torch.cuda.max_memory_allocated``);
- ``memory_reserved = (1 + allocator_cache_fraction) x memory_allocated`` -- the kernel's rule, which keeps
  ``allocator_cache_fraction`` under expandable segments too (registry ``allocator_cache_fraction``);
- ``memory_per_device`` = allocated + overhead; ``fits_memory``: ``memory_per_device <= HBM - margin`` with the
  rank's own default margin (``analysis.margin.default_margin_bytes`` of its allocated bytes, which takes
  ``allocator_cache_fraction_expandable`` under expandable segments) or the margin given;
- the peak stage is the worst rank, searched in the kernel's order (first, last, 1, 2, ..., pp - 2; a tie keeps
  the earlier, ``kernels/lm/memory.py`` ``memory_row``), so it is ``memory_peak_stage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fastmodel.registry import coordinate_attrs
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import MEMORY_KINDS

if TYPE_CHECKING:
    import xarray as xr



@dataclass(frozen=True)
class StagePeaks:
    """Every pipeline rank's peak moment: ``values[s, k]`` bytes of ``kinds[k]`` on rank ``s`` at the moment
    ``labels[s]`` (a memory-timeline label: ``F3`` after the forward of micro-batch 3, ``B0`` / ``I0`` at the start
    of a backward, ``B0 emb`` at the embedding's backward, ``optimizer step``), and the kernel's rules applied to it."""
    kinds: tuple[str, ...]
    values: np.ndarray
    labels: tuple[str, ...]
    allocated: np.ndarray
    reserved: np.ndarray
    per_device: np.ndarray
    fits: np.ndarray
    peak_stage: int
    hbm_bytes: float
    title: str


def kernel_order(pp: int) -> list[int]:
    """The ranks in the order ``memory_row`` visits them: first, last, then 1, 2, ..., pp - 2."""
    return [0] if pp == 1 else [0, pp - 1, *range(1, pp - 1)]


def worst_stage(allocated: np.ndarray, tie: float = 1e-12) -> int:
    """The rank with the largest allocated peak, a tie keeping the one the kernel visits first: two peaks within
    ``tie`` (relative) tie, as the timeline sums its kinds in another order than the kernel and equal peaks may
    differ in their last bits."""
    best = -1
    for stage in kernel_order(len(allocated)):
        if best < 0 or allocated[stage] > allocated[best] * (1.0 + tie):
            best = stage
    return best


def stage_peaks(columns: np.ndarray, title: str = "the configuration",
                memory_margin: float | None = None) -> StagePeaks:
    """Every pipeline rank's peak moment of the configuration ``columns`` (one column vector), by kind, with its
    allocated, reserved and per-device bytes and whether it fits (``memory_margin``: bytes of HBM kept free;
    default: the rank's own allocator cache, as ``fits_memory``)."""
    from fastmodel.analysis.margin import row_margin_bytes
    from fastmodel.lm.memory_timeline import _terms, stage_memory

    row = np.asarray(columns, dtype=np.float64)
    pp = int(row[C["pp"]])
    terms = _terms(row)
    values, labels = np.zeros((pp, len(MEMORY_KINDS))), []
    for stage in range(pp):
        moments = stage_memory(row, stage, terms)
        i = int(np.argmax(moments.totals))
        values[stage] = moments.values[i]
        labels.append(moments.labels[i])
    overhead = values[:, MEMORY_KINDS.index("overhead")]
    allocated = values.sum(axis=1) - overhead
    per_device = allocated + overhead
    hbm = float(row[C["hbm_bytes"]])
    usable = np.array([hbm - row_margin_bytes(row, a, memory_margin) for a in allocated])
    return StagePeaks(tuple(MEMORY_KINDS), values, tuple(labels), allocated,
                      allocated * (1.0 + row[C["allocator_cache_fraction"]]), per_device, per_device <= usable,
                      worst_stage(allocated), hbm, title)


#: the attrs of :func:`memory_by_stage`'s ``memory_kind`` coordinate (a sweep's), as ``stage`` has its own
MEMORY_KIND_ATTRS = coordinate_attrs("memory_kind")


def memory_by_stage(columns: np.ndarray, title: str = "the configuration",
                    memory_margin: float | None = None) -> "xr.Dataset":
    """:func:`stage_peaks` as a Dataset with dims (``stage``, ``memory_kind``): ``memory`` (bytes by kind at each
    rank's peak moment), ``memory_allocated``, ``memory_reserved``, ``memory_per_device``, ``fits_memory`` and
    ``peak_moment`` (its timeline label) per stage; attrs ``memory_peak_stage``, ``hbm_bytes`` and ``title``."""
    import xarray as xr

    peaks = stage_peaks(columns, title, memory_margin)
    per_stage = {"memory_allocated": peaks.allocated, "memory_reserved": peaks.reserved,
                 "memory_per_device": peaks.per_device, "fits_memory": peaks.fits,
                 "peak_moment": np.array(peaks.labels, dtype=object)}
    data = {"memory": (("stage", "memory_kind"), peaks.values, _per_rank("memory")),
            **{name: ("stage", value, _per_rank(name)) for name, value in per_stage.items()}}
    coords = {"stage": ("stage", np.arange(len(peaks.labels)), {"long_name": "pipeline stage", "units": "1",
                                                                "description": "pipeline rank, 0 first"}),
              "memory_kind": ("memory_kind", list(peaks.kinds), MEMORY_KIND_ATTRS)}
    from fastmodel import __version__

    return xr.Dataset(data, coords=coords, attrs={"memory_peak_stage": peaks.peak_stage, "hbm_bytes": peaks.hbm_bytes,
                                                  "title": title, "fastmodel_version": __version__,
                                                  "fastmodel_engine": "lm"})


def _per_rank(name: str) -> dict[str, str]:
    """The attrs of a :func:`memory_by_stage` variable: the registry's (units, long_name, description) said of
    each pipeline rank at its own peak moment; ``peak_moment`` (text) its own."""
    from fastmodel.registry import attrs

    if name == "peak_moment":
        return {"long_name": "peak moment", "description": "The memory timeline's label of the operation at which "
                "the rank's memory peaks ('B0': the backward of micro-batch 0)."}
    given = attrs(name)
    return {**given, "long_name": f"{given['long_name']} per pipeline rank",
            "description": f"{given['description']} Here: each pipeline rank at its own peak moment."}


def shown_stages(peaks: StagePeaks, limit: int = 16, worst: int = 6) -> list[int]:
    """The stages the report prints: all up to ``limit``; beyond, the first, the last and the ``worst`` largest
    (the peak stage among them), in stage order."""
    pp = len(peaks.labels)
    if pp <= limit:
        return list(range(pp))
    largest = [int(s) for s in np.argsort(-peaks.allocated, kind="stable")[:worst]]
    return sorted({0, pp - 1, peaks.peak_stage, *largest})


def stage_table(peaks: StagePeaks, limit: int = 16, worst: int = 6) -> list[str]:
    """The report's "memory by pipeline stage" lines (GiB): one row per stage shown (:func:`shown_stages`), a column
    per kind that is non-zero on some stage, allocated and reserved; ``*`` marks the peak stage."""
    kinds = [k for k, kind in enumerate(peaks.kinds) if np.any(peaks.values[:, k] > 0.0)]
    heads = [str(peaks.kinds[k])[:11] for k in kinds] + ["allocated", "reserved"]
    lines = ["memory by pipeline stage (GiB; each stage at its peak moment, * = memory_peak_stage)",
             "  stage " + "".join(f"{h:>12s}" for h in heads) + "  peak moment"]
    shown = shown_stages(peaks, limit, worst)
    for s in shown:
        cells = [peaks.values[s, k] for k in kinds] + [peaks.allocated[s], peaks.reserved[s]]
        mark = "*" if s == peaks.peak_stage else " "
        fits = "" if peaks.fits[s] else "  (does NOT fit)"
        lines.append(f"  {s:4d}{mark} " + "".join(f"{c / 2**30:12.2f}" for c in cells) + f"  {peaks.labels[s]}{fits}")
    if len(shown) < len(peaks.labels):
        lines.append(f"  ({len(peaks.labels) - len(shown)} of {len(peaks.labels)} stages left out: the first, "
                     f"the last and the {worst} largest are shown; --json lists all)")
    return lines


def stage_record(peaks: StagePeaks) -> dict:
    """The JSON twin of :func:`stage_table`, every stage: bytes by kind (``memory_<kind>``), allocated, reserved,
    per device, whether it fits, the peak moment's label; ``memory_peak_stage`` and the HBM (``hbm_bytes``)."""
    stages = []
    for s, label in enumerate(peaks.labels):
        entry = {"stage": s, "peak_moment": label}
        entry.update({f"memory_{kind}": float(peaks.values[s, k]) for k, kind in enumerate(peaks.kinds)})
        entry.update({"memory_allocated": float(peaks.allocated[s]), "memory_reserved": float(peaks.reserved[s]),
                      "memory_per_device": float(peaks.per_device[s]), "fits_memory": bool(peaks.fits[s])})
        stages.append(entry)
    return {"memory_peak_stage": peaks.peak_stage, "hbm_bytes": peaks.hbm_bytes, "stages": stages}
