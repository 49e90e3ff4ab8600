"""bench/five_run_calibrate.py ``--detail``: the per-run lines docs/calibration.md reads the MoE group's 8.3% from."""

from tests.bench_scripts import load_bench


def _row(run_id, error, predicted, **parts):
    row = {"id": run_id, "error": error, "predicted_step_time_s": predicted}
    row.update({name: parts.get(name, 0.0) for name in load_bench("five_run_calibrate").PARTS})
    return row


def test_detail_prints_errors_and_the_parts_as_shares_of_the_uncalibrated_step(capsys):
    """Shares by hand: a 2 s predicted step of 1 s GEMM, 0.2 s attention, 0.5 s memory-bound, 0.1 s exposed EP and
    0.02 s exposed DP is 50.0 / 10.0 / 25.0 / 0 / 5.0 / 1.0%; the first ``n_train`` runs are marked ``cal``; the
    calibrated row gives only its error (the shares are of the uncalibrated step)."""
    bench = load_bench("five_run_calibrate")
    before = [_row("moe-a", -0.2, 2.0, time_gemm=1.0, time_attention=0.2, time_memory_bound=0.5, exposed_ep=0.1,
                   exposed_dp=0.02),
              _row("dense-b", -0.05, 1.0, time_gemm=0.6)]
    after = [_row("moe-a", 0.05, 9.0, time_gemm=9.0), _row("dense-b", 0.125, 1.0)]
    bench.print_detail(before, after, 1)
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == ["run", "before", "after", "gemm", "attn", "mem-bnd", "exp.tp", "exp.ep", "exp.dp"]
    assert first.split() == ["moe-a", "cal", "-20.0%", "+5.0%", "50.0%", "10.0%", "25.0%", "0.0%", "5.0%", "1.0%"]
    assert second.split() == ["dense-b", "-5.0%", "+12.5%", "60.0%", "0.0%", "0.0%", "0.0%", "0.0%", "0.0%"]
