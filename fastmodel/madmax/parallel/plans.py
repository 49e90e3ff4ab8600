"""Parallelization plans: per component, an ordered list of (strategy, degree).

A plan is written ``DENSE/EMB``, each side a comma-separated list of levels
``<strategy><degree>``, outermost-last, e.g. ``tp8,ddp16/mp128``. The
dlrm-transformer family has a third component, its transformer layers:
``MLP/EMB/TRANSFORMER``, e.g. ``ddp/mp/fsdp``. A degree may be
omitted: under the MAD-Max 1-D/2-D rules a one-level component spans all
devices and a two-level one is ``[devices_per_node, num_nodes]``, so
``tp,ddp/mp`` names the same plan shape on any cluster size.

A plan is a front-end onto a device mesh (:meth:`Plan.to_mesh`,
``fastmodel.madmax.parallel.mesh``); its legality rules are one table in
``fastmodel.madmax.parallel.rules`` (docs/model.md §3).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

from fastmodel.errors import PlanError
from fastmodel.madmax.parallel.mesh import Factors, Mesh, factors, implied_degrees, madmax_mesh
from fastmodel.madmax.parallel.rules import STRATEGIES, check_plan, shape_failure

#: strategies of the dense part (transformer layers / MLPs)
DENSE_STRATEGIES = STRATEGIES["dense"]
#: strategies of the embedding tables
EMB_STRATEGIES = STRATEGIES["emb"]

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
    """Strategies per component: ``dense`` (transformer/MLP), ``emb`` (embeddings) and,
    for dlrm-transformer only, ``transformer`` (empty otherwise)."""

    dense: tuple[Level, ...]
    emb: tuple[Level, ...]
    transformer: tuple[Level, ...] = ()

    @property
    def components(self) -> tuple[tuple[str, tuple[Level, ...]], ...]:
        """(name, levels) of each component present."""
        parts = (("dense", self.dense), ("emb", self.emb))
        return parts + ((("transformer", self.transformer),) if self.transformer else ())

    @property
    def levels(self) -> tuple[Level, ...]:
        return (*self.dense, *self.emb, *self.transformer)

    @property
    def label(self) -> str:
        """The plan as text, ``tp8,ddp16/mp128``."""
        return "/".join(",".join(map(str, levels)) for _, levels in self.components)

    @property
    def shape(self) -> str:
        """The plan without degrees, ``tp,ddp/mp``."""
        return "/".join(",".join(lv.strategy for lv in levels) for _, levels in self.components)

    def __str__(self) -> str:
        return self.label

    @property
    def dense_strategies(self) -> tuple[str, ...]:
        return tuple(lv.strategy for lv in self.dense)

    @property
    def emb_strategies(self) -> tuple[str, ...]:
        return tuple(lv.strategy for lv in self.emb)

    @property
    def transformer_strategies(self) -> tuple[str, ...]:
        return tuple(lv.strategy for lv in self.transformer)

    @classmethod
    def parse(cls, text: str) -> "Plan":
        """Parse ``DENSE/EMB``; raises :class:`PlanError` (rule ``syntax``)."""
        if not isinstance(text, str):
            raise PlanError("syntax", f"a plan is a string like 'tp8,ddp16/mp128', got {text!r}")
        return _parse_plan(text)

    @classmethod
    def _parse_uncached(cls, text: str) -> "Plan":
        parts = text.replace(" ", "").split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise PlanError("syntax", f"cannot parse plan {text!r}: write DENSE/EMB, e.g. 'tp8,ddp16/mp128' or 'fsdp/ddp' "
                                      "(dlrm-transformer: MLP/EMB/TRANSFORMER)")
        return cls(*(_parse_levels(part, text) for part in parts))

    @classmethod
    def from_lists(cls, dense: list, dense_degrees: list, emb: list, emb_degrees: list,
                   transformer: list = (), transformer_degrees: list = ()) -> "Plan":
        """Build from MAD-Max style parallel lists of strategies and degrees."""
        parts = []
        for name, strategies, degrees in (("dense", dense, dense_degrees), ("embedding", emb, emb_degrees),
                                          ("transformer", transformer, transformer_degrees)):
            if len(strategies) != len(degrees):
                raise PlanError("len_mismatch", f"{name} strategies {list(strategies)} and degrees {list(degrees)} differ in length")
            for deg in degrees:
                if isinstance(deg, bool) or not isinstance(deg, int):
                    raise PlanError("syntax", f"degrees must be integers, got {deg!r}")
            parts.append(tuple(Level(str(s), int(d)) for s, d in zip(strategies, degrees)))
        return cls(*parts)

    def resolve(self, num_devices: int, devices_per_node: int) -> "Plan":
        """Fill omitted degrees: 1 level -> all devices; 2 levels -> [per node, rest]."""
        return _resolve_plan(self, num_devices, devices_per_node)

    def to_mesh(self, num_devices: int, devices_per_node: int, checked: bool = False) -> Mesh:
        """The device mesh of this plan on the cluster (degrees implied); PlanError if it is illegal there
        (``checked``: the caller already ran the rule table on this plan and cluster)."""
        if not checked:
            check_plan(self, num_devices, devices_per_node)
        plan = self.resolve(num_devices, devices_per_node)
        return madmax_mesh([(name, [(lv.strategy, lv.degree) for lv in levels]) for name, levels in plan.components],
                           devices_per_node, num_devices // devices_per_node)

    @classmethod
    def from_mesh(cls, mesh: Mesh) -> "Plan":
        """The MAD-Max plan (degrees resolved) of a mesh from :meth:`to_mesh`."""
        return cls(*(tuple(Level(use.strategy, use.degree) for use in uses) for _, uses in mesh.components))

    def _resolve_uncached(self, num_devices: int, devices_per_node: int) -> "Plan":
        return Plan(
            _resolve(self.dense, num_devices, devices_per_node),
            _resolve(self.emb, num_devices, devices_per_node),
            _resolve(self.transformer, num_devices, devices_per_node) if self.transformer else (),
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
    if len(levels) > 2:
        raise PlanError("more_than_2_levels", f"cannot imply degrees for {len(levels)} levels; give each degree")
    implied = implied_degrees([lv.degree for lv in levels], num_devices, devices_per_node,
                              num_devices // devices_per_node)
    for index, degree in enumerate(implied):
        if degree == 0:
            given = levels[1 - index]
            raise PlanError("product_ne_devices", f"level {given} does not divide the {num_devices} devices, "
                                                  f"so level {index} cannot be implied")
    return tuple(Level(lv.strategy, int(d)) for lv, d in zip(levels, implied))


def plan_factors(levels: tuple[Level, ...]) -> Factors:
    """ddp: duplicate; fsdp: duplicate and shard; tp/pp/mp: shard (the roles of ``mesh.ROLES``)."""
    duplicate, shard, tp = factors([lv.strategy for lv in levels], [lv.degree for lv in levels])
    return Factors(duplicate, shard, tp)


def enumerate_plan_shapes(num_nodes: int, devices_per_node: int, transformer: bool = False) -> list[Plan]:
    """Every legal 1-D/2-D plan shape (degrees omitted) for the given cluster (with ``transformer``: also
    every shape of a third, transformer component): the candidates the shape rules admit."""
    num_devices = num_nodes * devices_per_node
    dense_shapes: list[tuple[str, ...]] = []
    emb_shapes: list[tuple[str, ...]] = []
    if num_devices > 1:
        dense_shapes += _legal_shapes("dense", 1)
        emb_shapes += _legal_shapes("emb", 1)
    if num_nodes > 1 and devices_per_node > 1:
        dense_shapes += _legal_shapes("dense", 2)
        emb_shapes += _legal_shapes("emb", 2)
    third = dense_shapes if transformer else [()]
    return [
        Plan(tuple(Level(s) for s in dense), tuple(Level(s) for s in emb), tuple(Level(s) for s in tr))
        for dense in dense_shapes
        for emb in emb_shapes
        for tr in third
    ]


def _legal_shapes(component: str, levels: int) -> list[tuple[str, ...]]:
    """Strategy tuples of ``levels`` levels that break no shape rule, in strategy order."""
    pool = STRATEGIES[component]
    shapes = []
    for names in itertools.product(pool, repeat=levels):
        parts = {"dense": ("ddp",), "emb": ("ddp",)}
        parts[component] = names
        if shape_failure(Plan(tuple(map(Level, parts["dense"])), tuple(map(Level, parts["emb"])))) is None:
            shapes.append(names)
    return shapes


def enumerate_plans(num_nodes: int, devices_per_node: int, transformer: bool = False) -> list[Plan]:
    """Every legal plan of the cluster with its degrees resolved."""
    num_devices = num_nodes * devices_per_node
    return [shape.resolve(num_devices, devices_per_node)
            for shape in enumerate_plan_shapes(num_nodes, devices_per_node, transformer)]
