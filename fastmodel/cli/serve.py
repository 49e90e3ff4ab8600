"""``fastmodel serve``: one configuration or every record of a serving-record file: latency, throughput, memory, prefill/decode (serve.api)."""

from __future__ import annotations

import click

from fastmodel.cli.common import Choice, Count, FloatRange, Whole, flag_names, friendly
from fastmodel.serve.precisions import KV_DEFAULT_SAID, KV_PRECISIONS, PRECISIONS
from fastmodel.serve.profiles import PROFILE_COLUMNS, RECORD_ENGINE_COLUMNS
from fastmodel.serve.profiles_vendor import kv_upcast_note
from fastmodel.serve.report import load_mode, render


class IntList(click.ParamType):
    """Whole numbers, comma-separated (``--ep 1,4,8``); the option may also be repeated."""

    name = "N[,N...]"

    def __init__(self, low: int):
        self.low = low

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            values = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma list of whole numbers", param, ctx)
        if not values:      # '' or ',' said "every value must be at least 1", of no value
            self.fail(f"{value!r} names no number; give whole numbers, comma-separated, e.g. 1,2,4", param, ctx)
        if min(values) < self.low:
            self.fail(f"{value!r}: every value must be at least {self.low}", param, ctx)
        return values


#: the arguments of ``fastmodel.serve.api.columns`` and ``serving_model`` a single run's errors name, as ``serve``
#: spells them (``flag_names``): ``device: unknown device 'H10'`` is ``--device: ...``
SERVE_FLAGS = {"model": "--model", "device": "--device", "precision": "--precision", "kv_precision": "--kv-precision"}


def _flat(values) -> tuple[int, ...] | None:
    """A repeated IntList option's values in one tuple (None when not given)."""
    return tuple(v for group in values for v in group) or None


def _one(values, name: str, default):
    """The single value an option takes outside --search: its last occurrence (click's rule for a repeated
    option), which must be one value, not a list."""
    from fastmodel.errors import SpecError

    if not values:
        return default
    last = values[-1]
    if len(last) > 1:
        raise SpecError(None, name, f"one value outside --search (got {', '.join(map(str, last))})")
    return last[0]


@click.command("serve")
@click.argument("records", required=False, type=click.Path(dir_okay=False))
@click.option("--model", "-m", help="Built-in serving model (llama3.1-8b/70b/405b, mistral-7b, mixtral-8x7b) or "
              "family-\"lm\" model spec (deepseek-v3, kimi-k2, qwen3-235b-a22b, gpt-oss-120b, ...; --list-models).")
@click.option("--list-models", is_flag=True, help="List the models --model takes, with their attention and MoE shape.")
@click.option("--device", "-d", default="H100", show_default=True, help="Built-in device (specs/devices; fastmodel specs list device).")
@click.option("--tp", default=1, show_default=True, type=Whole(min=1), help="Tensor parallelism of one instance.")
@click.option("--pp", default=1, show_default=True, type=Whole(min=1), help="Pipeline stages of one instance.")
@click.option("--ep", multiple=True, type=IntList(1), help="Expert parallelism (default 1: experts split by TP). "
              "--search: the EP degrees to sweep, e.g. 1,2,4,8 (default for a MoE model: powers of two to --gpus).")
@click.option("--attention-dp", multiple=True, type=IntList(1),
              help="Attention data-parallel groups of --tp GPUs (the instance has tp x attention_dp x pp GPUs; "
                   "default 1); must divide the requests. --search: the degrees to sweep (default as --ep).")
@click.option("--moe-tp", default=0, show_default=True, type=Whole(min=0),
              help="Tensor parallelism of each expert (0: tp x attention_dp / ep).")
@click.option("--precision", default="bf16", show_default=True, type=Choice(list(PRECISIONS), case_sensitive=False), help="Weights' (and GEMMs') precision.")
@click.option("--kv-precision", type=Choice(list(KV_PRECISIONS), case_sensitive=False), help=KV_DEFAULT_SAID)
@click.option("--input-len", default=1024, show_default=True, type=Count(min=1), help="Prompt tokens per request.")
@click.option("--output-len", default=128, show_default=True, type=Count(min=1), help="Generated tokens per request.")
@click.option("--batch-size", type=Count(min=1), help="Static batch of N requests.")
@click.option("--concurrency", type=Count(min=1), help="N requests in flight (continuous batching).")
@click.option("--max-throughput", is_flag=True, help="As many requests as the KV cache holds.")
@click.option("--kv-cache-mem-fraction", default=0.9, show_default=True, type=FloatRange(0.01, 1.0),
              help="Share of free HBM for the KV cache (vLLM profile, kv_budget_of_total 1: f x HBM - the rest; S66).")
@click.option("--instances", default=1, show_default=True, type=Whole(min=1), help="Serving instances in the cluster.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per configuration.")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Also write one row per configuration: .csv, else JSON lines (atomically; never onto RECORDS). "
                   "With --search: the searched sweep as netCDF (.nc), for `fastmodel plot pareto`.")
@click.option("--force", is_flag=True, help="Replace an existing output of the same kind (never another kind).")
@click.option("--search", is_flag=True, help="SLO search: sweep TP x PP (x EP x attention DP for MoE models) within "
              "--gpus, --search-precision, --engine, --spec-tokens, --mode and concurrency 1..1024; print the Pareto "
              "frontier and the best configuration meeting --ttft/--tpot; exits 1 when no configuration meets the "
              "SLOs (one line: the best TTFT and TPOT found; -o still written), 3 when none is legal.")
@click.option("--ttft", help="--search: TTFT target, e.g. 2s or 500ms (a number without a unit is seconds).")
@click.option("--tpot", help="--search: TPOT target, e.g. 50ms (a number without a unit is seconds).")
@click.option("--gpus", default=8, show_default=True, type=Whole(min=1), help="--search: GPUs of one instance at most.")
@click.option("--search-precision", multiple=True, type=Choice(list(PRECISIONS), case_sensitive=False),
              help="--search: precisions to sweep (repeat; default bf16 and fp8).")
@click.option("--search-concurrency", type=Count(min=1), metavar="N",
              help="--search: every concurrency 1..N per instance (default: the powers of two to 1024).")
@click.option("--engine", multiple=True, help="The engine's profile: trtllm, vllm or sglang, at its newest version, "
              "or with a known version as a record's framework names it, e.g. \"vLLM 0.10.2\" "
              "(fastmodel/serve/profiles.py). Default (with a note): the default engine, TensorRT-LLM's newest "
              "profile (docs/model_serving.md S13). --search: several (comma list or repeated). It sets the "
              f"profile's columns only: {', '.join(PROFILE_COLUMNS)}; the engine-dependent columns a record's "
              f"framework also sets ({', '.join(RECORD_ENGINE_COLUMNS)}: FP4 activations, MoE dispatcher, "
              "linear, query-quantization and expert kernels, lockstep client) keep their defaults.")
@click.option("--mode", "modes", default="agg", show_default=True,
              help="--search: agg, disagg or agg,disagg (disaggregated prefill/decode pools within --gpus).")
@click.option("--spec-tokens", multiple=True, type=IntList(0), help="Speculative decoding (MTP, EAGLE): draft "
              "tokens per decode step (default 0: off; any load). --search: the draft lengths to sweep.")
@click.option("--spec-acceptance", type=FloatRange(0.0, 1.0),
              help="Speculative decoding: a draft token's acceptance rate (required with --spec-tokens > 0).")
@friendly
def serve(records, model, list_models, device, tp, pp, ep, attention_dp, moe_tp, precision, kv_precision, input_len, output_len, batch_size,
          concurrency, max_throughput, kv_cache_mem_fraction, instances, as_json, output, force, search, ttft, tpot,
          gpus, search_precision, search_concurrency, engine, modes, spec_tokens, spec_acceptance):
    """Predict LLM serving: TTFT, TPOT, throughput, KV cache and memory, prefill/decode breakdown.

    Give RECORDS (JSONL, SERVE_RUNS.md schema) or --model with one load mode."""
    import json

    from fastmodel.errors import FastmodelError
    from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
    from fastmodel.serve.api import columns, evaluate_table

    if list_models:
        from fastmodel.serve.models import servable_models

        for name, summary in servable_models():
            click.echo(f"{name:18s} {summary}")
        return
    if records and model:
        raise FastmodelError(f"give RECORDS or --model, not both{_stray_argument(records)}")
    _engines_named(engine)
    _check_requests(batch_size=batch_size, concurrency=concurrency, search_concurrency=search_concurrency)
    raw = ep, attention_dp, spec_tokens
    ep, attention_dp, spec_tokens = _flat(ep), _flat(attention_dp), _flat(spec_tokens)
    _check_spec(spec_tokens, spec_acceptance)
    if model:
        with flag_names(SERVE_FLAGS):      # serving_model names its argument, model: here --model
            shape, notes = _model_within_context(model, input_len, output_len)
    if search:
        from fastmodel.cli.serve_search import run_search

        axes = dict(ep=ep, attention_dp=attention_dp, modes=modes.split(","), spec_tokens=spec_tokens or (0,),
                    spec_acceptance=spec_acceptance or 0.0)
        return run_search(model, device, input_len, output_len, ttft, tpot, gpus, search_precision, engine, output,
                          force, search_concurrency, axes, kv_precision)
    stray = given_flags("ttft", "tpot", "gpus", "search_precision", "search_concurrency") + ["--mode"] * (modes != "agg")
    if stray:   # the flags given, not all six (serve --gpus 4 listed every one)
        raise FastmodelError(f"{', '.join(stray)} given without --search: the search options apply to --search only")
    if records and (engine or attention_dp or moe_tp or ep or spec_tokens):
        raise FastmodelError("--engine, --ep, --attention-dp, --moe-tp and --spec-tokens apply to --model (a record "
                             "names its own)")
    engine_notes: list[str] = []
    ep, attention_dp, spec = (_one(v, n, d) for v, n, d in zip(raw, ("--ep", "--attention-dp", "--spec-tokens"),
                                                                (1, 1, 0)))
    from fastmodel.serve.search import engine_list

    engine = _one([engine_list(e) for e in engine], "--engine", None)
    if output is not None:
        from fastmodel.io.outputs import check_output

        check_output(output, "text", inputs=(records,) if records else (), force=force)
    if records:
        return _serve_records(records, as_json, output, force)
    if model:
        if len(loads := given_flags("batch_size", "concurrency", "max_throughput")) > 1:   # was the API's 'load: ...'
            raise FastmodelError(f"give one of --batch-size, --concurrency, --max-throughput (got {', '.join(loads)})")
        if batch_size is None and concurrency is None and not max_throughput:
            batch_size = 1
        _check_layout(attention_dp, batch_size or concurrency)
        from fastmodel.serve.api import engine_columns

        if moe_tp and not shape.get("moe_experts"):    # the kernel's moe_tp rule reads routed experts only
            raise FastmodelError(f"--moe-tp: {model} is a dense model (no routed experts to split); leave it out")
        with flag_names(SERVE_FLAGS):      # the API's device: ...; here --device
            profile, engine_notes = engine_columns(engine, device, (), "--engine", refuse=True)
        _refuse_fp4(model, device, precision, engine, profile)
        weight_only = profile.get("fp8_weight_only", 0.0)
        for note in [speculative_note(n, spec) for n in notes] + precision_notes(model, device, precision, weight_only):
            click.echo(f"note: {note}", err=True)
        with flag_names(SERVE_FLAGS):
            params = columns(model, device, precision=precision, kv_precision=kv_precision, batch_size=batch_size,
                             concurrency=concurrency, max_throughput=max_throughput, tp=tp, pp=pp, ep=ep,
                             attention_dp=attention_dp, moe_tp=moe_tp, input_len=input_len, output_len=output_len,
                             kv_cache_mem_fraction=kv_cache_mem_fraction, instances=instances, spec_tokens=spec,
                             spec_acceptance=spec_acceptance or 0.0, **profile)[:, None]
        if upcast := kv_upcast_note(params[:, 0]):
            click.echo(f"note: {upcast}", err=True)
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
        if state != "ok":   # one configuration that cannot be evaluated: one line, exit 2
            raise FastmodelError(render(label, state, result, mode, params[:, i]))
        for note in engine_notes if i == 0 else ():      # the default engine, once, with a result (not an error)
            click.echo(f"note: {note}", err=True)
        rows.append(json_record(label, state, result))
        click.echo(json.dumps(rows[-1]) if as_json else render(label, state, result, mode))
    if output:
        _write_rows(rows, output, records, force)


#: words a value split from its unit leaves behind as a stray argument (``--ttft 2 s``: RECORDS is "s")
_UNIT_WORDS = ("s", "ms", "us", "µs", "sec", "secs", "seconds", "msec")


def _serve_records(records: str, as_json: bool, output: str | None, force: bool) -> None:
    """Every record of a serving-record file: notes, one report (or JSON object) each, and ``-o``'s rows. A name
    that is no file and no path (``serve llama3.1-8b``: -m left out) says a model goes with -m."""
    import os

    from fastmodel.errors import FastmodelError
    from fastmodel.serve.records import read_serve_records

    if not os.path.exists(records) and os.sep not in records and \
            not records.lower().endswith((".jsonl", ".json", ".md", ".csv", ".toml")):
        raise FastmodelError(f"{records}: no such file; RECORDS is a serving-record file (JSONL), a model goes with "
                             f"-m: fastmodel serve -m {records}")
    found = read_serve_records(records)
    labels = [r.id or f"record {i + 1}" for i, r in enumerate(found)]
    _echo_notes(found, labels)
    rows = _record_rows(found, labels, as_json)
    if output:
        _write_rows(rows, output, records, force)


def _stray_argument(records: str) -> str:
    """Why a RECORDS argument beside --model is likely no records file: a unit a space split from its number
    (``--ttft 2 s``) or a path that does not exist, as a hint ending the one line; '' for an existing file."""
    import os

    if records.strip().lower() in _UNIT_WORDS:
        return (f" (RECORDS is {records!r}: a unit a space split from its number? write --ttft 2s, or quote it: "
                "--ttft '2 s')")
    return "" if os.path.exists(records) else f" (RECORDS is {records!r}, which is no file)"


def _engines_named(engine) -> None:
    """Each --engine names one: '' or ',' ran the default engine without its note, as if --engine were left out."""
    from fastmodel.errors import FastmodelError

    for given in engine:
        if not any(part.strip() for part in given.split(",")):
            raise FastmodelError(f"--engine {given!r}: no engine named; give trtllm, vllm or sglang (a comma list "
                                 "with --search), or leave --engine out for the default engine")


def _check_requests(**counts) -> None:
    """A request count of the command line is a value of the ``batch_size`` column (requests, [1, 2^24]), as in a
    serving task or record (``ServeTaskSpec.concurrency``, records' ``Count``): ``--concurrency 99999999`` was
    answered (TTFT 5.8e9 ms)."""
    from fastmodel.errors import FastmodelError
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
    from fastmodel.registry.validators import column_problem

    column = COLUMNS[COLUMN_INDEX["batch_size"]]
    for name, value in counts.items():
        if value is not None and (problem := column_problem(column, value)):
            raise FastmodelError(f"--{name.replace('_', '-')}: {problem}")


def _model_within_context(model, input_len: int, output_len: int) -> tuple[dict[str, float], list[str]]:
    """The model's (columns, notes) (``serving_model``, read once for the command), with --input-len and
    --output-len checked against its context (``context_len``: a built-in serving model's
    config.json ``max_position_embeddings``; a family-"lm" spec states none, no bound): a request longer than the
    context is refused by the engine (vLLM's OpenAI server: prompt + max_tokens > max_model_len), so here in one
    line, exit 2; a serving sweep marks such a point ``context_exceeded`` (docs/model_serving.md S40)."""
    from fastmodel.errors import FastmodelError
    from fastmodel.serve.models import serving_model

    _, shape, notes = serving_model(model)
    context = int(shape.get("context_len", 0))
    if context and input_len + output_len > context:
        raise FastmodelError(f"--input-len {input_len}: with --output-len {output_len}, a request of "
                             f"{input_len + output_len} tokens exceeds {model}'s context of {context} tokens "
                             f"(max_position_embeddings); --input-len + --output-len must be at most {context}")
    return shape, notes


def _check_spec(spec_tokens, spec_acceptance) -> None:
    """--spec-acceptance goes with draft tokens (--spec-tokens > 0): required there, refused without them."""
    from fastmodel.errors import FastmodelError

    drafts = bool(spec_tokens) and max(spec_tokens) > 0
    if drafts and spec_acceptance is None:
        raise FastmodelError("--spec-acceptance: required with --spec-tokens (the draft tokens' acceptance rate)")
    if spec_acceptance is not None and not drafts:
        raise FastmodelError("--spec-acceptance: applies with --spec-tokens > 0 (draft tokens per decode step); "
                             "without them there is no speculative decoding")


def speculative_note(note: str, spec_tokens: int) -> str:
    """A model note as it holds under --spec-tokens: the MTP note says "no speculative decoding", which is false
    with draft tokens; then the draft is priced as a one-layer head (docs/model_serving.md S18) and the MTP
    layers' own weights are still not counted."""
    from fastmodel.serve.models import UNSERVED

    if spec_tokens > 0 and note.endswith(UNSERVED["mtp_layers"]):
        return note.replace(UNSERVED["mtp_layers"], "with --spec-tokens its draft steps are priced as a one-layer "
                            "draft head (docs/model_serving.md S18); the MTP layers' own weights are not counted")
    return note


def fp4_refusal_of(model: str, device: str, precision: str, profile: dict, engine_label: str) -> str | None:
    """Why the engine of ``profile`` runs no FP4 weights of ``model`` at ``precision`` on ``device`` (no FP4 tensor
    cores and no weight-only path there: ``precisions.fp4_refusal`` on the model's published checkpoint,
    docs/model_serving.md S63), or None: ``serve``'s refusal and ``serve --search``'s notes read it alike."""
    from fastmodel.serve.api import device_columns
    from fastmodel.serve.precisions import fp4_refusal, published_fp4_checkpoint

    checkpoint, _, _ = published_fp4_checkpoint(model, precision, None)
    return fp4_refusal(checkpoint, device_columns(device), profile.get("fp4_weight_only_cc", 0.0), engine_label,
                       device)


def _refuse_fp4(model: str, device: str, precision: str, engine: str | None, profile: dict) -> None:
    """One line naming --precision when the engine runs no FP4 weights on the device (:func:`fp4_refusal_of`), as a
    sweep's ``no_fp4``."""
    from fastmodel.errors import FastmodelError
    from fastmodel.serve.profiles import DEFAULT_ENGINE, ENGINE_LABELS

    label = (ENGINE_LABELS.get(str(engine).lower(), engine) if engine else
             f"{ENGINE_LABELS[DEFAULT_ENGINE]} (the default engine)")
    refusal = fp4_refusal_of(model, device, precision, profile, label)
    if refusal:
        raise FastmodelError(f"--precision: {refusal}")


def precision_notes(model: str, device: str, precision: str, fp8_weight_only: float = 0.0) -> list[str]:
    """What --precision means for this model and device, as a record's lowering says it
    (``fastmodel.serve.records``): gpt-oss's fp4 read as its published MXFP4 experts-only checkpoint, and FP4
    weights on a GPU without FP4 tensor cores (Hopper) run weight-only in 16-bit GEMMs (docs/model_serving.md S12)."""
    from fastmodel.serve.api import device_columns
    from fastmodel.serve.precisions import FP4_PRECISIONS, published_fp4_checkpoint, weight_only_note

    precision, _, checkpoint = published_fp4_checkpoint(model, precision, None)
    notes = [checkpoint.replace("serve.precision", "--precision")] if checkpoint else []
    if precision in FP4_PRECISIONS and device_columns(device).get("peak_flops_4", 0.0) <= 0:
        notes.append(weight_only_note(precision, device))
    if precision == "fp8" and fp8_weight_only > 0 and device_columns(device).get("peak_flops_8", 0.0) <= 0:
        notes.append(weight_only_note(precision, device))
    return notes


def _record_rows(found: list, labels: list[str], as_json: bool) -> list[dict]:
    """Print and return one row per record: an aggregated record through the serving kernels, a disaggregated
    one through its two worker pools (``fastmodel.serve.disagg.evaluate_disagg``, as validate predicts it)."""
    import json

    from fastmodel.serve.disagg import evaluate_records
    from fastmodel.serve.report import disagg_json, json_record, render_disagg

    rows = []
    for record, label, (state, result, pool) in zip(found, labels, evaluate_records(found)):
        if pool is not None:
            limiting = pool.get("limiting_pool")
            rows.append(disagg_json(label, state, result, limiting))
            text = render_disagg(label, record, state, result, limiting)
        else:
            rows.append(json_record(label, state, result))
            text = render(label, state, result, load_mode(record.columns), record.columns)
        click.echo(json.dumps(rows[-1]) if as_json else text)
    return rows


def _echo_notes(found: list, labels: list[str]) -> None:
    """Each distinct note of the records (an engine mapped to a default profile, a value the lowering
    replaced, an assumed constant, an FP8 KV pool converted at every forward) once on stderr, with the records it applies to."""
    by_note: dict[str, list[str]] = {}
    for record, label in zip(found, labels):
        upcast = kv_upcast_note(record.columns) if hasattr(record, "columns") else None
        for note in [*record.notes, *([upcast] if upcast else [])]:
            by_note.setdefault(note, []).append(label)
    for note, which in by_note.items():
        more = f" and {len(which) - 3} more" if len(which) > 3 else ""
        click.echo(f"note: {note} ({', '.join(which[:3])}{more})", err=True)


def _check_layout(attention_dp: int, requests) -> None:
    """One configuration's bad input, as a one-line error (exit 2): attention DP that does not divide the requests
    in flight (each group holds requests / attention_dp of them). Speculative decoding applies at every load
    (docs/model_serving.md S18)."""
    from fastmodel.errors import SpecError

    if requests is not None and requests % attention_dp:
        raise SpecError(None, "--attention-dp", f"{attention_dp} does not divide the {requests} requests in flight")


def _write_rows(rows: list[dict], path: str, records, force: bool) -> None:
    """One row per configuration: CSV for a .csv path, else JSON lines; under the output rule (io/outputs.py)."""
    import csv
    import json

    from fastmodel.io.atomic import atomic_write
    from fastmodel.io.outputs import claim_output, output_kind

    with claim_output(path, "text", inputs=(records,) if records else (), force=force), atomic_write(path) as handle:
        if output_kind(path, "text") == "csv":
            fields = list(dict.fromkeys(key for row in rows for key in row))   # aggregated and disagg rows
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        else:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
    click.echo(f"wrote {path}", err=True)


def given_flags(*names: str) -> list[str]:
    """The long flags of the options among ``names`` (parameter names) given on the command line."""
    ctx = click.get_current_context()
    return [max(param.opts, key=len) for param in ctx.command.params
            if param.name in names and ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE]
