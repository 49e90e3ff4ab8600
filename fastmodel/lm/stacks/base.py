"""What a stack profile is, and how a ``framework`` string names one (docs/model.md §11.8).

A *stack profile* is the software a run used (Megatron-Core, DeepSpeed, PyTorch FSDP...): its name, the
whole names that pick it in a run's ``framework`` text, and the execution defaults it sets -- the
``ExecutionSpec`` fields left ``None`` ("the stack decides"), e.g. whether attention is fused or gradient
reduction overlaps the backward pass. One module per profile in this package; ``PROFILES`` in
``__init__`` orders them.

Parsing a framework string (documented rule, no substrings):

1. lower-case the text and split it into *tokens*: maximal runs of letters, digits, ``.``, ``_`` and ``-``
   (``"Megatron-LM (commit 23e00ed) + TransformerEngine 2.11.0, NGC PyTorch 26.01"`` gives ``megatron-lm``,
   ``commit``, ``23e00ed``, ``transformerengine``, ``2.11.0``, ``ngc``, ``pytorch``, ``26.01``);
2. a profile is *named* when one of its names occurs as consecutive whole tokens (``megatron-deepspeed`` is
   one token, so it never names ``deepspeed``; ``pytorch`` alone names no stack: every stack here runs on
   PyTorch);
3. when several profiles are named, the first in ``PROFILES`` wins: a framework built on another is listed
   before its base (Megatron-DeepSpeed before Megatron-LM, TorchTitan before PyTorch FSDP), so a text naming
   both describes the derived one;
4. none named: the ``default`` profile, with a one-line note in the record's notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

_TOKEN = re.compile(r"[a-z0-9][a-z0-9._-]*")
#: a version token, e.g. ``1.10``, ``2``, ``2.2.1``
VERSION = r"\d+(?:\.\d+)*"


def tokens(framework: str) -> str:
    """The framework text as space-separated whole tokens (trailing ``.``/``-`` of a token dropped)."""
    return " ".join(t.rstrip(".-") for t in _TOKEN.findall(framework.lower()))


def names_in(text: str, pattern: str) -> re.Match | None:
    """Where ``pattern`` (a regex over tokens separated by single spaces) occurs as whole tokens."""
    return re.search(rf"(?:^| )(?:{pattern})(?= |$)", text)


@dataclass(frozen=True)
class StackProfile:
    """One software stack: how a framework text names it and the execution defaults it sets.

    ``defaults(execution, framework)`` returns ``ExecutionSpec`` field -> value for fields the stack decides
    (those the execution leaves ``None``; fields it does not return keep the registry column's default).
    ``unknown_vp`` is the rule for ``vp = "unknown"``: (virtual stages, the rule in words with its source).
    ``eager_blocks(execution, expert_parallel)`` is the stack's reason (a note) why a compiled model's decoder
    blocks still run eager element-wise kernels, or ``None`` when compiling fuses them; where it gives one,
    ``eager_defaults(execution)`` adds the defaults of those eager blocks (TorchTitan: their host issue, §11.59).
    ``unknown_recompute`` is the rule for ``recompute = "unknown"`` given the sequence length: (recompute, the
    rule in words); by default selective, which every stack here supports.
    ``parse_notes(execution, framework)`` are the notes of the stack's own parse of the text (e.g. DeepSpeed's
    ZeRO stage named twice); none by default.
    """

    name: str
    title: str
    names: tuple[str, ...]
    source: str
    defaults: Callable[[Any, str | None], dict] = field(default=lambda execution, framework: {})
    unknown_vp: Callable[[int, int], tuple[int, str]] = field(default=lambda pp, layers: (
        2, "2 virtual stages per rank, the fewest an interleaved schedule has (an assumption: the framework "
           "sets no default)"))
    eager_blocks: Callable[[Any, bool], str | None] = field(default=lambda execution, expert_parallel: None)
    eager_defaults: Callable[[Any], dict] = field(default=lambda execution: {})
    unknown_recompute: Callable[[int], tuple[str, str]] = field(default=lambda seq_len: (
        "selective", "selective assumed"))
    parse_notes: Callable[[Any, str | None], list[str]] = field(default=lambda execution, framework: [])

    def named_in(self, text: str) -> bool:
        """True when one of this profile's names occurs in ``tokens(framework)`` as whole tokens."""
        return any(names_in(text, pattern) for pattern in self.names)
