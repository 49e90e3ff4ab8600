"""One name per variable, and the older names users still read (``fastmodel.registry`` aliases).

A variable the engines share is stored once, under its one name (``step_time``); a Dataset handed to a user
also answers to its aliases (``iteration_time``): :func:`with_aliases` adds each alias as a second name of the
same data (no copy; its attrs say ``alias_of``). Files keep the one name only (:func:`without_aliases` before
writing; ``fastmodel.analysis.best.open_result`` adds the aliases back when reading). :func:`resolve` finds a
variable a user names by either name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastmodel.registry import ALIASES, VARIABLES

if TYPE_CHECKING:
    import xarray as xr

#: attr that marks an alias variable (the name of the variable it repeats)
ALIAS_OF = "alias_of"


def with_aliases(ds: "xr.Dataset") -> "xr.Dataset":
    """``ds`` with every registry alias of its variables as a second name of the same data (in place; returned).
    A file written before a variable took its one name holds it under the alias: that name is added too."""
    for alias, name in ALIASES.items():
        if alias in ds.data_vars and name not in ds.variables:    # an older file: the one name from the alias
            ds[name] = ds[alias].variable.copy(deep=False)
            ds[alias].attrs = {**ds[alias].attrs, ALIAS_OF: name}
        if name in ds.data_vars and alias not in ds.variables:
            source = ds[name].variable
            ds[alias] = source.copy(deep=False)
            ds[alias].attrs = {**source.attrs, ALIAS_OF: name}
    return ds


def without_aliases(ds: "xr.Dataset") -> "xr.Dataset":
    """``ds`` without its alias variables (what files store)."""
    drop = [name for name in ds.data_vars if ALIAS_OF in ds[name].attrs]
    return ds.drop_vars(drop) if drop else ds


def resolve(names, name: str) -> str:
    """The name under which ``names`` (a Dataset's variables, a record's keys) holds the variable ``name`` gives:
    itself, else its one name or another alias of it; ``name`` unchanged when none is there."""
    if name in names:
        return name
    one = ALIASES.get(name, name)
    var = VARIABLES.get(one)
    for candidate in (one, *(var.aliases if var is not None else ())):
        if candidate in names:
            return candidate
    return name


def variable_hint(ds: "xr.Dataset", name: str, names: list) -> str:
    """What to say after ``unknown variable NAME``: a variable another engine writes (``throughput``, MAD-Max's
    samples/s) names this result's variables of the same kind (a rate per second ranked the same way, from the
    registry: ``tokens_per_s``, ``tokens_per_s_per_gpu`` of a real-world result); else the nearest name."""
    import difflib

    from fastmodel.errors import nearest

    var = VARIABLES.get(name)
    if var is not None and var.units.endswith("/s"):
        kin = [n for n in ds.data_vars if n in VARIABLES and VARIABLES[n].better == var.better
               and VARIABLES[n].units.endswith("/s")]
        if kin:
            return (f": {name} ({var.units}) is a variable of the {', '.join(var.engines)} results; this one "
                    f"has {', '.join(kin)}")
    # a misspelt registry name this result lacks ('thruput': throughput) was answered with the nearest of
    # this result's names ('recompute'), or none: the registry's name, and what this result has of its kind
    near = difflib.get_close_matches(name, {*VARIABLES, *names}, n=1, cutoff=0.75)   # the closest of both
    if near and var is None and near[0] not in names and (hint := variable_hint(ds, near[0], names)).startswith(":"):
        return f" (did you mean '{near[0]}'?){hint}"
    return nearest(name, names)


__all__ = ["ALIAS_OF", "resolve", "variable_hint", "with_aliases", "without_aliases"]
