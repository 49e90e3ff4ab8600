"""Paper style: one palette, figure-size presets, number formats, deterministic saving.

Figures are made on the non-interactive Agg canvas (no display needed) inside
:func:`paper_rc`, so fonts and line widths survive shrinking to a column; they are
saved by :func:`save` with fixed metadata (no dates, fixed SVG hash salt) so the
same figure gives the same bytes.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)  # never require a display

import matplotlib as mpl
import numpy as np
from cycler import cycler
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, Locator, LogLocator, MaxNLocator

from fastmodel.errors import FastmodelError, nearest

#: one colour per op category, the same in every figure (colour-blind-safe Okabe-Ito + grey)
PALETTE: dict[str, str] = {
    "gemm": "#0072B2",
    "emb": "#56B4E9",
    "all2all": "#CC79A7",
    "allreduce": "#009E73",
    "allgather": "#E69F00",
    "reducescatter": "#F0E442",
    "exposed": "#D55E00",
}
CATEGORY_LABELS: dict[str, str] = {
    "gemm": "GEMM", "emb": "embedding", "all2all": "all-to-all", "allreduce": "allreduce",
    "allgather": "allgather", "reducescatter": "reduce-scatter", "exposed": "exposed comm.",
}
#: the colour cycle of every line and curve (scaling lines, serving frontiers): Okabe & Ito's colour-blind-safe
#: palette (https://jfly.uni-koeln.de/color/, 2008), darkest first; matplotlib's default tab10 puts red beside green
CYCLE: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
#: figure widths in inches: one column (ACM/IEEE ~3.33-3.5 in) and the full page width
SIZES: dict[str, float] = {"single": 3.5, "double": 7.16}
FORMATS = ("png", "pdf", "svg")

PAPER_RC = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "legend.frameon": False, "axes.linewidth": 0.6, "lines.linewidth": 1.2,
    "lines.markersize": 3.5, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "xtick.minor.width": 0.4,
    "ytick.minor.width": 0.4, "patch.linewidth": 0.5, "hatch.linewidth": 0.6, "axes.spines.top": False,
    "axes.spines.right": False, "figure.dpi": 100, "savefig.dpi": 300, "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02, "pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none",
    "svg.hashsalt": "fastmodel", "path.simplify": False, "image.interpolation": "nearest",
    "axes.prop_cycle": cycler(color=CYCLE),
}
#: the narrowest and widest figure ``--width`` takes, in inches (a thumbnail to a landscape page)
WIDTH_RANGE = (1.5, 20.0)


@contextlib.contextmanager
def paper_rc():
    """rcParams for paper figures (small, legible fonts; thin lines; editable text in PDF/SVG)."""
    with mpl.rc_context(PAPER_RC):
        yield


def figure_size(size: str | float | tuple[float, float], height: float | None = None) -> tuple[float, float]:
    """(width, height) in inches from a preset name (``single``/``double``), a width in inches, or a (w, h) pair.

    The default height is 0.72 x the width, at most 2.8 in (``single``: 3.5 x 2.52; ``double``: 7.16 x 2.8)."""
    if isinstance(size, str):
        if size not in SIZES:
            raise FastmodelError(f"unknown figure size {size!r}; one of {', '.join(SIZES)}{nearest(size, SIZES)}")
        size = SIZES[size]
    if isinstance(size, (int, float, np.floating, np.integer)) and not isinstance(size, bool):
        width = check_width(size)
        return width, float(height) if height is not None else round(min(width * 0.72, 2.8), 2)
    width, h = size
    return float(width), float(h)


def check_width(width) -> float:
    """``width`` (inches) as a float, or a one-line error naming the range :data:`WIDTH_RANGE`."""
    lo, hi = WIDTH_RANGE
    value = float(width)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise FastmodelError(f"figure width must be between {lo:g} and {hi:g} inches (got {width!r})")
    return value


def new_axes(size="single", height: float | None = None, ax=None):
    """A new (fig, ax) on the Agg canvas, or ``ax``'s figure when an axes is given."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figure_size(size, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def save(fig, path: str | Path, dpi: int = 300) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix: .png/.pdf/.svg) atomically, bytes reproducible."""
    from fastmodel.io.atomic import atomic_path

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise FastmodelError(f"{path}: unknown figure format {path.suffix or '(none)'!r}; use .png, .pdf or .svg")
    if dpi < 10 or dpi > 2400:
        raise FastmodelError(f"dpi must be between 10 and 2400 (got {dpi})")
    metadata = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None, "Producer": None},
                "svg": {"Date": None}}[fmt]
    metadata["Creator"] = "fastmodel"
    engine = fig.get_layout_engine()
    with paper_rc(), atomic_path(path) as tmp:
        for _ in range(2):  # settle the layout (tick labels change it once), then save it as it is
            fig.draw_without_rendering()
        fig.set_layout_engine("none")
        try:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
        finally:
            fig.set_layout_engine(engine)
    return path


# --- units and numbers ---------------------------------------------------------------

_SCALES = {
    "s": [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs")],
    # sizes in binary units, as the memory figures, `run` and `best` say them (GiB); rates stay decimal (GB/s, the
    # datasheets' unit)
    "bytes": [(2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "bytes")],
    "FLOP/s": [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s")],
    "B/s": [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")],
}


def display_unit(units: str | None, values) -> tuple[float, str]:
    """(factor, units) that show ``values`` with 1-3 digits before the point (s -> ms, bytes -> GB ...)."""
    units = units or ""
    if units not in _SCALES:
        return 1.0, units
    arr = np.abs(np.asarray(values, dtype=float))
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return _SCALES[units][-1] if units != "s" else (1.0, "s")
    top = float(arr.max())
    for factor, name in _SCALES[units]:
        if top >= factor:
            return factor, name
    return _SCALES[units][-1]


def fmt_number(value: float) -> str:
    """Compact, readable number: thousands separators, 3 significant digits, no needless exponent."""
    if value is None or not np.isfinite(value):
        return ""
    a = abs(value)
    if a == 0:
        return "0"
    if 1e-3 <= a < 1e7:
        if a >= 100 or float(value).is_integer():
            return f"{value:,.0f}"
        digits = max(0, 2 - math.floor(math.log10(a)))
        return f"{value:,.{digits}f}"
    return f"{value:.2e}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def fixed_formatter(values):
    """One format for every number of a figure's annotations: the decimals that give the largest 3 significant
    digits, the same for all (``0.87``, ``1.05``, ``12.40`` side by side, not ``0.87``, ``1.05``, ``12.4``)."""
    arr = np.abs(np.asarray(values, dtype=float))
    arr = arr[np.isfinite(arr) & (arr > 0)]
    top = float(arr.max()) if arr.size else 1.0
    if not 1e-3 <= top < 1e7:
        return fmt_number
    digits = max(0, 2 - math.floor(math.log10(top)))
    digits = max(digits, -math.floor(math.log10(float(arr.min())))) if arr.size else digits  # no non-zero shows 0
    if digits > 4:  # values spanning many decades: 3 significant digits each, still one rule for all
        return fmt_number
    return lambda value: "" if value is None or not np.isfinite(value) else f"{value:,.{digits}f}"


def is_power_of_two(value: float) -> bool:
    return value > 0 and float(value).is_integer() and (int(value) & (int(value) - 1)) == 0


def fmt_coord(value) -> str:
    """Tick label of a coordinate value: strings as they are; integers exact (2^k from 2^14 up)."""
    if isinstance(value, (str, np.str_, bytes)):
        return str(value)
    value = float(value)
    if value.is_integer():
        if is_power_of_two(value) and value >= 2 ** 14:
            return f"$2^{{{int(math.log2(value))}}}$"
        return f"{int(value)}"
    return f"{value:g}"


def fmt_quantity(value, units: str | None) -> str:
    """A coordinate value with its units, scaled for reading: ``25 GB/s``, ``40 GB``, ``312 TFLOP/s``, ``0.6``."""
    if isinstance(value, (str, np.str_, bytes)) or not units or units == "1":
        return fmt_coord(value)
    factor, shown = display_unit(units, [float(value)])
    scaled = float(value) / factor
    text = fmt_coord(scaled) if factor == 1.0 else fmt_number(scaled)
    return f"{text} {shown}"


#: a log axis spanning at least this many decades labels its ticks 10^k, all alike
POWER_LABEL_DECADES = 4


def unit_formatter(factor: float, axis=None):
    """A tick formatter dividing by ``factor`` (values stay in SI units, labels in display units). Given its
    ``axis``, a log axis spanning :data:`POWER_LABEL_DECADES` decades or more labels every tick ``10^k``: plain
    numbers there mixed ``1e-05``, ``0.0001`` and ``1,000`` on one axis."""
    def fmt(value, _pos):
        if axis is not None and axis.get_scale() == "log" and value > 0:
            lo, hi = sorted(axis.get_view_interval())
            if lo > 0 and math.log10(hi / lo) >= POWER_LABEL_DECADES:
                k = math.log10(value / factor)
                return f"$10^{{{round(k)}}}$" if abs(k - round(k)) < 1e-9 else ""
        return fmt_tick(value / factor)

    return FuncFormatter(fmt)


class DisplayUnitLocator(Locator):
    """Major ticks at round numbers of the display unit (values / ``factor``): 16, 32, 48 GiB, not the round byte
    counts 1e10, 2e10 that read 9.31323, 18.6265 GiB; matplotlib's own steps (1, 2, 2.5, 5, 10) on a linear axis,
    powers of ten on a log one."""

    def __init__(self, factor: float):
        self.factor = factor
        self.linear = MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10])
        # a log axis of under two decades also at 2 and 5 times a power of ten (10, 20, 50 GiB: one tick alone read
        # badly), as log_minor_formatter labels such an axis in decimal units
        self.log, self.log_fine = LogLocator(base=10), LogLocator(base=10, subs=(1.0, 2.0, 5.0))

    def set_axis(self, axis):
        super().set_axis(axis)
        for inner in (self.linear, self.log, self.log_fine):
            inner.set_axis(axis)

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin / self.factor, vmax / self.factor))
        inner = self.linear
        if self.axis is not None and self.axis.get_scale() == "log":
            inner = self.log_fine if lo > 0 and hi / lo < 100 else self.log
        return np.asarray(inner.tick_values(lo, hi)) * self.factor


def unit_ticks(axis, factor: float) -> None:
    """``axis`` labelled in the display unit ``factor`` (:func:`unit_formatter`); for a binary unit (GiB, MiB: not a
    power of ten) also ticked at its round numbers (:class:`DisplayUnitLocator`, unless the figure fixed its ticks),
    minor ticks unlabelled."""
    axis.set_major_formatter(unit_formatter(factor, axis))
    fixed = isinstance(axis.get_major_locator(), FixedLocator)      # ticks the figure chose (a coordinate's levels)
    if not fixed and factor > 0 and abs(math.log10(factor) - round(math.log10(factor))) > 1e-9:
        axis.set_major_locator(DisplayUnitLocator(factor))
        axis.set_minor_formatter("")


def log_minor_formatter(axis, factor: float = 1.0):
    """Minor tick labels of a log ``axis`` (values divided by ``factor``): 2, 3 and 5 times a power of ten while
    the view spans under two decades and shows fewer than three major ticks, none otherwise (a wide axis, or
    fixed major ticks such as 16, 32, 64 nodes); plain numbers, as the major labels (``20``, ``30``, ``50``, not
    ``2 x 10^1``)."""
    def fmt(value, _pos):
        lo, hi = sorted(axis.get_view_interval())
        majors = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
        if value <= 0 or lo <= 0 or hi / lo >= 100 or len(majors) >= 3:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return fmt_tick(value / factor) if any(abs(mantissa - m) < 1e-6 for m in (2, 3, 5)) else ""

    return FuncFormatter(fmt)


def fmt_tick(value: float) -> str:
    """Tick label: up to 6 significant digits, thousands separators, no float noise."""
    return f"{value:,.6g}" if abs(value) < 1e7 else f"{value:.3g}"


def label(name: str, units: str | None) -> str:
    """Axis/colorbar label ``name [units]`` (no brackets for dimensionless)."""
    return f"{name} [{units}]" if units and units != "1" else name


def is_geometric(values) -> bool:
    """True when positive numeric values (>= 3) grow by a constant ratio (log axis fits)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" or arr.size < 3 or np.any(arr <= 0):
        return False
    ratios = arr[1:] / arr[:-1]
    return bool(np.all(ratios > 1.0) and np.allclose(ratios, ratios[0], rtol=1e-6) and ratios[0] >= 1.5)


def luminance(rgba) -> float:
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
