"""Exceptions that carry a one-line, user-facing reason.

The CLI prints ``str(error)`` on one line and exits with status 2 for any
:class:`FastmodelError`; anything else is an internal bug (exit 1, traceback).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import re
from typing import Callable, Iterable, TypeVar

#: the reason given for JSON nested deeper than the parser recurses (``[[[[...`` thousands of levels)
NESTED_TOO_DEEP = "nested too deeply (no spec or record nests more than a few levels)"


def comment_line(text: str) -> str | None:
    """The reason a JSON line is refused when it opens with ``#`` or ``//`` (json would say "invalid JSON:
    Expecting value"), else None: one wording for ``batch`` (``io/batch.py``) and the record readers of
    ``validate`` and ``calibrate`` (``spec/records.py`` ``read_jsonl``)."""
    return "a comment: JSON lines have none" if text.lstrip().startswith(("#", "//")) else None


class FastmodelError(Exception):
    """Base class of every error caused by user input."""


class SpecError(FastmodelError):
    """A spec file, field, value or combination of specs is invalid.

    The message names the source (file or built-in name), the field path and
    the reason, e.g. ``m.toml: model.hidden: must be > 0 (got -1)``.
    """

    def __init__(self, source: str | None, field: str | None, reason: str):
        self.source = source
        self.field = field
        self.reason = reason
        where = ": ".join(part for part in (source, field) if part)
        super().__init__(f"{where}: {reason}" if where else reason)


class UnsupportedError(SpecError):
    """A field or value the engine does not take (an unknown key, a choice outside its list): the input may be
    right for a later version or another schema, so ``validate`` counts such a record as a miss instead of
    stopping; every other command reports it like any SpecError."""


class FieldValueError(ValueError):
    """Raised inside a spec's pydantic validator to blame a nested field: ``path`` (e.g.
    ``("tiers", 1, "domain_size")``) extends the field path of the one-line :class:`SpecError`. ``unsupported``:
    the value names a choice outside the engine's list (reported as :class:`UnsupportedError`)."""

    def __init__(self, path: tuple, reason: str, unsupported: bool = False):
        super().__init__(reason)
        self.path = tuple(path)
        self.unsupported = unsupported


class PlanError(FastmodelError):
    """A parallelization plan breaks a legality rule.

    ``rule`` is a short key (e.g. ``product_ne_devices``) shared with the
    status codes of sweeps; the message says which rule and why.
    """

    def __init__(self, rule: str, reason: str, where: str | None = None):
        self.rule = rule
        self.reason = reason
        self.where = where
        super().__init__(f"{where + ': ' if where else ''}illegal plan ({rule}): {reason}")

    def located(self, where: str) -> "PlanError":
        """The same error, saying where the plan came from (``t.toml: task.plan``)."""
        return PlanError(self.rule, self.reason, where)


class NotFiniteError(FastmodelError):
    """A configuration's results are not finite numbers (status ``not_finite``): an input magnitude is out
    of range. Sweeps and batches keep such points with that status; a single evaluation raises this."""

    def __init__(self, where: str | None, reason: str):
        self.where = where
        super().__init__(f"{where + ': ' if where else ''}not_finite: {reason}")


class SweepError(FastmodelError):
    """A sweep definition is invalid or too large to hold in memory."""


class NotThereError(FastmodelError, KeyError):
    """A name looked up in a result that it does not hold (``Validation.score``'s metric, key, group or split):
    one line naming what there is; a KeyError too, as a dict's lookup is, printed as a plain line."""

    __str__ = Exception.__str__


class ArgumentError(FastmodelError, TypeError):
    """A Python API function called with an argument it does not take (a misspelt keyword, one too many
    positional): one line naming the function, the argument and the nearest parameter. A TypeError too, as
    Python's own error for such a call is."""


_F = TypeVar("_F", bound=Callable)


def checked_arguments(func: _F) -> _F:
    """``func`` whose call with arguments its signature does not take raises :class:`ArgumentError` (naming the
    nearest parameter of a misspelt keyword) instead of Python's bare TypeError; ``help`` and
    ``inspect.signature`` still show ``func``'s own signature."""
    signature = inspect.signature(func)
    params = [name for name, p in signature.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            unknown = [k for k in kwargs if k not in signature.parameters]
            reason = (f"unknown argument {unknown[0]!r}{nearest(unknown[0], params)}; it takes "
                      f"{', '.join(params)}" if unknown and not _takes_any_keyword(signature) else str(error))
            if "too many positional" in reason:
                keywords = [n for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY]
                named = f"; by keyword: {', '.join(f'{k}=' for k in keywords)}" if keywords else ""
                reason += f" (positional: {', '.join(params[:len(params) - len(keywords)]) or 'none'}{named})"
            raise ArgumentError(f"{func.__qualname__}(): {reason}") from None
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _takes_any_keyword(signature: inspect.Signature) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())


def _bare(text: str) -> str:
    """``text`` lower-cased without ``-_. `` (the separators a hurried user drops or adds)."""
    return re.sub(r"[-_. ]", "", text.lower())


def nearest(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""``. The choice sharing the longest start
    with the word, 4 characters or more, comes first ("disaggregated" -> 'disagg', not the closer spelling
    'aggregated'; "fp8_blok" -> 'fp8_block', not 'fp8'), the closest spelling among equals; otherwise the
    closest spelling (difflib). A choice equal to the word but for case and the separators ``-_. `` comes before
    both ("llama-3.1-8b" -> 'llama3.1-8b', not 'llama-30b'), and so does a choice of the same words in another
    order ("70b-llama2" -> 'llama2-70b', not 'llama2-7b'). Where no spelling is close, the choice holding every
    word of ``word`` ("train-llm" -> 'llm-pretrain', :func:`_by_words`), else the choice whose words' initials
    the word is, when one alone is ("mb" -> 'micro_batch')."""
    choices = list(choices)
    low = word.lower()
    bare = [c for c in choices if _bare(c) == _bare(word)] or [
        c for c in choices if len(_words(word)) > 1 and sorted(_words(c)) == sorted(_words(word))]
    if bare:
        return f" (did you mean '{bare[0]}'?)"

    def shared(choice: str) -> int:
        return len(os.path.commonprefix([low, choice.lower()]))

    longest = max(map(shared, choices), default=0)
    if longest >= 4:
        tied = [c for c in choices if shared(c) == longest]
        pick = max(tied, key=lambda c: difflib.SequenceMatcher(None, low, c.lower()).ratio())
        return f" (did you mean '{pick}'?)"
    initials = [c for c in choices if len(_words(c)) > 1 and "".join(w[0] for w in _words(c)) == low]  # mb
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.5) or _by_words(word, choices) or (
        initials if len(initials) == 1 else [])   # 'dh' fits dgx-h100 and dgx-h200 alike: name neither
    return f" (did you mean '{match[0]}'?)" if match else ""


def _words(text: str) -> list[str]:
    """``text`` lower-cased and split at the separators ``-_. /``."""
    return [w for w in re.split(r"[-_. /]+", text.lower()) if w]


def _same_word(a: str, b: str) -> bool:
    """Equal, or one inside the other, both 3 characters or more ('train' in 'pretrain')."""
    return a == b or (min(len(a), len(b)) >= 3 and (a in b or b in a))


def _by_words(word: str, choices: list[str]) -> list[str]:
    """The choice holding every word of ``word`` (2 words or more), in any order, where the spelling misses:
    "train-llm" -> ['llm-pretrain']; the choice with the fewest other words first, then the closest spelling."""
    words = _words(word)
    if len(words) < 2:
        return []
    fits = [c for c in choices if all(any(_same_word(w, o) for o in _words(c)) for w in words)]
    fits.sort(key=lambda c: (len(_words(c)), -difflib.SequenceMatcher(None, word.lower(), c.lower()).ratio()))
    return fits[:1]
