"""Write ``dgxc_plans.jsonl``: plan-only run records of the DGX Cloud benchmarking recipe for Grok-1 314B.

Usage (run once, by hand; the JSONL is committed)::

    python tests/data/make_dgxc_plans.py

Sources (configuration CODE only; no README, result or performance table of the recipe is read or stored):

- NVIDIA/dgxc-benchmarking at 80634ad (v26.02 release, 2026-03-23; the v25.12 file is identical):
  ``grok1/launch.sh`` lines 84-125 (per-GPU defaults TP, PP, CP, EP, VP, ET, GPUs per node, CUDA graphs; global
  batch ``GBS = JOB_TOTAL_GPUS * 2``; MBS 1), lines 131-132 (64 layers, hidden 6,144), line 47 (default dtype
  FP8; the metadata also runs BF16) and ``grok1/metadata.yaml`` (``scales`` per GPU: H100 512/1,024/2,048,
  B200 256/512/1,024, GB200 and GB300 128/256/512; NeMo container 25.09.00).
- The NeMo script the launcher runs, ``scripts/performance/llm/pretrain_grok1_314b.py`` (dgxc pins NeMo
  032e4de, which no stored history holds; read at NVIDIA-NeMo/NeMo 5dcb379 (2025-09-19, branch
  ``mollys/25.07-grok-proxies``) and 01b83a7 (2025-08-08), whose model and recipe settings agree):
  ``model()``: ``MixtralConfig8x7B`` with 64 layers, hidden 6,144, 48 heads, 8 query groups, FFN 32,768,
  8 experts, sequence 8,192 (the Mixtral base: gated SiLU MLP, top-2 router, alltoall dispatcher, untied
  embeddings; nemo/collections/llm/gpt/model/mixtral.py ``MixtralConfig``); tokenizer Llama-3-70B (vocab
  128,256); ``pretrain_performance_optimizations``: ``MegatronTokenDropCallback`` (capacity factor 1.0, pad
  to capacity: nemo/lightning/pytorch/callbacks/moe_token_drop.py defaults), TP communication overlap,
  ``grad_reduce_in_fp32 = False``; the distributed fused Adam optimizer (Megatron distributed optimizer);
  ``set_primary_perf_configs`` (scripts/performance/utils.py): sequence parallel when TP > 1, recompute
  only when ``recompute_layers > 0`` (the launcher passes none). For FP8 the script sets
  ``bf16_with_fp8_mixed()`` (delayed scaling) after the launcher's ``-fr cs``.
- Systems: RUNS.md hardware values, shared with ``make_recipe_plans.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fastmodel.io.atomic import atomic_write

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_recipe_plans import SYSTEMS  # noqa: E402  (the sibling generator's RUNS.md hardware values)

REF = "NVIDIA/dgxc-benchmarking@80634ad grok1/launch.sh, grok1/metadata.yaml; NeMo " \
      "scripts/performance/llm/pretrain_grok1_314b.py (5dcb379)"
FRAMEWORK = "NeMo 2.0 (NeMo 25.09 container; Megatron-Core, Transformer Engine)"

#: grok1/launch.sh lines 84-125: GPU -> (TP, PP, CP, EP, VP, ETP, CUDA graphs); metadata.yaml scales
PLANS = {"H100": ((4, 8, 2, 8, 8, 1, False), (512, 1024, 2048)),
         "B200": ((4, 4, 1, 8, 8, 1, False), (256, 512, 1024)),
         "GB200": ((4, 1, 1, 8, 1, 4, True), (128, 256, 512)),
         "GB300": ((4, 1, 1, 8, 1, 4, True), (128, 256, 512))}

#: the NeMo recipe's model (MixtralConfig8x7B overridden by model(); Llama-3-70B tokenizer)
MODEL = {"name": "Grok-1 (NeMo recipe)", "layers": 64, "hidden": 6144, "ffn": 32768, "heads": 48, "kv_heads": 8,
         "head_dim": 128, "vocab": 128256, "seq_len": 8192, "ffn_kind": "swiglu3", "activation": "swiglu",
         "moe_experts": 8, "moe_topk": 2, "moe_ffn": 32768, "moe_capacity_factor": 1.0,
         "moe_pad_to_capacity": True, "tied_embeddings": False}


def record(gpu: str, n_gpus: int, dtype: str) -> dict:
    (tp, pp, cp, ep, vp, etp, graphs), _ = PLANS[gpu]
    dp = n_gpus // (tp * pp * cp)
    global_batch = 2 * n_gpus
    plan = {"tp": tp, "pp": pp, "vp": vp, "cp": cp, "dp": dp, "ep": ep, "etp": etp, "micro_batch": 1,
            "global_batch": global_batch, "grad_accum": global_batch // dp, "sequence_parallel": tp > 1,
            "precision": dtype, "sharding": "distopt", "tp_comm_overlap": tp > 1, "grad_reduce_dtype": "bf16",
            "moe_dispatcher": "alltoall", "moe_dispatch_detail": "alltoall dispatcher (MixtralConfig)",
            "moe_a2a_overlap": "none", "moe_grouped_gemm": False, "recompute": "none", "cuda_graphs": graphs}
    if tp > 1:
        # pretrain_grok1_314b.py passes userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 at every precision
        # (lines 347-350 at 5dcb379): proj_fprop and fc2_fprop run as ring exchange, 2 tp - 1 chunks each
        # (nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py lines 185-186)
        plan["ub_ring_exchange_rs"] = 2
    if dtype == "fp8":
        plan["fp8_recipe"] = "delayed scaling (bf16_with_fp8_mixed, set by the NeMo script after -fr cs)"
    kind = "moe_ep"
    return {
        "id": f"dgxc-grok1-314b-{gpu.lower()}-{dtype}-n{n_gpus}", "source": "dgxc_benchmarking_recipes",
        "workload": "pretrain", "framework": FRAMEWORK, "source_ref": REF, "reliability": "A",
        "model": dict(MODEL), "system": {**SYSTEMS[gpu], "n_gpus": n_gpus}, "plan": plan,
        "parallelism_kind": kind, "tier": 1, "flags": ["token drop: capacity factor 1.0, padded to capacity"],
        "notes": "plan-only: a published benchmarking-recipe plan, no measurement",
    }


def main() -> None:
    out = [record(gpu, n, dtype) for gpu, (_, scales) in PLANS.items() for n in scales for dtype in ("bf16", "fp8")]
    path = Path(__file__).with_name("dgxc_plans.jsonl")
    with atomic_write(path) as handle:             # never a half-written file
        handle.write("".join(json.dumps(r) + "\n" for r in out))
    print(f"{len(out)} plans -> {path}")


if __name__ == "__main__":
    main()
