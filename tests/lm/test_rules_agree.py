"""Sweeps and single runs agree (issue 25 item 5): the rule table (kernels/lm/rules.py) is the one place legality
lives, so every point of a random real-world grid gets the status a single run of the same configuration gives
(a spec run through ``point_columns`` and the same point as a run record). FP8 on a device without an FP8 peak
is one of those rules (``no_fp8``), not a record-only check."""

import numpy as np
import pytest

from fastmodel.errors import PlanError, SpecError
from fastmodel.lm.api import record_values
from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
from fastmodel.lm.sweep import lm_sweep, parse_mesh, point_columns
from fastmodel.registry.lm import STATUS_CODES, STATUSES

MODELS = ("llama3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "llama3.1-70b")
SYSTEMS = ("dgx-a100-80gb", "dgx-h100", "gb200-nvl72")


def _random_plans(rng, count: int) -> list[str]:
    plans = set()
    while len(plans) < count:
        mesh = {"tp": rng.choice([1, 2, 3, 4, 8, 16]), "pp": rng.choice([1, 2, 3, 4]), "cp": rng.choice([1, 1, 2]),
                "ep": rng.choice([1, 1, 2, 8])}
        plans.add(".".join(f"{k}{v}" for k, v in mesh.items() if v != 1) or "dp")
    return sorted(plans)


def _single_run_rule(model, system, plan, precision, micro_batch, nodes, global_batch) -> str:
    execution = {"precision": precision, "micro_batch": micro_batch}
    try:
        point_columns(model, system, plan=plan, execution=execution, num_nodes=nodes, global_batch=global_batch)
    except PlanError as error:
        return error.rule
    return "ok"


def _record_rule(model, system, plan, precision, micro_batch, nodes, global_batch) -> str:
    """The same point written as a run record (RUNS.md), through ``fastmodel run -m record.json``'s path."""
    lm, cluster = load_lm_model(model), load_cluster(system, nodes)
    mesh = parse_mesh(plan)
    dp = cluster.n_gpus / (mesh["tp"] * mesh["pp"] * mesh["cp"])
    if dp != int(dp):
        return "devices_not_divisible"    # a record must state a whole dp; the spec run above covers this rule
    block = load_execution({"precision": precision, "micro_batch": micro_batch}).plan_block(
        **mesh, dp=int(dp), global_batch=global_batch)
    record = {"id": "point", "model": lm.record_block(), "system": cluster.record_block(), "plan": block}
    try:
        record_values(record)
    except PlanError as error:
        return error.rule
    except SpecError as error:      # a record that breaks a RUNS.md invariant cannot describe a run at all
        return f"record refused: {error}"
    return "ok"


@pytest.mark.parametrize("seed", range(4))
def test_random_grids_agree_with_single_runs(seed):
    rng = np.random.default_rng(seed)
    model, system = str(rng.choice(MODELS)), str(rng.choice(SYSTEMS))
    nodes, global_batch = int(rng.choice([1, 2, 4])), int(rng.choice([16, 64, 256]))
    plans = _random_plans(rng, 5)
    ds = lm_sweep(model, system, global_batch=global_batch, num_nodes=nodes,
                  axes={"plan": plans, "precision": ["bf16", "fp8"], "micro_batch": [1, 2]})
    seen = set()
    for plan in plans:
        for precision in ("bf16", "fp8"):
            for micro_batch in (1, 2):
                swept = STATUSES[int(ds.status.sel(plan=plan, precision=precision, micro_batch=micro_batch))].name
                seen.add(swept)
                args = (model, system, plan, precision, micro_batch, nodes, global_batch)
                assert _single_run_rule(*args) == swept, args
                as_record = _record_rule(*args)
                if as_record.startswith("record refused: "):   # e.g. global_batch < micro_batch x dp
                    assert swept in ("batch_not_divisible", "devices_not_divisible"), (args, as_record)
                else:
                    assert as_record == swept, args
    assert len(seen) > 1    # the grid mixes legal and illegal points


def test_fp8_on_a100_is_the_same_status_in_a_sweep_and_a_run():
    ds = lm_sweep("llama3.1-8b", "dgx-a100-80gb", global_batch=64, axes={"precision": ["bf16", "fp8"]})
    assert [STATUSES[int(c)].name for c in ds.status.values] == ["ok", "no_fp8"]
    assert np.isnan(float(ds.step_time.sel(precision="fp8")))
    with pytest.raises(PlanError, match="no_fp8"):
        point_columns("llama3.1-8b", "dgx-a100-80gb", execution={"precision": "fp8"}, global_batch=64)
    assert _record_rule("llama3.1-8b", "dgx-a100-80gb", "dp", "fp8", 1, 1, 64) == "no_fp8"
    assert _record_rule("llama3.1-8b", "dgx-h100", "dp", "fp8", 1, 1, 64) == "ok"
    assert STATUS_CODES["no_fp8"] < STATUS_CODES["does_not_fit"]   # a rule, before the memory verdict


def test_plans_of_a_cluster_lists_the_meshes_a_sweep_finds_legal():
    """``fastmodel plans -s dgx-h100 --nodes 4`` was a traceback: a cluster's plans depend on the model, so
    without one it is a one-line error; with one, the meshes listed are exactly those a sweep over every mesh
    finds legal at the batch they are listed for."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.lm.rules import legal_meshes
    from fastmodel.lm.sweep import all_meshes, mesh_label

    result = CliRunner().invoke(main, ["plans", "-s", "dgx-h100", "--nodes", "4"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "pass --model" in result.output
    result = CliRunner().invoke(main, ["plans", "-s", "dgx-h100", "--nodes", "4", "-m", "mixtral-8x7b"])
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines()[1:]]
    cluster = load_cluster("dgx-h100", 4)
    found = legal_meshes(load_lm_model("mixtral-8x7b"), cluster)
    assert listed == [mesh_label(mesh) for mesh, _ in found] and "tp8.ep4" in listed and "tp8.ep8" not in listed
    for mesh, dp in found:
        ds = lm_sweep("mixtral-8x7b", cluster, global_batch=32 * mesh["pp"], axes={"plan": [mesh_label(mesh)]})
        assert int(ds.status.squeeze()) == 0 and dp * mesh["tp"] * mesh["pp"] * mesh["cp"] == 32
    every = {mesh_label(m) for m in all_meshes(load_lm_model("mixtral-8x7b"), cluster, 32)}
    assert set(listed) <= every
    result = CliRunner().invoke(main, ["plans", "-s", "dc-a", "-m", "llama3.1-70b"])
    assert result.exit_code == 2 and "kind = \"cluster\"" in result.output
