"""System specs: a cluster of identical GPU nodes.

Effective rates follow MAD-Max (docs/model.md §2.2): peak × utilization,
links counted per direction (bidirectional bandwidth / 2), the inter-node
bandwidth of a node shared by its devices, and an allreduce bandwidth that
blends intra- and inter-node links by ``allreduce_intra_fraction``.

The network is written either as MAD-Max's ``[node]`` + ``[network]`` tables
or as two ``[[tiers]]`` (``fastmodel/spec/network.py``) plus a top-level
``allreduce_intra_fraction``; either way ``SystemSpec.tiers`` is the tier list
and ``node`` / ``network`` hold the ``madmax`` reading of it (docs/model.md
§2.2.1), which is what the kernels read and what ``model_dump`` writes.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from fastmodel.errors import FieldValueError
from fastmodel.spec.network import NetworkTier, check_tiers, resolved
from fastmodel.spec.quantity import Bytes, BytesPerSecond, FlopPerSecond, Fraction, Utilization


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class PeakFlops(_Spec):
    """Peak dense FLOP/s of one device per precision."""

    fp64: FlopPerSecond
    fp32: FlopPerSecond = Field(description="FP32 or TF32 tensor-core peak.")
    fp16: FlopPerSecond = Field(description="FP16/BF16 tensor-core peak.")
    int8: FlopPerSecond


class DeviceSpec(_Spec):
    """One accelerator: compute peaks, HBM capacity and bandwidth."""

    name: str = "gpu"
    peak_flop_per_s: PeakFlops
    flops_util: Utilization = Field(description="Achieved fraction of peak for every GEMM.")
    hbm_capacity_bytes: Bytes
    hbm_bandwidth_bytes_per_s: BytesPerSecond
    hbm_bandwidth_util: Utilization


class NodeSpec(_Spec):
    """Intra-node links (NVLink-class) of one device."""

    num_links: PositiveInt = Field(le=4096, description="Links per device.")
    link_bandwidth_bytes_per_s: BytesPerSecond = Field(description="Bidirectional bandwidth of one link.")
    link_util: Utilization


class NetworkSpec(_Spec):
    """Inter-node network (IB/RoCE) of one node."""

    num_ports: PositiveInt = Field(le=4096, description="Network ports per node.")
    port_bandwidth_bytes_per_s: BytesPerSecond = Field(description="Bidirectional bandwidth of one port.")
    port_util: Utilization
    allreduce_intra_fraction: Fraction = Field(
        description="Share of a multi-node allreduce carried by intra-node links "
        "(MAD-Max ar_perc_intra). Single-node systems always use intra-node links only."
    )


_MAX_DEVICES_PER_NODE = 1 << 12


class SystemSpec(_Spec):
    """A cluster of ``num_nodes`` nodes with ``devices_per_node`` devices each.

    Give the network as ``node`` + ``network`` (MAD-Max's fields) or as ``tiers``
    + ``allreduce_intra_fraction`` (then ``devices_per_node`` may be left out: it
    is tier 0's domain). After validation every field is set whichever form was
    written; ``tiers`` and the top-level ``allreduce_intra_fraction`` are left
    out of ``model_dump`` (an input spelling, not a second copy of the truth).
    """

    model_config = ConfigDict(json_schema_extra={  # the two spellings of the network, one at a time
        "anyOf": [{"required": ["tiers", "allreduce_intra_fraction"]},
                  {"required": ["devices_per_node", "node", "network"]}],
        "not": {"anyOf": [{"required": ["tiers", "node"]}, {"required": ["tiers", "network"]}]},
    })

    name: str
    num_nodes: PositiveInt = Field(le=1 << 24, description="Nodes in the cluster (a parameter: --nodes).")
    devices_per_node: PositiveInt | None = Field(
        None, le=_MAX_DEVICES_PER_NODE, description="Devices per node; with [[tiers]], tier 0's domain_size (may be left out).")
    device: DeviceSpec
    node: NodeSpec | None = Field(None, description="Intra-node links (MAD-Max form; or give [[tiers]]).")
    network: NetworkSpec | None = Field(None, description="Inter-node network (MAD-Max form; or give [[tiers]]).")
    tiers: Annotated[tuple[NetworkTier, ...], Field(strict=False)] | None = Field(
        None, exclude=True, description="The network as two tiers, node then network (docs/model.md §2.2.1); "
        "instead of [node] and [network]. Tier 1 spans the whole cluster: leave its domain_size out.")
    allreduce_intra_fraction: Fraction | None = Field(
        None, exclude=True, description="With [[tiers]]: share of a multi-node allreduce carried by tier 0 "
        "(MAD-Max ar_perc_intra). In the MAD-Max form it is network.allreduce_intra_fraction.")
    price_usd_per_device_hour: PositiveFloat | None = Field(
        None, le=1e6, description="Price of one device for one hour, USD (cloud on-demand rate); enables cost.")
    node_tdp_watts: PositiveFloat | None = Field(
        None, le=1e7, description="Thermal design power of one whole node (GPUs, CPUs, NICs), W; enables energy.")

    @model_validator(mode="after")
    def _one_network(self):
        if self.tiers is None:
            self._from_node_network()
        else:
            self._from_tiers()
        return self

    def _set(self, **values) -> None:
        for key, value in values.items():
            object.__setattr__(self, key, value)  # frozen: fill the derived half once, while validating

    def _from_node_network(self) -> None:
        for key in ("devices_per_node", "node", "network"):
            if getattr(self, key) is None:
                raise FieldValueError((key,), "required field missing (or give the network as [[tiers]])")
        if self.allreduce_intra_fraction is not None:
            raise FieldValueError(("allreduce_intra_fraction",), "with [node] and [network] it is "
                                  "network.allreduce_intra_fraction; the top-level key goes with [[tiers]]")
        self._set(tiers=madmax_tiers(self.node, self.network, self.devices_per_node, self.num_nodes),
                  allreduce_intra_fraction=self.network.allreduce_intra_fraction)

    def _from_tiers(self) -> None:
        for key in ("node", "network"):
            if getattr(self, key) is not None:
                raise FieldValueError((key,), "give the network either as [[tiers]] or as [node] and "
                                      "[network], not both")
        tiers = self.tiers
        check_tiers(tiers)
        if len(tiers) != 2:
            raise FieldValueError(("tiers",), f"the madmax reading has two tiers (tier 0 the node, tier 1 the "
                                  f"network spanning the cluster); got {len(tiers)}")
        if self.allreduce_intra_fraction is None:
            raise FieldValueError(("allreduce_intra_fraction",), "required field missing (with [[tiers]]: the "
                                  "madmax reading's allreduce blend, MAD-Max ar_perc_intra)")
        per_node = tiers[0].domain_size
        if per_node > _MAX_DEVICES_PER_NODE:
            raise FieldValueError(("tiers", 0, "domain_size"), f"tier 0 is the node in the madmax reading: at most "
                                  f"{_MAX_DEVICES_PER_NODE} devices (got {per_node})")
        if self.devices_per_node is not None and self.devices_per_node != per_node:
            raise FieldValueError(("devices_per_node",), f"tier 0 is the node in the madmax reading, but its "
                                  f"domain_size is {per_node}, not {self.devices_per_node}")
        whole = self.num_nodes * per_node
        if tiers[1].domain_size is not None and tiers[1].domain_size != whole:
            raise FieldValueError(("tiers", 1, "domain_size"), f"tier 1 spans the whole cluster in the madmax "
                                  f"reading ({self.num_nodes} nodes x {per_node} = {whole} devices, and --nodes "
                                  f"changes it): leave domain_size out (got {tiers[1].domain_size})")
        node, network = madmax_node_network(tiers, per_node, self.allreduce_intra_fraction)
        self._set(devices_per_node=per_node, node=node, network=network, tiers=resolved(tiers, whole))

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.devices_per_node

    # --- effective rates (docs/model.md §2.2) ---
    def peak_flop_per_s(self, bytes_per_param: int) -> float:
        """Peak at the precision of ``bytes_per_param`` (8/4/2/1 bytes)."""
        peaks = self.device.peak_flop_per_s
        return {8: peaks.fp64, 4: peaks.fp32, 2: peaks.fp16, 1: peaks.int8}[bytes_per_param]

    @property
    def intra_bandwidth(self) -> float:
        """Effective unidirectional intra-node bandwidth per device, bytes/s."""
        node = self.node
        return node.num_links * (node.link_bandwidth_bytes_per_s / 2) * node.link_util

    @property
    def inter_bandwidth(self) -> float:
        """Effective unidirectional inter-node bandwidth per device, bytes/s."""
        net = self.network
        return net.num_ports * (net.port_bandwidth_bytes_per_s / 2) * net.port_util / self.devices_per_node

    @property
    def allreduce_bandwidth(self) -> float:
        """Blended bandwidth of a cluster-wide allreduce (arithmetic mean), bytes/s."""
        if self.num_nodes == 1:
            return self.intra_bandwidth
        frac = self.network.allreduce_intra_fraction
        return (1 - frac) * self.inter_bandwidth + frac * self.intra_bandwidth

    def with_nodes(self, num_nodes: int) -> "SystemSpec":
        """The same cluster with another node count (validated: raises SpecError)."""
        from fastmodel.errors import SpecError

        limit = type(self).model_fields["num_nodes"].metadata
        bound = next((m.le for m in limit if hasattr(m, "le")), None)
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1 or (bound and num_nodes > bound):
            raise SpecError(None, "system.num_nodes", f"must be an integer in 1..{bound} (got {num_nodes!r})")
        tiers = resolved((*self.tiers[:-1], self.tiers[-1].model_copy(update={"domain_size": None})),
                         num_nodes * self.devices_per_node)
        return self.model_copy(update={"num_nodes": num_nodes, "tiers": tiers})


def madmax_tiers(node: NodeSpec, network: NetworkSpec, devices_per_node: int, num_nodes: int):
    """The madmax reading: MAD-Max's node and network as two tiers (docs/model.md §2.2.1). Built from
    validated fields without re-validating (a derived view; its bounds are the fields' own)."""
    return (
        NetworkTier.model_construct(domain_size=devices_per_node, latency_s=0.0,
                    bandwidth_per_device_bytes_per_s=node.num_links * node.link_bandwidth_bytes_per_s / 2,
                    efficiency=node.link_util),
        NetworkTier.model_construct(domain_size=num_nodes * devices_per_node, latency_s=0.0,
                    bandwidth_per_device_bytes_per_s=(network.num_ports * network.port_bandwidth_bytes_per_s
                                                      / 2 / devices_per_node),
                    efficiency=network.port_util),
    )


def madmax_node_network(tiers, devices_per_node: int, allreduce_intra_fraction: float):
    """The madmax reading backwards, for a system written as tiers: one link per device of twice tier 0's bandwidth (links are
    bidirectional), one port per node of twice the node's share of tier 1 (docs/model.md §2.2.1)."""
    first, last = tiers
    try:
        node = NodeSpec(num_links=1, link_bandwidth_bytes_per_s=2 * first.bandwidth_per_device_bytes_per_s,
                        link_util=first.efficiency)
    except ValidationError as error:
        raise FieldValueError(("tiers", 0, "bandwidth_per_device_bytes_per_s"), error.errors()[0]["msg"]) from None
    try:
        network = NetworkSpec(num_ports=1, port_util=last.efficiency, allreduce_intra_fraction=allreduce_intra_fraction,
                              port_bandwidth_bytes_per_s=2 * last.bandwidth_per_device_bytes_per_s * devices_per_node)
    except ValidationError as error:
        raise FieldValueError(("tiers", 1, "bandwidth_per_device_bytes_per_s"),
                              f"{error.errors()[0]['msg']} (the node's {devices_per_node} devices together)") from None
    return node, network
