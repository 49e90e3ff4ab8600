"""Parallelization plans: per component, an ordered list of (strategy, degree).

A plan is written ``DENSE/EMB``, each side a comma-separated list of levels
``<strategy><degree>``, outermost-last, e.g. ``tp8,ddp16/mp128``. The
dlrm-transformer family has a third component, its transformer layers:
``MLP/EMB/TRANSFORMER``, e.g. ``ddp/mp/fsdp``. A degree may be
omitted: under the MAD-Max 1-D/2-D rules a one-level component spans all
devices and a two-level one is ``[devices_per_node, num_nodes]``, so
``tp,ddp/mp`` names the same plan shape on any cluster size.

Legality rules live here and only here (docs/model.md §3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from fastmodel.errors import PlanError, nearest
from fastmodel.families import FAMILIES

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
    at most two levels (docs/model.md §3.3, ``restrict2d``).
    """
    for name, levels in plan.components:
        allowed = EMB_STRATEGIES if name == "emb" else DENSE_STRATEGIES
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


def check_plan_for_model(plan: Plan, model) -> None:
    """Rules that depend on the model: the component set of its family, and
    DLRM-family ``tp`` only with even bottom and top layer counts (the TP
    allreduce fires once per layer pair)."""
    family = FAMILIES[model.family]
    wants_transformer = family.has_transformer_component
    if wants_transformer and not plan.transformer:
        raise PlanError("components", f"a {model.family} plan has three components MLP/EMB/TRANSFORMER, e.g. "
                                      f"'ddp/mp/fsdp' (got {plan.label})")
    if not wants_transformer and plan.transformer:
        raise PlanError("components", f"a {model.family} plan has two components DENSE/EMB (got {plan.label})")
    if "tp_odd_layers" in family.rules and "tp" in plan.dense_strategies and (
            model.num_bottom_layers % 2 or model.num_top_layers % 2):
        raise PlanError("tp_odd_layers", f"MLP tensor parallelism needs even bottom and top layer counts "
                                         f"(got {model.num_bottom_layers} and {model.num_top_layers})")


def degree_limits(model, component: str) -> tuple[int | None, int | None]:
    """(most pipeline stages, most tensor-parallel shards) of one plan component of ``model``:
    the family's ``degree_limits`` (transformer stacks: layers and heads; DLRM MLPs: bottom + top
    layers and no head limit; embeddings: none)."""
    layer_paths, head_path = FAMILIES[model.family].degree_limits.get(component, ((), None))
    layers = sum(getattr(model, path.split(".", 1)[1]) for path in layer_paths) if layer_paths else None
    heads = getattr(model, head_path.split(".", 1)[1]) if head_path else None
    return layers, heads


def check_degree_limits(plan: Plan, model) -> None:
    """PlanError when a resolved plan pipelines over more stages than layers or splits more heads than exist."""
    for name, levels in plan.components:
        layers, heads = degree_limits(model, name)
        for level in levels:
            if level.strategy == "pp" and layers is not None and level.degree > layers:
                raise PlanError("pp_gt_layers", f"pp{level.degree} pipelines {name} layers over more stages than "
                                                f"the model's {layers} layers")
            if level.strategy == "tp" and heads is not None and level.degree > heads:
                raise PlanError("tp_gt_heads", f"tp{level.degree} splits {name} attention over more devices than "
                                               f"the model's {heads} heads")


def check_plan(plan: Plan, num_devices: int, devices_per_node: int, model=None) -> None:
    """Raise :class:`PlanError` unless ``plan`` (degrees resolved) is legal on the cluster.

    The static rules of :func:`check_plan_static` (and :func:`check_plan_for_model`
    when ``model`` is given), then: every degree > 1, the product of degrees
    equals the device count for each component, and level 0 spans one node or
    all devices. (``params.param_table`` applies the same numeric rules
    vectorized, as status codes.)
    """
    check_plan_static(plan)
    if model is not None:
        check_plan_for_model(plan, model)
    for name, levels in plan.components:
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
    """How a component is replicated and sharded (docs/model.md §3.2)."""

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


def enumerate_plan_shapes(num_nodes: int, devices_per_node: int, transformer: bool = False) -> list[Plan]:
    """Every legal 1-D/2-D plan shape (degrees omitted) for the given cluster
    (with ``transformer``: also every shape of a third, transformer component)."""
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
    third = dense_shapes if transformer else [()]
    return [
        Plan(tuple(Level(s) for s in dense), tuple(Level(s) for s in emb), tuple(Level(s) for s in tr))
        for dense in dense_shapes
        for emb in emb_shapes
        for tr in third
    ]


def enumerate_plans(num_nodes: int, devices_per_node: int, transformer: bool = False) -> list[Plan]:
    """Every legal plan of the cluster with its degrees resolved."""
    num_devices = num_nodes * devices_per_node
    return [shape.resolve(num_devices, devices_per_node)
            for shape in enumerate_plan_shapes(num_nodes, devices_per_node, transformer)]
