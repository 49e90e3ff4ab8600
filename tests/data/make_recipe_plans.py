"""Write ``recipe_plans.jsonl``: one plan-only run record per published Megatron-Bridge performance recipe.

Usage (run once, by hand; the JSONL is committed)::

    git -C Megatron-Bridge archive b7b4e11b054e73fa3cfc52e5df14cd6b4d50e02e scripts/performance | tar -x -C /tmp/mb
    python tests/data/make_recipe_plans.py /tmp/mb/scripts/performance

Source: NVIDIA-NeMo/Megatron-Bridge at b7b4e11b054e73fa3cfc52e5df14cd6b4d50e02e (2026-07-08, the last commit
that holds ``scripts/performance/configs/``; c8327cfc2 removed them), files
``scripts/performance/configs/{deepseek,qwen,gpt_oss,llama,kimi}/*_workload_base_configs.py`` (the plans) and
``*_llm_pretrain.py`` beside them (the recipe settings each GPU's function applies: sequence length, token
dispatcher, TP communication overlap, recompute granularity), ``scripts/performance/utils/overrides.py``
(``_set_recompute_overrides``: ``recompute_num_layers`` -> full block recompute; ``recompute_modules`` ->
selective; ``cpu_offloading_num_layers`` -> activation offload; ``fine_grained_activation_offloading`` and
``offload_modules`` -> ``activation_offload_modules``, lines 254-257) and ``utils/precision.py`` (FP8_CS = current
(tensor-wise) scaling, FP8_MX = MXFP8, FP8_SC = sub-channel (block-wise) scaling). Only the CODE of the
configs is read; no measured result of any recipe is used or stored (``measured`` is absent: plan-only).

Models: fastmodel's built-in specs (``specs/models/*.toml``, each citing the model's public config.json).
Systems: RUNS.md's hardware values (the built-in ``specs/systems`` clusters carry the same numbers).
Kept: GPUs with RUNS.md hardware values (H100, B200, GB200, GB300); BF16 and the FP8 recipes (NVFP4 left
out: fastmodel has no FP4 GEMM precision); pretraining; identical plans of V1/V2 once.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from pathlib import Path

import tomllib

from fastmodel.io.atomic import atomic_write

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "b7b4e11b054e73fa3cfc52e5df14cd6b4d50e02e"
REPO = "NVIDIA-NeMo/Megatron-Bridge"
FRAMEWORK = "Megatron-Bridge (NeMo 26.04 container era; Megatron-Core, Transformer Engine)"

#: family module, model recipe prefix, fastmodel model spec, recipe settings from ``*_llm_pretrain.py``
MODELS = {
    "DEEPSEEK_V3": ("deepseek.deepseek_workload_base_configs", "deepseek-v3", "deepseek/deepseek_llm_pretrain.py"),
    "QWEN3_235B_A22B": ("qwen.qwen3_workload_base_configs", "qwen3-235b-a22b", "qwen/qwen3_llm_pretrain.py"),
    "QWEN3_30B_A3B": ("qwen.qwen3_workload_base_configs", "qwen3-30b-a3b", "qwen/qwen3_llm_pretrain.py"),
    "GPT_OSS_120B": ("gpt_oss.gpt_oss_workload_base_configs", "gpt-oss-120b", "gpt_oss/gpt_oss_llm_pretrain.py"),
    "KIMI_K2": ("kimi.kimi_workload_base_configs", "kimi-k2", "kimi/kimi_llm_pretrain.py"),
    "LLAMA3_8B": ("llama.llama3_workload_base_configs", "llama3-8b", "llama/llama3_llm_pretrain.py"),
    "LLAMA3_70B": ("llama.llama3_workload_base_configs", "llama3-70b", "llama/llama3_llm_pretrain.py"),
    "LLAMA31_405B": ("llama.llama31_workload_base_configs", "llama3.1-405b", "llama/llama31_llm_pretrain.py"),
}

#: sequence length each family's pretrain function (or its base recipe) sets
SEQ_LEN = {"DEEPSEEK_V3": 4096, "QWEN3_235B_A22B": 4096, "QWEN3_30B_A3B": 4096, "GPT_OSS_120B": 4096,
           "KIMI_K2": 4096, "LLAMA3_8B": 8192, "LLAMA3_70B": 8192, "LLAMA31_405B": 8192}

#: every family's pretrain function sets ``grad_reduce_in_fp32 = False`` (BF16 gradients; Megatron-Bridge's own
#: default is True, src/megatron/bridge/training/mixed_precision.py:47): deepseek_llm_pretrain.py:43,
#: gpt_oss_llm_pretrain.py:33, kimi_llm_pretrain.py:50, llama31_llm_pretrain.py:42, llama3_llm_pretrain.py:43,
#: qwen3_llm_pretrain.py:42
BF16_GRADS = set(MODELS)

#: RUNS.md hardware values (dense peaks, HBM, NVLink one way per GPU, NIC one way per GPU)
SYSTEMS = {
    "H100": dict(gpu="H100-SXM-80GB", gpus_per_node=8, peak_flops_bf16=989e12, peak_flops_fp8=1979e12,
                 hbm_bytes=80 * 2**30, hbm_bw_bytes_s=3.35e12, intra_node_bw_bytes_s_per_gpu=450e9,
                 inter_node_bw_bytes_s_per_gpu=50e9, inter_node_bw_assumed=True,
                 network="DGX H100: NVLink4 / NVSwitch in the node, one 400 Gb/s InfiniBand NIC per GPU (assumed)"),
    "B200": dict(gpu="B200", gpus_per_node=8, peak_flops_bf16=2.25e15, peak_flops_fp8=4.5e15,
                 hbm_bytes=180 * 2**30, hbm_bw_bytes_s=8e12, intra_node_bw_bytes_s_per_gpu=900e9,
                 inter_node_bw_bytes_s_per_gpu=50e9, inter_node_bw_assumed=True,
                 network="DGX B200: NVLink5 in the node, one 400 Gb/s InfiniBand NIC per GPU (assumed)"),
    "GB200": dict(gpu="GB200", gpus_per_node=4, nvlink_domain_size=72, peak_flops_bf16=2.5e15,
                  peak_flops_fp8=5e15, hbm_bytes=186 * 2**30, hbm_bw_bytes_s=8e12,
                  intra_node_bw_bytes_s_per_gpu=900e9, inter_node_bw_bytes_s_per_gpu=50e9,
                  inter_node_bw_assumed=True,
                  network="GB200 NVL72: 72 GPUs on one NVLink5 domain (4 per tray); 400 Gb/s NIC per GPU (assumed)"),
    "GB300": dict(gpu="GB300", gpus_per_node=4, nvlink_domain_size=72, peak_flops_bf16=2.5e15,
                  peak_flops_fp8=5e15, hbm_bytes=288 * 2**30, hbm_bw_bytes_s=8e12,
                  intra_node_bw_bytes_s_per_gpu=900e9, inter_node_bw_bytes_s_per_gpu=100e9,
                  inter_node_bw_assumed=True,
                  network="GB300 NVL72: 72 GPUs on one NVLink5 domain (4 per tray); ConnectX-8 800 Gb/s per GPU "
                          "(assumed)"),
}

#: compute dtype of a config name -> (precision, fp8_recipe) (utils/precision.py get_precision_config)
PRECISIONS = {"BF16": ("bf16", None),
              "FP8_CS": ("fp8", "current scaling, tensor-wise (bf16_with_fp8_current_scaling_mixed)"),
              "FP8_MX": ("fp8", "mxfp8: 1x32 E8M0 block scales (bf16_with_mxfp8_mixed)"),
              "FP8_SC": ("fp8", "sub-channel, block-wise 128x128 / 1x128 scaling "
                                "(bf16_with_fp8_subchannel_scaling_mixed)")}


def dispatcher(model: str, gpu: str, cfg) -> tuple[str, str]:
    """(moe_dispatcher, detail): a flex backend named by the workload config runs the flex dispatcher with it
    (``apply_flex_dispatcher_backend``); otherwise the dispatcher the family's pretrain function sets (Qwen3
    235B: alltoall on B200/H100, flex on GB200/GB300; Qwen3 30B: flex everywhere), else the recipe's alltoall."""
    if cfg.moe_flex_dispatcher_backend:
        return "flex", f"flex dispatcher, {cfg.moe_flex_dispatcher_backend} backend"
    if model == "QWEN3_30B_A3B" or (model == "QWEN3_235B_A22B" and gpu in ("GB200", "GB300")):
        return "flex", "flex dispatcher (qwen3_llm_pretrain.py), backend default"
    return "alltoall", "alltoall dispatcher (recipe default)"


def tp_overlap(model: str, gpu: str, tp: int) -> bool:
    """TP communication overlap as the pretrain functions set it: on when TP > 1 (CommOverlapConfig
    ``tp_comm_overlap=tp > 1`` in the Llama and gpt-oss functions; Qwen3 235B on H100 sets it off). The DeepSeek-V3
    and Kimi K2 base recipes build ``CommOverlapConfig(tp_comm_overlap=False)`` (src/megatron/bridge/recipes/
    deepseek/h100/deepseek_v3.py line 212, recipes/kimi/h100/kimi_k2.py line 187) and neither family's
    performance function replaces it, so Megatron-Bridge's ``_get_model_comm_overlap_cfgs`` keeps it off
    (src/megatron/bridge/training/comm_overlap.py lines 434, 546 and 581-587; docs/model.md §11.36)."""
    if (model == "QWEN3_235B_A22B" and gpu == "H100") or model in ("DEEPSEEK_V3", "KIMI_K2"):
        return False
    return tp > 1


def launch_settings(model: str, gpu: str, dtype: str, plan: dict) -> list[str]:
    """Settings the launch applies beside the workload config (docs/model.md §11.36); returns the assumption
    lines that cite them. DeepSeek-V3 on H100 turns the gradient-reduce overlap off in both the DDP and the
    comm-overlap config (deepseek_llm_pretrain.py lines 292-293). Kimi K2 runs the Muon optimizer by default
    (argument_parser.py ``--optimizer_type`` default "muon", lines 683-690, passed by run_script.py through
    ``get_perf_optimized_recipe``, utils/utils.py lines 271-272; ``kimi_k2_pretrain_config_*`` default
    ``optimizer_type="muon"``): ``_apply_kimi_k2_optimizer`` (src/megatron/bridge/recipes/kimi/h100/kimi_k2.py
    lines 65-74) builds ``distributed_muon_with_cosine_annealing`` (5 Newton-Schulz steps, blockwise TP mode:
    recipes/utils/optimizer_utils.py lines 26-27) with ``use_distributed_optimizer = False``: Megatron-Core's
    LayerWiseDistributedOptimizer all-reduces the full gradients, deals whole matrices to the data-parallel
    ranks and all-gathers the updated ones (``sharding = ddp`` with ``muon_distributed = 1``). Muon with MXFP8
    turns the FP8 parameter gather off (kimi_llm_pretrain.py lines 38-44)."""
    notes = []
    if model == "DEEPSEEK_V3" and gpu == "H100":
        plan["overlap_grad_reduce"] = False
        notes.append("no gradient-reduce overlap: deepseek_v3_pretrain_config_h100 sets ddp.overlap_grad_reduce "
                     "and comm_overlap.overlap_grad_reduce False (configs/deepseek/deepseek_llm_pretrain.py "
                     "lines 292-293)")
    if model == "KIMI_K2":
        plan["optimizer"], plan["sharding"] = "muon", "ddp"
        notes.append("Muon (dist_muon, LayerWiseDistributedOptimizer, use_distributed_optimizer False): "
                     "argument_parser.py --optimizer_type default 'muon' (lines 683-690); "
                     "src/megatron/bridge/recipes/kimi/h100/kimi_k2.py _apply_kimi_k2_optimizer lines 65-74")
        if dtype == "FP8_MX":
            plan["fp8_params"] = False
            notes.append("no FP8 parameter gather: Muon + MXFP8 sets fp8_param_gather False "
                         "(configs/kimi/kimi_llm_pretrain.py lines 38-44)")
    return notes


#: layouts the pretrain functions set when the workload config names none, by (pp, vp), in Megatron-Core's layout
#: notation (E embedding, t decoder layer, m MTP module, L loss, | between virtual stages): DeepSeek-V3
#: ``set_deepseek_v3_pipeline_model_parallel_layout`` (src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py
#: lines 68-76; the B200 and B300 functions call it whatever the workload config states,
#: deepseek_llm_pretrain.py lines 211 and 245) and Kimi K2 ``_get_kimi_k2_pipeline_layout``
#: (src/megatron/bridge/recipes/kimi/h100/kimi_k2.py lines 30-39: the same tables without the MTP module)
_FOUR = "Et*4|(t*4|)*14t"
_EIGHT = "Et*8|(t*8|)*6t*5"
DEFAULT_LAYOUTS = {
    "DEEPSEEK_V3": {(4, 1): "Et*16|t*16|t*16|t*13mL", (8, 1): _EIGHT + "mL", (4, 2): _EIGHT + "mL",
                    (16, 1): _FOUR + "mL", (8, 2): _FOUR + "mL", (4, 4): _FOUR + "mL"},
    "KIMI_K2": {(4, 1): "Et*16|t*16|t*16|t*13L", (8, 1): _EIGHT + "L", (4, 2): _EIGHT + "L",
                (16, 1): _FOUR + "L", (8, 2): _FOUR + "L", (4, 4): _FOUR + "L", (2, 8): _FOUR + "L"},
}


def expand_layout(layout: str) -> list[str]:
    """Virtual stages of a Megatron-Core layout string, as Megatron-Core reads it (NVIDIA/Megatron-LM@0823c73
    megatron/core/transformer/pipeline_parallel_layer_layout.py ``parse_str_to_list``, lines 283-320): commas
    are cosmetic, ``(...)*n`` and then ``x*n`` repeat, ``|`` separates the stages."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), text)
    return text.split("|")


def recipe_layout(model: str, gpu: str, cfg, pp: int, vp: int) -> str | None:
    """The pipeline layout the recipe runs: the workload config's, else the family's (pp, vp) table."""
    if cfg.pp_layout and not (model == "DEEPSEEK_V3" and gpu in ("B200", "B300")):
        return cfg.pp_layout
    return DEFAULT_LAYOUTS.get(model, {}).get((pp, vp)) if pp > 1 else None


def last_stage_layers(layout: str, pp: int, layers: int) -> int:
    """Decoder layers of the last pipeline rank (virtual stages r, r + pp, ..., Megatron-Core's 1D-to-2D
    conversion, the file above lines 47-52); checks that the busiest other rank holds the even split of the rest,
    ceil((L - n_last) / (pp - 1)) layers, what fastmodel charges a middle rank (docs/model.md §11.22, §11.25)."""
    stages = expand_layout(layout)
    vp = len(stages) // pp
    per_rank = [sum(stages[v * pp + r].count("t") for v in range(vp)) for r in range(pp)]
    assert sum(per_rank) == layers, (layout, per_rank)
    assert max(per_rank[:-1]) == -(-(layers - per_rank[-1]) // (pp - 1)), (layout, per_rank)
    return per_rank[-1]


def model_block(spec: str, seq_len: int) -> dict:
    data = tomllib.loads((ROOT / "specs" / "models" / f"{spec}.toml").read_text())
    block = {k: v for k, v in data.items() if k not in ("family", "source")}
    block["seq_len"] = seq_len
    return block


def model_block_of(model: str, spec: str, plan: dict, gpu: str) -> dict:
    """The model block; DeepSeek-V3's group-limited routing is node-limited routing when its 8 groups are the
    EP group's 8 NVLink domains: the bridge maps config.json's ``n_group`` 8 and ``topk_group`` 4 to
    ``moe_router_num_groups`` / ``moe_router_group_topk`` (src/megatron/bridge/models/conversion/model_bridge.py
    lines 446-447), Megatron-Core picks 4 groups of 32 consecutive experts per token, and E/ep consecutive experts
    sit on each rank, so a group is one 8-GPU node when ep = 64 over 8 nodes (DeepSeek-V3 report sec. 2.1.2: M = 4)."""
    block = model_block(spec, SEQ_LEN[model])
    ep = plan.get("ep", 1) * plan.get("etp", 1)
    domain = SYSTEMS[gpu].get("nvlink_domain_size", SYSTEMS[gpu]["gpus_per_node"])
    if model == "DEEPSEEK_V3" and ep // domain == 8:
        block["moe_max_nodes"] = 4
    return block


def record(name: str, cfg, model: str, gpu: str, dtype: str, variant: str) -> dict:
    module, spec, pretrain = MODELS[model]
    system = {**SYSTEMS[gpu], "n_gpus": cfg.num_gpus}
    tp, pp, cp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size
    dp = cfg.num_gpus // (tp * pp * cp)
    precision, fp8_recipe = PRECISIONS[dtype]
    plan = {"tp": tp, "pp": pp, "vp": cfg.virtual_pipeline_model_parallel_size or 1, "cp": cp, "dp": dp,
            "micro_batch": cfg.micro_batch_size, "global_batch": cfg.global_batch_size,
            "grad_accum": cfg.global_batch_size // (cfg.micro_batch_size * dp),
            "sequence_parallel": tp > 1, "precision": precision,
            "sharding": "fsdp" if cfg.use_megatron_fsdp else "distopt",
            "tp_comm_overlap": tp_overlap(model, gpu, tp),
            "grad_reduce_dtype": "bf16" if model in BF16_GRADS else "fp32"}
    if fp8_recipe:
        plan["fp8_recipe"] = fp8_recipe
        # FP8 parameters (no BF16 weight copy): Megatron-Bridge's bf16_with_fp8_current_scaling_mixed and
        # bf16_with_mxfp8_mixed set fp8_param_gather = True, bf16_with_fp8_subchannel_scaling_mixed False
        # (src/megatron/bridge/training/mixed_precision.py; fp8_param follows fp8_param_gather, lines 81-100)
        plan["fp8_params"] = dtype in ("FP8_CS", "FP8_MX")
        if plan["tp_comm_overlap"] and model in ("LLAMA3_8B", "LLAMA3_70B", "LLAMA31_405B"):
            # the Llama FP8 userbuffers configs run proj_fprop and fc2_fprop as ring exchange, whose buffers hold
            # 2 tp - 1 chunks (src/megatron/bridge/training/comm_overlap.py lines 120-121, 146-147, 173-174,
            # 199-200; the BF16 ones run them as pipeline): kernels/lm/memory.py userbuffer_bytes
            plan["ub_ring_exchange_rs"] = 2
    moe = model not in ("LLAMA3_8B", "LLAMA3_70B", "LLAMA31_405B")
    if moe:
        plan["ep"] = cfg.expert_model_parallel_size
        plan["etp"] = cfg.expert_tensor_parallel_size or tp
        plan["moe_dispatcher"], plan["moe_dispatch_detail"] = dispatcher(model, gpu, cfg)
        plan["moe_a2a_overlap"] = "batch" if cfg.moe_a2a_overlap else "none"
        plan["moe_grouped_gemm"] = True
    if cfg.recompute_num_layers:
        plan["recompute"], plan["recompute_num_layers"] = "partial_layers", cfg.recompute_num_layers
    elif cfg.recompute_modules:
        plan["recompute"], plan["recompute_modules"] = "selective", list(cfg.recompute_modules)
    elif model in ("DEEPSEEK_V3",):
        plan["recompute"] = "selective"       # set_deepseek_v3_common_configs: recompute_granularity "selective"
    else:
        plan["recompute"] = "none"
    if model == "LLAMA31_405B" and pp > 1:
        # llama31_405b_pretrain_config (= llama31_405b_pretrain_256gpu_h100_bf16_config,
        # src/megatron/bridge/recipes/llama/llama3.py:80) sets account_for_embedding_in_pipeline_split and
        # account_for_loss_in_pipeline_split (src/megatron/bridge/recipes/llama/h100/llama3.py:1161-1162)
        plan["embedding_loss_in_split"] = True
    if model == "QWEN3_235B_A22B" and pp > 1 and not cfg.pp_layout:
        # qwen3_235b_a22b_pretrain_config (= qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config,
        # src/megatron/bridge/recipes/qwen/qwen3_moe.py:32) sets account_for_embedding_in_pipeline_split and
        # account_for_loss_in_pipeline_split (src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py:166-167); the
        # performance functions (qwen3_llm_pretrain.py) keep them
        plan["embedding_loss_in_split"] = True
    if cfg.cpu_offloading_num_layers:
        plan["activation_offload_layers"] = cfg.cpu_offloading_num_layers
    assumptions = launch_settings(model, gpu, dtype, plan)
    if cfg.fine_grained_activation_offloading:
        # the line citation below is the DeepSeek-V3 GB300 workload's; another config that offloads needs its own
        assert (model, gpu) == ("DEEPSEEK_V3", "GB300"), f"{name}: cite its own offload_modules lines"
        # utils/overrides.py lines 254-257 copy both fields onto the model config (Megatron-Core
        # TransformerConfig.fine_grained_activation_offloading / offload_modules)
        plan["activation_offload_modules"] = list(cfg.offload_modules)
        assumptions.append(f"fine-grained activation offloading of {cfg.offload_modules}: the workload config sets "
                           "fine_grained_activation_offloading and offload_modules (DeepSeek-V3 GB300 FSDP: "
                           "configs/deepseek/deepseek_workload_base_configs.py lines 302-303), "
                           "utils/overrides.py lines 254-257 apply them")
    graphs = cfg.cuda_graph_impl not in (None, "none")
    plan["cuda_graphs"] = graph_scope(cfg.cuda_graph_impl, cfg.cuda_graph_scope)
    layout = recipe_layout(model, gpu, cfg, pp, cfg.virtual_pipeline_model_parallel_size or 1)
    if layout:
        plan["pipeline_layer_balance"] = f"pipeline_model_parallel_layout {layout!r}"
        plan["last_stage_layers"] = last_stage_layers(layout, pp, model_block(spec, 0)["layers"])
    kind = "moe_ep" if moe and cfg.expert_model_parallel_size > 1 else ("with_cp" if cp > 1 else "tp_pp_dp")
    if cfg.use_megatron_fsdp and kind == "tp_pp_dp":
        kind = "pure_fsdp"
    flags = []
    if graphs:
        flags.append(f"cuda_graph_impl {cfg.cuda_graph_impl!r}, scope {cfg.cuda_graph_scope!r}")
    if cfg.cutedsl_fused_grouped_mlp:
        flags.append("CuTe-DSL fused grouped MLP kernels")
    return {
        "id": f"mbridge-{name.lower().replace('_pretrain_config', '').replace('_', '-')}",
        "source": "megatron_bridge_recipes", "workload": "pretrain", "framework": FRAMEWORK,
        "source_ref": f"{REPO}@{COMMIT} scripts/performance/configs/{module.replace('.', '/')}.py {name}; "
                      f"recipe settings from scripts/performance/configs/{pretrain}",
        "reliability": "A", "model": model_block_of(model, spec, plan, gpu), "system": system, "plan": plan,
        "parallelism_kind": kind, "tier": 1, **({"assumptions": assumptions} if assumptions else {}), "flags": flags,
        "notes": f"plan-only: a published recipe plan, no measurement (config variant {variant})",
    }


def graph_scope(impl, scope) -> str:
    """The plan's ``cuda_graphs`` (docs/model.md §11.37) of a recipe's ``cuda_graph_impl`` and ``cuda_graph_scope``:
    Megatron-Bridge's ``is_full_iteration_cuda_graph`` (src/megatron/bridge/utils/cuda_graph.py lines 118-126 at
    COMMIT) is full-iteration for ``full_iteration``, or ``local`` with ``full_iteration`` in the scope; any other
    implementation (``local``, ``transformer_engine``) graphs per layer; none (or unset) is eager."""
    if impl in (None, "none"):
        return "none"
    names = [scope] if isinstance(scope, str) else list(scope or ())
    if impl == "full_iteration" or (impl == "local" and "full_iteration" in names):
        return "full_iteration"
    return "layer"


def main(perf_dir: str) -> None:
    sys.path.insert(0, perf_dir)
    out, seen = [], set()
    for model, (module_name, _, _) in MODELS.items():
        module = importlib.import_module(f"configs.{module_name}")
        for name in module.__all__:
            if not name.startswith(f"{model}_PRETRAIN_CONFIG_"):
                continue
            rest = name[len(f"{model}_PRETRAIN_CONFIG_"):].split("_")
            gpu = rest[0]
            dtype = "_".join(rest[1:3]) if rest[1] == "FP8" else rest[1]
            variant = "_".join(rest[3:] if rest[1] == "FP8" else rest[2:]) or "v1"
            if gpu not in SYSTEMS or dtype not in PRECISIONS:
                continue
            cfg = getattr(module, name)
            key = (model, gpu, dtype, json.dumps(dataclasses.asdict(cfg), sort_keys=True, default=str))
            if key in seen:
                continue
            seen.add(key)
            out.append(record(name, cfg, model, gpu, dtype, variant))
    path = Path(__file__).with_name("recipe_plans.jsonl")
    with atomic_write(path) as handle:             # never a half-written file
        handle.write("".join(json.dumps(r) + "\n" for r in out))
    print(f"{len(out)} plans -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
