"""MAD-Max plan legality as one rule table (docs/model.md §3.3).

Two tables, each rule a name, a predicate and a message builder:

- :data:`SHAPE_RULES` -- rules of the strategies alone (unknown strategy, repeat,
  fsdp not first, more than two levels, the components of a family); they
  hold on every cluster, so they run once per plan. Their status in a sweep is
  ``illegal_plan``; one configuration raises ``PlanError(rule)``.
- :data:`ROW_RULES` -- rules over numbers (degrees against the cluster, layer
  and head counts, batches), each predicate vectorized over broadcast numpy
  arrays (or plain ints). The vectorized form is canonical: ``params.param_table``
  runs the table to set status codes (:func:`row_status`); a single
  configuration runs the same table on scalars and raises a ``PlanError`` for
  the first rule it breaks (:func:`check_rows`).

Rules run in table order, component by component (within a component, level by
level), and the first broken one wins. Family facts (components, degree limits,
the DLRM odd-layer rule) are read through the marked section below only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from fastmodel.errors import PlanError, nearest

# ---------------------------------------------------------------------------------------------------
# Family facts: the only place rules read what a model family is made of (its Family object,
# fastmodel/madmax/families/).
from fastmodel.madmax.families import FAMILIES
from fastmodel.madmax.parallel.mesh import factors, implied_degrees
from fastmodel.registry.madmax import STATUS


def family_components(family: str) -> tuple[str, ...]:
    """The plan components of ``family``, in plan order (``Family.components``)."""
    return FAMILIES[family].components


def degree_limit_paths(family: str, component: str) -> tuple[tuple[str, ...], str | None]:
    """(spec paths whose sum is the most pipeline stages, spec path of the most tp shards) of one
    component (``Family.degree_limits``): transformer stacks split layers (pp) and heads (tp); DLRM MLPs
    their bottom + top layers; embeddings have no limit."""
    return FAMILIES[family].degree_limits.get(component, ((), None))


def odd_layer_paths(family: str) -> tuple[str, ...]:
    """Layer counts that must be even when the dense part uses tp (the family rule ``tp_odd_layers``: the
    DLRM MLPs' tp allreduce fires once per layer pair): the dense component's layer counts
    (``Family.degree_limits``); empty where the family has no such rule."""
    spec = FAMILIES[family]
    return spec.degree_limits["dense"][0] if "tp_odd_layers" in spec.rules else ()
# ---------------------------------------------------------------------------------------------------


#: strategies each component may use
STRATEGIES: dict[str, tuple[str, ...]] = {
    "dense": ("ddp", "fsdp", "tp", "pp"),
    "emb": ("ddp", "mp"),
    "transformer": ("ddp", "fsdp", "tp", "pp"),
}
#: at most this many levels per component (``restrict2d``)
MAX_LEVELS = 2


@dataclass(frozen=True)
class Rule:
    """One rule: its name (a PlanError rule; for row rules a ``registry.madmax.STATUSES`` name), its scope
    (``plan``: once; ``component``: per component; ``level``: per level of each component), whether it
    is broken, the message, when it applies (structural, per plan) and its block (see :func:`_walk`)."""

    name: str
    scope: str
    broken: Callable[..., Any]
    message: Callable[..., str]
    applies: Callable[..., bool] = lambda *_: True
    block: int = 0

    def rule_name(self, ctx: Any, c: int | None) -> str:
        """The PlanError rule: ``unknown_strategy`` is named after its component."""
        return f"{self.name}_{ctx.names[c]}" if self.name == "unknown_strategy" else self.name


def _walk(table: tuple[Rule, ...], levels: tuple[int, ...]) -> tuple:
    """(rule, component, level) in rule order, for components with ``levels`` levels each. A plan rule
    runs once; a block (consecutive rules of one ``block`` number) runs component by component, and
    within it a run of level rules level by level."""
    key = (id(table), levels)
    if key not in _WALKS:
        _WALKS[key] = _expand(table, levels)
    return _WALKS[key]


_WALKS: dict[tuple[int, tuple[int, ...]], tuple] = {}  # keyed by the table's id: the tables are module constants


def _expand(table: tuple[Rule, ...], levels: tuple[int, ...]) -> tuple:
    blocks: list[list[Rule]] = []
    for rule in table:
        if blocks and rule.scope != "plan" and blocks[-1][0].scope != "plan" and blocks[-1][0].block == rule.block:
            blocks[-1].append(rule)
        else:
            blocks.append([rule])
    out = []
    for block in blocks:
        if block[0].scope == "plan":
            out.append((block[0], None, None))
            continue
        for c, num_levels in enumerate(levels):
            i = 0
            while i < len(block):
                j = i
                while j < len(block) and block[j].scope == block[i].scope:
                    j += 1
                if block[i].scope == "component":
                    out.extend((rule, c, None) for rule in block[i:j])
                else:
                    out.extend((rule, c, level) for level in range(num_levels) for rule in block[i:j])
                i = j
    return tuple(out)


# ------------------------------------------------------------------ shape rules (per plan)

@dataclass(frozen=True)
class ShapeInputs:
    """A plan's strategies (and the model family, when known) for the shape rules."""

    label: str
    names: tuple[str, ...]
    strategies: tuple[tuple[str, ...], ...]
    family: str | None = None


def _components_message(x: ShapeInputs, *_) -> str:
    if "transformer" in family_components(x.family):
        return f"a {x.family} plan has three components MLP/EMB/TRANSFORMER, e.g. 'ddp/mp/fsdp' (got {x.label})"
    return f"a {x.family} plan has two components DENSE/EMB (got {x.label})"


def _allowed(x, c):
    return STRATEGIES["emb" if x.names[c] == "emb" else "dense"]


SHAPE_RULES: tuple[Rule, ...] = (
    Rule("components", "plan", lambda x, c, lv: x.names != family_components(x.family), _components_message,
         applies=lambda x, c, lv: x.family is not None),
    Rule("empty", "component", lambda x, c, lv: not x.strategies[c],
         lambda x, c, lv: f"{x.names[c]} component has no parallelism level"),
    Rule("unknown_strategy", "level", lambda x, c, lv: x.strategies[c][lv] not in _allowed(x, c),
         lambda x, c, lv: f"{x.names[c]} strategy {x.strategies[c][lv]!r} is not one of {', '.join(_allowed(x, c))}"
                          f"{nearest(x.strategies[c][lv], _allowed(x, c))}"),
    Rule("repeat", "level", lambda x, c, lv: x.strategies[c][lv] in x.strategies[c][:lv],
         lambda x, c, lv: f"{x.names[c]} strategy {x.strategies[c][lv]!r} appears twice"),
    Rule("fsdp_not_first", "level", lambda x, c, lv: x.strategies[c][lv] == "fsdp" and lv != 0,
         lambda x, c, lv: f"fsdp must be the first {x.names[c]} level (got {x.label})"),
    Rule("more_than_2_levels", "component", lambda x, c, lv: len(x.strategies[c]) > MAX_LEVELS,
         lambda x, c, lv: f"{x.names[c]} has {len(x.strategies[c])} levels; at most {MAX_LEVELS} are modelled"),
)


@lru_cache(maxsize=4096)
def shape_failure(plan, family: str | None = None) -> tuple[str, str] | None:
    """(rule, message) of the first shape rule ``plan`` breaks (with ``family``: also its components)."""
    x = ShapeInputs(plan.label, tuple(name for name, _ in plan.components),
                    tuple(tuple(lv.strategy for lv in levels) for _, levels in plan.components), family)
    for rule, c, lv in _walk(SHAPE_RULES, tuple(map(len, x.strategies))):
        if rule.applies(x, c, lv) and rule.broken(x, c, lv):
            return rule.rule_name(x, c), rule.message(x, c, lv)
    return None


def check_plan_shape(plan, family: str | None = None) -> None:
    """Raise :class:`PlanError` if the strategies break a rule on any cluster (and, given the model
    ``family``, if the plan has the wrong components)."""
    failure = shape_failure(plan, family)
    if failure:
        raise PlanError(*failure)


# ------------------------------------------------------------------ row rules (vectorized)

@dataclass
class RowInputs:
    """Everything the row rules read, as ints or broadcastable arrays. ``degrees[c][level]`` are implied
    (0 where an omitted degree cannot be implied); ``given`` the plan's own (None: omitted)."""

    names: tuple[str, ...]
    strategies: tuple[tuple[str, ...], ...]
    given: tuple[tuple[int | None, ...], ...]
    degrees: list[list[Any]]
    num_devices: Any
    per_node: Any
    nodes: Any
    family: str | None = None
    get_int: Callable[[str], Any] | None = None    # model fields by spec path (layer and head counts)
    degree_limits: bool = False
    wanted_devices: Any = None                     # a swept device count (nodes follow from it)
    global_batch: Any = None
    local_batch: dict[str, Any] | None = None
    replicas: list[Any] = field(default_factory=list)


def row_inputs(plan, num_devices, per_node, nodes, *, family: str | None = None,
               get_int: Callable[[str], Any] | None = None, degree_limits: bool = False, wanted_devices=None,
               global_batch=None, local_batch: dict[str, Any] | None = None) -> RowInputs:
    """The row rules' inputs for ``plan`` on a cluster (degrees implied on its mesh axes)."""
    components = plan.components
    names = tuple(name for name, _ in components)
    strategies = tuple(tuple(lv.strategy for lv in levels) for _, levels in components)
    given = tuple(tuple(lv.degree for lv in levels) for _, levels in components)
    degrees = [implied_degrees(g, num_devices, per_node, nodes) for g in given]
    replicas = [_at_least_1(factors(s, d)[0]) for s, d in zip(strategies, degrees)]
    return RowInputs(names, strategies, given, degrees, num_devices, per_node, nodes, family, get_int,
                     degree_limits, wanted_devices, global_batch, local_batch, replicas)


def _at_least_1(value):
    return max(value, 1) if isinstance(value, int) else np.maximum(value, 1)


def _sum(x: RowInputs, paths):
    total = 0
    for path in paths:
        total = total + x.get_int(path)
    return total


def _product(x: RowInputs, c: int):
    product = 1
    for degree in x.degrees[c]:
        product = product * degree
    return product


def _level_text(x: RowInputs, c: int, lv: int, at) -> str:
    return f"{x.strategies[c][lv]}{at(x.degrees[c][lv])}"


def _label(x: RowInputs, at) -> str:
    return "/".join(",".join(_level_text(x, c, lv, at) for lv in range(len(x.strategies[c])))
                    for c in range(len(x.names)))


def _has_limit(x: RowInputs, c: int, lv: int, strategy: str) -> bool:
    if not x.degree_limits or x.get_int is None or x.strategies[c][lv] != strategy:
        return False
    layers, heads = degree_limit_paths(x.family, x.names[c])
    return bool(layers) if strategy == "pp" else heads is not None


def _implied_message(x: RowInputs, c: int, lv: int, at) -> str:
    other = 1 - lv
    return (f"level {x.strategies[c][other]}{x.given[c][other]} does not divide the {at(x.num_devices)} devices, "
            f"so level {lv} cannot be implied")


def _emb(x: RowInputs) -> int:
    return x.names.index("emb")


ROW_RULES: tuple[Rule, ...] = (
    Rule("devices_not_divisible", "plan", lambda x, c, lv: x.wanted_devices % x.per_node != 0,
         lambda x, c, lv, at: f"{at(x.wanted_devices)} devices are not a multiple of the system's "
                              f"{at(x.per_node)} devices per node",
         applies=lambda x, c, lv: x.wanted_devices is not None),
    Rule("tp_odd_layers", "plan",
         lambda x, c, lv: _odd(x),
         lambda x, c, lv, at: "MLP tensor parallelism needs even bottom and top layer counts (got "
                              + " and ".join(str(at(x.get_int(p))) for p in odd_layer_paths(x.family)) + ")",
         applies=lambda x, c, lv: x.get_int is not None and "tp" in x.strategies[0]
         and bool(odd_layer_paths(x.family))),
    # an omitted degree is 0 when the given one does not divide the devices (Plan.resolve's product rule)
    Rule("product_ne_devices", "level", lambda x, c, lv: x.degrees[c][lv] == 0, _implied_message,
         applies=lambda x, c, lv: x.given[c][lv] is None and len(x.given[c]) == 2, block=1),
    Rule("degree_le_1", "level", lambda x, c, lv: x.degrees[c][lv] <= 1,
         lambda x, c, lv, at: f"{x.names[c]} level {_level_text(x, c, lv, at)} has degree {at(x.degrees[c][lv])}; "
                              "every degree must be > 1", block=2),
    Rule("product_ne_devices", "component", lambda x, c, lv: _product(x, c) != x.num_devices,
         lambda x, c, lv, at: f"{x.names[c]} degrees multiply to {at(_product(x, c))}, not the "
                              f"{at(x.num_devices)} devices of the system", block=2),
    Rule("first_degree", "component",
         lambda x, c, lv: (x.degrees[c][0] != x.per_node) & (x.degrees[c][0] != x.num_devices),
         lambda x, c, lv, at: f"{x.names[c]} level 0 degree {at(x.degrees[c][0])} must be the devices per node "
                              f"({at(x.per_node)}) or all devices ({at(x.num_devices)})", block=2),
    Rule("pp_gt_layers", "level",
         lambda x, c, lv: x.degrees[c][lv] > _sum(x, degree_limit_paths(x.family, x.names[c])[0]),
         lambda x, c, lv, at: f"pp{at(x.degrees[c][lv])} pipelines {x.names[c]} layers over more stages than the "
                              f"model's {at(_sum(x, degree_limit_paths(x.family, x.names[c])[0]))} layers",
         applies=lambda x, c, lv: _has_limit(x, c, lv, "pp"), block=3),
    Rule("tp_gt_heads", "level",
         lambda x, c, lv: x.degrees[c][lv] > x.get_int(degree_limit_paths(x.family, x.names[c])[1]),
         lambda x, c, lv, at: f"tp{at(x.degrees[c][lv])} splits {x.names[c]} attention over more devices than the "
                              f"model's {at(x.get_int(degree_limit_paths(x.family, x.names[c])[1]))} heads",
         applies=lambda x, c, lv: _has_limit(x, c, lv, "tp"), block=3),
    Rule("batch_not_divisible", "plan", lambda x, c, lv: _any_indivisible(x),
         lambda x, c, lv, at: _indivisible_message(x, at),
         applies=lambda x, c, lv: x.global_batch is not None),
    Rule("global_batch_mismatch", "component",
         lambda x, c, lv: x.local_batch[x.names[c]] * x.replicas[c] != _emb_global(x),
         lambda x, c, lv, at: f"{x.names[c]} part gives a global batch of "
                              f"{at(x.local_batch[x.names[c]] * x.replicas[c])} ({at(x.local_batch[x.names[c]])} x "
                              f"{at(x.replicas[c])}) but embeddings give {at(_emb_global(x))} "
                              f"({at(x.local_batch['emb'])} x {at(x.replicas[_emb(x)])})",
         applies=lambda x, c, lv: x.global_batch is None and x.local_batch is not None, block=4),
)


def _odd(x: RowInputs):
    odd = False
    for path in odd_layer_paths(x.family):
        odd = odd | (x.get_int(path) % 2 != 0)
    return odd


def _any_indivisible(x: RowInputs):
    broken = False
    for dup in x.replicas:
        broken = broken | (x.global_batch % dup != 0)
    return broken


def _indivisible_message(x: RowInputs, at) -> str:
    for c, dup in enumerate(x.replicas):
        if at(x.global_batch % dup != 0):
            return (f"global batch {at(x.global_batch)} does not divide over the {at(dup)} {x.names[c]} replicas "
                    f"of plan {_label(x, at)}")
    return "global batch does not divide over the replicas"


def _emb_global(x: RowInputs):
    return x.local_batch["emb"] * x.replicas[_emb(x)]


def _instances(x: RowInputs) -> list:
    return [(rule, c, lv) for rule, c, lv in _walk(ROW_RULES, tuple(map(len, x.strategies))) if rule.applies(x, c, lv)]


def row_status(x: RowInputs) -> np.ndarray:
    """int8 status code of every row (broadcast shape of the inputs): the first rule broken, 0 if none."""
    status = np.zeros((), dtype=np.int8)
    for rule, c, lv in _instances(x):
        status = np.where((status == 0) & rule.broken(x, c, lv), np.int8(STATUS[rule.name]), status).astype(np.int8)
    return status


def row_failure(x: RowInputs) -> tuple[str, str] | None:
    """(rule, message) of the first rule broken by the first row that breaks it, in rule order."""
    for rule, c, lv in _walk(ROW_RULES, tuple(map(len, x.strategies))):
        if not rule.applies(x, c, lv):
            continue
        broken = rule.broken(x, c, lv)
        if isinstance(broken, (bool, np.bool_)) and not broken:  # scalar inputs: the common case, kept cheap
            continue
        broken = np.asarray(broken)
        if broken.any():
            index = int(np.flatnonzero(broken)[0])
            shape = broken.shape

            def at(value, index=index, shape=shape):
                value = np.broadcast_to(np.asarray(value), shape).reshape(-1)[index] if shape else np.asarray(value)
                return value.item()
            return rule.name, rule.message(x, c, lv, at)
    return None


def check_rows(x: RowInputs) -> None:
    """Raise :class:`PlanError` for the first rule broken (single configurations: scalar inputs)."""
    failure = row_failure(x)
    if failure:
        raise PlanError(*failure)


def check_plan(plan, num_devices: int, devices_per_node: int, model=None) -> None:
    """Raise :class:`PlanError` unless ``plan`` is legal on a cluster of ``num_devices`` with
    ``devices_per_node`` each: the shape rules, then the row rules on one row (with ``model``: its
    family's components and the DLRM odd-layer rule too; omitted degrees are implied)."""
    family = None if model is None else model.family
    check_plan_shape(plan, family)
    get_int = None if model is None else (lambda path: int(getattr(model, path.split(".", 1)[1])))
    check_rows(row_inputs(plan, num_devices, devices_per_node, num_devices // devices_per_node,
                          family=family, get_int=get_int))
