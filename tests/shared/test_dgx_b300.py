"""The DGX B300 system (specs/systems/dgx-b300.toml) and the "did you mean" of a device name given as a system
(fastmodel/spec/loader.py ``_device_hint``): ``-s b300`` named 'mi300x', the closest spelling, before."""

import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.lm.loader import load_cluster
from fastmodel.spec.devices import device_table
from fastmodel.spec.loader import resolve_source


def test_dgx_b300_is_eight_b300_in_one_nvlink_5_domain_with_800g_nics():
    """DGX/HGX B300 datasheet: 8 GPUs, NVLink 5 at 1.8 TB/s per GPU (both ways: 900 GB/s one way), one ConnectX-8
    at 800 Gb/s (100 GB/s) per GPU; 72 PF FP8 with sparsity per 8 GPUs (4.5 PF dense each, BF16 half of it);
    64 TB/s HBM3e over 8 GPUs; the capacity is the B300 device file's CUDA-visible total."""
    cluster = load_cluster("dgx-b300")
    b300 = device_table()["b300"]
    assert cluster.gpu == "B300" and cluster.gpus_per_node == 8 and cluster.nvlink_domain_size is None
    assert cluster.intra_node_bw_bytes_s_per_gpu == 1.8e12 / 2 == b300["intra_bw"]
    assert cluster.inter_node_bw_bytes_s_per_gpu == 800e9 / 8 == b300["inter_bw"]
    assert cluster.peak_flops_fp8 == 72e15 / 8 / 2 == b300["peak_flops_8"]
    assert cluster.peak_flops_bf16 == cluster.peak_flops_fp8 / 2 == b300["peak_flops_16"]
    assert cluster.hbm_bw_bytes_s == 64e12 / 8 == b300["hbm_bw"] and cluster.hbm_bytes == b300["hbm_bytes"]


@pytest.mark.parametrize("name, hint", [
    ("b300", "(did you mean 'dgx-b300', the built-in system on device 'b300'?)"),
    ("HGX-B300", "(did you mean 'dgx-b300', the built-in system on device 'HGX-B300'?)"),
    ("h100", "(did you mean 'dgx-h100', the built-in system on device 'h100'?)"),
    ("gh200", "; 'gh200' is a device with no built-in system (a kind = \"cluster\" file states it as gpu)"),
    ("b30", "(did you mean 'dgx-b300'?)"),          # no device of that name: the nearest spelling, as before
])
def test_a_device_given_as_a_system_suggests_the_systems_built_on_it(name, hint):
    with pytest.raises(SpecError) as err:
        resolve_source(name, "system")
    assert str(err.value) == (f"system: unknown built-in system {name!r}{' ' if hint[0] == '(' else ''}{hint}; "
                              "see 'fastmodel specs list' or pass a .toml/.json path")


def test_the_cli_says_dgx_b300_for_b300_in_one_line():
    run = CliRunner().invoke(main, ["run", "-m", "llama3.1-8b", "-s", "b300", "-t", "llm-pretrain"])
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert "did you mean 'dgx-b300'" in run.output and "mi300x" not in run.output
    assert CliRunner().invoke(main, ["run", "-m", "llama3.1-8b", "-s", "dgx-b300", "-t", "llm-pretrain"]).exit_code == 0
