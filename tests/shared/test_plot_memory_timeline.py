"""The memory-timeline figure: memory over one step per pipeline rank, by kind, with the HBM lines."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import FastmodelError, SpecError
from fastmodel.plot.memory_timeline import memory_timeline, micro_batch, panel_stages

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def record():
    """A Megatron-LM run on 8 B200 (pp 2): the first line of runs_dev_b200.jsonl."""
    return json.loads((DATA / "runs_dev_b200.jsonl").read_text().splitlines()[0])


def test_panels_stack_to_each_moment_and_draw_hbm(record):
    from fastmodel import engines

    data = engines.memory_timeline(record=record)
    fig, axes = memory_timeline(data)
    assert len(axes) == len(data.stages) == 2
    for ax, stage in zip(axes, data.stages):
        top = max(np.max(c.get_paths()[0].vertices[:, 1]) for c in ax.collections)
        assert top == pytest.approx(stage.totals.max() / 2**30, rel=1e-9)
        lines = {line.get_gid(): line.get_ydata()[0] for line in ax.get_lines()}
        assert lines["hbm"] == pytest.approx(data.hbm_bytes / 2**30)
        assert lines["usable"] < lines["hbm"]
    custom = engines.memory_timeline(record=record, memory_margin=10 * 2**30)
    assert custom.usable_bytes == pytest.approx(custom.hbm_bytes - 10 * 2**30)
    # each reference line's label carries its unit, as the HBM line's does (was "usable 75", "reserved +
    # overhead 88.2")
    notes = [t.get_text() for t in axes[0].texts]
    gib = 2**30
    assert notes == [f"HBM {data.hbm_bytes / gib:.0f} GiB", f"usable {data.usable_bytes / gib:.0f} GiB",
                     f"reserved + overhead {data.reserved_bytes / gib:.1f} GiB"]


def test_panel_choice():
    assert panel_stages(3) == [0, 1, 2]
    assert panel_stages(16) == [0, 5, 10, 15]


def test_bad_margin_and_serving_are_errors(record):
    from fastmodel import engines

    with pytest.raises(FastmodelError, match="memory_margin"):   # run's and best's check (a SweepError)
        engines.memory_timeline(record=record, memory_margin=-1.0)
    serving = json.loads((DATA / "serve_dev_load.jsonl").read_text().splitlines()[0])
    with pytest.raises(SpecError, match="serving record"):
        engines.memory_timeline(record=serving)


def test_cli(record, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    runner = CliRunner()
    out = tmp_path / "memory.png"
    result = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    bad = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(tmp_path / "b.png"),
                               "--memory-margin", "-1"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "--memory-margin: -1 GiB is negative" in bad.output
    # above the HBM: named as the option and the value as typed, as the negative one (it said "memory_margin: 900.0")
    big = runner.invoke(main, ["plot", "memory-timeline", "-m", str(path), "-o", str(tmp_path / "c.png"),
                               "--memory-margin", "900"])
    assert big.exit_code == 2 and big.output.count("\n") == 1, big.output
    assert "error: --memory-margin: 900 GiB is not below the HBM of " in big.output, big.output
    assert not (tmp_path / "c.png").exists()


def test_specs_take_an_execution_as_evaluate_does(record):
    """Walk of issues 22-23: the API drew specs only under the default execution (a DualPipe or fully recomputed
    timeline of a built-in model needed a hand-written record). ``execution=`` runs them as ``fastmodel.evaluate``
    does: the highest moment over the ranks (plus nothing: overhead is a kind) is evaluate's memory_per_device
    under the same execution; beside a record it is refused."""
    import fastmodel
    from fastmodel import engines

    specs = {"model": "qwen3-30b-a3b", "system": "dgx-h100", "task": "llm-pretrain", "plan": "tp2.pp4.ep8",
             "num_nodes": 8}
    peaks = {}
    for recompute in ("selective", "full"):
        data = engines.memory_timeline(**specs, execution={"recompute": recompute})
        peaks[recompute] = max(stage.totals.max() for stage in data.stages)
        ds = fastmodel.evaluate(specs["model"], specs["system"], specs["task"], plan=specs["plan"],
                                num_nodes=specs["num_nodes"], execution={"recompute": recompute})
        assert peaks[recompute] == pytest.approx(float(ds.memory_per_device), rel=1e-9)
    assert peaks["full"] < 0.75 * peaks["selective"]     # full recompute keeps one layer input per layer
    fig, axes = memory_timeline(**specs, execution={"pipeline_schedule": "dualpipe", "moe_a2a_overlap": "dualpipe"})
    assert len(axes) == 4
    for door in (engines.memory_timeline, engines.memory_by_stage, engines.timeline):    # one refusal, each door
        with pytest.raises(SpecError, match="execution: a run record executes as its plan block says"):
            door(record=record, execution={"recompute": "full"})


def _one_f_one_b(micro_batches: int, emb: bool) -> tuple[str, ...]:
    """Rank 0's moments under 1F1B with two stages: F0, F1, B0 [B0 emb], F2, B1 ..."""
    labels, forward = ["start", "F0", "F1"], 2
    for j in range(micro_batches):
        labels += [f"B{j}"] + ([f"B{j} emb"] if emb else [])
        if forward < micro_batches:
            labels.append(f"F{forward}")
            forward += 1
    return (*labels, "optimizer step")


def _synthetic(micro_batches: int):
    from fastmodel.lm.memory_timeline import MemoryTimeline, StageMemory

    stages = tuple(StageMemory(r, labels, np.full((len(labels), 1), 2.0**30))
                   for r, labels in enumerate((_one_f_one_b(micro_batches, True), _one_f_one_b(micro_batches, False))))
    return MemoryTimeline(stages, ("weights",), 80 * 2.0**30, 76 * 2.0**30, 10 * 2.0**30, "synthetic")


def test_label_sets_keep_whole_passes():
    from fastmodel.plot.memory_timeline import label_sets

    labels = _one_f_one_b(8, True)
    sets = label_sets(labels)
    assert sets[0] == (list(range(len(labels))), "")
    assert [labels[i] for i in sets[1][0]] == [t for t in labels if t[0] in "FB" and " " not in t]
    stride4 = next(keep for keep, note in sets if note.startswith("labelled: the forward (F j) of micro-batches 0, 4;"))
    assert [labels[i] for i in stride4] == ["F0", "F4"]     # 8 micro-batches: it said "0, 4, 8, ..."
    assert len(sets) == 2 + 3    # every operation, F j and B j, the forwards at strides 1, 2, 4 (< 8)


def test_few_micro_batches_label_every_operation():
    """The gallery's case: F1 and F3 were missing on rank 0 (every 2nd operation of 'F0 F1 B0 B0 emb ...')."""
    fig, axes = memory_timeline(_synthetic(8))
    texts = [t.get_text() for t in axes[0].get_xticklabels()]
    assert texts == [("opt. step" if t == "optimizer step" else t) for t in _one_f_one_b(8, True)]
    assert "labelled" not in axes[-1].get_xlabel()


def test_many_micro_batches_label_forwards_at_a_stride_said_under_the_axis():
    data = _synthetic(64)
    fig, axes = memory_timeline(data)
    from fastmodel.plot.readable import crowded

    renderer = fig.canvas.get_renderer()
    xlabel = axes[-1].get_xlabel()
    stride = int(xlabel.split("micro-batches 0, ")[1].split(",")[0]) if "micro-batches 0, " in xlabel else 1
    assert "a tick marks every operation" in xlabel
    for ax, stage in zip(axes, data.stages):
        texts = [t.get_text() for t in ax.get_xticklabels()]
        assert texts == [f"F{j}" for j in range(0, 64, stride)]    # the same rule on every panel
        ticks = set(ax.xaxis.get_minorticklocs()) | set(ax.xaxis.get_majorticklocs())   # minor ones under a
        assert ticks == set(range(len(stage.labels)))                                  # major are not drawn
        assert not crowded(ax.xaxis, renderer)


def test_ticks_closer_than_the_gap_are_left_out_and_the_rule_says_so():
    """512 micro-batches (about 1,500 operations on 6.9 in): a tick per operation drew a solid bar."""
    from fastmodel.plot.memory_timeline import MIN_TICK_GAP_PT, TICK_NOTE

    fig, axes = memory_timeline(_synthetic(512))
    width_pt = axes[0].get_window_extent().width * 72.0 / fig.dpi
    assert width_pt / len(_one_f_one_b(512, True)) < MIN_TICK_GAP_PT
    assert all(len(ax.xaxis.get_minorticklocs()) == 0 for ax in axes)
    assert "labelled: the forward (F j) of micro-batches 0, " in axes[-1].get_xlabel()
    assert TICK_NOTE not in axes[-1].get_xlabel()


def _named(rule: str) -> list[int]:
    """The micro-batches a forward rule names: 'micro-batches 0, 8, 16, ..., 120' -> [0, 8, 16, 120]."""
    said = rule.split("micro-batch")[1].split(";")[0]
    return [int(word) for word in said.replace(",", " ").split() if word.isdigit()]


def test_four_micro_batches_name_none_that_does_not_exist():
    """Review MEDIUM 4: the strides ran while s < 2 x count and the rule said '0, s, 2s, ...' whatever existed
    (4 micro-batches: 'micro-batches 0, 4, 8, ...'). Now s < count and the rule names what it labels."""
    from fastmodel.plot.memory_timeline import TICK_NOTE, label_sets

    sets = label_sets(_one_f_one_b(4, True))
    rules = [note for _, note in sets[2:]]
    assert rules == ["labelled: the forward (F j) of every micro-batch" + TICK_NOTE,
                     "labelled: the forward (F j) of micro-batches 0, 2" + TICK_NOTE]
    fig, axes = memory_timeline(_synthetic(4), size=2.4)   # narrow: the forward levels are reached
    xlabel = axes[-1].get_xlabel()
    assert "labelled: the forward (F j) of micro-batches 0, 2" + TICK_NOTE in xlabel, xlabel
    assert xlabel.count("labelled") == 1 and "(every " not in xlabel
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["F0", "F2"]


def _check_one_forward_per_micro_batch(data, fig, axes):
    """Each panel labels the first ``F j`` of micro-batches 0, s, 2s ... < count, the rule (said once, under
    the lowest panel) names only labelled micro-batches, no panel is thinned again or crowded; returns s."""
    from fastmodel.plot.readable import crowded

    xlabel = axes[-1].get_xlabel()
    assert xlabel.count("labelled") == 1 and "(every " not in xlabel, xlabel   # make_readable's rule: not added
    assert "labelled: the first forward (F j) of micro-batches 0, " in xlabel, xlabel
    assert all(ax.get_xlabel() == "" for ax in axes[:-1])
    named = _named(xlabel.split("\n")[-1])
    stride = named[1]
    renderer = fig.canvas.get_renderer()
    ranks = [int(ax.get_ylabel().split()[1]) for ax in axes]
    for ax, rank in zip(axes, ranks):
        labels = data.stages[rank].labels
        count = 1 + max(micro_batch(t) for t in labels if t[0] in "FB" and " " not in t)
        first = {}     # micro-batch -> its first forward's index, of either DualPipe direction (F j or F j')
        for i, t in enumerate(labels):
            if t[0] == "F":
                first.setdefault(micro_batch(t), i)
        expect = list(range(0, count, stride))
        assert [t.get_text() for t in ax.get_xticklabels()] == [labels[first[j]] for j in expect]
        assert list(ax.get_xticks()) == [first[j] for j in expect]
        assert named[-1] == expect[-1] < count and set(named) <= set(expect)
        assert not crowded(ax.xaxis, renderer)
    return stride


def test_interleaved_labels_one_forward_per_micro_batch():
    """Review MEDIUM 4: interleaved (vp 2) runs F j once per chunk; each was labelled, every level crowded, and
    the figure showed F0 alone with 'micro-batches 0, 1024, 2048, ...' of 1,024 and 'every 2nd labelled'."""
    from fastmodel import engines

    data = engines.memory_timeline(model="llama3.1-70b", system="dgx-h100", task="llm-pretrain", plan="tp8.pp4",
                                   num_nodes=8, execution={"pipeline_schedule": "interleaved", "vp": 2})
    labels = data.stages[0].labels
    assert labels.count("F0") == 2 and sum(t.startswith("F") for t in labels) == 2 * 1024
    fig, axes = memory_timeline(data)
    assert 1 < _check_one_forward_per_micro_batch(data, fig, axes) < 1024


def test_dualpipe_labels_one_forward_per_micro_batch():
    """DualPipe runs micro-batch j once per direction: F0 ... F6 were each labelled twice, and the two were both
    ``F j``; now the reverse direction's is ``F j'``. Hand derivation on pp 4 (kernels/lm/pipeline.py
    ``dualpipe_order``, n = 2, h = 0 on ranks 0 and 3): step 1 runs 2 (n - h - 1) = 2 forwards of the rank's own
    direction, step 2 one pair (own, other): rank 0 F0 F1 F2 F0', rank 3 (own direction: the reverse) F0' F1' F2'
    F0."""
    from fastmodel import engines

    data = engines.memory_timeline(model="qwen3-30b-a3b", system="dgx-h100", task="llm-pretrain",
                                   plan="tp2.pp4.ep8", num_nodes=8,
                                   execution={"pipeline_schedule": "dualpipe", "moe_a2a_overlap": "dualpipe"})
    assert data.stages[0].labels[1:5] == ("F0", "F1", "F2", "F0'")
    assert data.stages[3].labels[1:5] == ("F0'", "F1'", "F2'", "F0")
    for stage in data.stages:
        forwards = [t for t in stage.labels if t[0] == "F"]
        half = len(forwards) // 2     # every rank runs each micro-batch of each direction forward once
        assert sorted(forwards) == sorted([f"F{j}" for j in range(half)] + [f"F{j}'" for j in range(half)])
    assert data.label_note == "F j' / B j': of DualPipe's reverse direction"
    fig, axes = memory_timeline(data)
    assert 1 < _check_one_forward_per_micro_batch(data, fig, axes)
    assert "F j' / B j': of DualPipe's reverse direction)" in axes[-1].get_xlabel()


def test_one_direction_schedules_mark_no_label(record):
    """Only DualPipe's reverse direction is marked: a 1F1B run's labels and axis say nothing of directions."""
    from fastmodel import engines

    data = engines.memory_timeline(record=record)
    assert data.label_note == "" and not any("'" in t for stage in data.stages for t in stage.labels)
    fig, axes = memory_timeline(data)
    assert "reverse" not in axes[-1].get_xlabel()
