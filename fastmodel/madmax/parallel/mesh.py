"""A parallelization plan as a device mesh: ordered axes with degrees, and per plan
component the strategy (and so the role) of each axis.

A MAD-Max plan lives on the cluster's two physical axes, ``device`` (the
devices of one node) and ``node`` (the nodes): a two-level component puts its
level 0 on ``device`` and its level 1 on ``node``; a one-level component spans
both (one axis of all devices). A real-world plan (``tp8.pp4.cp2.ep8``) lives
on the logical axes tp, cp, ep, pp, dp (:func:`lm_mesh`).

A role says how an axis splits a component's work: ``shard`` (tp, pp, mp, cp,
ep: one sample's work and weights are cut into pieces), ``replicate`` (ddp,
dp: full copies on disjoint slices of the batch), ``replicate_shard`` (fsdp,
or dp with sharded states: copies for the batch, weights stored in shards).

The degree helpers (:func:`implied_degrees`, :func:`factors`) take Python ints
or numpy arrays that broadcast, so one configuration and a sweep block read a
plan through the same code (``madmax/lowering/params.py``, ``Plan.resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

SHARD, REPLICATE, REPLICATE_SHARD = "shard", "replicate", "replicate_shard"
#: the role of each strategy
ROLES: dict[str, str] = {
    "tp": SHARD, "pp": SHARD, "mp": SHARD, "cp": SHARD, "ep": SHARD,
    "ddp": REPLICATE, "dp": REPLICATE, "fsdp": REPLICATE_SHARD,
}
#: the physical axes of a MAD-Max cluster, innermost first
DEVICE, NODE = "device", "node"


@dataclass(frozen=True)
class Axis:
    """One mesh axis: a name and the number of devices along it."""

    name: str
    degree: int


@dataclass(frozen=True)
class Use:
    """One plan level of a component: a strategy over one or more mesh axes (their product is its degree)."""

    strategy: str
    axes: tuple[str, ...]
    degree: int

    @property
    def role(self) -> str:
        return ROLES[self.strategy]

    def __str__(self) -> str:
        return f"{self.strategy}{self.degree}"


@dataclass(frozen=True)
class Factors:
    """How a component is replicated and sharded (docs/model.md §3.2)."""

    duplicate: int
    shard: int
    tp_degree: int


@dataclass(frozen=True)
class Mesh:
    """Ordered axes (innermost first) and, per plan component, its levels placed on them."""

    axes: tuple[Axis, ...]
    components: tuple[tuple[str, tuple[Use, ...]], ...]

    @property
    def num_devices(self) -> int:
        return int(np.prod([axis.degree for axis in self.axes], dtype=np.int64))

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.components)

    def axis(self, name: str) -> Axis:
        for axis in self.axes:
            if axis.name == name:
                return axis
        raise KeyError(f"mesh has no axis {name!r} (axes: {', '.join(a.name for a in self.axes)})")

    def uses(self, component: str) -> tuple[Use, ...]:
        for name, uses in self.components:
            if name == component:
                return uses
        raise KeyError(f"mesh has no component {component!r} (components: {', '.join(self.component_names)})")

    def strategies(self, component: str) -> tuple[str, ...]:
        return tuple(use.strategy for use in self.uses(component))

    def degrees(self, component: str) -> tuple[int, ...]:
        return tuple(use.degree for use in self.uses(component))

    def roles(self, component: str) -> dict[str, str]:
        """Role of every mesh axis for ``component`` (``replicate`` where no level uses the axis)."""
        roles = {axis.name: REPLICATE for axis in self.axes}
        for use in self.uses(component):
            for name in use.axes:
                roles[name] = use.role
        return roles

    def factors(self, component: str) -> Factors:
        duplicate, shard, tp = factors(self.strategies(component), self.degrees(component))
        return Factors(int(duplicate), int(shard), int(tp))

    @property
    def label(self) -> str:
        """The plan text of the mesh: MAD-Max ``tp8,ddp16/mp128``, real-world ``tp8.pp4.cp2.ep8``."""
        if self.component_names[:2] == ("dense", "emb"):
            return "/".join(",".join(map(str, uses)) for _, uses in self.components)
        degrees = {use.strategy: use.degree for _, uses in self.components for use in uses}
        text = ".".join(f"{key}{degrees[key]}" for key in ("tp", "pp", "cp", "ep") if degrees.get(key, 1) > 1)
        return text or "dp"


def implied_degrees(given: Sequence[int | None], num_devices: Any, per_node: Any, nodes: Any) -> list:
    """Per-level degrees of one component, omitted ones implied by their mesh axes.

    One level spans all devices; two levels lie on [device, node], or one
    given degree leaves the rest of the devices to the other. A given degree
    that does not divide the devices leaves the other 0 (the rules flag it).
    Ints in, ints out; arrays broadcast.
    """
    given = list(given)
    if all(g is not None for g in given):
        return given
    if len(given) == 1:
        return [num_devices]
    if len(given) == 2:
        if given[0] is None and given[1] is None:
            return [per_node, nodes]
        k = 1 if given[0] is None else 0
        rest = _where(num_devices % given[k] == 0, num_devices // given[k], 0)
        return [rest, given[1]] if k == 1 else [given[0], rest]
    return [0 if g is None else g for g in given]  # more than 2 levels cannot be implied (a shape rule)


def factors(strategies: Sequence[str], degrees: Sequence[Any]) -> tuple[Any, Any, Any]:
    """(duplicate, shard, tp degree) of one component: the product of its replicating, its sharding and
    its tp degrees. Ints or arrays."""
    duplicate = shard = tp = 1
    for strategy, degree in zip(strategies, degrees):
        role = ROLES[strategy]
        if role in (REPLICATE, REPLICATE_SHARD):
            duplicate = duplicate * degree
        if role in (SHARD, REPLICATE_SHARD):
            shard = shard * degree
        if strategy == "tp":
            tp = degree
    return duplicate, shard, tp


def _where(condition, a, b):
    if isinstance(condition, (bool, np.bool_)):
        return a if condition else b
    return np.where(condition, a, b)


def madmax_mesh(components: Sequence[tuple[str, Sequence[tuple[str, int]]]], devices_per_node: int,
                num_nodes: int) -> Mesh:
    """The mesh of a legal MAD-Max plan (degrees resolved): per component its ``(strategy, degree)`` levels.

    Raises ValueError when a level does not lie on the physical axes (check legality first:
    ``fastmodel.madmax.parallel.rules``)."""
    axes = (Axis(DEVICE, devices_per_node), Axis(NODE, num_nodes))
    placed = []
    for name, levels in components:
        levels = list(levels)
        degrees = [d for _, d in levels]
        if len(levels) == 1 and degrees[0] == devices_per_node * num_nodes:
            spans = [(DEVICE, NODE)]
        elif len(levels) == 2 and degrees == [devices_per_node, num_nodes]:
            spans = [(DEVICE,), (NODE,)]
        else:
            raise ValueError(f"{name} levels {levels} do not lie on the mesh [{devices_per_node} devices, "
                             f"{num_nodes} nodes]")
        placed.append((name, tuple(Use(s, span, d) for (s, d), span in zip(levels, spans))))
    return Mesh(axes, tuple(placed))


def lm_mesh(degrees: Mapping[str, int], num_gpus: int, sharded_states: bool = False) -> Mesh:
    """The mesh of a real-world plan: ``{"tp", "pp", "cp", "ep"}`` degrees (``lm_sweep.parse_mesh``) on
    ``num_gpus`` devices; dp fills the rest, and ep is carved out of dp (axes tp, cp, ep, pp, dp with
    dp = n / (tp pp cp ep)).

    Components: ``layers`` (attention and dense MLPs: tp, cp and pp shard, ep and dp replicate) and,
    when ep > 1, ``experts`` (ep shards the experts). ``sharded_states``: the data-parallel axes keep
    weights in shards (ZeRO / FSDP), role ``replicate_shard``. Raises ValueError when the degrees do not
    tile ``num_gpus`` (``parallel.lm_rules`` says which rule).
    """
    tp, pp, cp, ep = (int(degrees.get(key, 1)) for key in ("tp", "pp", "cp", "ep"))
    inner = tp * pp * cp * ep
    if num_gpus % inner:
        raise ValueError(f"tp{tp} x pp{pp} x cp{cp} x ep{ep} does not divide {num_gpus} devices")
    dp = num_gpus // inner
    axes = (Axis("tp", tp), Axis("cp", cp), Axis("ep", ep), Axis("pp", pp), Axis("dp", dp))
    data = "fsdp" if sharded_states else "dp"
    layers = (Use("tp", ("tp",), tp), Use("cp", ("cp",), cp), Use("pp", ("pp",), pp),
              Use(data, ("ep", "dp"), ep * dp))
    components = [("layers", layers)]
    if ep > 1:
        components.append(("experts", (Use("tp", ("tp",), tp), Use("cp", ("cp",), cp), Use("ep", ("ep",), ep),
                                       Use("pp", ("pp",), pp), Use(data, ("dp",), dp))))
    return Mesh(axes, tuple(components))
