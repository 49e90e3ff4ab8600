"""What an input is, read from its content alone: the cheap key checks every engine and loader share.

Nothing here validates: it says which kind of input a dict (or spec object) is, so that
:mod:`fastmodel.engines` can choose the engine before any wing is imported.

- a run record (``RUNS.md``): ``model``, ``system`` and ``plan`` blocks (a record missing ``plan.tp`` is still a
  record, so that its error names ``plan.tp``);
- a serving record (``SERVE_RUNS.md``): ``model``, ``system`` and ``serve`` blocks;
- a real-world model (``family = "lm"``), cluster (``kind = "cluster"``) or serving task (``kind = "serve"``);
- anything else is a MAD-Max spec (fastmodel's family specs or the reference's JSON formats).
"""

from __future__ import annotations

from typing import Any

RUN_RECORD_BLOCKS = ("model", "system", "plan")
SERVE_RECORD_BLOCKS = ("model", "system", "serve")
#: ``family`` of the real-world model's specs (fastmodel/lm/spec.py)
REAL_WORLD_FAMILY = "lm"
#: ``kind`` of the real-world model's system specs
CLUSTER_KIND = "cluster"
#: ``kind`` of serving task specs (fastmodel/serve/spec.py)
SERVE_TASK_KIND = "serve"


def is_run_record(data: Any) -> bool:
    """True for a dict in the RUNS.md schema."""
    return isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in RUN_RECORD_BLOCKS)


def is_serve_record(data: Any) -> bool:
    """True for a dict in the SERVE_RUNS.md schema."""
    return isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in SERVE_RECORD_BLOCKS)


#: top-level keys only a run or serving record has (RUNS.md, SERVE_RUNS.md): a dict with one of them and a block
#: missing is a record with a hole, never a MAD-Max case or spec (their keys: ``case``, ``model``, ``system``,
#: ``task``, ``plan`` as text, ...)
RECORD_ONLY_KEYS = ("measured", "workload", "reliability", "source_ref", "parallelism_kind", "tier")


def misshapen_record(data: Any) -> str | None:
    """The problem of a dict that is a run or serving record but for one block, as ``"<block>: reason"``: a dict
    with every block name of a record whose block is not an object (``"serve": "tp4"``), or a dict with a key only
    a record has (``RECORD_ONLY_KEYS``, a ``plan`` or ``serve`` object) that lacks a block (``model``: required
    block missing, naming a key that looks like its misspelling). None for anything else. Such a dict is no
    record by :func:`is_run_record`, and would otherwise be read as a MAD-Max case and refused for its keys, or as
    a spec that needs ``--system``."""
    if not isinstance(data, dict) or is_run_record(data) or is_serve_record(data):
        return None
    for blocks, kind in ((RUN_RECORD_BLOCKS, "run"), (SERVE_RECORD_BLOCKS, "serving")):
        if kind == "run" and _a_case(data):
            continue
        if set(blocks) <= set(data):
            wrong = next(name for name in blocks if not isinstance(data[name], dict))
            return f"{wrong}: a {kind} record's {wrong} block must be an object (got {data[wrong]!r:.40})"
    serving = isinstance(data.get("serve"), dict)
    if not (serving or isinstance(data.get("plan"), dict) or any(key in data for key in RECORD_ONLY_KEYS)):
        return None
    from fastmodel.spec.records import block_missing

    blocks, kind = (SERVE_RECORD_BLOCKS, "serving") if serving else (RUN_RECORD_BLOCKS, "run")
    missing = next(name for name in blocks if not isinstance(data.get(name), dict))
    if missing in data:
        return f"{missing}: a {kind} record's {missing} block must be an object (got {data[missing]!r:.40})"
    needs = f"a {kind} record needs {', '.join(blocks)}"
    if not serving and "plan" not in data:    # neither plan nor serve: either kind of record
        needs = f"a run record needs {', '.join(RUN_RECORD_BLOCKS)}; a serving record {', '.join(SERVE_RECORD_BLOCKS)}"
    return f"{missing}: {block_missing(data, missing)} ({needs})"


def _a_case(data: dict) -> bool:
    """A MAD-Max (or real-world spec) batch case: it names a ``task`` (a record never does), its ``plan`` is text,
    and it has no key only a record has. ``{"model": "llama2-70b", "system": "dc-a", "task": ..., "plan":
    "tp,ddp/mp", "nodes": 64}`` holds every block name of a run record, and its misspelt ``num_nodes`` was
    reported as "model: a run record's model block must be an object"."""
    return "task" in data and not isinstance(data.get("plan"), dict) and not any(k in data for k in RECORD_ONLY_KEYS)


def is_case_line(data: Any) -> bool:
    """Whether a JSON object is a batch case (``_a_case``): a line of ``fastmodel batch``, not a record."""
    return isinstance(data, dict) and _a_case(data)


def check_system_kind(data: Any, source: str | None) -> None:
    """A SpecError for a system dict whose ``kind`` is not ``"cluster"``: a MAD-Max system has no ``kind``, so any
    other value is a misspelt cluster (``"clustr"``), named with the nearest kind."""
    kind = field(data, "kind") if isinstance(data, dict) else None
    if kind is not None and kind != CLUSTER_KIND:
        from fastmodel.errors import SpecError, nearest

        raise SpecError(source, "system.kind", f"unknown kind {kind!r}{nearest(str(kind), [CLUSTER_KIND])}; a "
                        f"real-world cluster has kind = \"{CLUSTER_KIND}\", a MAD-Max system no kind")


def field(data: Any, name: str):
    """``data[name]`` of a dict, or the attribute of a spec object; None when absent."""
    if isinstance(data, dict):
        return data.get(name)
    return getattr(data, name, None)


def is_real_world_model(data: Any) -> bool:
    return field(data, "family") == REAL_WORLD_FAMILY


def is_cluster(data: Any) -> bool:
    return field(data, "kind") == CLUSTER_KIND


def is_serve_task(data: Any) -> bool:
    return field(data, "kind") == SERVE_TASK_KIND


def misplaced(data: Any, kind: str) -> str | None:
    """Why ``data``, given as a ``kind`` spec (model, system), is another input: a spec wrapped in a table of its
    kind's name (``[model]`` above the fields), the other kind of real-world spec (a ``family = "lm"`` model given as
    the system, a ``kind = "cluster"`` system as the model), or a sweep file (its ``[axes]``). None otherwise."""
    if not isinstance(data, dict):
        return None
    if len(data) == 1 and isinstance(data.get(kind), dict):
        return f"the fields sit under a [{kind}] table; write them at the top level of the file, without it"
    if "axes" in data and isinstance(data["axes"], dict):
        return "a sweep file (it has [axes]): run it with 'fastmodel sweep FILE -o out.nc'"
    if kind == "system" and is_real_world_model(data):
        return "a model spec (family = \"lm\"), not a system: give it as the model (-m)"
    if kind == "model" and is_cluster(data):
        return "a cluster spec (kind = \"cluster\"), not a model: give it as the system (-s)"
    return None



#: ``kind`` of task specs (MAD-Max's and the real-world model's ``pretrain``, a serving task's ``serve``)
TASK_KINDS = ("pretrain", "finetune", "inference", SERVE_TASK_KIND)


def not_execution(data: Any) -> str | None:
    """Why ``data``, given as an execution file (``--execution``: one ``[execution]`` table), is another input: a
    sweep file, a run or serving record, a model, cluster, task or device spec, each with where it goes. None
    otherwise (a file of ``[execution]`` alone, or unknown keys, which the caller names)."""
    if not isinstance(data, dict) or set(data) <= {"execution"}:
        return None
    if isinstance(data.get("axes"), dict):
        what, goes = "a sweep file (it has [axes])", "run it with 'fastmodel sweep FILE -o out.nc'" + (
            ", or copy its [execution] table alone into a file" if isinstance(data.get("execution"), dict) else "")
    elif is_serve_record(data):
        what, goes = "a serving record (SERVE_RUNS.md)", "'fastmodel serve FILE' evaluates it"
    elif is_run_record(data):
        what, goes = "a training run record (RUNS.md)", "'fastmodel run -m FILE' evaluates it with its plan block"
    elif is_real_world_model(data):
        what, goes = f"a model spec (family = \"{REAL_WORLD_FAMILY}\")", "give it as the model (-m)"
    elif is_cluster(data):
        what, goes = f"a cluster spec (kind = \"{CLUSTER_KIND}\")", "give it as the system (-s)"
    elif field(data, "kind") in TASK_KINDS:
        what, goes = f"a task spec (kind = \"{data['kind']}\")", "give it as the task (-t)"
    elif "names" in data and "hbm_bytes" in data:
        what, goes = "a device spec", "a cluster spec names it as its gpu"
    else:
        return None
    return f"{what}, not an execution file (one [execution] table): {goes}"
