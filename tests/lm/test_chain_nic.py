"""The interleaved pipeline's chain sends beside the per-chunk DP collectives on one NIC (kernels/lm/chain_nic.py,
docs/model.md §11.65): the sharing rule, the schedule's offsets and the MLPerf GPT-3 rows, by hand."""

from pathlib import Path

import pytest

from fastmodel.kernels.lm.chain_nic import chain_share_seconds, shared_send_delay
from fastmodel.lm.calibrate.overlay import overlay_columns
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C

RECORDS = {r.id: r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")}
V31_N1344 = "mlperf-v31-gpt3-175b-nvidia-n1344"
NO_DP_OVERLAP = {"overlap_grad_reduce": 0, "overlap_param_gather": 0}


def _exposed_pp(record_id, **changes):
    columns = overlay_columns(RECORDS[record_id].columns, changes)
    return float(evaluate_table(columns[:, None])["exposed_pp"][0])


def test_a_send_beside_a_collective_by_hand():
    # both flows at half rate while both run: a send of 0.3 s of NIC time that starts 2 s into a 10 s collective
    # takes 0.6 s (0.3 late); one that starts at 9.8 s shares 0.2 s (both at half: the collective's last 0.2 s of
    # work take 0.4 s, the send moves 0.2 s of its 0.3) and runs its last 0.1 s alone: 0.5 s (0.2 late); after
    # the collective ended, nothing
    assert shared_send_delay(0.3, 10.0, 2.0) == pytest.approx(0.3, rel=1e-12)
    assert shared_send_delay(0.3, 10.0, 9.8) == pytest.approx(0.2, rel=1e-12)
    assert shared_send_delay(0.3, 10.0, 11.0) == 0.0


def test_the_cycles_by_hand():
    # p = 2 ranks, v = 3 chunks, chunk passes f = 1, b = 2, a send s = 0.1 of which beta = 0.08 bandwidth.
    # Forward, v - 1 = 2 cycles (chunks 0, 1 under the all-gathers of chunks 1, 2): rank 0 sends f = 1 after its
    # launch (rho_g = 1.5: 0.08 late), rank 1 at 2 f + p s = 2.2 (after rho_g: 0) -> 2 x 0.08 = 0.16.
    # Backward: rank 1 sends at its reduction's launch in v - 1 = 2 cycles (2 x 0.08); rank 0 at b + p s = 2.2 after
    # its reduction's launch in v - 2 = 1 cycle: rho_r = 2.5 -> 0.08; rho_r = 2.25 -> 0.05 of sharing
    assert chain_share_seconds(2.0, 3.0, 1.0, 2.0, 0.1, 0.08, 1.5, 2.5) == pytest.approx(0.16 + 0.16 + 0.08, rel=1e-12)
    assert chain_share_seconds(2.0, 3.0, 1.0, 2.0, 0.1, 0.08, 1.5, 2.25) == pytest.approx(0.16 + 0.16 + 0.05,
                                                                                        rel=1e-12)
    # no all-gather overlapped (DDP, or overlap_param_gather off): the backward's only; one chunk: nothing
    assert chain_share_seconds(2.0, 3.0, 1.0, 2.0, 0.1, 0.08, 0.0, 2.5) == pytest.approx(0.24, rel=1e-12)
    assert chain_share_seconds(2.0, 1.0, 1.0, 2.0, 0.1, 0.08, 1.5, 2.5) == 0.0


def test_mlperf_v31_at_scale_by_hand():
    # v3.1 n1344: p 8, v 12, TP 4 with sequence parallelism: a chain send is 2 B x 2,048 x 12,288 / 4 = 12,582,912 B
    # over one NIC (50 GB/s x inter_eff): beta = 0.296 ms. The model's chunk passes f = 1.857 ms, b = 4.064 ms and
    # s = 0.306 ms (p s = 2.446 ms); a chunk's all-gather or reduce-scatter of 906 MB (BF16) over dp 336, two ranks
    # a node: 12.55 ms. Forward offsets f, then (1 + r) f + p s: 1.86, 6.16, 8.02, 9.87, 11.73 ms are within
    # rho - beta, 13.59 on are past rho: 5 shared sends a cycle, 11 cycles. Backward: 11 cycles at offset 0, and
    # k b + p s = 6.51, 10.57 ms within rho - beta (14.64 past) in 10 cycles: 86 sends of beta in all
    col = RECORDS[V31_N1344].columns
    assert col[C["pp"]] == 8 and col[C["vp"]] == 12 and col[C["dp"]] == 336 and col[C["tp"]] == 4
    beta = 2.0 * 2048 * 12288 / 4 / (col[C["inter_bw"]] * col[C["inter_eff"]])
    assert 1e3 * beta == pytest.approx(0.296, abs=0.001)
    added = _exposed_pp(V31_N1344) - _exposed_pp(V31_N1344, **NO_DP_OVERLAP)
    assert added == pytest.approx((11 * 5 + 11 + 10 * 2) * beta, rel=1e-9)
    assert 1e3 * added == pytest.approx(25.46, abs=0.01)


def test_nothing_shared_inside_one_domain_or_without_per_chunk_collectives():
    # every device in one NVLink domain: no NIC; the collectives not overlapped: none in flight beside the chain
    assert _exposed_pp(V31_N1344, domain_size=1e6) == _exposed_pp(V31_N1344, domain_size=1e6, **NO_DP_OVERLAP)
    assert _exposed_pp(V31_N1344, vp=1) == _exposed_pp(V31_N1344, vp=1, **NO_DP_OVERLAP)
    # Megatron-LM 2021's blocking exchanges keep their own count (§11.52)
    narayanan = "narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full"
    assert _exposed_pp(narayanan, overlap_grad_reduce=1, overlap_param_gather=1) == _exposed_pp(narayanan)
