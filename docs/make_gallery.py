"""Regenerate the figure gallery of docs/usage.md: ``python docs/make_gallery.py`` (writes docs/gallery/*.png).

Runs the LLaMA2-70B plan sweep (1,300 configurations) in memory and one
trace, and the cloud-provider study (``specs/sweeps/cloud_dlrm_a.toml``, 336
configurations) for its Pareto frontiers and a cost heatmap, the serving SLO search's frontier and the
memory timeline of a B200 run record.
"""

from __future__ import annotations

import sys
from pathlib import Path

import fastmodel
import fastmodel.plot as P
from fastmodel.sweeps import run_in_memory
from fastmodel.sweeps.file import load_sweep_file

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "gallery"
SWEEPS = ROOT / "specs" / "sweeps"
DPI = 200


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
    serving_search()
    memory_over_the_step()
    return 0


def memory_over_the_step() -> None:
    """The README's memory timeline: the Megatron-LM run of tests/data/runs_dev_b200.jsonl line 7 (Llama 3 70B,
    12 layers, on 8 B200, tp1.pp2.dp4, 8 micro-batches; ``fastmodel plot memory-timeline -m RUN.json``)."""
    import json

    record = json.loads((ROOT / "tests" / "data" / "runs_dev_b200.jsonl").read_text().splitlines()[6])
    fig, _ = P.memory_timeline(record=record, title="Llama 3 70B (12 layers) on 8 B200, tp1.pp2.dp4, "
                               "8 micro-batches: memory over one step")
    write(fig, "memory_timeline_llama3_70b_b200_pp2.png")


def serving_search() -> None:
    """The SLO search of the README (``fastmodel serve --search -m llama3.1-70b -d H200 --ttft 1 --tpot 50ms
    --gpus 8 --input-len 1024 --output-len 1024 -o search.nc``, then ``fastmodel plot pareto search.nc --curve
    precision``): one frontier per precision, the TPOT target and the best point meeting both SLOs."""
    from fastmodel.plot.serving import serving_pareto
    from fastmodel.serve.search import slo_search

    result = slo_search("llama3.1-70b", "H200", input_len=1024, output_len=1024, ttft=1.0, tpot=0.05, gpus=8)
    fig, _ = serving_pareto(result.dataset, "precision",
                            title="Llama 3.1 70B, up to 8 H200, 1k in / 1k out")
    write(fig, "pareto_serving_slo_llama31_70b_h200.png")


if __name__ == "__main__":
    sys.exit(main())
