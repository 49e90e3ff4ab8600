"""Status codes of a real-world (lm) grid point: ``STATUSES`` (index = code, name and message) and
``STATUS_CODES`` (name -> code).

Kept out of ``fastmodel.registry.lm`` (which re-exports both) so that module stays under the line cap; each
grid point gets one from the rule table (``kernels/lm/rules.py``), as docs/architecture.md describes.
"""

from __future__ import annotations

from fastmodel.registry.variables import NOT_COMPUTED, NOT_FINITE, Status

#: status codes of a real-world grid point (index = code); 0 is a legal point that was evaluated
STATUSES: tuple[Status, ...] = (
    Status("ok", "evaluated"),
    Status("devices_not_divisible", "n_gpus is not a multiple of tp x pp x cp"),
    Status("heads_not_divisible", "attention heads (or kv heads) not divisible by tp"),
    Status("layers_not_divisible", "layers (L + 2 with embedding_loss_in_split at pp > 1) not divisible by pp x vp "
           "(execution.uneven_stages = true allows it)"),
    Status("batch_not_divisible", "global_batch is not a multiple of micro_batch x dp"),
    Status("too_few_microbatches", "fewer micro-batches than pipeline stages under an interleaved or split-backward "
           "schedule (1F1B and GPipe run them, with a longer bubble)"),
    Status("experts_not_divisible", "experts not divisible by ep, or etp x ep does not divide tp x cp x dp"),
    Status("sequence_not_divisible", "seq_len not divisible by 2 x cp"),
    Status("ep_without_experts", "ep > 1 on a dense model"),
    Status("no_fp8", "precision is fp8 but the device has no FP8 peak"),
    Status("does_not_fit", "memory per device exceeds usable HBM"),
    NOT_FINITE,
    Status("schedule_not_runnable", "the pipeline schedule cannot run this pipeline: DualPipe needs an even pp and an "
           "even number of micro-batches, at least 2 pp, and no per-layer CUDA graphs (cuda_graphs layer, "
           "cuda_graph_microbatch_buffers); "
           "moe_a2a_overlap 'dualpipe' needs pipeline_schedule 'dualpipe' (a grid's axis under another schedule); the "
           "interleaved schedule (vp > 1) needs micro-batches a multiple of pp (Megatron-Core; docs/model.md §11.45); "
           "a grid crossing pipeline_schedule with vp: 'interleaved' at vp 1, another schedule at vp > 1 (the "
           "execution spec refuses both; docs/model.md §11.49)"),
    Status("node_limit_below_topk", "moe_max_nodes NVLink domains of the EP group hold fewer than moe_topk experts"),
    Status("topk_above_experts", "moe_topk exceeds moe_experts: a token's k experts are distinct, so k <= E (a sweep "
           "crossing a moe_experts axis with a moe_topk axis)"),
    Status("fp8_recipe_unsupported", "fp8_recipe mxfp8 needs compute capability 10.x (Blackwell block-scaled tensor "
           "cores), blockwise 9.0 or higher (Transformer Engine quantization.py); on an AMD device (MI300X, CDNA 3) "
           "neither runs: ROCm Transformer Engine runs MXFP8 on gfx95x only and no block-scaled FP8 GEMM"),
    Status("offload_conflict", "activation_offload_modules cannot run so: with activation_offload (layer-level CPU "
           "offloading), attn_proj without core_attn, or expert_fc1 / moe_act with recompute_modules moe (Megatron-Core "
           "refuses each, transformer_config.py@0823c73 lines 1743-1780)"),
    Status("layout_not_runnable", "last_stage_layers (an explicit pipeline layout) states a layout Megatron-Core "
           "refuses: not a whole number of decoder layers, more than the model's (or at pp 1 other than all of "
           "them), or set with embedding_loss_in_split (pipeline_model_parallel_layout with "
           "account_for_*_in_pipeline_split; docs/model.md §11.22, §11.25)"),
    Status("no_fp4", "precision fp4 (NVFP4 training) needs FP4 tensor cores: the device has no FP4 peak "
           "(peak_flops_4) or a compute capability below 10.0 (Transformer Engine NVFP4BlockScaling; docs/model.md "
           "§11.38)"),
    Status("bf16_layers_delayed", "bf16_layers_start / bf16_layers_end under fp8 need a stated per-layer recipe "
           "(tensorwise, mxfp8 or blockwise): Megatron-LM refuses BF16 layers under delayed scaling, its default "
           "recipe (transformer_config.py@d98e8a6 lines 1527-1530; docs/model.md §11.39)"),
    Status("bf16_layers_above_stage", "bf16_layers_start or bf16_layers_end exceeds floor(layers / pp), a rank's "
           "layers (Megatron-LM refuses more under fp8, transformer_config.py@d98e8a6 lines 1533-1557), or under "
           "interleaving floor(layers / (pp x vp)), an end chunk's (the model places no BF16 layer beyond it; "
           "docs/model.md §11.39)"),
    Status("bf16_layers_dualpipe", "bf16_layers_start / bf16_layers_end with pipeline_schedule dualpipe: DualPipe "
           "puts stages s and pp - 1 - s on rank s, so the first and last layers sit on both end ranks, which the "
           "model does not place; Megatron-LM, whose flags these are, runs no DualPipe (docs/model.md §11.39)"),
    Status("tp_per_projection_unsupported", "tp_per_projection (a DTensor plan per projection, KempnerForge's) at "
           "tp > 1 on an MoE or MLA model: its collective counts (3 + 2 projection inputs a layer) are a dense "
           "Llama block's; the model places no per-projection plan on experts or latent projections "
           "(docs/model.md §11.42)"),
    Status("wgrad_accumulation_twice", "wgrad_fused_accumulation with grad_accum_bytes > 0: the weight-gradient GEMMs "
           "already accumulate into the main gradient (beta = 1, its read charged), so a separate accumulation pass "
           "would count the main-gradient traffic twice; a stack runs one or the other (docs/model.md §11.46)"),
    NOT_COMPUTED,
)
STATUS_CODES: dict[str, int] = {s.name: i for i, s in enumerate(STATUSES)}
