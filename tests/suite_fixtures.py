"""What several test modules share: the column values of the tests that derive a table row's figures by hand (the
H100 device and the 8-GPU-node network of the lm table's rows, the lm engine's outputs of one row, two serving
models' shapes), the command line's invocation and the check of its one-line errors, and the first records of a
test data file.

A test that needs other values states them as an override where it uses these (``dict(NET, inter_bw=12.5e9)``),
so the numbers it derives from stay in sight. Importing it loads no engine (the serving tests use its shapes)."""

from pathlib import Path

#: the test data folder (tests/data)
DATA = Path(__file__).resolve().parent / "data"

#: an H100 SXM's 16-bit GEMM, flash-attention, memory and launch columns: the values of specs/devices/h100-sxm.toml
H100 = dict(peak_flops_16=989e12, gemm_eff_16=0.72, sm_count=132, gemm_tile_m=128, gemm_tile_n=256,
            gemm_k_half=128, kernel_overhead_s=4e-6, hbm_bw=3.35e12, hbm_eff=0.8, attn_eff=0.45)

#: 8-GPU NVLink domains (450 GB/s each way per GPU) joined by one 400 Gb/s NIC per GPU; round latencies (not the
#: spec files': h100-sxm.toml has 3.4 and 9.6 us)
NET = dict(domain_size=8, intra_bw=450e9, intra_eff=0.8, intra_latency=3e-6, inter_bw=50e9, inter_eff=0.85,
           inter_latency=8e-6)

#: gpt-oss-120b's shape as serving columns (36 layers, 128 experts of which 4 routed, hidden 2,880)
GPT_OSS = {"layers": 36, "hidden": 2880, "ffn": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64,
           "vocab": 201088, "gated_mlp": 1, "tied_embeddings": 0, "moe_experts": 128, "moe_topk": 4,
           "moe_ffn": 2880}

#: Qwen3-235B-A22B's shape as serving columns (94 layers, 128 experts of which 8 routed, expert FFN 1,536)
QWEN3 = {"layers": 94, "hidden": 4096, "ffn": 1536, "heads": 64, "kv_heads": 4, "head_dim": 128, "vocab": 151936,
         "gated_mlp": 1, "tied_embeddings": 0, "moe_experts": 128, "moe_topk": 8, "moe_ffn": 1536}


def one(**values) -> dict:
    """The lm engine's outputs of one table row of ``values`` (the table's defaults elsewhere), as scalars."""
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    return {k: v[0] for k, v in evaluate_table(table(1, **values)).items()}


def one_line_error(result, *texts: str) -> None:
    """A command-line run (click's ``Result``) refused with exit code 2 and one line, ``error: ...``, that holds every
    one of ``texts``."""
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    for text in texts:
        assert text in result.output, (text, result.output)


def cli(*args):
    """click's ``Result`` of ``fastmodel ARGS`` (each argument as text), exceptions raised, not caught."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def data_lines(name: str, count: int) -> list[str]:
    """The first ``count`` non-blank lines of the test data file ``name`` (tests/data)."""
    return [line for line in (DATA / name).read_text().splitlines() if line.strip()][:count]
