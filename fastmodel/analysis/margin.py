"""The memory margin ``best`` ranks by: how much HBM a plan must leave free to count as fitting.

A real-world result says, per configuration, ``memory_per_device`` (allocated tensors plus what lies outside the
caching allocator) and, in its attrs, the device's ``hbm_bytes``. A plan fits when ``memory_per_device <= hbm_bytes
- margin``. The default margin (what ``fits_memory`` was computed with, kernels/lm/evaluate.py
``usable_hbm_bytes``) is each plan's own allocator cache, ``allocator_cache_fraction x memory_allocated``
(``allocator_cache_fraction_expandable`` under expandable segments, ``unrecoverable_share``) (attribute
``memory_margin_rule`` = "allocator_cache"; docs/model_memory.md "What a run keeps free"), or, when the device
column ``usable_hbm_fraction`` is set, ``hbm_bytes - usable_hbm_bytes``. A margin the user sets (``--memory-margin``
/ ``memory_margin=``, bytes) replaces it. A margin below zero or at least the HBM is a one-line error.
"""

from __future__ import annotations

import re

from fastmodel.errors import SweepError

#: the attribute value of a real-world result whose default margin is each plan's allocator cache
ALLOCATOR_CACHE_RULE = "allocator_cache"


def usable_attrs(base) -> dict:
    """A real-world result's attrs for its default margin, from its base column vector ``base``:
    ``usable_hbm_bytes`` when the device column ``usable_hbm_fraction`` is set (> 0), else ``memory_margin_rule``
    (each plan keeps its own allocator cache free, a margin per configuration)."""
    from fastmodel.registry.lm import COLUMN_INDEX

    fraction = float(base[COLUMN_INDEX["usable_hbm_fraction"]])
    if fraction > 0.0:
        return {"usable_hbm_bytes": fraction * float(base[COLUMN_INDEX["hbm_bytes"]])}
    return {"memory_margin_rule": ALLOCATOR_CACHE_RULE}


def unrecoverable_share(row) -> float:
    """The share of allocated bytes a failed allocation does not get back from the caching allocator, as
    kernels/lm/evaluate.py ``unrecoverable_cache_share`` takes it: ``allocator_cache_fraction_expandable`` when the
    plan column ``allocator_expandable_segments`` is set, else ``allocator_cache_fraction`` (docs/model_memory.md "Expandable segments")."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    if float(row[C["allocator_expandable_segments"]]) > 0.0:
        return float(row[C["allocator_cache_fraction_expandable"]])
    return float(row[C["allocator_cache_fraction"]])


def default_margin_bytes(row, allocated: float) -> float:
    """The default margin of one configuration (column vector ``row``, ``allocated`` its peak allocated bytes),
    as kernels/lm/evaluate.py ``usable_hbm_bytes`` applies it: ``(1 - usable_hbm_fraction) x HBM`` when the
    column is set, else ``unrecoverable_share x allocated``."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    fraction = float(row[C["usable_hbm_fraction"]])
    if fraction > 0.0:
        return (1.0 - fraction) * float(row[C["hbm_bytes"]])
    return unrecoverable_share(row) * float(allocated)


def row_margin_bytes(row, allocated: float, memory_margin: float | None = None) -> float:
    """The margin one configuration (column vector ``row``, ``allocated`` its peak allocated bytes) keeps free, as
    its memory timeline and its stage table apply it: the user's ``memory_margin`` (bytes) as
    :func:`user_margin_bytes` checks it against the row's HBM, else :func:`default_margin_bytes`."""
    if memory_margin is None:
        return default_margin_bytes(row, allocated)
    from fastmodel.registry.lm import COLUMN_INDEX as C

    return user_margin_bytes(memory_margin, float(row[C["hbm_bytes"]]))


def user_margin_bytes(memory_margin, hbm: float) -> float:
    """A margin the user gave (bytes, or a :class:`TypedMargin`) as a float, checked as ``run``, ``best`` and the
    memory figures check it: a number >= 0 (:func:`check_margin`) below the HBM ``hbm`` (:func:`check_below_hbm`)."""
    return check_below_hbm(check_margin(memory_margin), float(hbm), memory_margin)


def margin(ds, memory_margin: float | None = None) -> dict:
    """The margin applied to ``ds``: ``{"bytes", "hbm_bytes", "source"}`` (``source``: ``"default"`` or
    ``"user"``); ``hbm_bytes`` None when the result does not record its HBM (then only the default applies).
    The default's ``bytes`` is None when it is a margin per configuration (``"rule"``: "allocator_cache")."""
    hbm = ds.attrs.get("hbm_bytes")
    usable = ds.attrs.get("usable_hbm_bytes")
    if memory_margin is None:
        reserve = float(hbm) - float(usable) if hbm is not None and usable is not None else None
        chosen = {"bytes": reserve, "hbm_bytes": None if hbm is None else float(hbm), "source": "default"}
        if ds.attrs.get("memory_margin_rule") == ALLOCATOR_CACHE_RULE:
            chosen["rule"] = ALLOCATOR_CACHE_RULE
        return chosen
    value = check_margin(memory_margin)
    if hbm is None:
        name = getattr(memory_margin, "flag", "memory_margin")
        if ds.attrs.get("fastmodel_engine") == "serve":
            raise SweepError(serving_margin_refusal(name))
        if ds.attrs.get("fastmodel_engine") == "madmax":     # a re-run records no HBM either
            raise SweepError(f"{name}: applies to real-world training results; a MAD-Max result fits by its "
                             "3 x weights rule (fits_memory), not HBM - margin; filter with --where "
                             "memory_per_device<BYTES instead")
        raise SweepError(f"{name}: this result does not record its device's HBM (attribute hbm_bytes); "
                         "re-run the sweep with this version, or filter with --where memory_per_device<BYTES")
    return {"bytes": check_below_hbm(value, float(hbm), memory_margin), "hbm_bytes": float(hbm), "source": "user"}


def serving_margin_refusal(flag: str) -> str:
    """Why a serving result takes no memory margin, in one line: it records ``memory_per_device`` but not the
    device's HBM capacity (no ``hbm_bytes`` attribute; a serving sweep's attrs are its model, task and engine), so
    ``HBM - margin`` has no HBM to start from; ``--where memory_per_device<BYTES`` filters on what it has."""
    return (f"{flag}: this serving result records memory_per_device but not its device's HBM capacity (no "
            "hbm_bytes attribute), so there is no HBM to take the margin from; filter with "
            "--where memory_per_device<BYTES instead")


def check_margin(memory_margin) -> float:
    """``memory_margin`` (bytes, or a text with a bytes unit as spec files write one: ``"2 GiB"``) as a float >= 0;
    nan (or a non-number) is "not a number", below 0 "negative", each a one-line SweepError naming the value as
    given. The unit is read whatever its case (``"2 gib"`` is 2 GiB, ``"500 mb"`` 500 MB), as ``gib_margin``
    reads the command line's."""
    if isinstance(memory_margin, str) and memory_margin.strip()[-1:] in ("B", "b"):       # "2GiB", "500 MB"
        from fastmodel.spec.quantity import parse_quantity

        unit = re.fullmatch(r"\s*(.*?[\d.])\s*([kmgtpe]?)(i?)b\s*", memory_margin, flags=re.IGNORECASE)
        text = f"{unit[1]} {unit[2].upper()}{unit[3].lower()}B" if unit else memory_margin
        try:
            return _at_least_zero(parse_quantity(text, "bytes"), "memory_margin", repr(memory_margin),
                                  "", ", >= 0 bytes")
        except ValueError as error:
            raise SweepError(f"memory_margin: {error}") from None
    return _at_least_zero(memory_margin, "memory_margin", repr(memory_margin), "bytes", ", >= 0 bytes")


def _at_least_zero(raw, name: str, shown: str, unit: str, hint: str) -> float:
    """``raw`` as a float >= 0, else a one-line SweepError: "not a number" (nan or text) or "negative"
    (``shown`` ``unit``), each ending with how to give the HBM to keep free (``hint``)."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if value != value:
        raise SweepError(f"{name}: {raw!r} is not a number; give the HBM to keep free{hint}")
    given = " ".join(part for part in (shown, unit) if part)
    if value < 0.0:
        raise SweepError(f"{name}: {given} is negative; give the HBM to keep free{hint}")
    if value == float("inf"):
        raise SweepError(f"{name}: {given} is not below any HBM; give the HBM to keep free{hint}")
    return value + 0.0   # -0 typed is a margin of 0.0, not "-0.0 GiB" in best's line


def check_below_hbm(value: float, hbm: float, given=None) -> float:
    """``value`` (bytes) if it is below the HBM ``hbm``, else a one-line SweepError (nothing would fit) naming
    the margin as the user gave it: ``memory_margin``, or the option and its text for a :class:`TypedMargin`
    (``given``, the margin before :func:`check_margin`)."""
    if value >= hbm:
        name, shown = getattr(given, "flag", "memory_margin"), getattr(given, "typed", _gib(value))
        unit = getattr(given, "unit", "")     # 8TiB: "8192 GiB (8TiB)", the value as typed beside it
        raise SweepError(f"{name}: {shown} GiB{f' ({unit})' if unit else ''} is not below the HBM of "
                         f"{hbm / 2**30:.1f} GiB; nothing would fit")
    return value


class TypedMargin(float):
    """A margin in bytes typed on a command line (:func:`gib_margin`): ``flag`` (the option) and ``typed`` (the
    GiB as typed) let a later check name them, as the option's other errors do."""

    flag = "--memory-margin"
    typed = ""
    unit = ""    # the text as typed when it named another binary unit than GiB (8TiB), else ""


def _gib(value: float) -> str:
    """Bytes as GiB for a message: one decimal, or three significant digits past a billion GiB."""
    gib = value / 2**30
    return f"{gib:.1f}" if gib < 1e9 else f"{gib:.3g}"


def gib_margin(text: str | None, flag: str = "--memory-margin") -> float | None:
    """A command line's margin in GiB (``text`` as typed) in bytes, a :class:`TypedMargin`; None when not given.
    The errors name the option and the value as the user typed it, in GiB: "not a number" (nan or text),
    "negative", and later (:func:`check_below_hbm`) "not below the HBM"."""
    if text is None:
        return None
    typed, text = text, _in_gib(text, flag)
    value = _at_least_zero(text, flag, text, "GiB", " in GiB, >= 0") * 2**30
    if value == float("inf"):  # finite GiB past the float range once in bytes (1e300)
        raise SweepError(f"{flag}: {text} GiB is not below any HBM; give the HBM to keep free in GiB, >= 0")
    margin = TypedMargin(value)
    margin.flag, margin.typed = flag, text.strip()
    margin.unit = typed.strip() if re.search(r"[kmtpe]ib\s*$", typed, flags=re.IGNORECASE) else ""
    return margin


def _in_gib(text: str, flag: str) -> str:
    """``text`` without the unit the option is in (``8GiB``, ``8 gib``: 8); another binary unit (``8TiB``,
    ``512MiB``) is read as its GiB (8192, 0.5), so a margin past the HBM says so; a decimal unit (``8GB``) is
    refused naming its value in GiB (8 GB = 7.451 GiB), never read as GiB."""
    match = re.fullmatch(r"\s*(.*?)\s*(gib|([kmgtpe])b|([kmtpe])ib)\s*", text, flags=re.IGNORECASE)
    if match is None:
        return text
    if match.group(4) is not None:
        return _binary_in_gib(match.group(1), match.group(4), text, flag)
    if match.group(3) is None:
        return match.group(1)
    try:
        gib = float(match.group(1)) * 1000 ** "kmgtpe".index(match.group(3).lower()) * 1000 / 2**30
    except ValueError:
        return text
    if gib != gib or abs(gib) == float("inf"):   # nan, 1e400: "not a number", "not below any HBM" say it
        return text
    raise SweepError(f"{flag}: {text.strip()!r} is in {match.group(2)}, the option in GiB ({text.strip()} = {gib:.4g} "
                     "GiB); give the HBM to keep free in GiB, >= 0")


def _binary_in_gib(number: str, prefix: str, text: str, flag: str) -> str:
    """``number`` KiB/MiB/TiB/PiB/EiB (``prefix``) as GiB, as text; ``text`` unchanged when ``number`` is not a
    number (then "not a number"); past the float range, "not below any HBM"."""
    try:
        gib = float(number) * 1024.0 ** ("kmgtpe".index(prefix.lower()) - 2)
    except ValueError:
        return text
    if gib != gib:
        return text
    if gib == -float("inf"):
        return "-inf"         # "negative"
    if gib == float("inf"):
        raise SweepError(f"{flag}: {text.strip()!r} is not below any HBM; give the HBM to keep free in GiB, >= 0")
    return repr(gib) if gib != int(gib) or abs(gib) >= 1e16 else str(int(gib))


def fits_under(ds, chosen: dict):
    """Whether each configuration fits under the margin ``chosen`` (:func:`margin`): ``fits_memory`` for the
    default, else ``memory_per_device <= hbm_bytes - margin``."""
    if chosen["source"] == "default":
        return ds["fits_memory"] > 0.5
    return ds["memory_per_device"] <= chosen["hbm_bytes"] - chosen["bytes"]


def marks_over_memory(ds) -> bool:
    """Whether the sweep of ``ds`` marked its points over memory ``does_not_fit`` (``only_fitting`` in its ``sweep``
    attr, the JSON of the sweep's definition); False without one, or with one that cannot be read. Under a margin
    the user sets, ``ok`` becomes ``does_not_fit`` only where this holds (:func:`fit_view`, ``best``'s table)."""
    import json

    try:
        return bool(json.loads(ds.attrs.get("sweep", "{}")).get("only_fitting"))
    except (TypeError, ValueError, AttributeError):
        return False


def fit_view(ds, memory_margin: float | None = None, include_oom: bool = False, flag: str = "--memory-margin"):
    """``ds`` as a figure of it shows what fits, under ``best``'s rules: with ``memory_margin`` (bytes, as
    :func:`margin` checks it) ``fits_memory`` and the ``ok`` / ``does_not_fit`` statuses follow
    ``memory_per_device <= HBM - margin`` (``does_not_fit`` is set only where the sweep marks points over memory,
    ``only_fitting``) and the attrs say the usable HBM it leaves (``usable_hbm_bytes``, the memory figure's line);
    with ``include_oom`` the plans over memory are drawn as answers (their status ``ok``, the status attr
    ``include_oom`` telling :func:`fastmodel.plot.data.over_memory` not to fold them back). ``ds`` itself is left
    as it is; without either option it is returned. Real-world training results only (a one-line error
    otherwise: MAD-Max's fit is its 3 x weights rule; a serving result records no HBM capacity,
    :func:`serving_margin_refusal`), but for ``include_oom`` on a serving result, which draws its points over HBM
    as best --include-oom ranks them."""
    from fastmodel.registry import status_names

    if memory_margin is None and not include_oom:
        return ds
    if memory_margin is None and ds.attrs.get("fastmodel_engine") == "serve" and "fits_memory" in ds \
            and "status" in ds:    # serving: its points over HBM are ok, folded for figures only (plot.data)
        out = ds.copy(deep=False)
        out["status"] = ds["status"].copy(deep=False).assign_attrs(ds["status"].attrs, include_oom=1)
        return out
    if memory_margin is not None and ds.attrs.get("fastmodel_engine") == "serve" and "hbm_bytes" not in ds.attrs:
        raise SweepError(serving_margin_refusal(flag))
    if ds.attrs.get("fastmodel_engine") != "lm" or "fits_memory" not in ds or "status" not in ds:
        given = flag if memory_margin is not None else "--include-oom"
        also = "" if memory_margin is not None else " and serving results"
        raise SweepError(f"{given}: applies to real-world training results{also} (fits_memory of the real-world "
                         "memory model), not to this one")
    out = ds.copy(deep=False)
    out.attrs = dict(ds.attrs)
    status = ds["status"]
    dnf = status_names(status).index("does_not_fit")
    if memory_margin is not None:
        chosen = margin(ds, memory_margin)
        fits = fits_under(ds, chosen).broadcast_like(status)
        status = status.where(~((status == dnf) & fits), 0)
        if marks_over_memory(ds):
            status = status.where(~((status == 0) & ~fits), dnf)
        out["fits_memory"] = fits.astype(ds["fits_memory"].dtype).assign_attrs(ds["fits_memory"].attrs)
        out.attrs.pop("memory_margin_rule", None)
        out.attrs.update(usable_hbm_bytes=chosen["hbm_bytes"] - chosen["bytes"], memory_margin=chosen["bytes"])
    if include_oom:
        status = status.where(status != dnf, 0)
    out["status"] = status.astype(ds["status"].dtype).assign_attrs(ds["status"].attrs, include_oom=int(include_oom))
    return out


def describe(chosen: dict) -> str:
    """The margin in words, for ``best``'s line on the plans it dropped."""
    if chosen.get("rule") == ALLOCATOR_CACHE_RULE:
        hbm = f"HBM {chosen['hbm_bytes'] / 2**30:.1f} GiB" if chosen["hbm_bytes"] is not None else "the HBM"
        return (f"{hbm} minus each plan's own allocator cache, allocator_cache_fraction x memory_allocated "
                "(the default: memory_reserved + overhead must fit; allocator_cache_fraction_expandable under "
                "expandable segments)")
    if chosen["bytes"] is None:
        return "usable HBM"
    hbm = f"HBM {chosen['hbm_bytes'] / 2**30:.1f} GiB minus " if chosen["hbm_bytes"] is not None else ""
    which = "set by --memory-margin" if chosen["source"] == "user" else \
        "the default: 1 - usable_hbm_fraction, set on the device"
    return f"{hbm}a margin of {chosen['bytes'] / 2**30:.1f} GiB, {which}"
