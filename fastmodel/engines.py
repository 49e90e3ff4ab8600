"""The engines and the one place that chooses among them.

fastmodel holds three engines, each a wing of the package with one door (its ``api`` module) that is
imported only when the engine is chosen, so choosing one imports none of the others:

- ``madmax``: the MAD-Max model, exact to the reference (``fastmodel/madmax``; family specs of the six
  MAD-Max families, in fastmodel's or the reference's format; every semantics preset);
- ``lm``: the real-world training model (``fastmodel/lm``; ``family = "lm"`` models on ``kind = "cluster"``
  systems under a preset with ``real_world``, and run records of ``RUNS.md``);
- ``serve``: LLM serving (``fastmodel/serve``; serving records of ``SERVE_RUNS.md``, ``kind = "serve"`` tasks).

Shared services (the CLI, batch, sweeps, plots) ask :func:`for_specs` or :func:`for_record` and then use
the :class:`Engine`'s fields; they never ask "is this real-world?" themselves.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from fastmodel.errors import SpecError
from fastmodel.spec import detect


@dataclass(frozen=True)
class Engine:
    """One engine: its name, its door module and what it offers the shared services.

    ``api`` names the wing's door module: ``evaluate(model, system, task, *, semantics, plan, num_nodes,
    execution, calibration)`` for specs and, where the engine reads records, ``evaluate_record(record,
    source, calibration)`` and ``record_values(record, source, calibration)``; for sweeps (``fastmodel.sweeps``)
    ``sweep_plan(model, system, task, axes, *, semantics, unit_configs, execution, only_fitting, calibration)``,
    ``sweep_plan_from_file(source, data, base, unit_configs)`` and ``sweep_plan_from_definition(definition)``;
    for ``fastmodel.plot.timeline``, where the engine draws one, ``timeline(model, system, task, *, semantics,
    plan, num_nodes)`` (a ``fastmodel.schedule.timeline.Timeline``). ``batch_kinds`` are
    ``"module:Class"`` line kinds of ``fastmodel batch`` (fastmodel/io/batch_kinds.py). ``registry`` is the
    module of its result variables and statuses; ``kernels`` its numba cache name (kernels/jit.py).
    """

    name: str
    title: str
    api: str
    registry: str
    kernels: str
    batch_kinds: tuple[str, ...] = ()
    reads_records: bool = False

    def door(self) -> ModuleType:
        """The engine's api module (imported on first use)."""
        return importlib.import_module(self.api)

    def evaluate(self, model: Any, system: Any, task: Any, **options):
        """One configuration from specs as a 0-d ``xarray.Dataset`` (see the door's ``evaluate``)."""
        return self.door().evaluate(model, system, task, **options)

    def evaluate_record(self, record: dict, source: str | None = None, calibration: Any = None):
        """One measured-run record as a 0-d ``xarray.Dataset`` (``measured`` is not read)."""
        return self.door().evaluate_record(record, source, calibration)

    def batch_kind_classes(self) -> list[type]:
        """The engine's batch line kinds, in claim order."""
        found = []
        for path in self.batch_kinds:
            module, name = path.split(":")
            found.append(getattr(importlib.import_module(module), name))
        return found


MADMAX = Engine("madmax", "the MAD-Max model", "fastmodel.madmax.api", "fastmodel.registry.madmax", "madmax",
                batch_kinds=("fastmodel.madmax.batch:SpecCases",))
LM = Engine("lm", "the real-world training model", "fastmodel.lm.api", "fastmodel.registry.lm", "lm",
            batch_kinds=("fastmodel.lm.batch:RunRecords", "fastmodel.lm.batch:SpecLines"), reads_records=True)
SERVE = Engine("serve", "the serving model", "fastmodel.serve.api", "fastmodel.registry.serve", "serve",
               batch_kinds=("fastmodel.serve.batch:ServeRecords",), reads_records=True)

#: every engine by name; batch asks their kinds in this order (MAD-Max's spec lines claim what is left)
ENGINES: dict[str, Engine] = {engine.name: engine for engine in (LM, SERVE, MADMAX)}


def _peek(spec: Any, kind: str):
    """The raw content of a spec given as a name, path, dict or spec object (nothing validated)."""
    if spec is None or isinstance(spec, (list, tuple)):
        return spec
    if hasattr(spec, "model_dump"):                  # a spec object
        return spec
    from fastmodel.spec.loader import resolve_source

    return resolve_source(spec, kind)[0]


def _file_of(spec: Any) -> str | None:
    """The path of a spec given as an existing file (for an error's source), else None."""
    return str(spec) if isinstance(spec, (str, Path)) and Path(str(spec)).is_file() else None


def for_specs(model: Any, semantics: Any = "default", system: Any = None) -> Engine:
    """The engine of a configuration given as specs: ``lm`` for a real-world model (``family = "lm"``) or
    cluster under a preset with ``real_world``, else ``madmax``. A real-world spec under a MAD-Max-only
    preset is a SpecError naming the preset to use."""
    from fastmodel.semantics import get_semantics

    data, system_data = _peek(model, "model"), _peek(system, "system")      # each file read once
    for spec, kind, content in ((model, "model", data), (system, "system", system_data)):
        if problem := detect.misplaced(content, kind):
            raise SpecError(_file_of(spec), kind, problem)
    real_model = detect.is_real_world_model(data)
    real_system = system is not None and not real_model and detect.is_cluster(system_data)
    if not (real_model or real_system):
        return MADMAX
    chosen = get_semantics(semantics)
    name = detect.field(data, "name") if real_model else detect.field(system_data, "name")
    what = f"model {name!r}" if real_model else f"system {name!r}"
    if not chosen.real_world:
        raise SpecError(None, "semantics", f"{what} is a real-world spec: evaluate it under semantics 'default' "
                        f"(not {chosen.name!r}, which is the MAD-Max model only)")
    if not real_model:     # the model is what to change: its file, when it is one, is named
        raise SpecError(_file_of(model), "model", f"{what} is a real-world cluster: pair it with a real-world model "
                        "(family = \"lm\", e.g. llama3.1-70b; 'fastmodel specs list model')")
    return LM


def for_sweep(model: Any, system: Any = None, task: Any = None, semantics: Any = None) -> Engine:
    """The engine of a sweep: ``serve`` for a serving task (``kind = "serve"``), else the engine of its specs
    (:func:`for_specs`; a list of models, a model axis, is MAD-Max's). With ``semantics`` None (a sweep file,
    whose engine checks its own ``semantics`` key) a real-world model or cluster is ``lm`` whatever the
    preset."""
    if detect.is_serve_task(_peek(task, "task")):
        return SERVE
    if isinstance(model, (list, tuple)):
        return MADMAX
    if semantics is not None:
        return for_specs(model, semantics, system)
    real = detect.is_real_world_model(_peek(model, "model")) or \
        (system is not None and detect.is_cluster(_peek(system, "system")))
    return LM if real else MADMAX


def for_record(data: Any) -> Engine | None:
    """The engine of a measured-run record (``lm`` for RUNS.md, ``serve`` for SERVE_RUNS.md), else None."""
    if detect.is_run_record(data):
        return LM
    if detect.is_serve_record(data):
        return SERVE
    return None


def timeline(config: Any = None, *, model: Any = None, system: Any = None, task: Any = None, record: Any = None,
             source: str | None = None, semantics: Any = "default", plan: str | None = None,
             num_nodes: int | None = None, execution: Any = None):
    """The op-by-op step (``fastmodel.schedule.timeline.Timeline``) of one configuration, from the engine that
    evaluates it: a resolved ``config`` (``fastmodel.make_config``) is MAD-Max's, a ``record`` its engine's,
    specs :func:`for_specs`'. A SpecError for an engine without timelines (serving); ``execution`` (a dict of
    execution fields, as in ``fastmodel.evaluate``) applies to the real-world training model's specs only."""
    if config is not None:
        return MADMAX.door().timeline(config=config)
    engine = for_record(record) if record is not None else for_specs(model, semantics, system)
    if engine is None or not hasattr(engine.door(), "timeline"):
        what = "a serving record" if engine is SERVE else "not a run record"
        raise SpecError(source, "model", f"{what}: timelines are drawn for training steps")
    if execution is not None and engine is not LM:
        raise SpecError(source, "execution", "applies to real-world training models (family = \"lm\") only; the "
                        "MAD-Max model has no execution spec")
    extra = {} if execution is None else {"execution": execution}
    return engine.door().timeline(model, system, task, record=record, source=source, semantics=semantics,
                                  plan=plan, num_nodes=num_nodes, **extra)


def memory_timeline(*, model: Any = None, system: Any = None, task: Any = None, record: Any = None,
                    source: str | None = None, plan: str | None = None, num_nodes: int | None = None,
                    memory_margin: float | None = None, execution: Any = None):
    """Memory over one training step per pipeline rank and kind, from the engine that draws one (the real-world
    training model; ``execution`` as in ``fastmodel.evaluate``, for specs); a SpecError for others (MAD-Max
    holds weights only, serving has no training step)."""
    door = _memory_door(model, system, record, source, "memory_timeline", "memory timelines are drawn for")
    return door.memory_timeline(model, system, task, record=record, source=source, plan=plan, num_nodes=num_nodes,
                                memory_margin=memory_margin, execution=execution)


def memory_by_stage(*, model: Any = None, system: Any = None, task: Any = None, record: Any = None,
                    source: str | None = None, plan: str | None = None, num_nodes: int | None = None,
                    memory_margin: float | None = None, execution: Any = None):
    """Memory by kind at each pipeline rank's peak moment (a Dataset over ``stage`` and ``memory_kind``), from the
    engine that has a memory timeline (the real-world training model); a SpecError for others."""
    door = _memory_door(model, system, record, source, "memory_by_stage", "memory by pipeline stage is given for")
    return door.memory_by_stage(model, system, task, record=record, source=source, plan=plan, num_nodes=num_nodes,
                                memory_margin=memory_margin, execution=execution)


def _memory_door(model: Any, system: Any, record: Any, source: str | None, method: str, said: str):
    """The door of the engine that has ``method`` (the real-world training model's memory over a step), or a
    SpecError naming what was given instead: "<what>: <said> the real-world training model"."""
    if record is None and (model is None or for_record(model) is not None):
        raise SpecError(source, "model", "a run record: pass it as record=..." if model is not None else
                        "give model, system and task (specs) or record= (a run record)")
    if record is not None and not isinstance(record, dict):
        raise SpecError(source, "record", f"expected one run record as a dict (a parsed JSON line), got "
                        f"{type(record).__name__}")
    engine = for_record(record) if record is not None else for_specs(model, "default", system)
    if engine is None or not hasattr(engine.door(), method):
        what = "a serving record" if engine is SERVE else "not a real-world training configuration"
        raise SpecError(source, "model" if record is None else "record", f"{what}: {said} the real-world training model")
    return engine.door()


def load_model(spec: Any):
    """A model spec of whichever engine it belongs to (by its content; nothing of the other wing imported)."""
    if detect.is_real_world_model(_peek(spec, "model")):
        from fastmodel.lm.loader import load_lm_model

        return load_lm_model(spec)
    from fastmodel.madmax.spec.loader import load_model as load_madmax_model

    return load_madmax_model(spec)


def load_system(spec: Any, num_nodes: int | None = None):
    """A system spec of whichever engine it belongs to; ``num_nodes`` overrides its size."""
    if detect.is_cluster(_peek(spec, "system")):
        from fastmodel.lm.loader import load_cluster

        return load_cluster(spec, num_nodes)
    from fastmodel.madmax.spec.loader import load_system as load_madmax_system

    return load_madmax_system(spec, num_nodes)


def load_task(spec: Any):
    """A task spec of whichever engine it belongs to (a serving task for ``kind = "serve"``)."""
    if detect.is_serve_task(_peek(spec, "task")):
        from fastmodel.serve.spec import load_serve_task

        return load_serve_task(spec)
    from fastmodel.madmax.spec.loader import load_task as load_madmax_task

    return load_madmax_task(spec)
