"""Status codes of a result whose ``status`` was masked to NaN (``ds.where(ds.status == 0)`` turns the int8
status into floats, NaN where the condition failed). The figures count such points as :data:`MASKED`, not as the
integer a cast of NaN gives (-9223372036854775808, with a RuntimeWarning), and never as an illegal status."""
from __future__ import annotations

import numpy as np

#: the code a NaN status reads as: below every status code (status is int8, codes 0 and up)
MASKED_CODE = -128
#: the reason a figure gives for a point whose status is NaN
MASKED = "masked (status NaN)"


def status_codes(status) -> np.ndarray:
    """``status``'s codes as ints, at least 1-d (a grid of one point too), NaN as :data:`MASKED_CODE`."""
    values = np.atleast_1d(np.asarray(getattr(status, "values", status)))
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), MASKED_CODE, values)
    return values.astype(int)


def code_name(code: int, names: list[str]) -> str:
    """A status code's name: ``names[code]``, :data:`MASKED` for a NaN status, else the number."""
    if code == MASKED_CODE:
        return MASKED
    return names[code] if 0 <= code < len(names) else str(code)


def status_reasons(status) -> str:
    """The names of ``status``'s non-ok codes, in code order and once each, a NaN status as :data:`MASKED`:
    ``'masked (status NaN), product_ne'``; '' when every point is ok."""
    from fastmodel.registry import status_names

    names = status_names(status)
    return ", ".join(code_name(int(code), names) for code in sorted(set(status_codes(status).ravel()) - {0}))
