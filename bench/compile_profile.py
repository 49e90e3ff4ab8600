"""Diagnostic: which kernels take an engine's cold compile, and at how many signatures each.

Runs ``fastmodel warmup ENGINE``'s work (``fastmodel/cli/warmup.py`` ``WARMERS``) in this process on an empty
``NUMBA_CACHE_DIR`` with a listener on numba's ``numba:compile`` events (one per signature compiled, nested as
the kernels call each other) and prints the functions by exclusive compile seconds (the signature's own
seconds less those of the signatures compiled inside it; a signature's LLVM optimisation of the callees linked
into its module counts as its own), with how many signatures each was compiled at; ``--signatures`` lists the
argument types of each function compiled more than once (``Literal[int](8)`` beside ``int64``: one compile per
constant value). CPU seconds of the whole warm-up are printed beside wall (the load-robust figure on a shared
machine). ``--json FILE`` keeps every event.

    python bench/compile_profile.py [--engine lm] [--top 40] [--signatures] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time


def _listen(records: list[dict]) -> None:
    """Append one record per compiled signature to ``records``: function, argument types, depth, inclusive and
    exclusive seconds."""
    from numba.core import event

    stack = []

    class Listener(event.Listener):
        def on_start(self, ev):
            func = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
            stack.append([name, str(ev.data.get("args")), time.perf_counter(), 0.0])

        def on_end(self, ev):
            name, args, start, nested = stack.pop()
            seconds = time.perf_counter() - start
            if stack:
                stack[-1][3] += seconds
            records.append({"func": name, "args": args[:400], "depth": len(stack), "incl": seconds,
                            "excl": seconds - nested})

    event.register("numba:compile", Listener())


def by_function(records: list[dict]) -> dict[str, list[dict]]:
    """The records of each function, the functions by total exclusive seconds (largest first)."""
    grouped = collections.defaultdict(list)
    for record in records:
        grouped[record["func"]].append(record)
    return dict(sorted(grouped.items(), key=lambda kv: -sum(r["excl"] for r in kv[1])))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="lm", choices=("lm", "serve", "madmax"))
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--signatures", action="store_true", help="argument types of functions compiled twice+")
    parser.add_argument("--json", help="write every compile event here")
    args = parser.parse_args()
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="fastmodel-compile-profile-")
    os.environ["FASTMODEL_COMPILE_NOTE"] = "0"
    if os.environ.get("FASTMODEL_JIT") == "0":
        raise SystemExit("FASTMODEL_JIT=0: nothing compiles; unset it")
    records: list[dict] = []
    _listen(records)
    from fastmodel.cli.warmup import WARMERS

    wall, cpu = time.perf_counter(), os.times()
    WARMERS[args.engine]()
    wall, end = time.perf_counter() - wall, os.times()
    grouped = by_function(records)
    print(f"{args.engine}: {wall:.1f} s wall, {end.user + end.system - cpu.user - cpu.system:.1f} s CPU; "
          f"{len(records)} signatures of {len(grouped)} functions; load average {os.getloadavg()[0]:.1f}")
    print(" exclusive  inclusive  signatures  function")
    for name, rs in list(grouped.items())[:args.top]:
        print(f"{sum(r['excl'] for r in rs):8.2f} s {max(r['incl'] for r in rs):8.2f} s {len(rs):6d}      {name}")
    if args.signatures:
        for name, rs in grouped.items():
            if len(rs) > 1:
                print(f"{name}:")
                for r in rs:
                    print(f"    {r['excl']:5.2f} s  {r['args']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh)


if __name__ == "__main__":
    main()
