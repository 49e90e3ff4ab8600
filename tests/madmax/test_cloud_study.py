"""The paper's cloud-provider study as one sweep: system and num_devices axes, the
3 x weights feasibility rule, and train time / GPU-hours / cost / energy."""

from pathlib import Path

import numpy as np
import pytest

import fastmodel
from fastmodel import sweep
from fastmodel.errors import SweepError
from fastmodel.madmax.lowering.params import STATUS
from fastmodel.sweeps import run_in_memory
from fastmodel.sweeps.file import load_sweep_file


@pytest.fixture(scope="module")
def cloud():
    return run_in_memory(load_sweep_file("cloud_dlrm_a"))


def test_whole_study_in_one_dataset(cloud):
    assert dict(cloud.sizes) == {"system": 14, "num_devices": 4, "plan": 3, "train_samples": 2}
    for name in ("throughput", "train_time", "gpu_hours", "cost", "energy"):
        assert name in cloud and cloud[name].attrs["units"]
    ok = cloud.status.values == STATUS["ok"]
    assert ok.sum() > 100 and (cloud.status.values == STATUS["does_not_fit"]).sum() > 50


def test_feasibility_is_three_times_weights_within_hbm(cloud):
    point = cloud.sel(system="cloud-a-v100-16gb", num_devices=64, plan="ddp/mp", train_samples=5e9)
    # DLRM-A embeddings by hand: 4096 tables x 2.08M rows x 94 dims x 2 bytes over 64 devices
    emb_bytes = 4096 * 2_080_000 * 94 * 2 / 64
    assert point.weight_memory_emb.item() == pytest.approx(emb_bytes, rel=1e-12)
    assert 3 * emb_bytes > 16e9 and point.status.item() == STATUS["does_not_fit"]
    assert np.isnan(point.throughput.item()) and point.fits_memory.item() == 0
    big = cloud.sel(system="cloud-a-h100-80gb", num_devices=512, plan="ddp/mp", train_samples=5e9)
    assert big.status.item() == STATUS["ok"]


def test_cost_energy_by_hand(cloud):
    point = cloud.sel(system="cloud-a-h100-80gb", num_devices=256, plan="tp,ddp/mp", train_samples=3e10)
    hours = 3e10 / point.throughput.item() / 3600
    assert point.train_time.item() == pytest.approx(hours * 3600, rel=1e-12)
    assert point.gpu_hours.item() == pytest.approx(hours * 256, rel=1e-12)
    assert point.cost.item() == pytest.approx(hours * 256 * 12.29, rel=1e-12)           # USD per GPU-hour
    assert point.energy.item() == pytest.approx(hours * 256 * 3600 * 10200 / 8, rel=1e-12)  # node TDP / 8 GPUs


def test_points_equal_single_runs_with_the_same_nodes(cloud):
    """num_devices = 64 on a 4-GPU/node instance is 16 nodes; TP stays inside the node (tp4)."""
    point = cloud.sel(system="cloud-b-a100-80gb-4", num_devices=64, plan="tp,ddp/mp", train_samples=5e9)
    single = fastmodel.evaluate("dlrm-a", "cloud-b-a100-80gb-4", "dlrm-cloud-train", plan="tp4,ddp16/mp64",
                                num_nodes=16, semantics="madmax")
    for name in ("iteration_time", "cost", "energy", "memory_per_device"):
        assert point[name].item() == single[name].item(), name


def test_num_devices_not_a_multiple_of_the_node_keeps_a_status():
    ds = sweep("dlrm-a-small", "cloud-c-a100-40gb-16", "dlrm-cloud-train",
               {"num_devices": [24, 32], "plan": ["ddp/mp"]}, semantics="madmax")
    assert ds.status.sel(num_devices=24).item() == STATUS["devices_not_divisible"]
    assert ds.status.sel(num_devices=32).item() == STATUS["ok"]


def test_spec_axes_are_checked_up_front():
    with pytest.raises(SweepError, match="axis system"):
        sweep("dlrm-a", "dc-a", "dlrm-cloud-train", {"system": ["cloud-a-h100-80g"], "plan": ["ddp/mp"]})
    with pytest.raises(SweepError, match="num_nodes"):
        sweep("dlrm-a", "dc-a", "dlrm-cloud-train", {"num_devices": [64], "num_nodes": [8], "plan": ["ddp/mp"]})
    with pytest.raises(SweepError, match="has no field"):
        sweep("dlrm-a", "dc-a", "dlrm-cloud-train", {"hidden": [64], "plan": ["ddp/mp"]})


def test_cost_is_nan_without_price_or_samples():
    ds = fastmodel.evaluate("dlrm-a", "dc-a", "dlrm-pretrain", num_nodes=16)
    assert np.isnan(ds.train_time.item()) and np.isnan(ds.cost.item())
    task = {"name": "t", "kind": "pretrain", "global_batch": 65536, "train_samples": 1e9}
    ds = fastmodel.evaluate("dlrm-a", "dc-a", task, plan="fsdp/mp", num_nodes=16)
    assert ds.train_time.item() == pytest.approx(1e9 / ds.throughput.item()) and np.isnan(ds.cost.item())


def test_best_answers_cheapest_for_a_deadline(cloud, tmp_path):
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "cloud.nc"
    cloud.to_netcdf(path)
    result = CliRunner().invoke(main, ["best", str(path), "--by", "cost", "--ascending", "--top", "1",
                                       "--where", "train_samples=5e9", "--where", "train_time<=7200"])
    assert result.exit_code == 0, result.output
    sub = cloud.sel(train_samples=5e9)
    cost = sub.cost.where(sub.train_time <= 7200)
    best = cost.where(cost == cost.min(), drop=True)
    assert str(best.system.values.ravel()[0]) in result.output


def test_spec_axes_round_trip_through_the_stored_definition(tmp_path):
    """Workers and --resume rebuild a sweep from its definition: spec axes carry the specs, not just names."""
    import json

    from fastmodel.madmax.sweep.definition import Sweep

    spec = tmp_path / "mine.toml"
    spec.write_text((Path(__file__).parents[2] / "specs" / "systems" / "cloud-a-h100-80gb.toml").read_text()
                    .replace('name = "cloud-a-h100-80gb"', 'name = "mine"'))
    original = Sweep("dlrm-a", "dc-a", "dlrm-cloud-train",
                     {"system": [str(spec), "dc-a"], "num_devices": [64], "plan": ["ddp/mp"]})
    definition = json.loads(json.dumps(original.definition()))
    spec.unlink()  # elsewhere (another directory, another machine) the file is not there
    rebuilt = Sweep.from_definition(definition)
    assert [s.name for s in rebuilt.systems] == ["mine", "dc-a"]
    again = rebuilt.definition()
    assert {k: v for k, v in again.items() if k != "semantics"} == {k: v for k, v in definition.items() if k != "semantics"}
