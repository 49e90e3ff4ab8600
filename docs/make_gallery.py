"""Regenerate the figure gallery of docs/usage.md and README.md: ``python docs/make_gallery.py`` (writes
docs/gallery/*.png; ``python docs/make_gallery.py readme`` only the README's).

Runs the LLaMA2-70B plan sweep (1,300 configurations) in memory and one
trace, and the cloud-provider study (``specs/sweeps/cloud_dlrm_a.toml``, 336
configurations) for its Pareto frontiers and a cost heatmap. The README's images are made by the command lines
the README shows beside them (:data:`README_COMMANDS`, run as written through the command line, their last
``-o`` pointed at the gallery; tests/behaviour/test_gallery_commands.py checks the README shows them): the
Llama 3 70B memory bars, the Llama 3.1 70B timeline, the memory timeline of a B200 run record and the serving
SLO search's frontier.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

import fastmodel
import fastmodel.plot as P
from fastmodel.sweeps import run_in_memory
from fastmodel.sweeps.file import load_sweep_file

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "gallery"
SWEEPS = ROOT / "specs" / "sweeps"
DPI = 200
#: the README's images and the command lines the README shows beside them, run as written: each line's ``-o``
#: file goes to a scratch folder (later lines read it by the same name) except the last line's, which is the image
#: (``--dpi 200 --force`` added). ``my_run.json`` is tests/data/runs_dev_b200.jsonl line 7 (:data:`MY_RUN`).
README_COMMANDS = {
    "memory_llama3_70b_h100.png": [
        "fastmodel sweep llama3_70b_h100_plans -o plans.nc",
        "fastmodel plot memory plans.nc --sel num_nodes=16 --sel micro_batch=1 --sel recompute=selective -o memory.png",
    ],
    "timeline_llama31_70b_tp8pp4.png": [
        "fastmodel plot timeline -m llama3.1-70b -s dgx-h100 -t llm-pretrain --nodes 8 -p tp8.pp4 --window 0:3 -o tl.png",
    ],
    "memory_timeline_llama3_70b_b200_pp2.png": [
        "fastmodel plot memory-timeline -m my_run.json -o memory_timeline.png",
    ],
    "pareto_serving_slo_llama31_70b_h200.png": [
        "fastmodel serve --search -m llama3.1-70b -d H200 --ttft 1 --tpot 0.05 --gpus 8 --input-len 1024 "
        "--output-len 1024 -o search.nc",
        "fastmodel plot pareto search.nc --curve precision -o slo_pareto.png",
    ],
}
#: the run record the README's ``my_run.json`` stands for in the gallery (Llama 3 70B, 12 layers, on 8 B200,
#: tp1.pp2.dp4, 8 micro-batches; Megatron-LM)
MY_RUN = ("tests/data/runs_dev_b200.jsonl", 7)


def write(fig, name: str) -> None:
    path = P.save(fig, OUT / name, dpi=DPI)
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    plans = run_in_memory(load_sweep_file(str(SWEEPS / "llama2_70b_plans.toml")))
    shown = ["fsdp/ddp", "fsdp/mp", "fsdp,ddp/mp", "fsdp,tp/mp", "tp,ddp/mp", "tp,pp/mp", "ddp,tp/mp", "pp,ddp/mp",
             "ddp/ddp"]

    fig, _ = P.heatmap(plans, x="num_nodes", y="plan", var="throughput", sel={"global_batch": 2048, "plan": shown},
                       annotate=True, title="LLaMA2-70B pretraining, global batch 2,048")
    write(fig, "heatmap_llama2_70b_plans.png")

    fig, _ = P.heatmap(plans, x="num_nodes", y="plan", var="iteration_time", relative_to="fsdp/ddp",
                       sel={"global_batch": 2048, "plan": shown}, annotate=True, best=None)
    write(fig, "heatmap_gain_over_fsdp.png")

    config = fastmodel.make_config("llama2-70b", "dc-a", "llm-pretrain-fsdp", num_nodes=256)
    fig, _ = P.timeline(config)
    write(fig, "timeline_llama2_70b_fsdp.png")
    fig, _ = P.timeline(config, window=(0.0, 0.25), title="first 250 ms (forward pass, FSDP allgathers)")
    write(fig, "timeline_llama2_70b_fsdp_window.png")

    fig, _ = P.breakdown(plans, sel={"num_nodes": 256, "global_batch": 2048,
                                     "plan": ["fsdp/ddp", "fsdp,ddp/mp", "tp,ddp/mp"]})
    write(fig, "breakdown_llama2_70b.png")

    fig, _ = P.pareto(plans, "num_nodes", "throughput", where=plans.fits_memory, label=["plan", "global_batch"],
                      title="LLaMA2-70B: cluster size vs throughput (all plans, batches)")
    write(fig, "pareto_llama2_70b_nodes_throughput.png")

    fig, _ = P.scaling(plans, "num_nodes", var="throughput", hue="plan", sel={"global_batch": 2048},
                       top=5, title="LLaMA2-70B, global batch 2,048: five best plans")
    write(fig, "scaling_llama2_70b.png")

    ds = run_in_memory(load_sweep_file(str(SWEEPS / "cloud_dlrm_a.toml")))
    budget = {"train_samples": 5e9}
    for y, name in (("cost", "pareto_cloud_dlrm_a.png"), ("gpu_hours", "pareto_cloud_dlrm_a_gpu_hours.png")):
        fig, _ = P.pareto(ds, "train_time", y, sel=budget, where=ds.fits_memory,
                          label=["system", "num_devices", "plan"],
                          title=f"DLRM-A on cloud instances, 5 B samples: time vs {y.replace('_', '-')}")
        write(fig, name)
    fig, _ = P.heatmap(ds, x="num_devices", y="system", var="cost", sel=budget, reduce=[("min", "plan")], annotate=True,
                       title="DLRM-A, 5 B samples: cost of the cheapest plan (USD)")
    write(fig, "heatmap_cloud_dlrm_a_cost.png")

    config = fastmodel.make_config("dlrm-a", "dc-a", "dlrm-pretrain", num_nodes=16)
    fig, _ = P.timeline(config)
    write(fig, "timeline_dlrm_a_fsdp.png")
    readme_figures()
    return 0


def readme_figures(names=None) -> None:
    """Run the command lines of :data:`README_COMMANDS` (``names``: only these images) as the README shows them."""
    from fastmodel.cli import main as cli

    for name, lines in README_COMMANDS.items():
        if names is not None and name not in names:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            run = ROOT / MY_RUN[0]
            (Path(scratch) / "my_run.json").write_text(run.read_text().splitlines()[MY_RUN[1] - 1])
            for k, line in enumerate(lines):
                argv = [str(Path(scratch) / a) if a.endswith((".nc", ".json")) else a for a in shlex.split(line)[1:]]
                out = argv.index("-o") + 1
                if k == len(lines) - 1:
                    argv[out:out + 1] = [str(OUT / name), "--dpi", str(DPI), "--force"]
                cli.main(argv, prog_name="fastmodel", standalone_mode=False)
        print(f"wrote docs/gallery/{name} by: {' && '.join(lines)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["readme"]:
        readme_figures()
        sys.exit(0)
    sys.exit(main())
