"""The hurried user's leftovers (walk of 2026-12-06): units on the command line, plots of illegal points, sweeps
whose every point is illegal, output suffixes. Each is one line and a documented exit code, never a crash."""

import pytest

from fastmodel.errors import SweepError
from tests.suite_fixtures import cli, one_line_error


def test_a_margin_in_another_binary_unit_is_read_as_its_gib():
    """``--memory-margin 8TiB`` was "not a number": 8 TiB = 8 x 1024 GiB = 8192 GiB, and 512 MiB = 0.5 GiB; the
    check against the HBM names the GiB and the text as typed. ``8TB`` keeps its hint (8e12 / 2^30 = 7451 GiB)."""
    from fastmodel.analysis.margin import check_below_hbm, gib_margin

    assert gib_margin("8TiB") == 8192 * 2**30 and gib_margin(" 1.5 tib ") == 1536 * 2**30
    assert gib_margin("512MiB") == 0.5 * 2**30 and gib_margin("1048576KiB") == 2**30
    big = gib_margin("8TiB")
    with pytest.raises(SweepError, match=r"^--memory-margin: 8192 GiB \(8TiB\) is not below the HBM of 80.0 GiB"):
        check_below_hbm(big, 80 * 2**30, big)
    assert check_below_hbm(gib_margin("8GiB"), 80 * 2**30, gib_margin("8GiB")) == 8 * 2**30
    with pytest.raises(SweepError, match=r"'8TB' is in TB, the option in GiB \(8TB = 7451 GiB\)"):
        gib_margin("8TB")
    with pytest.raises(SweepError, match="-1024 GiB is negative"):
        gib_margin("-1TiB")
    with pytest.raises(SweepError, match="is negative"):
        gib_margin("-1e400TiB")
    with pytest.raises(SweepError, match="'nanTiB' is not a number"):
        gib_margin("nanTiB")


def test_a_margin_of_8_tib_on_the_command_line_is_above_the_hbm(tmp_path):
    """The command line says the margin is above the device's HBM (one line, exit 2), as it does for 1e7 GiB."""
    figure = tmp_path / "never.png"
    result = cli("plot", "memory-timeline", "-o", figure, "-m", "llama3-70b", "-s", "dgx-h100", "--nodes", "4",
                 "-t", "llm-pretrain", "--memory-margin", "8TiB")
    one_line_error(result, "--memory-margin: 8192 GiB (8TiB) is not below the HBM of")
    assert not figure.exists()
