"""Fault injection: a sweep killed or interrupted in every window resumes to the bytes of an uninterrupted run.

Each fault runs `fastmodel sweep` in a subprocess that kills itself (SIGKILL) or
interrupts itself (SIGINT, as Ctrl-C) at a chosen point: while the store is
created, in the middle of a unit (some variables of a unit written, not its done
flag), and on the last unit's done flag. Then `--resume` (or a plain rerun when
no store was left) must complete it, and every variable must equal the
uninterrupted run bit for bit -- for a MAD-Max sweep and a real-world (lm) one, which share the store machinery
(fastmodel/sweeps). Also: two writers at once, and a full disk.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import xarray as xr

SWEEP = ('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\nunit_configs = 8\n'
         '[axes]\nnum_nodes = [1, 2, 4]\nflops_util = { start = 0.4, stop = 0.8, num = 5 }\n'
         'global_batch = [512, 1024]\nplan = ["fsdp/ddp", "tp,ddp/mp", "ddp,pp/mp,ddp"]\n')
#: a real-world training sweep: 2 x 4 x 2 points in 4 units of 4 (the plan axis split, micro_batch whole)
LM_SWEEP = ('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\nunit_configs = 4\n'
            '[axes]\nnum_nodes = [1, 2]\nplan = ["dp", "tp8", "tp4.pp2", "tp3"]\nmicro_batch = [1, 2]\n')
#: each engine's sweep file, its number of units and a variable to rank by
SWEEPS = {"madmax": (SWEEP, 18, "throughput"), "lm": (LM_SWEEP, 4, "step_time")}

# runs the CLI with a fault planted at POINT, signalled with SIG, the COUNT-th time the point is reached
DRIVER = textwrap.dedent("""
    import os, signal, sys
    import xarray as xr, zarr
    from fastmodel.cli import main

    point, sig, count = sys.argv[1], getattr(signal, sys.argv[2]), int(sys.argv[3])
    seen = [0]

    def fire():
        seen[0] += 1
        if seen[0] == count:
            os.kill(os.getpid(), sig)

    if point == "creation":  # after the metadata, before the status fill and the rename
        real = xr.Dataset.to_zarr
        def to_zarr(self, *a, **k):
            out = real(self, *a, **k)
            fire()
            return out
        xr.Dataset.to_zarr = to_zarr
    else:
        from zarr.core.array import Array
        created = [False]
        real_rename = os.rename
        def rename(*a, **k):  # the store exists under its name: units are written from now on
            real_rename(*a, **k)
            created[0] = True
        os.rename = rename
        real = Array.__setitem__
        def setitem(self, key, value):
            name = self.path.rsplit("/", 1)[-1]
            if created[0] and ((point == "mid-unit" and name == "status") or (point == "done-flag" and name == "unit_done")):
                fire()  # mid-unit: float variables of the unit written, status and done flag not yet
            return real(self, key, value)
        Array.__setitem__ = setitem
    main(["sweep", sys.argv[4], "-o", sys.argv[5], "--no-progress"])
""")


def _cli(*args, cwd):
    """The CLI in this process (fast); returns (exit code, output)."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.output


def _assert_same(path, reference):
    got = xr.open_zarr(path)
    assert bool(got.unit_done.all())
    for name in reference.data_vars:
        if name == "unit_done":
            continue
        a, b = got[name].values, reference[name].values
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), name  # bit for bit, NaN payloads included


def _reference(folder, text):
    (folder / "s.toml").write_text(text)
    code, output = _cli("sweep", "s.toml", "-o", "ref.zarr", "--no-progress", cwd=folder)
    assert code == 0, output
    return xr.open_zarr(folder / "ref.zarr").load()


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted store of each engine's sweep (built on first use)."""
    made = {}

    def get(engine):
        if engine not in made:
            made[engine] = _reference(tmp_path_factory.mktemp(f"reference-{engine}"), SWEEPS[engine][0])
        return made[engine]

    return get


@pytest.fixture(scope="module")
def reference(references):
    return references("madmax")


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith(".lock"))


@pytest.mark.parametrize("engine", ["madmax", "lm"])
@pytest.mark.parametrize("point, count, sig", [
    ("creation", 1, "SIGKILL"),    # metadata written under the temporary name, not renamed yet
    ("mid-unit", 3, "SIGKILL"),    # third unit: float variables written, its status and done flag not
    ("mid-unit", 3, "SIGINT"),     # the same as Ctrl-C: exit 130, one line
    ("done-flag", -1, "SIGKILL"),  # on the last unit's done flag: every value written, the flag not
])
def test_interrupted_sweep_resumes_bit_identical(tmp_path, references, engine, point, count, sig):
    text, units, by = SWEEPS[engine]
    reference = references(engine)
    count = units if count < 0 else count
    (tmp_path / "s.toml").write_text(text)
    killed = subprocess.run([sys.executable, "-c", DRIVER, point, sig, str(count), "s.toml", "out.zarr"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if sig == "SIGKILL":
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    else:
        assert killed.returncode == 130, killed.stderr
        assert "Traceback" not in killed.stderr and "rerun with --resume" in killed.stderr
    store = tmp_path / "out.zarr"
    if point == "creation":
        assert not store.exists()  # no half-made store: a plain rerun starts over, --resume says so
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", "--resume", cwd=tmp_path)
        assert code == 2 and "run without --resume" in output
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", "--no-progress", cwd=tmp_path)
    else:
        assert store.exists()
        code, output = _cli("best", "out.zarr", "--by", by, cwd=tmp_path)
        assert code == 2 and "not computed" in output, output  # readers refuse the incomplete store
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", cwd=tmp_path)
        assert code == 2 and "--resume" in output
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", "--resume", "--no-progress", cwd=tmp_path)
    assert code == 0, output
    _assert_same(store, reference)
    assert _leftovers(tmp_path) == []


def _two_writers(tmp_path, output: str, flags: list[str]) -> list[tuple[int, str]]:
    """(exit code, stderr) of two ``fastmodel sweep s.toml -o OUTPUT`` started together in ``tmp_path``."""
    runs = [subprocess.Popen([sys.executable, "-m", "fastmodel.cli", "sweep", "s.toml", "-o", output,
                              "--no-progress", *flags], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    return [(p.wait(timeout=600), p.stderr.read()) for p in runs]


def test_two_concurrent_writers(tmp_path, reference):
    (tmp_path / "s.toml").write_text(SWEEP)
    for flags in ([], ["--force"]):
        results = _two_writers(tmp_path, "out.zarr", flags)
        codes = sorted(code for code, _ in results)
        assert codes[0] == 0 and codes[1] in (0, 2), results
        for code, err in results:
            assert "Traceback" not in err, err
            if code == 2:
                assert err.strip().startswith("error: ") and err.strip().count("\n") == 0 or \
                    err.strip().splitlines()[-1].startswith("error: "), err
                assert "being written by pid" in err or "exists" in err, err
        _assert_same(tmp_path / "out.zarr", reference)
    assert _leftovers(tmp_path) == []


def test_disk_full_then_resume(tmp_path, reference):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("this platform does not allow mounting a tmpfs")
    try:
        (disk / "s.toml").write_text(SWEEP)
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", "--no-progress", cwd=disk)
        assert code == 2 and output.splitlines()[-1].startswith("error: "), output
        assert "No space left on device" in output, output
        store = disk / "out.zarr"
        if store.exists():  # the units that fit are kept; readers refuse the store until it is complete
            code, output = _cli("best", "out.zarr", "--by", "throughput", cwd=disk)
            assert code == 2 and "not computed" in output, output
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        flags = ["--resume"] if store.exists() else []
        code, output = _cli("sweep", "s.toml", "-o", "out.zarr", "--no-progress", *flags, cwd=disk)
        assert code == 0, output
        _assert_same(store, reference)
        assert [p for p in os.listdir(disk) if p.startswith(".")] == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# --- .nc writers (issue 25 item 3): the same lock as stores, atomic, and Ctrl-C says what is on disk ----------

# runs the CLI and signals itself with SIG right after the dataset is written under its temporary name, or
# ("pause") writes a file "writing" and waits 5 s before writing the dataset
NC_DRIVER = textwrap.dedent("""
    import os, signal, sys, time
    import xarray as xr
    from fastmodel.cli import main

    action = sys.argv[1]
    if action == "SIGTERM_BACKGROUND":     # a shell's `cmd &` job: SIGINT ignored, SIGTERM still unwinds
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        action = "SIGTERM"
    real = xr.Dataset.to_netcdf
    def to_netcdf(self, *a, **k):
        if action == "pause":
            open("writing", "w").close()
            time.sleep(5)
            return real(self, *a, **k)
        out = real(self, *a, **k)
        os.kill(os.getpid(), getattr(signal, action))
        return out
    xr.Dataset.to_netcdf = to_netcdf
    main(["sweep", sys.argv[2], "-o", sys.argv[3], "--no-progress"])
""")

REAL_SWEEP = ('model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'
              '[axes]\nnum_nodes = [1, 2]\nplan = ["dp", "tp8", "tp4.pp2", "tp3"]\nmicro_batch = [1, 2]\n')


@pytest.fixture(scope="module", params=["madmax", "real"])
def nc_reference(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"nc-{request.param}")
    (folder / "s.toml").write_text(SWEEP if request.param == "madmax" else REAL_SWEEP)
    code, output = _cli("sweep", "s.toml", "-o", "ref.nc", "--no-progress", cwd=folder)
    assert code == 0, output
    return folder / "s.toml", xr.open_dataset(folder / "ref.nc").load()


def _assert_same_nc(path, reference):
    got = xr.open_dataset(path).load()
    assert set(got.data_vars) == set(reference.data_vars)
    for name in reference.data_vars:
        assert got[name].values.tobytes() == reference[name].values.tobytes(), name


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT", "SIGTERM", "SIGTERM_BACKGROUND"])
def test_interrupted_nc_write_leaves_no_file_and_a_rerun_completes_it(tmp_path, nc_reference, sig):
    """SIGTERM (kill, timeout, a batch scheduler) unwinds as Ctrl-C does, its lock and temporary file removed
    (it killed the process where it stood, leaving both), and says "terminated", exit 143; also in a background
    job, whose SIGINT the shell ignores."""
    sweep_file, reference = nc_reference
    (tmp_path / "s.toml").write_text(sweep_file.read_text())
    killed = subprocess.run([sys.executable, "-c", NC_DRIVER, sig, "s.toml", "out.nc"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    if sig == "SIGKILL":
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    else:   # Ctrl-C: one line saying nothing was written, never a hint at --resume (a .nc cannot resume)
        code, word = (130, "interrupted") if sig == "SIGINT" else (143, "terminated")
        assert killed.returncode == code and "Traceback" not in killed.stderr, killed.stderr
        assert killed.stderr.splitlines()[-1] == (f"{word}: out.nc was not written (a .nc file is written whole "
                                                  "at the end); rerun to start again"), killed.stderr
        assert _leftovers(tmp_path) == []
    assert not (tmp_path / "out.nc").exists()
    code, output = _cli("sweep", "s.toml", "-o", "out.nc", "--no-progress", cwd=tmp_path)  # no --force needed
    assert code == 0, output
    _assert_same_nc(tmp_path / "out.nc", reference)
    assert _leftovers(tmp_path) == []          # the killed writer's temporary file and lock are gone


def test_two_concurrent_nc_writers_never_both_succeed(tmp_path, nc_reference):
    sweep_file, reference = nc_reference
    (tmp_path / "s.toml").write_text(sweep_file.read_text())
    for flags in ([], ["--force"]):
        results = _two_writers(tmp_path, "out.nc", flags)
        codes = sorted(code for code, _ in results)
        if flags:       # both may replace the file in turn; never a traceback, the file whole
            assert codes[0] == 0 and codes[1] in (0, 2), results
        else:           # a second writer is refused: by the lock while the first runs, or as "exists" after it
            assert codes == [0, 2], results
        for code, err in results:
            assert "Traceback" not in err, err
            if code == 2:
                assert err.strip().splitlines()[-1].startswith("error: "), err
                assert "being written by pid" in err or "exists; pass --force" in err, err
        _assert_same_nc(tmp_path / "out.nc", reference)
    assert _leftovers(tmp_path) == []
    # the race itself: a second writer that starts while the first computes (no file yet) is refused by the lock
    (tmp_path / "out.nc").unlink()
    first = subprocess.Popen([sys.executable, "-c", NC_DRIVER, "pause", "s.toml", "out.nc"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (tmp_path / "writing").exists():
        assert first.poll() is None, first.stderr.read()
        time.sleep(0.05)
    code, output = _cli("sweep", "s.toml", "-o", "out.nc", "--no-progress", cwd=tmp_path)
    assert code == 2 and "being written by pid" in output, output
    assert first.wait(timeout=600) == 0, first.stderr.read()
    _assert_same_nc(tmp_path / "out.nc", reference)


def test_ctrl_c_before_a_store_exists_says_nothing_was_written(tmp_path):
    (tmp_path / "s.toml").write_text(SWEEP)
    killed = subprocess.run([sys.executable, "-c", DRIVER, "creation", "SIGINT", "1", "s.toml", "out.zarr"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert killed.returncode == 130 and "Traceback" not in killed.stderr, killed.stderr
    last = killed.stderr.splitlines()[-1]
    assert last.startswith("interrupted before ") and "nothing was written" in last and "--resume" not in last
    assert not (tmp_path / "out.zarr").exists() and _leftovers(tmp_path) == []
