"""A sweep's size before it runs: memory for an in-memory grid, disk and time estimates, confirmation."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fastmodel.errors import SweepError


def available_memory_bytes() -> int:
    """The memory this process may still take: the least of MemAvailable (/proc/meminfo; else total physical
    memory), the cgroup's limit less its usage (a container: cgroup v2 ``memory.max``/``memory.current``, v1
    ``memory.limit_in_bytes``/``memory.usage_in_bytes``, less the reclaimable page cache ``inactive_file`` of
    ``memory.stat``, as ``docker stats`` counts it) and the address-space limit (``ulimit -v``,
    RLIMIT_AS) less the process's virtual size."""
    have = _meminfo_available()
    for limit_file, usage_file, stat_file, cache_key in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
             "inactive_file"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
             "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:   # "max" or v1's huge "no limit"
            usage -= min(_stat_value(stat_file, cache_key), usage)       # page cache the kernel reclaims
            have = min(have, max(limit - usage, 0))
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            have = min(have, max(soft - _virtual_size_bytes(), 0))
    except (ImportError, OSError, ValueError):
        pass
    return have


def _meminfo_available() -> int:
    """MemAvailable (/proc/meminfo), else total physical memory."""
    available = _proc_kib_field("/proc/meminfo", "MemAvailable")
    return available if available is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _proc_kib_field(path: str, key: str) -> int | None:
    """Bytes of the ``key:  N kB`` line of a /proc file (``/proc/meminfo``, ``/proc/self/status``), or None."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> int | None:
    """The integer in a one-line kernel file, or None (absent, unreadable, ``max``)."""
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _stat_value(path: str, key: str) -> int:
    """The value of ``key`` in a cgroup ``memory.stat`` file (lines ``key value``), 0 where absent."""
    try:
        with open(path) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _virtual_size_bytes() -> int:
    """VmSize of this process (/proc/self/status), 0 where it cannot be read."""
    return _proc_kib_field("/proc/self/status", "VmSize") or 0


def summarise_status(counts: np.ndarray, total: int, names) -> str:
    """"40% illegal_plan, 10% does_not_fit": the share of each status other than ok among ``total`` points
    (``names``: the status names of the engine, in code order)."""
    parts = [f"{100 * c / total:.0f}% {names[k] if k < len(names) else k}" for k, c in enumerate(counts) if c and k]
    return ", ".join(parts)


#: sweeps above this many configurations need confirmation (--yes)
CONFIRM_CONFIGS = 10**10


def human_bytes(n: float) -> str:
    """Bytes in decimal units, e.g. ``"1.5 GB"``."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"


def human_seconds(s: float) -> str:
    """Seconds as s, min, h or days, whichever reads best."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.0f} days"


def check_size(plan, output: str, to_store: bool, confirmed: bool = False) -> str:
    """The sweep plan's size estimate as text; SweepError for an absurd size unless ``confirmed``; an in-memory
    grid over half the available memory is refused even then (write a .zarr store).

    Disk is the uncompressed size of every stored variable (an upper bound; zarr compresses NaN regions of
    illegal points well); time assumes the engine's ``ESTIMATE_CONFIGS_PER_S``.
    """
    import shutil

    need = plan.num_configs * plan.stored_bytes_per_config()
    rate = plan.ESTIMATE_CONFIGS_PER_S
    text = (f"about {human_bytes(need)} {'on disk' if to_store else 'of output'} uncompressed, "
            f"~{human_seconds(plan.num_configs / rate)} at {rate / 1e6:g} M configs/s")
    if not to_store:
        check_memory(plan, netcdf=True)
    if confirmed:
        return text
    try:
        free = shutil.disk_usage(Path(os.path.abspath(output)).parent).free
    except OSError:
        free = None
    if plan.num_configs > CONFIRM_CONFIGS:
        raise SweepError(f"{plan.num_configs:,} configurations: {text}; pass --yes to run it anyway")
    if to_store and free is not None and need > free:
        raise SweepError(f"{plan.num_configs:,} configurations need up to {human_bytes(need)} but only "
                         f"{human_bytes(free)} is free there; pass --yes to run it anyway (zarr compresses)")
    return text


def netcdf_peak_bytes(plan) -> tuple[int, int]:
    """(result matrix, the netCDF-3 writer's copy) in bytes of an in-memory sweep written to ``.nc``: scipy's
    ``netcdf_file.createVariable`` allocates every variable whole (``empty(shape, dtype=type.newbyteorder("B"))``,
    scipy 1.17.1 ``scipy/io/_netcdf.py``) and writes them at close, so the stored output is held a second time
    beside the matrix (docs/usage.md "Size"; measured: a 1,560,000-point MAD-Max grid, 323 + 301 MiB estimated,
    peaked 665 MiB above the same sweep at 1,560 points)."""
    return plan.result_bytes(), plan.num_configs * plan.stored_bytes_per_config()


def check_memory(plan, netcdf: bool = False) -> None:
    """SweepError when the in-memory result grid would take more than half of the available memory; with
    ``netcdf`` (``fastmodel sweep -o out.nc``) the writer's copy counts too (:func:`netcdf_peak_bytes`)."""
    if not netcdf:
        check_grid_memory(plan.num_configs, plan.result_bytes(), "write it to a zarr store with -o out.zarr")
        return
    matrix, copy = netcdf_peak_bytes(plan)
    check_grid_memory(plan.num_configs, matrix + copy, "write it to a zarr store with -o out.zarr (streamed in "
                      "units, memory bounded)", f"{matrix / 2**30:.1f} GiB of results + {copy / 2**30:.1f} GiB "
                      "the .nc writer holds at once, ")


def axes_points(values) -> int:
    """Points of the grid these axis values span (a list, tuple, array or range is an axis, anything else a fixed
    value; ``len`` of a range is free), counted before any axis is built as a list."""
    import numpy as np

    total = 1
    for value in values:
        if isinstance(value, (list, tuple, range, np.ndarray)):
            total *= len(value)
    return total


def check_grid_memory(configs: int, need: int, hint: str, parts: str = "") -> None:
    """SweepError (one line ending in ``hint``) when ``need`` bytes for a grid of ``configs`` points exceed half of
    the available memory (the limit, named in the line): refused before anything is allocated, not after minutes
    of swapping. ``parts``: what the bytes are, said before the count ("... GiB of results + ..., ")."""
    have = available_memory_bytes()
    if need > have // 2:
        raise SweepError(
            f"the result grid needs about {need / 2**30:.1f} GiB ({parts}{configs:,} configurations) but only "
            f"{have / 2**30:.1f} GiB is available (the limit is half of it, {have / 2 / 2**30:.1f} GiB); {hint}"
        )
