"""``fastmodel serve --search``: the SLO search of fastmodel.serve.search on the command line: its SLO flags read
as durations, the options of one configuration refused beside it, the notes, the table or the one line when no
configuration meets the SLOs (exit 1), and ``-o SEARCH.nc``."""

from __future__ import annotations

import click

from fastmodel.cli.common import flag_names
from fastmodel.cli.serve import given_flags, precision_notes
from fastmodel.serve.precisions import FP8_KV_DEFAULT_SAID
from fastmodel.serve.profiles_vendor import kv_upcast_note

#: ``serve --search``'s exit status when no configuration meets the SLOs (grep's "no match"; bad input is 2)
NO_MATCH_EXIT = 1

#: each argument of ``fastmodel.serve.search.slo_search`` as ``serve --search`` spells it (``flag_names``)
SEARCH_FLAGS = {"ttft": "--ttft", "tpot": "--tpot", "gpus": "--gpus", "modes": "--mode", "engine": "--engine",
                "precisions": "--search-precision", "concurrency": "--search-concurrency", "ep": "--ep",
                "attention_dp": "--attention-dp", "spec_tokens": "--spec-tokens", "spec_acceptance": "--spec-acceptance",
                "input_len": "--input-len", "output_len": "--output-len"}

#: above these, a bare number given as an SLO is more likely milliseconds than seconds (a note, not an error):
#: a token every second is far slower than reading speed, a first token after a minute is no interactive service
SECONDS_PLAUSIBLE = {"--ttft": 60.0, "--tpot": 1.0}


def refuse_one_configuration(kv_precision) -> None:
    """--precision, --kv-precision and the other options of one configuration given with --search: one line."""
    from fastmodel.errors import FastmodelError

    if kv_precision or given_flags("precision"):
        raise FastmodelError("--precision and --kv-precision set one configuration; --search sweeps --search-precision"
                             f", each with its default KV cache (FP8 with {FP8_KV_DEFAULT_SAID} weights)")
    if ignored := given_flags("tp", "pp", "moe_tp", "batch_size", "concurrency", "max_throughput", "kv_cache_mem_fraction",
                         "instances", "as_json"):
        raise FastmodelError(f"{', '.join(ignored)}: not read by --search, which sweeps TP x PP within --gpus and "
                             "the concurrency (--search-concurrency) of one instance and prints a table (-o "
                             "SEARCH.nc writes the searched sweep); leave them out, or drop --search")


def _search_precision_notes(model, device, precisions, engines) -> list[str]:
    """``precision_notes`` of every searched precision, once each, as ``serve`` prints them (FP4 / FP8 weight-only,
    the FP8 KV pool's conversion at every forward where a searched engine does it: ``kv_upcast_note``); none for a
    precision no searched engine runs on the device (every point ``no_fp4``: ``precisions.fp4_refusal``)."""
    from fastmodel.cli.serve import fp4_refusal_of
    from fastmodel.serve.api import columns, engine_columns
    from fastmodel.serve.search import engine_list

    profiles = [engine_columns(name, device)[0] for name in engine_list(engines or None, device)]
    precisions = [precision for precision in precisions
                  if any(fp4_refusal_of(model, device, precision, profile, "") is None for profile in profiles)]
    weight_only = max(profile.get("fp8_weight_only", 0.0) for profile in profiles)
    notes = [note for precision in precisions for note in precision_notes(model, device, precision, weight_only)]
    notes += [kv_upcast_note(columns(model, device, precision=precision, max_throughput=True, **profile))
              for precision in precisions for profile in profiles]
    return list(dict.fromkeys(note for note in notes if note))


def run_search(model, device, input_len, output_len, ttft, tpot, gpus, precisions, engine, output=None,
               force=False, concurrency=None, axes=None, kv_precision=None) -> None:
    """``--search``: the SLO search of fastmodel.serve.search, printed as a table; with ``output`` its sweep (with
    ``within_budget``, ``meets_slo`` and the SLOs as attributes) as netCDF for ``fastmodel plot pareto``. No
    configuration meeting the SLOs is one line (:func:`fastmodel.serve.search.no_match`) and exits NO_MATCH_EXIT
    (1, as grep's no match; bad input is 2), the output still written; no legal point exits 3, as a sweep's."""
    from fastmodel.analysis.where_units import flag_slip_note
    from fastmodel.cli.sweep import NO_LEGAL_POINT_EXIT, _write_netcdf
    from fastmodel.errors import FastmodelError, SpecError
    from fastmodel.serve.search import format_search, no_match, none_legal, slo_search
    from fastmodel.spec.quantity import parse_quantity

    refuse_one_configuration(kv_precision)
    if not model:
        raise FastmodelError("--search needs --model (e.g. -m llama3.1-8b)")
    missing = [name for name, value in (("--ttft", ttft), ("--tpot", tpot)) if value is None]
    if missing:     # the ones left out, not all three (--model given)
        raise FastmodelError(f"--search needs {' and '.join(missing)} (e.g. --ttft 2s --tpot 50ms)")
    targets = []
    for name, value in (("--ttft", ttft), ("--tpot", tpot)):
        if not value.strip():      # --tpot '' said "--search needs --model, --ttft and --tpot", all three given
            raise SpecError(None, name, f"{value!r} gives no duration; write e.g. --ttft 2s --tpot 50ms")
        try:
            targets.append(parse_quantity(value, "duration"))
        except ValueError as error:
            raise SpecError(None, name, str(error)) from None
        if note := flag_slip_note(name, value, targets[-1], SECONDS_PLAUSIBLE[name]):   # the --where notes' rule
            click.echo(f"note: {note}", err=True)
    if output is not None:
        from fastmodel.io.outputs import check_output

        check_output(output, "netcdf", force=force, what="search sweep")

    with flag_names(SEARCH_FLAGS):     # the API's errors name its arguments; here the flags
        result = slo_search(model, device, input_len=input_len, output_len=output_len, ttft=targets[0],
                            tpot=targets[1], gpus=gpus, precisions=precisions or ("bf16", "fp8"),
                            engine=engine or None, **(axes or {}),
                            **({"concurrency": range(1, concurrency + 1)} if concurrency else {}))
    for note in _search_precision_notes(model, device, precisions or ("bf16", "fp8"), engine):
        click.echo(f"note: {note}", err=True)
    if not engine:      # the default engine, with the result (an error stays one line)
        from fastmodel.serve.profiles import default_engine_note
        from fastmodel.spec.devices import device_vendor

        click.echo(f"note: {default_engine_note(device_vendor(device))}", err=True)
    click.echo(format_search(result, *targets) if result.best is not None else no_match(result, *targets))
    if output:        # written when nothing meets the SLOs too: its frontier says how close the grid comes
        _write_netcdf(result.dataset, output)
        click.echo(f"wrote {output} (fastmodel plot pareto {output} --curve precision)", err=True)
    if none_legal(result.dataset):
        raise SystemExit(NO_LEGAL_POINT_EXIT)
    if result.best is None:
        raise SystemExit(NO_MATCH_EXIT)
