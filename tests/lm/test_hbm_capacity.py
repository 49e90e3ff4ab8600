"""One HBM capacity per GPU on every path (issue 23; docs/model_memory.md "One capacity per GPU (issue 23)").

The device file holds the CUDA-visible total (what ``cudaMemGetInfo`` reports, what PyTorch's out-of-memory message
prints as "total capacity"); a cluster system file, a training run record and a serving record that state the same
part's datasheet figure another way (decimal GB, GiB) are read at it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastmodel.lm.loader import load_cluster
from fastmodel.lm.lowering import cluster_values
from fastmodel.lm.records import lower_record
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.records import driver_hbm
from fastmodel.spec.devices import SAME_PART_SLACK, device_hbm, device_table, same_part_hbm

GIB = 2**30
DATA = Path(__file__).resolve().parents[1] / "data"
#: every built-in real-world (kind = "cluster") system file and its GPU
CLUSTERS = ("dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72",
            "gb300-nvl72", "mi300x")
#: the CUDA-visible totals the device files hold (GiB): PyTorch's "total capacity" in public out-of-memory
#: messages; for MI300X the ROCm-visible total (hipMemGetInfo, the HSA pool); for GH200 96 GB nvidia-smi's total,
#: an upper bound [A] (sources, and the [A] values' sensitivity, in the doc section)
CUDA_VISIBLE_GIB = {"A100-SXM4-40GB": 39.50, "A100-SXM4-80GB": 79.25, "H100-SXM-80GB": 79.11,
                    "H200-SXM-141GB": 139.81, "B200": 178.35, "GB200": 184.31, "B300": 267.69, "GB300": 276.50,
                    "GH200-96GB": 97871 / 1024, "GH200-144GB": 153008209920 / GIB, "L40S": 44.52,
                    "MI300X": 201310208 / 2**20}


@pytest.mark.parametrize("gpu, gib", sorted(CUDA_VISIBLE_GIB.items()))
def test_each_device_file_holds_the_cuda_visible_total(gpu, gib):
    assert device_table()[gpu.lower()]["hbm_bytes"] == pytest.approx(gib * GIB, abs=1.0)


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_cluster_system_file_states_its_devices_capacity(name):
    cluster = load_cluster(name)
    device = device_table()[cluster.gpu.lower()]["hbm_bytes"]
    assert cluster.hbm_bytes == pytest.approx(device, abs=1.0)     # "178.35 GiB" against its rounded byte count
    assert cluster_values(cluster)["hbm_bytes"] == device


def test_a_stated_reading_of_the_same_part_gives_way_with_a_note_above_two_percent():
    """By hand: B200's device file holds 178.35 GiB. A record's 180 GiB (the datasheet's "180 GB" read as GiB) is
    0.93% above it: replaced silently. H200's 141 GB read as 141e9 B = 131.32 GiB is 6.07% below 139.81 GiB:
    replaced, with a note. B300's 288 GiB is 7.59% above 267.69 GiB: replaced (within SAME_PART_SLACK = 8.5%)."""
    notes: list[str] = []
    b200 = 178.35 * GIB
    assert device_hbm("B200", 180 * GIB, notes) == pytest.approx(b200, abs=1.0) and notes == []
    assert device_hbm("H200-SXM-141GB", 141e9, notes) == pytest.approx(139.81 * GIB, abs=1.0)
    assert len(notes) == 1 and "131.3 GiB -> 139.81 GiB" in notes[0]
    assert abs(288 / 267.69 - 1) < SAME_PART_SLACK
    assert device_hbm("B300", 288 * GIB) == pytest.approx(267.69 * GIB, abs=1.0)


def test_another_part_under_the_same_name_keeps_its_stated_capacity():
    """An H100 NVL (94 GB, 95 GiB CUDA-visible in a record) named "H100" resolves to h100-sxm.toml (79.11 GiB):
    95 / 79.11 - 1 = 20.1% > 8.5%, another part: its own figure stays, with a note. No device file: stated."""
    notes: list[str] = []
    assert device_hbm("H100", 95 * GIB, notes) == 95 * GIB
    assert len(notes) == 1 and "+20%" in notes[0] and "kept" in notes[0]
    assert device_hbm("MI355X", 288e9) == 288e9
    assert same_part_hbm(None, 288e9, "MI355X") == 288e9


def test_serving_and_training_read_one_capacity():
    """docs/model_serving.md S20 and the training lowering use the same rule: an H200 serving record stating 141e9
    B is lowered at the device file's 139.81 GiB, as a training cluster stating it is."""
    device = device_table()["h200-sxm-141gb"]
    system, notes = {"hbm_bytes": 141e9}, []
    driver_hbm(system, device, "H200-SXM-141GB", notes)
    record = json.loads((DATA / "runs_dev_b200.jsonl").read_text().splitlines()[0])
    record["system"].update(gpu="H200-SXM-141GB", hbm_bytes=141e9)
    training = lower_record(record).columns[COLUMN_INDEX["hbm_bytes"]]
    assert system["hbm_bytes"] == training == device["hbm_bytes"] and len(notes) == 1


def test_a_cluster_spec_files_capacity_is_a_what_if_and_stays():
    """A user's system file stating 84 GiB for an H100 cluster (6% over the device file) is a hardware what-if: the
    lowering keeps it; only run records read the device file's total."""
    what_if = load_cluster("dgx-h100").model_copy(update={"hbm_bytes": 84 * GIB})
    assert cluster_values(what_if)["hbm_bytes"] == 84 * GIB
