"""The one place kernels get compiled: numba's ``njit`` with the project's defaults.

Every kernel module imports ``njit`` and ``prange`` from here instead of from
numba, so compilation options (on-disk caching, its location and keying) are
decided once.

Compiled kernels are cached on disk, never inside the installed package: a
cache file written into ``site-packages/fastmodel/kernels/__pycache__`` outlives
``pip uninstall`` and turns the leftover folder into a namespace package that
shadows the next install. The cache lives in a per-user directory
(``$NUMBA_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/fastmodel`` or
``~/.cache/fastmodel``), in a subfolder keyed by fastmodel's version and a hash
of the bytes of every file of this package. numba itself keys its index only by
the *entry* function's file, so an edit to a helper module (``layout``,
``costs``) or to the registry the layouts derive their indices from
(``fastmodel/registry/*.py``) would otherwise load a stale kernel; here any edit
selects a fresh folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: ``FASTMODEL_JIT=0``: kernels run as plain Python (numba is not imported). The ``fastmodel run`` console
#: command sets it for its one configuration, where loading numba and its compiled kernels (about 1.5 s)
#: costs far more than interpreting one row.
#: Any other value is refused here, at the first import of a kernel, so the Python API refuses it as the CLI does
#: (``fastmodel/cli/app.py`` ``_check_environment``, one line before any kernel loads): ``false`` ran compiled.
_JIT = os.environ.get("FASTMODEL_JIT", "")
if _JIT not in ("", "0", "1"):
    raise ValueError(f"FASTMODEL_JIT={_JIT!r}: give 0 (kernels interpreted) or 1 (compiled, the default), or unset it")
INTERPRETED = _JIT == "0"

if INTERPRETED:
    prange = range
else:
    from numba import config as _numba_config
    from numba import njit as _numba_njit
    from numba import prange

__all__ = ["njit", "prange", "stack_vector", "cache_dir", "kernel_source_key", "INTERPRETED", "compiled_engines",
           "LABELS"]


# --- scratch vectors without a reference count -----------------------------------------------------------------

if INTERPRETED:
    def stack_vector(size):
        """``np.empty(size)`` (the interpreted kernels)."""
        import numpy as np

        return np.empty(size)
else:
    from numba import types as _types
    from numba.core import cgutils as _cgutils
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def stack_vector(typingctx, size):
        """A float64 vector of ``size`` (a compile-time constant: a literal or a module-level int) in the stack
        frame of the kernel that calls it, with no reference count: valid until that kernel returns, so it must
        not be returned or stored. Every array a numba kernel passes to another kernel is reference-counted on
        the way in and out (an atomic increment and decrement of its meminfo, about 20 cycles each); a
        configuration's column vector ``row`` and its scratch vectors go through hundreds of such calls per
        configuration, most of the per-configuration time of the serving kernels before (bench/bench_serve.py).
        A vector without a meminfo (as ``numba.carray`` makes) skips the atomics; views of it (``v[1]``,
        ``v.reshape``) have none either. The contents start undefined, as ``np.empty``'s.

        One buffer per call site per frame: the alloca is made once in the calling kernel's frame (LLVM hoists
        it to the entry block), so calling ``stack_vector`` in a loop, or in an ``inline="always"`` callee that
        is called in a loop, returns the same memory at every iteration; allocate before the loop and reuse.
        Under a ``parallel=True`` ``prange`` each worker thread calls the chunk's kernel in a frame on its own
        stack, so workers never share a vector (tests/shared/test_stack_vector.py)."""
        if not isinstance(size, _types.IntegerLiteral):
            return None
        n = size.literal_value
        vector = _types.Array(_types.float64, 1, "C")

        def codegen(context, builder, signature, args):
            from numba.np.arrayobj import populate_array

            data = _cgutils.alloca_once(builder, context.get_value_type(_types.float64), size=n)
            array = context.make_array(vector)(context, builder)
            intp = context.get_value_type(_types.intp)
            populate_array(array, data=data, shape=[intp(n)], strides=[intp(8)], itemsize=intp(8), meminfo=None)
            return array._getvalue()

        return vector(size), codegen

_PACKAGE_DIR = Path(__file__).resolve().parent


def _lm_registries() -> tuple[str, ...]:
    """The registry modules of the lm column table: ``registry/lm.py`` and every ``registry/lm_*.py`` holding its
    rows or statuses, found in the folder, so a new one cannot be left out of the cache key."""
    from importlib.util import find_spec

    spec = find_spec("fastmodel.registry")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return tuple(f"fastmodel.registry.{p.stem}" for p in sorted(folder.glob("lm*.py")))


#: the registry modules of the lm column table
LM_REGISTRIES = _lm_registries()
#: engine -> (its kernel subfolders, the registry modules whose module-level constants its kernels compile
#: in). Each engine's kernels are cached in a folder of their own, keyed by the shared kernel files (this
#: folder's top level), its subfolders and its registries, so an edit to an lm kernel recompiles the lm and
#: serving kernels and leaves the MAD-Max ones cached. Serving compiles in the lm layer shape.
ENGINES = {
    "madmax": (("madmax",), ("fastmodel.registry.madmax", "fastmodel.registry.variables")),
    "lm": (("lm",), (*LM_REGISTRIES, "fastmodel.registry.variables")),
    "serve": (("lm", "serve"), (*LM_REGISTRIES, "fastmodel.registry.serve", "fastmodel.registry.variables")),
}
#: the key of the shared kernels (schedule, roofline, nccl) when compiled on their own
SHARED = "shared"
#: what each engine's kernels are, and about how long they take to compile on an empty cache
#: (bench/bench_compile.py on the project's 2-core VM), for the first-use note
LABELS = {"madmax": "MAD-Max", "lm": "real-world training", "serve": "serving", SHARED: "shared scheduling"}
FIRST_USE = {"madmax": "about 15 s", "lm": "about a minute and a half", "serve": "about 30 s",
             SHARED: "a few seconds"}


def engine_of(module: str) -> str:
    """The engine a kernel module belongs to (``fastmodel.kernels.lm.step`` -> ``lm``), else :data:`SHARED`."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["fastmodel", "kernels"] and parts[2] in ENGINES \
        else SHARED


def _constant_sources(engine: str = SHARED) -> list[Path]:
    from importlib.util import find_spec

    names = sorted({n for _, regs in ENGINES.values() for n in regs}) if engine == SHARED else ENGINES[engine][1]
    paths = []
    for name in names:
        spec = find_spec(name)
        if spec is not None and spec.origin:
            paths.append(Path(spec.origin))
    return paths


def kernel_source_key(folder: str | os.PathLike = _PACKAGE_DIR, constant_sources=None, engine: str = SHARED) -> str:
    """Hash of the names and bytes of the kernel files ``engine`` compiles in (the shared top level of
    ``folder`` and the engine's subfolders; :data:`SHARED`: the top level only) and of the registry modules
    whose constants they read (``constant_sources``; default: the installed ones)."""
    digest = hashlib.sha256()
    folder = Path(folder)
    extra = _constant_sources(engine) if constant_sources is None else [Path(p) for p in constant_sources]
    files = sorted(folder.glob("*.py"))
    for sub in ENGINES[engine][0] if engine != SHARED else ():
        files += sorted((folder / sub).glob("*.py"))
    for path in [*files, *extra]:
        digest.update(path.relative_to(folder).as_posix().encode() if path.is_relative_to(folder)
                      else path.name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("fastmodel")
    except Exception:  # noqa: BLE001 - not installed (source checkout): the source hash still keys the cache
        return "src"


def _base_dir() -> Path:
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user:
        return Path(user)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fastmodel"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def cache_dir(engine: str = SHARED) -> Path | None:
    """The folder ``engine``'s compiled kernels are cached in, created if needed; None when no folder is
    writable."""
    key = f"numba-{_version()}-{engine}-{kernel_source_key(engine=engine)}"
    candidates = [_base_dir() / key, Path(tempfile.gettempdir()) / f"fastmodel-{os.getuid()}" / key]
    return next((c for c in candidates if _writable(c)), None)


_CACHE_DIRS: dict[str, Path | None] = {}


def _engine_cache_dir(engine: str) -> Path | None:
    if engine not in _CACHE_DIRS:
        _CACHE_DIRS[engine] = cache_dir(engine)
    return _CACHE_DIRS[engine]


def njit(*args, **options):
    """``numba.njit`` with ``cache=True`` (in :func:`cache_dir`) unless the caller says otherwise; the plain
    function when :data:`INTERPRETED`."""
    if INTERPRETED:
        return args[0] if len(args) == 1 and callable(args[0]) else (lambda func: func)
    if len(args) == 1 and callable(args[0]):
        return _decorate(args[0], (), options)
    return lambda func: _decorate(func, args, options)


def _decorate(func, args, options):
    """``func`` compiled with numba, cached in its engine's folder (:func:`engine_of` its module); an lm kernel
    is compiled at one signature per argument type (:class:`_TypeDispatcher`)."""
    engine = engine_of(func.__module__)
    folder = _engine_cache_dir(engine)
    options = {**options}
    options.setdefault("cache", folder is not None)
    if not options["cache"]:
        return _one_signature_per_type(_numba_njit(*args, **options)(func), engine)
    # numba picks the cache folder when the function is decorated: point it at ours for that moment only
    saved = _numba_config.CACHE_DIR
    _numba_config.CACHE_DIR = str(folder)
    try:
        return _one_signature_per_type(_numba_njit(*args, **options)(func), engine)
    finally:
        _numba_config.CACHE_DIR = saved


if not INTERPRETED:
    from numba.core.registry import CPUDispatcher as _CPUDispatcher
    from numba.core.types import unliteral as _unliteral

    class _TypeDispatcher(_CPUDispatcher):
        """A kernel called from another kernel is compiled for the types of its arguments, not their values.
        numba types a constant argument as a literal (``Literal[int](8)``, ``Literal[bool](True)``) and compiles
        the callee once per literal value and call site kind: ``memory_offload.offloads(row, MODULE)`` was
        compiled 15 times, ``passes._layer_kinds`` 5 times, each a full compile of the callee and of what it
        calls (bench/compile_profile.py). Typed by their types (``int64``, ``bool``) they compile once; the
        values are the same at run time, and without fast-math LLVM folds a constant argument to the same
        bits as it computes with it, so the results are the same (docs/performance.md "Cold compile")."""

        def get_call_template(self, args, kws):
            return super().get_call_template(tuple(_unliteral(a) for a in args),
                                             {k: _unliteral(v) for k, v in kws.items()})


def _one_signature_per_type(dispatcher, engine: str):
    """``dispatcher`` typed by argument types when called from a kernel (:class:`_TypeDispatcher`), for the lm
    engine's kernels (MAD-Max's and serving's keep numba's default)."""
    if engine == "lm" and type(dispatcher) is _CPUDispatcher:
        dispatcher.__class__ = _TypeDispatcher
    return dispatcher


# --- first use: a note when kernels compile (issue 25 item 7) ------------------------------------------------

_COMPILED: dict[str, int] = {}
_NOTED: set[str] = set()


def compiled_engines() -> dict[str, int]:
    """Kernel signatures compiled (not loaded from the cache) in this process, by engine."""
    return dict(_COMPILED)


def _note_wanted() -> bool:
    """``FASTMODEL_COMPILE_NOTE=1``/``0`` says; otherwise only when stderr is a terminal (a person waits)."""
    import sys

    setting = os.environ.get("FASTMODEL_COMPILE_NOTE", "")
    if setting in ("0", "1"):
        return setting == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _on_compile(engine: str, nested: bool = False) -> None:
    """A kernel of ``engine`` starts compiling (a cache miss): count it, and say so once per engine. Helpers
    compiled inside another kernel's compile (``nested``) are counted, not announced: the kernel was."""
    import sys

    _COMPILED[engine] = _COMPILED.get(engine, 0) + 1
    if nested or engine in _NOTED or not _note_wanted():
        return
    _NOTED.add(engine)
    print(f"compiling the {LABELS.get(engine, engine)} kernels for first use, {FIRST_USE.get(engine, 'a while')} "
          f"(once: later runs load them from the cache; 'fastmodel warmup' compiles every engine ahead)",
          file=sys.stderr, flush=True)


if not INTERPRETED:
    from numba.core import event as _event

    class _CompileListener(_event.Listener):
        """numba's ``numba:compile`` event fires only when a signature is not in the disk cache."""

        depth = 0

        def on_start(self, event):
            func = getattr(event.data.get("dispatcher"), "py_func", None)
            _on_compile(engine_of(getattr(func, "__module__", "") or ""), nested=self.depth > 0)
            self.depth += 1

        def on_end(self, event):
            self.depth = max(0, self.depth - 1)

    _event.register("numba:compile", _CompileListener())
