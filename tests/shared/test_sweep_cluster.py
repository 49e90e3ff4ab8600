"""The Dask helper of sweeps (fastmodel/sweeps/cluster.py): a local cluster's size is checked before it starts."""

import os

import pytest

from fastmodel.cli import main
from fastmodel.errors import SweepError
from fastmodel.sweeps.cluster import check_local_workers


def test_a_local_cluster_of_more_workers_than_four_per_cpu_is_refused(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    check_local_workers(8)                                  # 4 per CPU on 2 CPUs
    with pytest.raises(SweepError, match=r"^--workers 1,000,000: this machine has 2 CPUs; a local cluster takes at "
                                         r"most 8 worker processes .*run a larger cluster with --scheduler$"):
        check_local_workers(1_000_000)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    check_local_workers(8)                                  # at least 8 on any machine


def test_the_cli_refuses_it_in_one_line_before_starting_a_worker(tmp_path):
    from click.testing import CliRunner

    sweep = tmp_path / "s.toml"
    sweep.write_text('model = "llama3-70b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n[axes]\nnum_nodes = [4]\n')
    result = CliRunner().invoke(main, ["sweep", str(sweep), "-o", str(tmp_path / "o.zarr"), "--workers", "100000"])
    assert result.exit_code == 2 and "--workers 100,000: this machine has" in result.output
    assert result.output.strip().splitlines() == [result.output.strip()]    # the only line: before the size line
    assert result.output.startswith("error: ")
    assert not (tmp_path / "o.zarr").exists()
