"""Periodic segments of a program (``program.find_segments``, whole-array comparisons) against a plain
op-by-op reference written here, on random programs whose layers sometimes differ."""

import numpy as np

from fastmodel.kernels.madmax.layout import CAT_ALLGATHER, CAT_GEMM
from fastmodel.kernels.madmax.layout import STREAM_COMM as COMM
from fastmodel.kernels.madmax.layout import STREAM_COMPUTE as COMP
from fastmodel.schedule.program import ProgramBuilder


def _reference_segments(p, layer_runs):
    """Op by op: a layer joins a run when it has the run's length and equals the previous layer with
    every dependency shifted by that length, and neither has a barrier; runs of 4+ layers whose window
    (lookback into the run, dependencies of later ops into it) is below layers - 1 are kept."""
    stream, slot, cat, barrier = p.op_stream, p.op_slot, p.op_category, p.op_barrier
    ptr, idx = p.dep_ptr, p.dep_idx

    def deps(op):
        return [int(d) for d in idx[ptr[op]:ptr[op + 1]]]

    def same(a, b, period):
        for k in range(period):
            i, j = a + k, b + k
            if (stream[i], slot[i], cat[i]) != (stream[j], slot[j], cat[j]) or barrier[i] or barrier[j]:
                return False
            if [d + (b - a) for d in deps(i)] != deps(j):
                return False
        return True

    found = []
    for bounds in layer_runs:
        starts, end = bounds[:-1], bounds[-1]
        length = [(starts[i + 1] if i + 1 < len(starts) else end) - starts[i] for i in range(len(starts))]
        first = 0
        while first < len(starts):
            last = first
            while (last + 1 < len(starts) and length[last] > 0 and length[last + 1] == length[last]
                   and same(starts[last], starts[last + 1], length[last])):
                last += 1
            layers, period, s = last - first + 1, length[first], starts[first]
            if layers >= 4:
                e = s + layers * period
                lookback = max([1] + [(op - s) // period - (d - s) // period
                                      for op in range(s + period, e) for d in deps(op)])
                tail = max([1] + [layers - (d - s) // period
                                  for op in range(e, len(stream)) for d in deps(op) if s <= d < e])
                if max(lookback, tail) < layers - 1:
                    found.append((s, period, layers, max(lookback, tail)))
            first = last + 1
    return found


def _program(rng):
    """Runs of layers of one random shape, with now and then a layer that differs (a slot, a dependency,
    an extra op, a barrier), and later ops depending back into the runs."""
    b = ProgramBuilder()
    b.op("pro", COMP, 0, CAT_GEMM)
    shape = [(int(rng.integers(0, 2)), int(rng.integers(0, 6))) for _ in range(int(rng.integers(1, 5)))]
    back = [[(int(rng.integers(0, 3)), int(rng.integers(0, len(shape)))) for _ in range(int(rng.integers(0, 3)))]
            for _ in shape]
    names = []
    for run in range(int(rng.integers(1, 4))):
        b.begin_layers()
        for layer in range(int(rng.integers(1, 30))):
            b.layer()
            odd = rng.random() < 0.15
            for k, (stream, slot) in enumerate(shape):
                name = f"r{run}.{layer}.{k}"
                deps = [f"r{run}.{layer - up}.{target}" if layer - up >= 0 else "pro"
                        for up, target in back[k] if not (up == 0 and target >= k)]
                if odd and k == 0:
                    choice = int(rng.integers(0, 4))
                    if choice == 0:
                        slot = slot + 1
                    elif choice == 1:
                        deps = deps + ["pro"]
                    elif choice == 2:
                        b.op(name + "x", stream, slot, CAT_GEMM)
                    else:
                        b.barrier()
                b.op(name, stream, slot, CAT_GEMM if stream == COMP else CAT_ALLGATHER, deps)
                names.append(name)
        b.end_layers()
    for i in range(int(rng.integers(0, 4))):
        b.op(f"epi{i}", COMM, 1, CAT_ALLGATHER, list(rng.choice(names, size=min(3, len(names)), replace=False)))
    return b


def test_segments_match_the_op_by_op_reference():
    rng = np.random.default_rng(11)
    with_segments = 0
    for _ in range(400):
        builder = _program(rng)
        program = builder.build()
        expected = _reference_segments(program, builder._layer_runs)
        got = list(zip(program.seg_start.tolist(), program.seg_period.tolist(), program.seg_layers.tolist(),
                       program.seg_window.tolist()))
        assert got == expected
        with_segments += bool(expected)
    assert 100 < with_segments < 400   # both kinds of program occur
