"""The prefill-allreduce test of the TP > 1 TTFT gap, bench/serve_tp_allreduce.py (docs/model_serving.md §S62), by
hand."""

import pytest

from tests.bench_scripts import load_bench, write_validated

serve_tp_allreduce = load_bench("serve_tp_allreduce")

MIB = 1024 * 1024
_COLS = ["id", "status", "framework", "gpu", "precision", "model", "measured_ttft_s", "predicted_ttft_s", "split"]


def test_needed_factor_and_extra_per_allreduce():
    """vLLM 0.18.0 gpt-oss-120b H200 TP 8, ISL 1,024 (§S62 table): a 12.6 ms gap on the model's 2.9 ms of prefill
    allreduces (36 layers, 72 calls) needs them (2.9 + 12.6) / 2.9 = 5.34x slower, 12.6 ms / 72 = 175 us more each."""
    k, extra = serve_tp_allreduce.needed(0.0126, 0.0029, 36)
    assert k == pytest.approx(15.5 / 2.9)
    assert extra == pytest.approx(175.0)
    assert serve_tp_allreduce.needed(0.0, 0.0029, 36) == (pytest.approx(1.0), pytest.approx(0.0))


def test_published_against_the_model_by_hand():
    """H100: bus 450 GB/s x 0.80 = 360 GB/s, NCCL hop 3.4 us. 16 MiB at TP 8 is over vLLM's 8 MiB buffer: NCCL, the
    LL128 ring (10 + 14 x 1.9 us + 2 x 7/8 x 16 MiB / (0.92 x 360 GB/s) = 36.6 + 88.65 = 125.25 us) beating the
    Simple ring (8.4 + 14 x 3.4 + 81.56 = 137.6 us) and NCCL's tree (LL128: 4.4 + 14 x 1.25 us + 2 x 16 MiB /
    (0.92 x 7/9 x 360 GB/s) = 152.2 us; docs/model.md §11.5); PR #42324's pynccl 121 us is 0.97x it, its multimem
    87 us 0.69x. 4 MiB at TP 4 is under the buffer and over 512 KiB: two-shot, 4 + 3 x 0.47 + 6 + 1.5 x 4 MiB /
    360 GB/s = 28.89 us; PR #24532's ca_2stage 42 us is 1.45x it."""
    tree16 = 10e-6 + 14 * 1.9e-6 + 2 * 7 / 8 * 16 * MIB / (0.92 * 360e9)
    assert 1e6 * tree16 == pytest.approx(125.25, abs=0.01)
    two4 = 4e-6 + 3 * 0.47e-6 + 6e-6 + 1.5 * 4 * MIB / 360e9
    got = {(src, tp, path, mib): (model, ratio) for src, tp, path, mib, _, model, ratio in serve_tp_allreduce.source_ratios()}
    assert got[("PR42324", 8, "pynccl", 16.0)] == (pytest.approx(1e6 * tree16), pytest.approx(121e-6 / tree16))
    assert got[("PR42324", 8, "symm_mem_multimem", 16.0)][1] == pytest.approx(87e-6 / tree16)
    assert got[("PR24532", 4, "ca_2stage", 4.0)] == (pytest.approx(1e6 * two4), pytest.approx(42e-6 / two4))
    ratios = [r for _, r in got.values()]
    assert 0.56 < min(ratios) and max(ratios) < 1.46      # 0.57 .. 1.45 (§S62 quoted 0.75 .. 1.45 before NCCL's tree)


def test_groups_filter_tp_load_layout_and_split(tmp_path):
    """Kept: TP >= 2, N <= 8, no attention DP or EP, answered, of the asked split. Left out: TP 1, N 16, attention
    DP 2, EP 8, a refused row, a held-out row (unless split "all")."""
    rows = [  # id, tp, N, adp, ep, measured, predicted, status, split
        ("a", 8, 4, 1, 1, 0.030, 0.020, "ok", "dev"),
        ("b", 8, 8, None, 1, 0.034, 0.020, "ok", "dev"),
        ("c", 1, 4, 1, 1, 0.090, 0.020, "ok", "dev"),
        ("d", 8, 16, 1, 1, 0.090, 0.020, "ok", "dev"),
        ("e", 8, 4, 2, 1, 0.090, 0.020, "ok", "dev"),
        ("f", 8, 4, 1, 8, 0.090, 0.020, "ok", "dev"),
        ("g", 8, 4, 1, 1, 0.090, 0.020, "refused", "dev"),
        ("h", 8, 4, 1, 1, 0.050, 0.020, "ok", "held-out"),
    ]
    records = [{"id": rid, "model": {"layers": 36}, "serve": {"tp": tp, "concurrency": n, "input_len": 1024,
                                                             "attention_dp": adp, "ep": ep}}
               for rid, tp, n, adp, ep, *_ in rows]
    table = [[rid, st, "vLLM 0.18.0", "H200", "fp4", "gpt-oss-120b", m, p, sp] for rid, _, _, _, _, m, p, st, sp in rows]
    csv_path, rec_path = write_validated(tmp_path, records, _COLS, table)
    key = ("vLLM 0.18.0", "H200", "gpt-oss-120b", 1024, 8)
    dev = serve_tp_allreduce.by_group(csv_path, rec_path, 8, "dev", comm=lambda rec: 0.003)
    assert list(dev) == [key]
    assert sorted(g for g, *_ in dev[key]) == [pytest.approx(0.010), pytest.approx(0.014)]
    assert all(c == 0.003 and layers == 36 for _, c, layers in dev[key])
    every = serve_tp_allreduce.by_group(csv_path, rec_path, 8, "all", comm=lambda rec: 0.003)
    assert len(every[key]) == 3


def test_b200_nccl_tests_fit_against_the_model_by_hand():
    """The 8-B200 nccl-tests all_reduce fit (latency_us 5.5183, scale 2, efficient_factor 0.7424): intercept
    5.5183 x 7 x 2 = 77.26 us, busbw 0.7424 x 900 GiB/s = 717.4 GB/s; at 16 MiB 77.26 + 1.75 x 16 MiB / 717.4 GB/s
    = 118.18 us. The model's NCCL on B200 (648 GB/s, 8.6 us per step) runs the ring's LL128 at 16 MiB: 10 + 14 x
    8.6 x 1.9/3.4 us + 2 x 7/8 x 16 MiB / (0.92 x 648 GB/s) = 77.28 + 49.25 = 126.53 us; the fit is 0.93x it. The
    tree's LL128, 4.4 + 14 x 8.6 x 1.25/3.4 us + 2 x 16 MiB / (0.92 x 7/9 x 648 GB/s x 0.9) = 48.66 + 80.41 = 129.07
    us, is slower since NCCL's treeCorrectionFactor (LL128 entry log2i(16 MiB >> 6) = 18: 0.9; review12 #1; 121.03
    us without it). At 5.625 MiB (gpt-oss, 1,024 tokens) 1.14x (1.24x before), at 128 MiB 0.86x."""
    fit = {"latency_us": 5.5183, "scale": 2, "efficient_factor": 0.7424}
    fit16 = 5.5183 * 14 + 1e6 * 1.75 * 16 * MIB / (0.7424 * 900 * 1024 ** 3)
    assert serve_tp_allreduce.b200_fit_us(16.0, fit) == pytest.approx(fit16)
    assert fit16 == pytest.approx(118.18, abs=0.01)
    got = {mib: (us, model, ratio) for mib, us, model, ratio in serve_tp_allreduce.b200_ratios()}
    ring16 = 1e6 * (10e-6 + 14 * 8.6e-6 * 1.9 / 3.4 + 2 * 7 / 8 * 16 * MIB / (0.92 * 900e9 * 0.72))
    tree16 = 1e6 * (4.4e-6 + 14 * 8.6e-6 * 1.25 / 3.4 + 2 * 16 * MIB / (0.92 * 7 / 9 * 900e9 * 0.72 * 0.9))
    assert (ring16, tree16) == (pytest.approx(126.53, abs=0.01), pytest.approx(129.07, abs=0.01))
    assert got[16.0] == (pytest.approx(fit16), pytest.approx(ring16), pytest.approx(fit16 / ring16))
    assert got[5.625][2] == pytest.approx(1.14, abs=0.005) and got[128.0][2] == pytest.approx(0.86, abs=0.005)
