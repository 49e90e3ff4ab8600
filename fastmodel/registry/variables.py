"""What a result variable and a status code are, and the variables several engines produce.

Dependency-free (the kernels' layouts derive their indices from the registry modules, and the numba cache key
hashes them per engine, ``kernels/jit.py``).

A :class:`Variable` declares its name, units, direction (``better``), description, the engines that produce
it, the dimensions it has beyond the grid's own axes (``dims``: the real-world memory breakdown has
``memory_kind``), its dtype in a dataset and its aliases. **One name per concept**: where two engines mean the
same quantity they share one :class:`Variable` declared here (step time, memory per device, fits in memory,
GEMM time, weights per device); an older name of it is an alias (``iteration_time`` for ``step_time``) that
datasets, ``batch`` lines, ``best --by`` and plots still answer to (``fastmodel.io.results``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the engines (fastmodel/engines.py), in the order the registry lists their variables
ENGINE_NAMES = ("madmax", "lm", "serve")


@dataclass(frozen=True)
class Variable:
    """One result variable: how it is named, measured and read, and which engines produce it."""

    name: str
    units: str
    better: str                      # "min" | "max" | "" (no direction: a batch size, a capacity, a count)
    description: str
    engines: tuple[str, ...] = ()
    long_name: str = ""
    dims: tuple[str, ...] = ()       # dimensions beyond the grid's axes, each a key of the engine's COORDS
    dtype: str = "float64"           # "float64" | "bool" (stored 0/1 by the kernels, a flag in datasets)
    aliases: tuple[str, ...] = ()    # older names, answered to wherever a user reads the variable

    def attrs(self) -> dict[str, str]:
        """xarray attrs: units, long name, description, and ``better`` where the variable has a direction."""
        out = {"units": self.units, "long_name": self.long_name or self.name.replace("_", " "),
               "description": self.description}
        if self.better:
            out["better"] = self.better
        return out


@dataclass(frozen=True)
class Status:
    """One status code of a grid point: its name and the message that explains it."""

    name: str
    message: str


@dataclass(frozen=True)
class Breakdown:
    """How an engine's step time splits into components (``fastmodel plot breakdown``): ``serialized`` is every
    component summed (compute and all communication), ``overlapped`` the compute and the communication left
    exposed, which add up to ``total``."""

    serialized: tuple[str, ...]
    overlapped: tuple[str, ...]
    total: str = "step_time"


#: the status every engine's stores start a point with, until its unit of work is written
NOT_COMPUTED = Status("not_computed", "zarr store: the point's unit of work has not been written (yet)")
#: the status of a point whose results are not all finite numbers (kernels/finite.py), in the real-world training
#: and the serving engines' codes alike
NOT_FINITE = Status("not_finite", "a result is not a finite number: an input magnitude is out of range (e.g. a "
                    "bandwidth of 1e-300 B/s)")

_TRAINING = ("madmax", "lm")
_ALL = ENGINE_NAMES

# --- variables two or three engines produce (one name, one unit, one direction) ------------------------------
STEP_TIME = Variable(
    "step_time", "s", "min",
    "Time of one step: one optimizer step of training (MAD-Max: the end of the last op on either stream; the "
    "real-world model: the busiest pipeline stage's step), one forward pass for MAD-Max inference.",
    _TRAINING, "step time", aliases=("iteration_time",))
TIME_GEMM = Variable(
    "time_gemm", "s", "min",
    "GEMM time of one step on one device (MAD-Max: sum of GEMM durations; the real-world model: the busiest "
    "device, recompute included).", _TRAINING, "GEMM time")
WEIGHT_MEMORY = Variable(
    "weight_memory", "bytes", "min",
    "Weights held per device (MAD-Max: dense + embedding weights only; serving: the most loaded device).",
    ("madmax", "serve"), "weights per device")
MEMORY_PER_DEVICE = Variable(
    "memory_per_device", "bytes", "min",
    "Memory per device (MAD-Max: memory_weight_factor x weight_memory, the paper's 3 x weights rule; the "
    "real-world model: the sum of its memory kinds on the most loaded rank; serving: weights + KV cache + "
    "activations + framework constant).", _ALL, "memory per device")
FITS_MEMORY = Variable(
    "fits_memory", "1", "max",
    "True if the point fits in memory, with each engine's margin. MAD-Max: memory_per_device (memory_weight_factor "
    "x weights) <= the device's HBM (hbm_capacity), no margin. The real-world training model: memory_per_device <= "
    "the HBM less the plan's own unrecoverable allocator cache, i.e. memory_reserved + overhead <= HBM (the "
    "dataset's memory_margin_rule attr), or <= usable_hbm_fraction x HBM when the device states that fraction "
    "(its usable_hbm_bytes attr); docs/model_memory.md, What a run keeps free. Serving: weights + KV cache + "
    "workspace + framework memory <= usable_hbm_fraction x HBM, 0.95 unless the device states it "
    "(docs/model_serving.md S9).", _ALL, "fits in memory", dtype="bool")

#: the variables above, by name
SHARED: dict[str, Variable] = {v.name: v for v in (STEP_TIME, TIME_GEMM, WEIGHT_MEMORY, MEMORY_PER_DEVICE,
                                                   FITS_MEMORY)}


def producer(engine: str):
    """A constructor of one engine's own variables: ``producer("lm")("mfu", "1", "max", "doc")``."""
    def make(name: str, units: str, better: str, description: str, long_name: str = "", **fields) -> Variable:
        return Variable(name, units, better, description, (engine,), long_name, **fields)

    return make
