"""Benchmark: `fastmodel batch` end to end and CLI start-up, next to the previous release, in one run.

Every figure is a fresh `fastmodel` process timed from spawn to exit (start-up
included), for this tree and for the previous release (commit --previous,
default 20885c0: its files extracted with `git archive` into a temp dir that is
kept between runs, run by this interpreter with PYTHONPATH pointing at it; the
script checks that each process imported the fastmodel it meant to). Numba
caches of both are warmed first. Printed side by side, each with its bar:

  (1) lines/s on 1,000,000 lines of built-in names: LLaMA2-70B pretrain on DC-A,
      the 52 plan shapes x 10 cluster sizes (2..1024 nodes), drawn at random;
      the previous release runs the first --previous-lines of the same file
      (its rate is per line; the whole file would take minutes);        bar >= 100,000
  (2) lines/s on 100,000 lines of inline MAD-Max-format dicts (the 65 dev
      reference cases of tests/data, cycled);                              bar >= 30,000
  (3) peak RSS of a --huge-lines (10,000,000) batch: lines generated into its
      stdin, results to /dev/null (previous release: on --previous-lines lines);
                                                                           bar < 1 GiB
  (4) `fastmodel run` of one configuration, warm cache: best and median wall
      of --repeats processes;                                              bar <= 0.8 s
  (5) `fastmodel --help`: best and median wall of --repeats processes;     bar <= 0.3 s
It also checks that both releases give the same results on a sample of lines of
(1) and (2). Writes the figures to bench/results/bench_batch.json.

    python bench/bench_batch.py [--lines 1000000] [--inline-lines 100000] [--huge-lines 10000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: what the `fastmodel` console script runs: cli.entry where the release has it (it interprets `run`), else cli.main
ENTRY = ("import sys; from fastmodel import cli; sys.argv[0] = 'fastmodel'; "
         "(getattr(cli, 'entry', None) or cli.main)()")
WHERE = "import fastmodel, sys; print(fastmodel.__file__)"
#: working directory of every process: not the repository, whose fastmodel/ `python -c` would import first
CWD = tempfile.gettempdir()


def previous_release(commit: str) -> Path:
    """A directory importable as the previous release's ``fastmodel`` (its package layout rebuilt)."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], capture_output=True, text=True,
                          check=True).stdout.strip()
    home = Path(tempfile.gettempdir()) / f"fastmodel-bench-{full[:12]}"
    package = home / "fastmodel"
    if not package.is_dir():
        tree = home / "tree"
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", full], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        (tree / "fastmodel").rename(package)  # pyproject maps fastmodel.kernels -> kernels/, fastmodel.specs -> specs/
        (tree / "kernels").rename(package / "kernels")
        (tree / "specs").rename(package / "specs")
    return home


class Release:
    def __init__(self, name: str, path: Path | None):
        self.name = name
        self.env = dict(os.environ)
        if path is not None:
            self.env["PYTHONPATH"] = str(path)
        else:
            self.env.pop("PYTHONPATH", None)
        where = subprocess.run([sys.executable, "-c", WHERE], env=self.env, capture_output=True, text=True,
                               check=True, cwd=CWD).stdout.strip()
        expected = path if path is not None else ROOT
        if not Path(where).resolve().is_relative_to(expected.resolve()):
            raise SystemExit(f"{name}: imported fastmodel from {where}, not from {expected}")
        self.where = where

    def run(self, args: list[str], stdin=None, stdout=subprocess.DEVNULL) -> tuple[float, float]:
        """(wall seconds, peak RSS bytes) of one `fastmodel ARGS` process (RSS: its largest process;
        CPU seconds, its own and its children's, go to ``self.cpu``)."""
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", ENTRY, *args], env=self.env, stdin=stdin, stdout=stdout,
                                   stderr=subprocess.PIPE, cwd=CWD)
        stderr = []
        reader = threading.Thread(target=lambda: stderr.append(process.stderr.read()))
        reader.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        reader.join()
        self.cpu = usage.ru_utime + usage.ru_stime
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{self.name}: fastmodel {' '.join(args)} failed: {stderr[0].decode()[-2000:]}")
        return wall, usage.ru_maxrss * 1024


def trees(previous: str) -> list[tuple[str, dict | None]]:
    """(label, environment) of the trees a bench measures: this one (None: the current environment) and, unless
    ``previous`` is "none", that commit's (``previous_release``)."""
    found: list[tuple[str, dict | None]] = [("this tree", None)]
    if previous != "none":
        found.append((f"previous {previous}", Release(previous, previous_release(previous)).env))
    return found


def save_results(name: str, figures) -> Path:
    """Write ``figures`` as bench/results/NAME.json, atomically (``fastmodel.io.atomic.atomic_write``)."""
    from fastmodel.io.atomic import atomic_write

    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    with atomic_write(out) as handle:
        handle.write(json.dumps(figures, indent=1))
    return out


def names_lines(count: int, seed: int = 0) -> list[bytes]:
    sys.path.insert(0, str(ROOT))
    from fastmodel.madmax.parallel.plans import enumerate_plan_shapes

    rng = random.Random(seed)
    shapes = [p.label for p in enumerate_plan_shapes(2, 8)]
    nodes = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    return [json.dumps({"model": "llama2-70b", "system": "dc-a", "task": "llm-pretrain", "plan": rng.choice(shapes),
                        "num_nodes": rng.choice(nodes)}, separators=(",", ":")).encode() + b"\n"
            for _ in range(count)]


def inline_lines(count: int) -> list[bytes]:
    cases = [json.loads(line) for line in (ROOT / "tests" / "data" / "madmax_cases_dev.jsonl").read_text().splitlines()]
    lines = [json.dumps({"case": c["case"], "model": c["model"], "system": c["system"], "task": c["task"]}).encode()
             + b"\n" for c in cases]
    return [lines[i % len(lines)] for i in range(count)]


def write(path: Path, lines: list[bytes]) -> Path:
    with open(path, "wb") as handle:
        handle.writelines(lines)
    return path


def batch_rate(release: Release, path: Path, lines: int, out: Path) -> dict:
    wall, rss = release.run(["batch", str(path), "-o", str(out), "--semantics", "madmax"])
    return {"lines": lines, "wall_s": wall, "cpu_s": release.cpu, "lines_per_s": lines / wall,
            "peak_rss_mib": rss / 2**20}


#: variables that took one name across engines since an earlier release: its name -> the older one
RENAMED = {"step_time": "iteration_time"}


def _one_name(record: dict) -> dict:
    """A result line with each variable under its one name (an older release's ``iteration_time`` is
    ``step_time``; this tree writes both)."""
    out = dict(record)
    for name, old in RENAMED.items():
        if old in out and name not in out:
            out[name] = out[old]
    return out


def same_results(a: Path, b: Path, every: int) -> int:
    """Number of sampled lines checked equal (raises if any differs), variables compared by their one name."""
    checked = 0
    with open(a) as fa, open(b) as fb:
        for number, (x, y) in enumerate(zip(fa, fb)):
            if number % every == 0:
                if _one_name(json.loads(x)) != _one_name(json.loads(y)):
                    raise SystemExit(f"line {number + 1}: results differ:\n{x[:500]}\n{y[:500]}")
                checked += 1
    return checked


def huge_rss(release: Release, lines: list[bytes], count: int) -> dict:
    """Peak RSS (and lines/s) of a batch of ``count`` lines streamed into stdin, results to /dev/null."""
    block = b"".join(lines)
    read, write_end = os.pipe()

    def feed():
        with os.fdopen(write_end, "wb") as sink:
            whole, rest = divmod(count, len(lines))
            for _ in range(whole):
                sink.write(block)
            sink.write(b"".join(lines[:rest]))

    feeder = threading.Thread(target=feed)
    feeder.start()
    with os.fdopen(read, "rb") as source:
        wall, rss = release.run(["batch", "-", "-o", os.devnull, "--semantics", "madmax"], stdin=source)
    feeder.join()
    return {"lines": count, "wall_s": wall, "cpu_s": release.cpu, "lines_per_s": count / wall,
            "peak_rss_mib": rss / 2**20}


def walls(release: Release, args: list[str], repeats: int) -> dict:
    times = [release.run(args)[0] for _ in range(repeats)]
    return {"best_s": min(times), "median_s": statistics.median(times), "runs": repeats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--inline-lines", type=int, default=100_000)
    parser.add_argument("--huge-lines", type=int, default=10_000_000)
    parser.add_argument("--previous", default="20885c0", help="commit of the previous release")
    parser.add_argument("--previous-lines", type=int, default=20_000,
                        help="lines of (1) and (2) the previous release runs (and of (3) for its RSS)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    current = Release("this tree", None)
    previous = Release(f"previous release {args.previous}", previous_release(args.previous))
    releases = (current, previous)
    record: dict = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
                    "previous": args.previous, "load_average_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        names = names_lines(args.lines)
        inline = inline_lines(args.inline_lines)
        files = {"names": write(tmp / "names.jsonl", names), "inline": write(tmp / "inline.jsonl", inline)}
        prev_files = {"names": write(tmp / "names_prev.jsonl", names[:args.previous_lines]),
                      "inline": write(tmp / "inline_prev.jsonl", inline[:args.previous_lines])}
        warm = write(tmp / "warm.jsonl", names[:2000] + inline[:200])
        t = time.perf_counter()
        for release in releases:  # compile or load every kernel both inputs use
            release.run(["batch", str(warm), "-o", os.devnull])
        record["warm_up_s"] = time.perf_counter() - t

        for key in ("names", "inline"):
            count = len(names) if key == "names" else len(inline)
            record[key] = {
                "current": batch_rate(current, files[key], count, tmp / f"{key}.out.jsonl"),
                "previous": batch_rate(previous, prev_files[key], min(count, args.previous_lines),
                                       tmp / f"{key}.prev.jsonl"),
            }
            with open(tmp / f"{key}.out.jsonl", "rb") as whole, open(tmp / f"{key}.head.jsonl", "wb") as head:
                for _, line in zip(range(args.previous_lines), whole):
                    head.write(line)
            record[key]["identical_lines_checked"] = same_results(tmp / f"{key}.head.jsonl",
                                                                  tmp / f"{key}.prev.jsonl", 97)
            for name in (f"{key}.out.jsonl", f"{key}.prev.jsonl", f"{key}.head.jsonl"):
                (tmp / name).unlink()

        record["huge"] = {"current": huge_rss(current, names[:100_000], args.huge_lines),
                          "previous": huge_rss(previous, names[:100_000], args.previous_lines)}
    run_args = ["run", "-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp"]
    record["run"] = {r.name: walls(r, run_args, args.repeats) for r in releases}
    record["help"] = {r.name: walls(r, ["--help"], args.repeats) for r in releases}
    report(record, args)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_batch.json").write_text(json.dumps(record, indent=2) + "\n")


def report(r: dict, args) -> None:
    prev = f"previous release {args.previous}"
    print(f"machine {r['machine']}, load average {r['load_average_at_start'][0]:.1f} at start (other users' "
          f"processes share the cores); previous release = {args.previous} (warm-up of both numba caches "
          f"{r['warm_up_s']:.0f} s)")
    print(f"{'':58} {'this tree':>16} {prev:>30}  bar")

    def line(label, now, before, bar, ok):
        print(f"{label:58} {now:>16} {before:>30}  {bar} {'PASS' if ok else 'FAIL'}")

    for key, label, bar in (("names", "(1) lines/s, built-in names", 100_000), ("inline", "(2) lines/s, inline MAD-Max dicts", 30_000)):
        c, p = r[key]["current"], r[key]["previous"]
        line(f"{label} ({c['lines']:,} / {p['lines']:,} lines)", f"{c['lines_per_s']:,.0f}",
             f"{p['lines_per_s']:,.0f}", f">= {bar:,}", c["lines_per_s"] >= bar)
        print(f"{'':8}wall {c['wall_s']:.2f} s (CPU {c['cpu_s']:.2f} s) vs {p['wall_s']:.2f} s (CPU {p['cpu_s']:.2f} s);"
              f" speed-up {c['lines_per_s'] / p['lines_per_s']:.1f}x; same results on "
              f"{r[key]['identical_lines_checked']:,} sampled lines")
    c, p = r["huge"]["current"], r["huge"]["previous"]
    line(f"(3) peak RSS MiB ({c['lines']:,} / {p['lines']:,} lines)", f"{c['peak_rss_mib']:,.0f}",
         f"{p['peak_rss_mib']:,.0f}", "< 1,024", c["peak_rss_mib"] < 1024)
    print(f"{'':8}{c['lines_per_s']:,.0f} lines/s from a pipe ({c['wall_s']:.1f} s, CPU {c['cpu_s']:.1f} s) vs "
          f"{p['lines_per_s']:,.0f} lines/s")
    for key, label, bar in (("run", "(4) `fastmodel run`, one config, warm cache, s", 0.8),
                            ("help", "(5) `fastmodel --help`, s", 0.3)):
        c, p = r[key]["this tree"], r[key][prev]
        line(f"{label} (best/median of {c['runs']})", f"{c['best_s']:.2f} / {c['median_s']:.2f}",
             f"{p['best_s']:.2f} / {p['median_s']:.2f}", f"<= {bar}", c["best_s"] <= bar)


if __name__ == "__main__":
    main()
