"""A run record's ``plan.fp8_recipe`` text -> a name of ``FP8_RECIPES`` (docs/model.md §11.19, "Reading a record").

RUNS.md lets a record describe its FP8 recipe in words ("current scaling, tensor-wise
(bf16_with_fp8_current_scaling_mixed)"). The rule, documented and exact: a text that is a name of the code table
is that recipe (an alias read as its canonical name); otherwise the text is cut into words (letters, digits and ``_``, joined by ``-``) and each word is
looked up in :data:`RECIPE_WORDS`, the names the recipes carry in Megatron-LM, Transformer Engine, NeMo /
Megatron-Bridge, torchao and the DeepSeek-V3 report. Exactly one recipe named: that recipe. None or several: the
recipe stays unstated (today's generic cast count) and a note says why. Words are matched whole, never as
substrings, so "-fr cs" names nothing and "mxfp8" never reads as "fp8". Only stated words count: the text is cut
into clauses at ``,;:?`` and sentence stops (a parenthesis stays in its clause: "tensorwise (assumed)"), and a
clause carrying a word of :data:`HEDGES` ("default tensorwise scaling assumed") is the record author's assumption,
not the source's statement, and names nothing. A recipe stated on a run whose ``precision`` is not ``fp8`` is
ignored with a note (:func:`ignored_note`): it scales FP8 GEMM inputs, and a 16-bit run has none.
"""

from __future__ import annotations

import re

from fastmodel.registry.lm import FP8_RECIPES

#: word -> recipe. Sources: Megatron-LM megatron/core/enums.py ``Fp8Recipe`` (delayed, tensorwise, mxfp8,
#: blockwise); TE transformer_engine/common/recipe/__init__.py class names; NeMo mixed-precision recipe names
#: (``bf16_with_fp8_mixed`` is DelayedScaling, ``..._current_scaling_mixed``, ``bf16_with_mxfp8_mixed``,
#: ``..._subchannel_scaling_mixed``) and Megatron-Bridge scripts/performance/utils/precision.py (FP8_CS, FP8_MX,
#: FP8_SC); torchao float8 ``tensorwise``; DeepSeek-V3 report sec. 3.3.2 ("fine-grained", 1x128 tiles, 128x128
#: blocks)
RECIPE_WORDS = {
    "delayed": "delayed", "delayedscaling": "delayed", "bf16_with_fp8_mixed": "delayed",
    "tensorwise": "tensorwise", "tensor-wise": "tensorwise", "current": "tensorwise",
    "float8currentscaling": "tensorwise", "fp8_cs": "tensorwise", "bf16_with_fp8_current_scaling_mixed": "tensorwise",
    "mxfp8": "mxfp8", "fp8_mx": "mxfp8", "mxfp8blockscaling": "mxfp8", "bf16_with_mxfp8_mixed": "mxfp8",
    "blockwise": "blockwise", "block-wise": "blockwise", "sub-channel": "blockwise", "subchannel": "blockwise",
    "fp8_sc": "blockwise", "float8blockscaling": "blockwise", "bf16_with_fp8_subchannel_scaling_mixed": "blockwise",
    "fine-grained": "blockwise", "1x128": "blockwise", "128x128": "blockwise",
}
#: code -> its first (canonical) name in FP8_RECIPES
CANONICAL = {code: name for name, code in reversed(FP8_RECIPES.items())}
_WORD = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_]+)*")
#: words that mark a clause as the record author's assumption rather than the source's statement
HEDGES = frozenset({"assumed", "assume", "assuming", "assumption", "presumably", "presumed", "probably", "likely",
                    "guessed", "unverified", "unknown", "unclear"})
_CLAUSE = re.compile(r"[,;:?]|\.(?:\s|$)")


def _stated_words(key: str) -> list[str]:
    """The words of ``key`` outside hedged clauses (module docstring)."""
    clauses = (_WORD.findall(clause) for clause in _CLAUSE.split(key))
    return [word for words in clauses if not HEDGES.intersection(words) for word in words]


def recipe_from_text(text: str | None) -> tuple[str | None, str]:
    """(recipe name or None, note): the recipe ``text`` names by the module's rule; None with a note (empty when
    ``text`` is None) when it names none or several."""
    if text is None:
        return None, ""
    key = text.strip().lower()
    if key in FP8_RECIPES:
        return CANONICAL[FP8_RECIPES[key]], ""
    named = sorted({RECIPE_WORDS[word] for word in _stated_words(key) if word in RECIPE_WORDS})
    if len(named) == 1:
        return named[0], ""
    hedged = not named and any(word in RECIPE_WORDS for word in _WORD.findall(key))
    why = f"names several recipes ({', '.join(named)})" if named else \
        "names a recipe only as an assumption" if hedged else "names no recipe"
    if not named and not hedged and key and not any(c.isspace() for c in key):   # one word: a typo ("delayed_scalng")
        from fastmodel.errors import nearest

        why += nearest(key, [*FP8_RECIPES, *RECIPE_WORDS])
    return None, f"plan.fp8_recipe {text!r} {why}: the recipe is unstated (generic FP8 cast count)"


def ignored_note(stated: str, precision: str) -> str:
    """The note of an FP8 recipe ``stated`` (a name or a record's text) on a run of ``precision`` other than
    ``fp8``: the kernels read ``fp8_recipe`` only under FP8 GEMMs (``kernels/lm/fp8.py``, ``rules.py``), so it is
    ignored, as ``recompute_modules`` is outside selective recompute."""
    return f"fp8_recipe {stated!r} ignored: precision {precision!r} runs no FP8 GEMMs"
