"""``fastmodel serve``: one serving configuration, or every record of a serving-record file, with its
latency, throughput, memory and prefill/decode breakdown (see fastmodel.serve.api)."""

from __future__ import annotations

import click

from fastmodel.cli.common import friendly
from fastmodel.serve.precisions import KV_PRECISIONS, PRECISIONS
from fastmodel.serve.report import load_mode, render


@click.command("serve")
@click.argument("records", required=False, type=click.Path(dir_okay=False))
@click.option("--model", "-m", help="Built-in serving model (llama3.1-8b/70b/405b, mistral-7b, mixtral-8x7b).")
@click.option("--device", "-d", default="H100", show_default=True, help="Built-in device (specs/devices).")
@click.option("--tp", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--pp", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--ep", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--attention-dp", default=1, show_default=True, type=click.IntRange(min=1),
              help="Attention data-parallel groups of --tp GPUs (the instance has tp x attention_dp x pp GPUs).")
@click.option("--moe-tp", default=0, show_default=True, type=click.IntRange(min=0),
              help="Tensor parallelism of each expert (0: tp x attention_dp / ep).")
@click.option("--precision", default="bf16", show_default=True, type=click.Choice(list(PRECISIONS)))
@click.option("--kv-precision", type=click.Choice(list(KV_PRECISIONS)), help="Default: fp8 with fp8 weights, else bf16.")
@click.option("--input-len", default=1024, show_default=True, type=click.IntRange(min=1))
@click.option("--output-len", default=128, show_default=True, type=click.IntRange(min=1))
@click.option("--batch-size", type=click.IntRange(min=1), help="Static batch of N requests.")
@click.option("--concurrency", type=click.IntRange(min=1), help="N requests in flight (continuous batching).")
@click.option("--max-throughput", is_flag=True, help="As many requests as the KV cache holds.")
@click.option("--kv-cache-mem-fraction", default=0.9, show_default=True, type=click.FloatRange(0.01, 1.0))
@click.option("--instances", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per configuration.")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Also write one row per configuration: .csv, else JSON lines (atomically; never onto RECORDS). "
                   "With --search: the searched sweep as netCDF (.nc), for `fastmodel plot pareto`.")
@click.option("--force", is_flag=True, help="Replace an existing output of the same kind (never another kind).")
@click.option("--search", is_flag=True, help="SLO search: sweep TP x PP within --gpus, --search-precision and "
              "concurrency 1..1024; print the Pareto frontier and the best configuration meeting --ttft/--tpot.")
@click.option("--ttft", help="--search: TTFT target, e.g. 2s or 500ms.")
@click.option("--tpot", help="--search: TPOT target, e.g. 50ms.")
@click.option("--gpus", default=8, show_default=True, type=click.IntRange(min=1), help="--search: GPUs of one instance at most.")
@click.option("--search-precision", multiple=True, type=click.Choice(list(PRECISIONS)),
              help="--search: precisions to sweep (repeat; default bf16 and fp8).")
@click.option("--search-concurrency", type=click.IntRange(min=1), metavar="N",
              help="--search: every concurrency 1..N per instance (default: the powers of two to 1024).")
@click.option("--engine", type=click.Choice(["trtllm", "vllm", "sglang"]),
              help="The engine's scheduler profile (fastmodel/serve/profiles.py; default TensorRT-LLM's).")
@friendly
def serve(records, model, device, tp, pp, ep, attention_dp, moe_tp, precision, kv_precision, input_len, output_len, batch_size,
          concurrency, max_throughput, kv_cache_mem_fraction, instances, as_json, output, force, search, ttft, tpot,
          gpus, search_precision, search_concurrency, engine):
    """Predict LLM serving: TTFT, TPOT, throughput, KV cache and memory, prefill/decode breakdown.

    Give RECORDS (JSONL, SERVE_RUNS.md schema) or --model with one load mode."""
    import json

    from fastmodel.errors import FastmodelError
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import columns, evaluate_table

    if records and model:
        raise FastmodelError("give RECORDS or --model, not both")
    if search:
        return _search(model, device, input_len, output_len, ttft, tpot, gpus, search_precision, engine, output,
                       force, search_concurrency)
    if ttft or tpot or search_precision or search_concurrency:
        raise FastmodelError("--ttft, --tpot, --search-precision and --search-concurrency apply to --search only")
    if records and (engine or attention_dp != 1 or moe_tp):
        raise FastmodelError("--engine, --attention-dp and --moe-tp apply to --model (a record names its own)")
    if output:
        from fastmodel.io.outputs import check_output

        check_output(output, "text", inputs=(records,) if records else (), force=force)
    if records:
        from fastmodel.serve.records import read_serve_records

        found = read_serve_records(records)
        labels = [r.id or f"record {i + 1}" for i, r in enumerate(found)]
        _echo_notes(found, labels)
        import numpy as np

        params = np.stack([r.columns for r in found], axis=1)
    elif model:
        if batch_size is None and concurrency is None and not max_throughput:
            batch_size = 1
        from fastmodel.serve.api import device_columns
        from fastmodel.serve.profiles import profile_columns

        profile = profile_columns(engine, None, device_columns(device)["hbm_bytes"]) if engine else {}
        params = columns(model, device, precision=precision, kv_precision=kv_precision, batch_size=batch_size,
                         concurrency=concurrency, max_throughput=max_throughput, tp=tp, pp=pp, ep=ep,
                         attention_dp=attention_dp, moe_tp=moe_tp, input_len=input_len, output_len=output_len,
                         kv_cache_mem_fraction=kv_cache_mem_fraction, instances=instances, **profile)[:, None]
        labels = [f"{model} on {tp * attention_dp * pp}x {device}"]
    else:
        raise FastmodelError("give a serving-record file or --model (see fastmodel serve --help)")
    from fastmodel.serve.report import json_record

    out, status = evaluate_table(params)
    rows = []
    for i, label in enumerate(labels):
        result = {r.name: float(out[k, i]) for k, r in enumerate(SERVE_RESULTS)}
        state = SERVE_STATUS_NAMES[int(status[i])]
        mode = load_mode(params[:, i])
        if not records and state != "ok":   # one configuration that cannot be evaluated: one line, exit 2
            raise FastmodelError(render(label, state, result, mode))
        rows.append(json_record(label, state, result))
        click.echo(json.dumps(rows[-1]) if as_json else render(label, state, result, mode))
    if output:
        _write_rows(rows, output, records, force)


def _echo_notes(found: list, labels: list[str]) -> None:
    """Each distinct note of the records (an engine mapped to a default profile, a value the lowering
    replaced, an assumed constant) once on stderr, with the records it applies to."""
    by_note: dict[str, list[str]] = {}
    for record, label in zip(found, labels):
        for note in record.notes:
            by_note.setdefault(note, []).append(label)
    for note, which in by_note.items():
        more = f" and {len(which) - 3} more" if len(which) > 3 else ""
        click.echo(f"note: {note} ({', '.join(which[:3])}{more})", err=True)


def _write_rows(rows: list[dict], path: str, records, force: bool) -> None:
    """One row per configuration: CSV for a .csv path, else JSON lines; under the output rule (io/outputs.py)."""
    import csv
    import json

    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import claim_output, output_kind

    with claim_output(path, "text", inputs=(records,) if records else (), force=force), atomic_write(path) as handle:
        if output_kind(path, "text") == "csv":
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        else:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    click.echo(f"wrote {path}", err=True)


#: above these, a bare number given as an SLO is more likely milliseconds than seconds (a note, not an error):
#: a token every second is far slower than reading speed, a first token after a minute is no interactive service
SECONDS_PLAUSIBLE = {"--ttft": 60.0, "--tpot": 1.0}


def _bare_number(value) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _search(model, device, input_len, output_len, ttft, tpot, gpus, precisions, engine, output=None,
            force=False, concurrency=None) -> None:
    """``--search``: the SLO search of fastmodel.serve.search, printed as a table; with ``output`` its sweep (with
    ``within_budget``, ``meets_slo`` and the SLOs as attributes) as netCDF for ``fastmodel plot pareto``."""
    from fastmodel.errors import FastmodelError, SpecError
    from fastmodel.serve.search import format_search, slo_search
    from fastmodel.spec.quantity import parse_quantity

    if not model or not ttft or not tpot:
        raise FastmodelError("--search needs --model, --ttft and --tpot (e.g. --ttft 2s --tpot 50ms)")
    targets = []
    for name, value in (("--ttft", ttft), ("--tpot", tpot)):
        try:
            targets.append(parse_quantity(value, "duration"))
        except ValueError as error:
            raise SpecError(None, name, str(error)) from None
        if _bare_number(value) and targets[-1] > SECONDS_PLAUSIBLE[name]:
            click.echo(f"note: {name} {value} reads as {targets[-1]:g} s (a number without a unit is seconds); "
                       f"write e.g. {value}ms for milliseconds", err=True)
    if output:
        from fastmodel.io.outputs import check_output

        check_output(output, "netcdf", force=force, what="search sweep")
    result = slo_search(model, device, input_len=input_len, output_len=output_len, ttft=targets[0],
                        tpot=targets[1], gpus=gpus, precisions=precisions or ("bf16", "fp8"), engine=engine,
                        **({"concurrency": range(1, concurrency + 1)} if concurrency else {}))
    click.echo(format_search(result, *targets))
    if output:
        from fastmodel.cli.sweep import _write_netcdf

        _write_netcdf(result.dataset, output)
        click.echo(f"wrote {output} (fastmodel plot pareto {output} --curve precision)", err=True)
