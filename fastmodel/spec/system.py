"""System specs: a cluster of identical GPU nodes.

Effective rates follow MAD-Max (docs/model.md §2.2): peak × utilization,
links counted per direction (bidirectional bandwidth / 2), the inter-node
bandwidth of a node shared by its devices, and an allreduce bandwidth that
blends intra- and inter-node links by ``allreduce_intra_fraction``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

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


class SystemSpec(_Spec):
    """A cluster of ``num_nodes`` nodes with ``devices_per_node`` devices each."""

    name: str
    num_nodes: PositiveInt = Field(le=1 << 24, description="Nodes in the cluster (a parameter: --nodes).")
    devices_per_node: PositiveInt = Field(le=1 << 12)
    device: DeviceSpec
    node: NodeSpec
    network: NetworkSpec
    price_usd_per_device_hour: PositiveFloat | None = Field(
        None, le=1e6, description="Price of one device for one hour, USD (cloud on-demand rate); enables cost.")
    node_tdp_watts: PositiveFloat | None = Field(
        None, le=1e7, description="Thermal design power of one whole node (GPUs, CPUs, NICs), W; enables energy.")

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
        return self.model_copy(update={"num_nodes": num_nodes})
