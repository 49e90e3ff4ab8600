"""Network tiers (fastmodel/spec/network.py) and the madmax reading of them (docs/model.md §2.2.1).

Golden values are derived by hand from the spec files' numbers (ZionEX: 12 NVLinks of 50 GB/s
bidirectional, 8 RoCE ports of 25 GB/s bidirectional per node of 8 GPUs) or come from the MAD-Max
reference's own runs (tests/data/madmax_cases_dev.jsonl).
"""

import copy
from pathlib import Path

import numpy as np
import pytest

import fastmodel
from fastmodel.engines import load_model, load_system, load_task
from fastmodel.errors import SpecError
from fastmodel.lm.loader import load_cluster
from fastmodel.madmax.families import FAMILIES
from fastmodel.madmax.lowering.params import _COL, param_table
from fastmodel.madmax.spec.schema import json_schema
from fastmodel.registry.madmax import COLUMNS
from fastmodel.spec.loader import _builtin_data
from fastmodel.spec.network import NetworkTier
from fastmodel.testing import assert_matches_reference, dev_cases

ROOT_SPECS = Path(__file__).resolve().parents[2] / "specs" / "systems"
#: dc-a is the same hardware as zionex written in MAD-Max's [node] + [network] form
LEGACY = copy.deepcopy(_builtin_data("system", "dc-a"))
TIERS = {
    **{k: v for k, v in LEGACY.items() if k not in ("node", "network", "devices_per_node")},
    "allreduce_intra_fraction": 0.2746,
    "tiers": [
        {"domain_size": 8, "bandwidth_per_device_bytes_per_s": "300 GB/s", "efficiency": 0.6667},
        {"bandwidth_per_device_bytes_per_s": "12.5 GB/s", "efficiency": 0.56, "latency_s": "9.6 us"},
    ],
}
#: the tier form's legacy twin, as the madmax reading derives it: one link of twice tier 0's bandwidth,
#: one port per node of twice the node's share of tier 1 (2 x 12.5 GB/s x 8 devices)
TWIN = {**LEGACY,
        "node": {"num_links": 1, "link_bandwidth_bytes_per_s": 600e9, "link_util": 0.6667},
        "network": {"num_ports": 1, "port_bandwidth_bytes_per_s": 200e9, "port_util": 0.56,
                    "allreduce_intra_fraction": 0.2746}}
#: every system column of the parameter table, and the ones the cluster size and the plan set
SET_COLUMNS = [c.name for c in COLUMNS if c.path and (c.needs == "all" or c.needs in FAMILIES["dlrm"].traits)] + [
    "num_nodes", "devices_per_node", "peak_flop_per_s", "dense_degree0", "dense_degree1", "emb_degree0",
    "emb_degree1", "local_dense_batch", "local_emb_batch"]
RATES = ("intra_bandwidth", "inter_bandwidth", "allreduce_bandwidth", "num_devices")


def test_builtin_tiers_by_hand():
    for name in ("zionex", "dc-a"):  # tier form and MAD-Max form of the same cluster
        node, network = load_system(name).tiers
        assert (node.domain_size, node.efficiency, node.latency_s) == (8, 0.6667, 0.0)
        assert node.bandwidth_per_device_bytes_per_s == pytest.approx(12 * 50e9 / 2, rel=1e-15)
        assert (network.domain_size, network.efficiency) == (16 * 8, 0.56)
        assert network.bandwidth_per_device_bytes_per_s == pytest.approx(8 * 25e9 / 2 / 8, rel=1e-15)
    zionex = load_system("zionex")
    assert zionex.devices_per_node == 8 and zionex.allreduce_intra_fraction == 0.2746
    # the madmax reading's effective rates, docs/model.md §2.2: 300 x 0.6667, 12.5 x 0.56, blend 0.2746
    assert zionex.intra_bandwidth == pytest.approx(200.01e9, rel=1e-12)
    assert zionex.inter_bandwidth == pytest.approx(7.0e9, rel=1e-12)
    assert zionex.allreduce_bandwidth == pytest.approx(0.2746 * 200.01e9 + 0.7254 * 7.0e9, rel=1e-12)


def test_tier_form_equals_its_legacy_twin():
    tiers, twin = load_system(TIERS), load_system(TWIN)
    assert tiers.model_dump() == twin.model_dump()
    for nodes in (None, 1, 4):
        a, b = (s if nodes is None else s.with_nodes(nodes) for s in (tiers, twin))
        for rate in RATES:
            assert getattr(a, rate) == getattr(b, rate), rate
        for bytes_per_param in (8, 4, 2, 1):
            assert a.peak_flop_per_s(bytes_per_param) == b.peak_flop_per_s(bytes_per_param)
        assert a.tiers[-1].domain_size == b.tiers[-1].domain_size == a.num_devices
        assert [t.bandwidth_per_device_bytes_per_s for t in a.tiers] == [t.bandwidth_per_device_bytes_per_s
                                                                        for t in b.tiers]
    assert tiers.tiers[1].latency_s == 9.6e-6  # kept in the view; the madmax reading ignores it
    model, task = load_model("dlrm-a"), load_task("dlrm-pretrain")
    for plan in ("fsdp/mp", "tp,ddp/mp", "ddp/mp"):
        parsed = task.model_copy(update={"plan": plan}).parsed_plan
        values = {"system.num_nodes": np.array([1, 2, 16, 64])}
        table_a, status_a = param_table(model, tiers, task, parsed, values, shape=(4,))
        table_b, status_b = param_table(model, twin, task, parsed, values, shape=(4,))
        np.testing.assert_array_equal(status_a, status_b)
        for name in SET_COLUMNS:  # the table leaves columns the family never reads unset (np.empty)
            np.testing.assert_array_equal(table_a[_COL[name]], table_b[_COL[name]], err_msg=name)


def test_rewritten_builtin_predicts_bit_identically():
    """zionex is written as tiers, dc-a as MAD-Max tables: every prediction is the same float."""
    for model, task, plan in (("dlrm-a", "dlrm-pretrain", None), ("dlrm-a", "dlrm-pretrain", "tp,ddp/mp"),
                              ("llama-7b", "llm-pretrain", "fsdp/ddp"), ("llama-7b", "llm-finetune", "tp,ddp/ddp"),
                              ("dlrm-a-moe", "dlrm-moe-pretrain", None), ("vit-h", "vit-pretrain", None)):
        for nodes in (2, 16):
            a = fastmodel.evaluate(model, "zionex", task, semantics="madmax", plan=plan, num_nodes=nodes)
            b = fastmodel.evaluate(model, "dc-a", task, semantics="madmax", plan=plan, num_nodes=nodes)
            assert a["iteration_time"].item() > 0
            for name in a.data_vars:
                np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=f"{model} {name}")


def test_tier_form_reproduces_the_reference():
    """MAD-Max's own ZionEX runs, with the built-in tier-form zionex as the system."""
    cases = [c for c in dev_cases() if c["system"]["name"] in ("ZionEX-128", "ZionEX-8")]
    assert len(cases) >= 3
    for case in cases:
        nodes = case["system"]["num_nodes"]
        if case["system"]["ar_perc_intra"] != load_system("zionex").allreduce_intra_fraction and nodes > 1:
            continue
        ds = fastmodel.evaluate(case["model"], "zionex", case["task"], semantics="madmax", num_nodes=nodes)
        assert_matches_reference({n: ds[n].item() for n in ds.data_vars}, case["expected"], case["case"])


def _error(mutate) -> str:
    data = copy.deepcopy(TIERS)
    mutate(data)
    with pytest.raises(SpecError) as caught:
        load_system(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def _third_tier(d):
    d["tiers"].insert(1, {"domain_size": 64, "bandwidth_per_device_bytes_per_s": "50 GB/s", "efficiency": 0.9})


@pytest.mark.parametrize("mutate, path, reason", [
    (lambda d: d["tiers"][0].update(domain_size=8192), "system.tiers.0.domain_size", "at most 4096 devices"),
    (lambda d: d["tiers"][1].update(domain_size=4), "system.tiers.1.domain_size", "domains must increase"),
    (lambda d: d["tiers"][1].update(domain_size=8), "system.tiers.1.domain_size", "domains must increase"),
    (lambda d: d["tiers"][1].update(domain_size=12), "system.tiers.1.domain_size", "multiple of tier 0"),
    (lambda d: d["tiers"][1].update(domain_size=64), "system.tiers.1.domain_size", "spans the whole cluster"),
    (lambda d: d["tiers"][0].pop("domain_size"), "system.tiers.0.domain_size", "required field missing"),
    (lambda d: d["tiers"][0].pop("efficiency"), "system.tiers.0.efficiency", "required field missing"),
    (lambda d: d["tiers"][1].pop("bandwidth_per_device_bytes_per_s"),
     "system.tiers.1.bandwidth_per_device_bytes_per_s", "required field missing"),
    (lambda d: d["tiers"][0].update(bandwidth_per_device_bytes_per_s="300 GBs"),
     "system.tiers.0.bandwidth_per_device_bytes_per_s", "unknown unit 'GBs'"),
    (lambda d: d["tiers"][0].update(bandwidth_per_device_bytes_per_s=300),
     "system.tiers.0.bandwidth_per_device_bytes_per_s", "implausibly small"),
    (lambda d: d["tiers"][1].update(latency_s="9.6 uS"), "system.tiers.1.latency_s", "unknown unit"),
    (lambda d: d["tiers"][1].update(latency_s=5), "system.tiers.1.latency_s", "implausibly large"),
    (lambda d: d["tiers"][0].update(efficiency=56), "system.tiers.0.efficiency", "looks like a percentage"),
    (lambda d: d["tiers"][0].update(bandwith_per_device_bytes_per_s=1e9), "system.tiers.0.bandwith_per_device",
     "did you mean 'bandwidth_per_device_bytes_per_s'"),
    (lambda d: d.update(tierz=d.pop("tiers")), "system.tierz", "did you mean 'tiers'"),
    (lambda d: d.update(tiers=[]), "system.tiers", "at least one tier"),
    (_third_tier, "system.tiers", "the madmax reading has two tiers"),
    (lambda d: d.pop("allreduce_intra_fraction"), "system.allreduce_intra_fraction", "required field missing"),
    (lambda d: d.update(devices_per_node=4), "system.devices_per_node", "domain_size is 8, not 4"),
    (lambda d: d.update(node=LEGACY["node"]), "system.node", "not both"),
])
def test_bad_tier_lists_are_one_line_errors(mutate, path, reason):
    message = _error(mutate)
    assert message.startswith(path), message
    assert reason in message, message


def test_legacy_form_errors_keep_their_paths():
    data = copy.deepcopy(LEGACY)
    del data["network"]
    with pytest.raises(SpecError, match=r"^system\.network: required field missing"):
        load_system(data)
    data = copy.deepcopy(LEGACY)
    data["allreduce_intra_fraction"] = 0.5
    with pytest.raises(SpecError, match=r"^system\.allreduce_intra_fraction: with \[node\] and \[network\]"):
        load_system(data)


def test_dump_is_the_madmax_form_and_round_trips():
    system = load_system("zionex")
    dumped = system.model_dump()
    assert "tiers" not in dumped and dumped["node"]["num_links"] == 1
    again = load_system(dumped)
    assert again.model_dump() == dumped
    assert [t.bandwidth_per_device_bytes_per_s for t in again.tiers] == [300e9, 12.5e9]
    assert again.with_nodes(2).tiers[1].domain_size == 16 and system.with_nodes(2).tiers[1].domain_size == 16


def test_sweep_axes_see_no_second_allreduce_fraction():
    from fastmodel.madmax.sweep.axes import FIELDS, axis_path

    assert axis_path("allreduce_intra_fraction") == "system.network.allreduce_intra_fraction"
    assert not any(path.startswith("system.tiers") for path in FIELDS)


def test_json_schema_accepts_the_tier_form():
    jsonschema = pytest.importorskip("jsonschema")  # a test dependency (pyproject [test])
    schema = json_schema("system")
    tier = schema["$defs"]["NetworkTier"]["properties"]
    assert set(tier) == {"domain_size", "bandwidth_per_device_bytes_per_s", "latency_s", "efficiency"}
    jsonschema.validate(_builtin_data("system", "zionex"), schema)
    jsonschema.validate(TIERS, schema)
    jsonschema.validate(LEGACY, schema)
    for bad in ({**TIERS, "node": LEGACY["node"]}, {k: v for k, v in LEGACY.items() if k != "network"},
                {**TIERS, "tiers": [{"domain_size": 8, "efficiency": 0.5}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_cluster_tiers_from_the_device_file():
    """dgx-h100: NVLink 450 GB/s and 8 x 400 Gb/s NICs; H100 efficiencies and NCCL hop latencies
    from specs/devices/h100-sxm.toml (0.80 / 3.4 us NVLink, 0.85 / 9.6 us network)."""
    cluster = load_cluster("dgx-h100")
    assert cluster.tiers == (
        NetworkTier(domain_size=8, bandwidth_per_device_bytes_per_s=450e9, latency_s=3.4e-6, efficiency=0.80),
        NetworkTier(domain_size=32, bandwidth_per_device_bytes_per_s=50e9, latency_s=9.6e-6, efficiency=0.85))
    nvl72 = load_cluster("gb200-nvl72", num_nodes=36)
    assert [t.domain_size for t in nvl72.tiers] == [72, 144]  # an NVL72 domain is data
    data = {**_builtin_data("system", "dgx-h100"), "efficiency": {"intra_eff": 0.7, "inter_latency": 2e-5}}
    tuned = load_cluster(data)
    assert (tuned.tiers[0].efficiency, tuned.tiers[1].latency_s) == (0.7, 2e-5)


def test_real_world_columns_come_from_the_tiers_unchanged():
    """lm_sweep.base_columns routes the network columns through ClusterSpec.tiers: the same numbers as
    the run-record lowering, so no real-world prediction moves."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.records import lower_record
    from fastmodel.lm.spec import ExecutionSpec
    from fastmodel.lm.sweep import base_columns
    from fastmodel.registry.lm import COLUMN_INDEX

    model = load_lm_model("llama3.1-8b")
    for name in ("dgx-h100", "gb200-nvl72", "dgx-a100-40gb"):
        cluster = load_cluster(name)
        execution = ExecutionSpec()
        record = {"id": name, "framework": execution.framework, "model": model.record_block(),
                  "system": cluster.record_block(),
                  "plan": execution.plan_block(tp=1, pp=1, cp=1, ep=1, dp=cluster.n_gpus, global_batch=256)}
        expected = lower_record(record, name).columns
        got = base_columns(model, cluster, execution, 256)
        np.testing.assert_array_equal(got, expected)
        assert got[COLUMN_INDEX["domain_size"]] == cluster.tiers[0].domain_size


def test_specs_show_prints_the_tiers():
    from click.testing import CliRunner

    from fastmodel.cli import main

    out = CliRunner().invoke(main, ["specs", "show", "zionex"]).output
    assert "#   tier 0: domain 8 devices, 300 GB/s per device, efficiency 0.6667" in out
    assert "#   tier 1: domain 128 devices (the whole cluster), 12.5 GB/s per device, efficiency 0.56" in out
    out = CliRunner().invoke(main, ["specs", "show", "gb200-nvl72"]).output
    assert "#   tier 0: domain 72 devices" in out


def test_a_bad_tier_file_is_one_line_and_exit_2(tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    text = (ROOT_SPECS / "zionex.toml").read_text().replace('domain_size = 8', 'domain_size = 6\ndomain_size_ = 1')
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["plans", "--system", str(path)])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and f"{path}: system.tiers.0.domain_size_: unknown field" in line, line
    path.write_text(text.replace("\ndomain_size_ = 1", "").replace('= "12.5 GB/s"', '= "12.5 Gb/S"'))
    result = CliRunner().invoke(main, ["plans", "--system", str(path)])
    assert result.exit_code == 2 and "\n" not in result.output.strip()
    assert f"{path}: system.tiers.1.bandwidth_per_device_bytes_per_s: unknown unit 'Gb/S'" in result.output
