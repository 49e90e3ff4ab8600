"""Regenerate the README's figure gallery: ``python docs/make_gallery.py`` (writes docs/gallery/*.png).

Runs the LLaMA2-70B plan sweep (1,300 configurations) in memory and one
trace; the cloud-study Pareto figure (DLRM-A time vs cost) is made when
``specs/sweeps/cloud_dlrm_a.toml`` exists, otherwise a note is printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import fastmodel
import fastmodel.plot as P
from fastmodel.errors import FastmodelError
from fastmodel.sweep import run_in_memory
from fastmodel.sweep_file import load_sweep_file

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

    cloud = SWEEPS / "cloud_dlrm_a.toml"
    if not cloud.exists():
        print(f"note: {cloud.relative_to(ROOT)} not found: skipping the cloud-study Pareto figure (DLRM-A time vs cost)")
        return 0
    try:
        ds = run_in_memory(load_sweep_file(str(cloud)))
        time_var = "train_time" if "train_time" in ds else "iteration_time"
        fig, _ = P.pareto(ds, time_var, "cost", where=ds.fits_memory,
                          title="DLRM-A on cloud instances: time vs cost")
        write(fig, "pareto_cloud_dlrm_a.png")
    except FastmodelError as error:
        print(f"note: cloud-study figure skipped: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
