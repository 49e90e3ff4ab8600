"""``fastmodel validate`` for serving records: predicted vs measured TTFT, TPOT and throughput.

For every serving record (``SERVE_RUNS.md``) the serving model predicts ``ttft``, ``tpot`` and
``output_tokens_per_s`` (whole instance); the error is ``predicted / measured - 1``. Beside the model stands a
naive baseline: a lone prefill for TTFT, the decode-only iteration at the running batch (a batch-size roofline) for
TPOT. Tables give MAPE, median |error| and bias by engine, GPU and precision; a record the model refuses
is counted as a miss. Disaggregated records are evaluated as two worker pools
(``fastmodel.serve.disagg``; naive baseline: the prefill worker's lone prefill and the decode worker's step). With
a held-out split (``fastmodel.analysis.splits``) every table shows the development rows and the held-out rows side
by side. Beside engine, GPU, precision and mode, the tables split by model and by load band (``load``: the
closed loop's requests in flight, 1-4 / 5-32 / 33+, which separates prefill speed at low concurrency from
queueing at high; or the load mode, ``batch`` or ``max_throughput``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.scores import score
from fastmodel.analysis.splits import HIT_TOLERANCE, NOT_GIVEN, SPLITS, hit_rate
from fastmodel.errors import FastmodelError
from fastmodel.serve.profiles import ENGINE_LABELS, parse_framework
from fastmodel.serve.records import LOAD_KEYS, ServeRecord

#: measured key -> predicted result
METRICS = {"ttft_s": "ttft", "tpot_s": "tpot", "output_tokens_per_s": "output_tokens_per_s"}
GROUP_KEYS = ("engine", "gpu", "precision", "mode", "model", "load")
#: upper ends of the concurrency bands (requests in flight) of the ``load`` group, and their labels
LOAD_BANDS = ((4, "c1-4"), (32, "c5-32"))
LOAD_TOP = "c33+"
ENGINE_TITLES = {**ENGINE_LABELS, None: "other"}
NAIVE = {"ttft_s": "a lone prefill", "tpot_s": "the decode-only iteration at the running batch",
         "output_tokens_per_s": "none"}
DECODE = ("decode_gemm", "decode_attention", "decode_memory_bound", "decode_comm", "decode_overhead")


def load_mode(serve: dict, keys: tuple[str, ...] = LOAD_KEYS) -> str:
    """The first of ``keys`` (the SERVE_RUNS.md load modes) the ``serve`` block sets, else ``""``."""
    return next((k for k in keys if serve.get(k)), "")


def load_band(serve: dict) -> str:
    """The ``load`` group of a record's ``serve`` block: the band of its concurrency (``c1-4``, ``c5-32``,
    ``c33+``), else its load mode (``batch``, ``max_throughput``; ``-`` when none is given)."""
    concurrency = serve.get("concurrency")
    if isinstance(concurrency, (int, float)) and not isinstance(concurrency, bool) and concurrency > 0:
        return next((label for top, label in LOAD_BANDS if concurrency <= top), LOAD_TOP)
    mode = load_mode(serve, ("batch_size", "max_throughput"))
    return {"batch_size": "batch", "": "-"}.get(mode, mode)


def _model_name(raw: dict) -> str:
    model = raw.get("model")
    return str(model.get("name", "")) if isinstance(model, dict) else str(model or "")


def read_measured_records(path, refused: list, skipped: list | None = None) -> list:
    """``read_serve_records`` for validate: a record whose ``measured`` block cannot be read (``ttft_s = "173ms"``,
    a negative or NaN value; ``record_schema.parse_measured``) is refused, a miss naming the field, instead of
    leaving the tables that metric's row without a word. A ``measured`` block holding none of the three metrics
    (``tpot`` for ``tpot_s``, or ``{}``) is left out with a line in ``skipped`` naming the key it likely meant,
    as a run record without ``measured.step_time_s`` is (it was left out of every table without a word)."""
    from fastmodel.serve.record_schema import parse_measured
    from fastmodel.serve.records import lower_any
    from fastmodel.spec.records import read_jsonl

    def lower(data, where):
        if isinstance(data, dict) and "measured" in data:
            parse_measured(data, where)
        record = lower_any(data, where)      # a run record among serving records is refused here, a miss
        measured = data.get("measured") if isinstance(data, dict) else None
        if skipped is not None and isinstance(measured, dict):
            if not any(key in measured for key in METRICS):
                skipped.append(f"skipped: {where}: {no_metric(measured)}")
                return None
            skipped.extend(f"warning: {where}: measured.{key}: not read{hint}" for key, hint in _misspelt(measured))
        return record

    return [r for r in read_jsonl(path, lower, "serving records", whole_object=True, refused=refused)
            if r is not None]


def _misspelt(measured: dict) -> list[tuple[str, str]]:
    """(key, " (did you mean 'tpot_s'?)") of each key of ``measured`` spelt like a metric the block lacks
    (``tpot``, ``ttft_ms``; difflib ratio 0.75 or more, so ``tpot_ms_published`` is left alone)."""
    import difflib

    missing = [key for key in METRICS if key not in measured]
    close = {key: difflib.get_close_matches(key, missing, n=1, cutoff=0.75) for key in measured}
    return [(key, f" (did you mean {match[0]!r}?)") for key, match in close.items() if match and key not in METRICS]


def no_metric(measured: dict) -> str:
    """The line of a ``measured`` block without ttft_s, tpot_s or output_tokens_per_s: its key spelt like one."""
    hint = next((f"; has {key!r}{hint}" for key, hint in _misspelt(measured)), "")
    return f"measured: none of {', '.join(METRICS)}{hint}"


def _measured(record) -> dict:
    measured = record.raw.get("measured")
    return measured if isinstance(measured, dict) else {}


def rows(records: list) -> list[dict]:
    """One dict per record: ids, groups, status, measured, predicted and baseline values, errors."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX as INDEX
    from fastmodel.registry.serve import SERVE_STATUS_NAMES
    from fastmodel.serve.api import evaluate_table

    if not any(any(_number(_measured(r).get(k)) for k in METRICS) for r in records):
        raise FastmodelError("no serving record carries measured output_tokens_per_s, ttft_s or tpot_s")
    from fastmodel.serve.disagg import DisaggRecord, evaluate_disagg

    answered = [r for r in records if isinstance(r, ServeRecord)]
    out, status = evaluate_table(np.stack([r.columns for r in answered], axis=1)) if answered else (None, None)
    lone = _lone_prefill(answered)
    implied = np.array([implied_running(r.raw["serve"], _measured(r)) for r in answered])
    at_implied = _decode_at(answered, implied)
    position = {id(r): i for i, r in enumerate(answered)}
    pools = [r for r in records if isinstance(r, DisaggRecord)]
    disagg = {id(r): result for r, result in zip(pools, evaluate_disagg(pools))}
    table = []
    for r in records:
        serve = r.raw["serve"]
        row = {"id": r.id, "engine": ENGINE_TITLES[parse_framework(r.raw.get("framework"))[0]],
               "framework": r.raw.get("framework"), "gpu": str(r.raw["system"].get("gpu", "")),
               "precision": serve.get("precision", "bf16"), "model": _model_name(r.raw), "load": load_band(serve),
               "load_mode": load_mode(serve)}
        i = position.get(id(r))
        pooled = disagg.get(id(r))
        row["status"] = pooled["status"] if pooled is not None else SERVE_STATUS_NAMES[int(status[i])]
        row["mode"] = "disagg" if pooled is not None else "aggregated"
        predicted = {name: out[INDEX[name], i] for name in METRICS.values()} if i is not None else {}
        baseline = {}
        if pooled is not None and pooled["status"] == "ok":
            predicted = {name: pooled[name] for name in METRICS.values()}
            baseline = {"ttft": pooled["naive_ttft"], "tpot": pooled["naive_tpot"]}
        if i is not None:
            steps = max(1.0, float(serve.get("output_len", 2)) - 1.0)
            baseline = {"ttft": lone[i], "tpot": sum(out[INDEX[k], i] for k in DECODE) / steps}
        for key, name in METRICS.items():
            measured = _number(_measured(r).get(key))
            row[f"measured_{key}"] = measured
            row[f"predicted_{key}"] = predicted.get(name, np.nan)
            row[f"error_{key}"] = predicted.get(name, np.nan) / measured - 1.0 if measured else np.nan
            row[f"baseline_error_{key}"] = baseline[name] / measured - 1.0 if measured and name in baseline \
                else np.nan
        if pooled is not None and pooled["status"] == "ok":
            row["batch_size"] = pooled["batch_size"]
            row["kv_transfer_s"] = pooled["kv_transfer_s"]
        if i is not None:
            row["batch_size"] = out[INDEX["batch_size"], i]
            row["memory_per_device"] = out[INDEX["memory_per_device"], i]
            row["implied_running"] = implied[i]
            row["tpot_at_implied_running_s"] = at_implied[i]
        row["notes"] = "; ".join(getattr(r, "notes", ()))
        table.append(row)
    return table


def _lone_prefill(records: list) -> np.ndarray:
    """TTFT of each record's prompt alone (one request in flight, no overlap step): the naive TTFT."""
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.registry.serve import SERVE_RESULT_INDEX
    from fastmodel.serve.api import evaluate_table

    if not records:
        return np.zeros(0)
    table = np.stack([r.columns for r in records], axis=1).copy()
    table[COLUMN_INDEX["batch_size"]] = table[COLUMN_INDEX["attention_dp"]]
    table[COLUMN_INDEX["overlap_step"]] = 0.0
    out, _ = evaluate_table(table)
    return out[SERVE_RESULT_INDEX["ttft"]]


def implied_running(serve: dict, measured: dict) -> float:
    """Requests decoding at once that a closed-loop record's own measured TTFT and TPOT imply (Little's law,
    Little 1961): ``N`` requests in flight finish at ``lambda = N / (TTFT + (O - 1) TPOT)`` and each decodes for
    ``(O - 1) TPOT``, so ``N (O - 1) TPOT / (TTFT + (O - 1) TPOT)`` decode at once (the prompts being prefilled and
    the requests waiting, wherever they wait, make up the rest of ``N``). NaN without a concurrency, an output of
    more than one token, or both measurements (docs/model_serving.md S26)."""
    n = serve.get("concurrency")
    steps = float(serve.get("output_len", 0)) - 1.0
    ttft, tpot = _number(measured.get("ttft_s")), _number(measured.get("tpot_s"))
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n <= 0 or steps <= 0 or not ttft or not tpot:
        return np.nan
    return float(n) * steps * tpot / (ttft + steps * tpot)


def _decode_at(records: list, batches: np.ndarray) -> np.ndarray:
    """The model's decode-only iteration (the naive TPOT) of each record at ``batches`` requests in flight instead
    of its own load (NaN where the batch is NaN): what the record's TPOT would be, by the model, at the running
    batch its measurements imply (:func:`implied_running`)."""
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.registry.serve import SERVE_RESULT_INDEX
    from fastmodel.serve.api import evaluate_table

    result = np.full(len(records), np.nan)
    chosen = [i for i, b in enumerate(batches) if np.isfinite(b)]
    if not chosen:
        return result
    table = np.stack([records[i].columns for i in chosen], axis=1).copy()
    table[COLUMN_INDEX["batch_size"]] = np.maximum(1.0, np.round(batches[chosen]))
    out, _ = evaluate_table(table)
    steps = np.maximum(1.0, table[COLUMN_INDEX["output_len"]] - 1.0)
    result[chosen] = sum(out[SERVE_RESULT_INDEX[k]] for k in DECODE) / steps
    return result


def _number(value) -> float:
    """A measured value when it is a positive finite number, else 0 (absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        return 0.0
    return float(value)


def refused_rows(refused: list) -> list[dict]:
    """One row per serving record the engine refused (``fastmodel.spec.records.Refused``): its groups and
    measured values, no prediction: a miss for every metric it measured, or for every metric when no
    measurement of it can be read (a malformed line)."""
    table = []
    for item in refused:
        raw = item.raw
        serve = raw.get("serve") if isinstance(raw.get("serve"), dict) else {}
        system = raw.get("system") if isinstance(raw.get("system"), dict) else {}
        measured = raw.get("measured") if isinstance(raw.get("measured"), dict) else {}
        row = {"id": item.id, "engine": ENGINE_TITLES[parse_framework(raw.get("framework"))[0]],
               "framework": raw.get("framework"), "gpu": str(system.get("gpu", NOT_GIVEN)),
               "precision": str(serve.get("precision", "bf16")) if serve else NOT_GIVEN,    # no serve block: no
               "mode": str(serve.get("mode", "aggregated")) if serve else NOT_GIVEN,      # default to read either
               "model": _model_name(raw) or NOT_GIVEN, "load": load_band(serve),
               "load_mode": load_mode(serve),
               "status": "refused"}
        for key in METRICS:
            row[f"measured_{key}"] = _number(measured.get(key))
            row[f"predicted_{key}"] = row[f"error_{key}"] = row[f"baseline_error_{key}"] = np.nan
        if not any(row[f"measured_{key}"] for key in METRICS):   # unreadable: a miss in every table
            row.update({f"measured_{key}": np.nan for key in METRICS})
        row["notes"] = item.reason
        table.append(row)
    return table


def cell_summary(rows_: list[dict], key: str) -> dict | None:
    """The numbers of one cell of the ``key`` table (a measured metric) over ``rows_``, as training's tables count
    (``fastmodel.lm.validate.group_summary``): ``n`` records answered (a finite prediction), ``miss`` those that
    measured it without one (refused), the model's ``mape``, ``median`` and ``bias`` (NaN when none is predicted),
    ``hit_rate`` within HIT_TOLERANCE over every record that measured it (``n + miss``), the naive baseline's
    ``naive_mape``; None when no row measured it."""
    measured = [r for r in rows_ if r[f"measured_{key}"]]
    if not measured:
        return None
    errors = [r[f"error_{key}"] for r in measured if np.isfinite(r[f"error_{key}"])]
    base = score([r[f"baseline_error_{key}"] for r in measured if np.isfinite(r[f"baseline_error_{key}"])])
    s = score(errors)
    return {"n": len(errors), "miss": len(measured) - len(errors), "mape": s.mape, "median": s.median,
            "bias": s.bias, "hit_rate": hit_rate(errors, len(measured)), "naive_mape": base.mape}


def _cells(rows_: list[dict], key: str) -> str:
    s = cell_summary(rows_, key)
    if s is None:
        return " " * len(HEAD)
    hits = 100 * s["hit_rate"]
    if s["n"] == 0:
        return f"{s['n']:5d} {s['miss']:4d} {'-':>7s} {'-':>7s} {'-':>7s} {hits:5.0f}% {'-':>7s}"
    naive = f"{100 * s['naive_mape']:6.1f}%" if np.isfinite(s["naive_mape"]) else f"{'-':>7s}"   # no baseline
    return f"{s['n']:5d} {s['miss']:4d} {100 * s['mape']:6.1f}% {100 * s['median']:6.1f}% {100 * s['bias']:+6.1f}% " \
           f"{hits:5.0f}% {naive}"


def _groups(table: list[dict]):
    """(group key, group name, label, rows) of every line of a metric's table: all records, then each group."""
    for group in (None, *GROUP_KEYS):
        for name in sorted({"all" if group is None else str(r[group]) for r in table}):
            chosen = [r for r in table if group is None or str(r[group]) == name]
            yield group, name, "all" if group is None else f"{group}={name}", chosen


def summaries(table: list[dict], by_split: bool = False) -> list[dict]:
    """Every cell of :func:`format_report`'s tables as a dict: ``metric`` (the measured key), ``key`` (the group
    key, None for all records), ``group``, ``split`` (``all``, or ``dev`` / ``held-out`` with ``by_split``) and
    :func:`cell_summary`'s numbers; a cell no record measured is left out."""
    out = []
    for metric in METRICS:
        for group, name, _, chosen in _groups(table):
            for split in (SPLITS if by_split else ("all",)):
                s = cell_summary([r for r in chosen if split == "all" or r["split"] == split], metric)
                if s is not None:
                    out.append({"metric": metric, "key": group, "group": name, "split": split, **s})
    return out


HEAD = f"{'n':>5s} {'miss':>4s} {'MAPE':>7s} {'median':>7s} {'bias':>7s} {'<=' + format(HIT_TOLERANCE, '.0%'):>6s} " \
       f"{'naive':>7s}"


def format_report(table: list[dict], by_split: bool = False) -> str:
    """Error tables per metric: all records, then by engine, GPU, precision and mode, with the naive baseline's
    MAPE; ``miss``: records that measured the metric but have no prediction (refused), counted against the hit
    rate (share within HIT_TOLERANCE). With ``by_split`` (rows marked by ``analysis.splits.mark_split``), the
    in-sample (dev) and held-out columns side by side."""
    splits = SPLITS if by_split else ("all",)
    lines = []
    for key in METRICS:
        if not any(r[f"measured_{key}"] for r in table):
            continue
        lines.append("")
        lines.append(f"{key}: model vs measured (naive: {NAIVE[key]})")
        lines.append(f"{'group':30s} " + " | ".join(f"{s:>9s} {HEAD}" for s in splits))
        for _, _, label, chosen in _groups(table):
            cells = [f"{'':9s} {_cells([r for r in chosen if not by_split or r['split'] == s], key)}"
                     for s in splits]
            lines.append(f"{label[:30]:30s} " + " | ".join(cells))
    if lines:    # the legend, as training's tables print it (fastmodel.lm.validate.format_report)
        lines += ["", f"n: records answered; miss: records that measured the metric refused or without a finite "
                      f"prediction; <={HIT_TOLERANCE:.0%}: share of all records of the group that measured it "
                      "predicted within that error (misses count against it); naive: the baseline's MAPE"]
    return "\n".join(lines).lstrip("\n")


def validation(runs, ids: set[str] | None = None):
    """``fastmodel.validate`` of serving records (``runs``: a JSONL path or a list of dicts): a
    ``fastmodel.analysis.validation.Validation`` whose rows, scores and report ``fastmodel validate`` prints; a
    refused record is a row with status ``refused``; ``ids``: the held-out ids (None: no split)."""
    from fastmodel.analysis.splits import mark_split
    from fastmodel.analysis.validation import Validation, refused_lines

    refused: list = []
    skipped: list = []
    records = read_measured_records(runs, refused, skipped)
    if not records and not refused:
        raise FastmodelError(f"no serving record carries measured output_tokens_per_s, ttft_s or tpot_s ("
                             f"{skipped[0]})")
    table = (rows(records) if records else []) + refused_rows(refused)
    if ids is not None:
        mark_split(table, ids)
    return Validation("serving", table, summaries(table, ids is not None), skipped + refused_lines(refused), None,
                      format_report(table, ids is not None))
