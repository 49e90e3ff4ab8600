"""Parallelization plans: per component, an ordered list of (strategy, degree).

A plan is written ``DENSE/EMB``, each side a comma-separated list of levels
``<strategy><degree>``, outermost-last, e.g. ``tp8,ddp16/mp128``. A degree may be
omitted: under the MAD-Max 1-D/2-D rules a one-level component spans all
devices and a two-level one is ``[devices_per_node, num_nodes]``, so
``tp,ddp/mp`` names the same plan shape on any cluster size.

Legality rules live here and only here (MADMAX_MODEL.md section 1.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from fastmodel.errors import PlanError, nearest

#: strategies of the dense part (transformer layers / MLPs)
DENSE_STRATEGIES = ("ddp", "fsdp", "tp", "pp")
#: strategies of the embedding tables
EMB_STRATEGIES = ("ddp", "mp")

_LEVEL = re.compile(r"^([A-Za-z_]+)(\d*)$")


@dataclass(frozen=True)
class Level:
    """One level of parallelism: a strategy over ``degree`` devices (None: implied)."""

    strategy: str
    degree: int | None = None

    def __str__(self) -> str:
        return f"{self.strategy}{'' if self.degree is None else self.degree}"


@dataclass(frozen=True)
class Plan:
    """Strategies per component: ``dense`` (transformer/MLP) and ``emb`` (embeddings)."""

    dense: tuple[Level, ...]
    emb: tuple[Level, ...]

    @property
    def label(self) -> str:
        """The plan as text, ``tp8,ddp16/mp128``."""
        return ",".join(map(str, self.dense)) + "/" + ",".join(map(str, self.emb))

    @property
    def shape(self) -> str:
        """The plan without degrees, ``tp,ddp/mp``."""
        return ",".join(lv.strategy for lv in self.dense) + "/" + ",".join(lv.strategy for lv in self.emb)

    def __str__(self) -> str:
        return self.label

    @property
    def dense_strategies(self) -> tuple[str, ...]:
        return tuple(lv.strategy for lv in self.dense)

    @property
    def emb_strategies(self) -> tuple[str, ...]:
        return tuple(lv.strategy for lv in self.emb)

    @classmethod
    def parse(cls, text: str) -> "Plan":
        """Parse ``DENSE/EMB``; raises :class:`PlanError` (rule ``syntax``)."""
        if not isinstance(text, str):
            raise PlanError("syntax", f"a plan is a string like 'tp8,ddp16/mp128', got {text!r}")
        return _parse_plan(text)

    @classmethod
    def _parse_uncached(cls, text: str) -> "Plan":
        parts = text.replace(" ", "").split("/")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise PlanError("syntax", f"cannot parse plan {text!r}: write DENSE/EMB, e.g. 'tp8,ddp16/mp128' or 'fsdp/ddp'")
        return cls(_parse_levels(parts[0], text), _parse_levels(parts[1], text))

    @classmethod
    def from_lists(cls, dense: list, dense_degrees: list, emb: list, emb_degrees: list) -> "Plan":
        """Build from MAD-Max style parallel lists of strategies and degrees."""
        if len(dense) != len(dense_degrees):
            raise PlanError("len_mismatch", f"dense strategies {dense} and degrees {dense_degrees} differ in length")
        if len(emb) != len(emb_degrees):
            raise PlanError("len_mismatch", f"embedding strategies {emb} and degrees {emb_degrees} differ in length")
        for deg in list(dense_degrees) + list(emb_degrees):
            if isinstance(deg, bool) or not isinstance(deg, int):
                raise PlanError("syntax", f"degrees must be integers, got {deg!r}")
        return cls(
            tuple(Level(str(s), int(d)) for s, d in zip(dense, dense_degrees)),
            tuple(Level(str(s), int(d)) for s, d in zip(emb, emb_degrees)),
        )

    def resolve(self, num_devices: int, devices_per_node: int) -> "Plan":
        """Fill omitted degrees: 1 level -> all devices; 2 levels -> [per node, rest]."""
        return _resolve_plan(self, num_devices, devices_per_node)

    def _resolve_uncached(self, num_devices: int, devices_per_node: int) -> "Plan":
        return Plan(
            _resolve(self.dense, num_devices, devices_per_node),
            _resolve(self.emb, num_devices, devices_per_node),
        )


@lru_cache(maxsize=4096)
def _parse_plan(text: str) -> Plan:
    return Plan._parse_uncached(text)


@lru_cache(maxsize=65536)
def _resolve_plan(plan: Plan, num_devices: int, devices_per_node: int) -> Plan:
    return plan._resolve_uncached(num_devices, devices_per_node)


def _parse_levels(text: str, whole: str) -> tuple[Level, ...]:
    levels = []
    for token in text.split(","):
        match = _LEVEL.match(token)
        if not match:
            raise PlanError("syntax", f"cannot parse level {token!r} of plan {whole!r}: write e.g. 'tp8' or 'tp'")
        strategy, degree = match.group(1).lower(), match.group(2)
        if degree and int(degree) < 1:
            raise PlanError("degree_le_1", f"level {token!r} of plan {whole!r} has degree {int(degree)}; every degree must be > 1")
        levels.append(Level(strategy, int(degree) if degree else None))
    return tuple(levels)


def _resolve(levels: tuple[Level, ...], num_devices: int, devices_per_node: int) -> tuple[Level, ...]:
    if all(lv.degree is not None for lv in levels):
        return levels
    if len(levels) == 1:
        implied = [num_devices]
    elif len(levels) == 2:
        known = [lv.degree for lv in levels]
        if known[0] is None and known[1] is None:
            implied = [devices_per_node, num_devices // devices_per_node]
        elif known[0] is None:
            if num_devices % known[1]:
                raise PlanError("product_ne_devices",
                                f"level {levels[1]} does not divide the {num_devices} devices, so level 0 cannot be implied")
            implied = [num_devices // known[1], known[1]]
        else:
            if num_devices % known[0]:
                raise PlanError("product_ne_devices",
                                f"level {levels[0]} does not divide the {num_devices} devices, so level 1 cannot be implied")
            implied = [known[0], num_devices // known[0]]
    else:
        raise PlanError("more_than_2_levels", f"cannot imply degrees for {len(levels)} levels; give each degree")
    return tuple(Level(lv.strategy, lv.degree if lv.degree is not None else d) for lv, d in zip(levels, implied))


def check_plan_static(plan: Plan) -> None:
    """Raise :class:`PlanError` if the strategies break a rule on any cluster.

    Known strategies per component, none repeated, ``fsdp`` only at level 0,
    at most two levels (MADMAX_MODEL.md 1.4, ``restrict2d``).
    """
    for name, levels, allowed in (("dense", plan.dense, DENSE_STRATEGIES), ("emb", plan.emb, EMB_STRATEGIES)):
        if not levels:
            raise PlanError("empty", f"{name} component has no parallelism level")
        seen: set[str] = set()
        for index, level in enumerate(levels):
            if level.strategy not in allowed:
                raise PlanError(
                    f"unknown_strategy_{name}",
                    f"{name} strategy {level.strategy!r} is not one of {', '.join(allowed)}{nearest(level.strategy, allowed)}",
                )
            if level.strategy in seen:
                raise PlanError("repeat", f"{name} strategy {level.strategy!r} appears twice")
            if level.strategy == "fsdp" and index != 0:
                raise PlanError("fsdp_not_first", f"fsdp must be the first {name} level (got {plan.label})")
            seen.add(level.strategy)
        if len(levels) > 2:
            raise PlanError("more_than_2_levels", f"{name} has {len(levels)} levels; at most 2 are modelled")


def check_plan(plan: Plan, num_devices: int, devices_per_node: int, family: str = "llm") -> None:
    """Raise :class:`PlanError` unless ``plan`` (degrees resolved) is legal on the cluster.

    The static rules of :func:`check_plan_static`, then: every degree > 1, the
    product of degrees equals the device count for each component, and level 0
    spans one node or all devices. (``params.llm_table`` applies the same
    numeric rules vectorized, as status codes.)
    """
    check_plan_static(plan)
    for name, levels in (("dense", plan.dense), ("emb", plan.emb)):
        product = 1
        for level in levels:
            if level.degree is None or level.degree <= 1:
                raise PlanError("degree_le_1", f"{name} level {level} has degree {level.degree}; every degree must be > 1")
            product *= level.degree
        if product != num_devices:
            raise PlanError(
                "product_ne_devices",
                f"{name} degrees multiply to {product}, not the {num_devices} devices of the system",
            )
        if levels[0].degree not in (devices_per_node, num_devices):
            raise PlanError(
                "first_degree",
                f"{name} level 0 degree {levels[0].degree} must be the devices per node ({devices_per_node}) "
                f"or all devices ({num_devices})",
            )


@dataclass(frozen=True)
class PlanFactors:
    """How a component is replicated and sharded (MADMAX_MODEL.md 1.4)."""

    duplicate: int
    shard: int
    tp_degree: int


def plan_factors(levels: tuple[Level, ...]) -> PlanFactors:
    """ddp: duplicate; fsdp: duplicate and shard; tp/pp/mp: shard."""
    duplicate = shard = tp = 1
    for level in levels:
        if level.strategy in ("ddp", "fsdp"):
            duplicate *= level.degree
        if level.strategy in ("fsdp", "tp", "pp", "mp"):
            shard *= level.degree
        if level.strategy == "tp":
            tp = level.degree
    return PlanFactors(duplicate, shard, tp)


def enumerate_plan_shapes(num_nodes: int, devices_per_node: int) -> list[Plan]:
    """Every legal 1-D/2-D plan shape (degrees omitted) for the given cluster."""
    num_devices = num_nodes * devices_per_node
    dense_shapes: list[tuple[str, ...]] = []
    emb_shapes: list[tuple[str, ...]] = []
    if num_devices > 1:
        dense_shapes += [(s,) for s in DENSE_STRATEGIES]
        emb_shapes += [(s,) for s in EMB_STRATEGIES]
    if num_nodes > 1 and devices_per_node > 1:
        dense_shapes += [
            (a, b) for a in DENSE_STRATEGIES for b in DENSE_STRATEGIES if a != b and b != "fsdp"
        ]
        emb_shapes += [(a, b) for a in EMB_STRATEGIES for b in EMB_STRATEGIES if a != b]
    return [
        Plan(tuple(Level(s) for s in dense), tuple(Level(s) for s in emb))
        for dense in dense_shapes
        for emb in emb_shapes
    ]


def enumerate_plans(num_nodes: int, devices_per_node: int) -> list[Plan]:
    """Every legal plan of the cluster with its degrees resolved."""
    num_devices = num_nodes * devices_per_node
    return [shape.resolve(num_devices, devices_per_node) for shape in enumerate_plan_shapes(num_nodes, devices_per_node)]
