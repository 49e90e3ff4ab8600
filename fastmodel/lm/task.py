"""The training task of the real-world model: what the built-in task files say that it evaluates.

A task file (``specs/tasks/*.toml``) is shared by the engines; the real-world training model reads a
``kind = "pretrain"`` task's ``global_batch`` (sequences per optimizer step) and, where the task names one,
its plan as a mesh (``"tp8.pp4"``). It models pretraining steps only: a fine-tuning or inference task, or
a MAD-Max plan string (``"fsdp/ddp"``) that no given mesh replaces, is refused with the reason, never evaluated as
something else.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, PrivateAttr

from fastmodel.errors import SpecError
from fastmodel.spec.loader import resolve_source, validate

#: task kinds the real-world training model does not evaluate, and what to use instead
OTHER_KINDS = {
    "finetune": "the real-world model predicts pretraining steps only (fine-tuning with frozen parts is the "
                "MAD-Max model's: semantics 'madmax-fixed' with a MAD-Max model)",
    "inference": "the real-world model predicts training steps; for LLM inference use 'fastmodel serve'",
    "serve": "a serving task: use 'fastmodel serve' (in Python fastmodel.serve.api.evaluate), or a serving sweep "
             "file (fastmodel.sweep with this task)",
}


class TrainTaskSpec(BaseModel):
    """A pretraining task: its name, ``global_batch`` in sequences and optionally a mesh plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    kind: Literal["pretrain"]
    description: str = ""
    global_batch: PositiveInt = Field(le=1 << 30, description="Sequences per optimizer step.")
    plan: str | None = Field(None, description="A mesh such as 'tp8.pp4' (dp fills the cluster).")

    _source: str | None = PrivateAttr(None)

    def mesh(self, plan: str | None = None) -> str | None:
        """The mesh a configuration evaluates: ``plan`` when the caller gives one (``--plan``, a sweep's plan axis),
        else the task's own. A task's MAD-Max plan string (DENSE/EMB: ``llm-moe-pretrain``'s ``tp,ddp/ddp``, shared
        with the MAD-Max engine) is refused only when it would be read, not when a mesh replaces it (a coverage walk
        found ``-t llm-moe-pretrain -p ep8`` refused with "give one with --plan")."""
        if plan is not None:
            return plan
        if self.plan is not None and "/" in self.plan:
            raise SpecError(self._source, "task.plan", f"{self.plan!r} is a MAD-Max plan (DENSE/EMB); the real-world "
                            "model takes a mesh such as 'tp8.pp4' (give one with --plan)")
        return self.plan


def load_train_task(spec: Any) -> TrainTaskSpec:
    """The pretraining task of a built-in name, a .toml/.json path, a dict or a spec object; a task of
    another kind is a SpecError saying what evaluates it."""
    if isinstance(spec, TrainTaskSpec):
        return spec
    data, source = resolve_source(spec, "task")
    if hasattr(data, "model_dump"):                     # another engine's task object
        data = data.model_dump(exclude_none=True)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind in OTHER_KINDS:
        raise SpecError(source, "task.kind", f"{kind!r}: {OTHER_KINDS[kind]}")
    if isinstance(data, dict) and kind == "pretrain":
        for key, value in data.items():
            if key.startswith("freeze_") or key in ("min_frozen_layer", "local_batch", "train_samples"):
                if value not in (None, False):
                    raise SpecError(source, f"task.{key}", "a MAD-Max task field; the real-world model reads "
                                    "global_batch (and a mesh plan) of a pretraining task")
        data = {k: v for k, v in data.items() if not (k.startswith("freeze_") or k in (
            "min_frozen_layer", "local_batch", "train_samples"))}
    train = validate(TrainTaskSpec, data, source, "task")
    train._source = source
    return train
