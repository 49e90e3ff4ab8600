"""Network tiers: how a system's devices reach each other, as an ordered list.

A tier is a set of equal domains: ``domain_size`` devices reach each other
through it at ``bandwidth_per_device_bytes_per_s`` per device in one direction
(before ``efficiency``), with ``latency_s`` per hop of a collective. Tier 0 is
the fastest and smallest (an NVLink domain); each next tier groups whole
domains of the one before (a scale-out network, a second level of a fat tree),
so domain sizes increase and each divides the next. The last tier may leave
``domain_size`` out: it then spans the whole cluster, whatever its size.

Both system kinds describe their network this way (``SystemSpec.tiers``,
``ClusterSpec.tiers``); how each engine reads the list is docs/model.md §2.2.1
(the ``madmax`` reading) and the real-world columns of ``fastmodel/registry/lm.py``.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from fastmodel.errors import FieldValueError
from fastmodel.spec.quantity import BytesPerSecond, Latency, Utilization


class NetworkTier(BaseModel):
    """One tier of a system's network."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    domain_size: PositiveInt | None = Field(
        None, le=1 << 24, description="Devices that reach each other through this tier (72 for an NVL72 "
        "domain); left out in the last tier: the whole cluster.")
    bandwidth_per_device_bytes_per_s: BytesPerSecond = Field(
        description="Bandwidth of one device into this tier, one direction, before efficiency.")
    latency_s: Latency = Field(0.0, description="Latency of one hop of a collective on this tier, s.")
    efficiency: Utilization = Field(description="Attainable fraction of the bandwidth, in (0, 1].")

    @property
    def effective_bandwidth(self) -> float:
        """Bandwidth x efficiency, bytes/s per device, one direction."""
        return self.bandwidth_per_device_bytes_per_s * self.efficiency

    def describe(self, total_devices: int | None = None) -> str:
        """One line for humans: ``domain 8 devices, 300 GB/s per device, efficiency 0.6667, latency 0 s``."""
        domain = "the whole cluster" if self.domain_size is None else f"{self.domain_size} devices"
        if total_devices is not None and self.domain_size == total_devices:
            domain += " (the whole cluster)"
        return (f"domain {domain}, {self.bandwidth_per_device_bytes_per_s / 1e9:g} GB/s per device, "
                f"efficiency {self.efficiency:g}, latency {self.latency_s * 1e6:g} us")


def check_tiers(tiers: Sequence[NetworkTier], path: tuple = ("tiers",)) -> None:
    """Raise :class:`FieldValueError` (field path ``tiers.I.domain_size``) unless the domains are in order:
    only the last tier may leave its size out, sizes increase tier to tier and each divides the next."""
    if not tiers:
        raise FieldValueError(path, "needs at least one tier")
    previous = None
    for index, tier in enumerate(tiers):
        where = (*path, index, "domain_size")
        size = tier.domain_size
        if size is None:
            if index != len(tiers) - 1:
                raise FieldValueError(where, "required field missing (only the last tier may leave it out: "
                                             "it then spans the whole cluster)")
            continue
        if previous is not None and size <= previous:
            raise FieldValueError(where, f"domains must increase tier to tier: {size} is not more than "
                                         f"tier {index - 1}'s {previous}")
        if previous is not None and size % previous:
            raise FieldValueError(where, f"must be a multiple of tier {index - 1}'s domain_size {previous} "
                                         f"(a tier groups whole domains of the one before), got {size}")
        previous = size


def resolved(tiers: Sequence[NetworkTier], total_devices: int) -> tuple[NetworkTier, ...]:
    """The tiers with the last tier's omitted domain set to ``total_devices``. A view of a loaded system,
    not re-checked by :func:`check_tiers`: on one node the last tier's domain equals the node's."""
    out = list(tiers)
    if out and out[-1].domain_size is None:
        out[-1] = out[-1].model_copy(update={"domain_size": int(total_devices)})
    return tuple(out)
