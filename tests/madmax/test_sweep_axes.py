"""The plan axis of MAD-Max sweeps (fastmodel/madmax/sweep/axes.py ``plan_values``)."""

import pytest

from fastmodel.madmax.parallel.plans import enumerate_plan_shapes
from fastmodel.madmax.sweep.axes import plan_values

CLUSTERS = [(1, 1), (1, 8), (4, 8), (2, 1), (3, 8), (1, 4), (16, 8)]


def _every_cluster(clusters, transformer, keep=lambda plan: True):
    """The shapes legal on at least one cluster, enumerating every cluster of the grid (the rule by definition),
    in plan_values' order (that of a 2 x 2 cluster's enumeration)."""
    shapes = {}
    for nodes, per_node in clusters:
        for plan in enumerate_plan_shapes(nodes, per_node, transformer):
            if keep(plan):
                shapes.setdefault(plan.shape, plan)
    order = {p.shape: i for i, p in enumerate(enumerate_plan_shapes(2, 2, transformer))}
    return sorted(shapes, key=lambda shape: order.get(shape, 0))


@pytest.mark.parametrize("transformer", [False, True])
@pytest.mark.parametrize("clusters", [CLUSTERS, CLUSTERS[:2], [(1, 1), (2, 1)], [(8, 8)] * 3])
def test_plan_shapes_are_those_of_every_cluster(clusters, transformer):
    """One cluster per kind (several devices; several multi-device nodes) gives what every cluster gives."""
    expected = _every_cluster(clusters, transformer)
    if not expected:
        return
    assert [plan.shape for plan in plan_values("all", clusters, transformer)] == expected


def test_a_rule_set_keeps_the_one_level_shapes():
    plans = plan_values({"max_levels": 1}, CLUSTERS)
    expected = _every_cluster(CLUSTERS, False, lambda p: all(len(levels) <= 1 for _, levels in p.components))
    assert [plan.shape for plan in plans] == expected and expected
    assert len(expected) < len(_every_cluster(CLUSTERS, False))      # the two-level shapes of (4, 8) are left out


def test_a_hundred_thousand_cluster_sizes_take_one_pass_per_kind(monkeypatch):
    """A node axis of 1e5 values enumerates the shapes once per cluster kind, not once per size (it took minutes)."""
    from fastmodel.madmax.sweep import axes

    calls = []

    def counted(nodes, per_node, transformer=False):
        calls.append((nodes, per_node))
        return enumerate_plan_shapes(nodes, per_node, transformer)

    monkeypatch.setattr(axes, "enumerate_plan_shapes", counted)
    clusters = [(n, 8) for n in range(1, 100_001)]
    plans = plan_values("all", clusters)
    assert [p.shape for p in plans] == _every_cluster([(1, 8), (2, 8)], False)
    assert calls[:2] == [(1, 8), (2, 8)] and len(calls) <= 3    # the two kinds (+ the ordering's reference cluster)


@pytest.mark.parametrize("axis, said", [
    ("flops_utl", "unknown axis 'flops_utl' (did you mean 'flops_util'?)"),
    ("num_node", "unknown axis 'num_node' (did you mean 'num_nodes'?)"),
    ("zzqqxx", "unknown axis 'zzqqxx': an axis is plan, model, system or a field of the model, system or task spec "
               "by its name or path (fields: `fastmodel specs schema model|system|task`; docs/usage.md, "
               "`fastmodel sweep`)"),
])
def test_an_unknown_axis_names_the_nearest_or_where_the_axes_are(tmp_path, axis, said):
    """The message listed every sweepable name (~60, ~800 characters on one line): now the nearest axis, or,
    when none is near, where the fields are listed (``axis_path``)."""
    from tests.suite_fixtures import cli, one_line_error

    path = tmp_path / "s.toml"
    path.write_text(f'model = "llama2-70b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n[axes]\n{axis} = [1]\n')
    result = cli("sweep", path, "-o", tmp_path / "out.nc")
    one_line_error(result, said)
    assert len(result.output) < 300 and "num_nodes, " not in result.output
