"""The registry of the real-world LM model (``default`` semantics): parameter columns, codes, results.

Declared once, dependency-free. ``kernels/lm/layout.py`` derives the integer
column and result indices the kernels use from these tuples; datasets, run
records, ``validate`` and calibration read names, units and bounds from here.

A *column* is one numeric input of a configuration (one row of the parameter
table): a model dimension, a plan degree, an execution choice (as an integer
code) or a device / network constant. SI units throughout (s, bytes, bytes/s,
FLOP/s). ``fittable`` columns are physical efficiencies that ``calibrate`` may
fit; their bounds are the physical range.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastmodel.registry.lm_chunk import CHUNK_ENGINE_ROWS, CHUNK_MODEL_ROWS
from fastmodel.registry.lm_cudagraph import CUDA_GRAPH_PLAN_ROWS, CUDA_GRAPH_SCOPES
from fastmodel.registry.lm_engine import ENGINE_KERNEL_ROWS
from fastmodel.registry.lm_eval import EVAL_PLAN_ROWS, EVAL_RESULT_ROWS
from fastmodel.registry.lm_experts import EXPERT_PLAN_ROWS
from fastmodel.registry.lm_fsdp1 import FSDP1_PLAN_ROWS, FSDP_BACKWARD_PREFETCH
from fastmodel.registry.lm_lowprec import FP8_DEVICE_ROWS, FP8_RECIPES, LOW_PRECISION_PLAN_ROWS, OPTIMIZER_MOMENTS
from fastmodel.registry.lm_muon import MUON_PLAN_ROWS
from fastmodel.registry.lm_offload import OFFLOAD_DEVICE_ROWS, OFFLOAD_MODULES, OFFLOAD_PLAN_ROWS, OFFLOAD_RESULT_ROWS  # noqa: F401
from fastmodel.registry.lm_overhead import ALLOCATOR_PLAN_ROWS, OVERHEAD_DEVICE_ROWS, USERBUFFER_PLAN_ROWS
from fastmodel.registry.lm_pipeline import PIPELINE_PLAN_ROWS
from fastmodel.registry.lm_positions import POSITION_MODEL_ROWS
from fastmodel.registry.lm_sdpa import SDPA_DEVICE_ROWS, SDPA_PLAN_ROWS
from fastmodel.registry.lm_status import STATUS_CODES, STATUSES  # noqa: F401  (re-exported: registry.lm.STATUSES)
from fastmodel.registry.lm_step import EMBEDDING_FP32_GRADS, STEP_PLAN_ROWS
from fastmodel.registry.lm_straggler import STRAGGLER_DEVICE_ROWS, STRAGGLER_RESULT_ROWS
from fastmodel.registry.variables import (
    FITS_MEMORY,
    MEMORY_PER_DEVICE,
    STEP_TIME,
    TIME_GEMM,
    Breakdown,
    Variable,
    producer,
)


@dataclass(frozen=True)
class Column:
    name: str
    units: str
    default: float
    doc: str
    group: str = "model"          # model | plan | device | network
    lo: float = 0.0
    hi: float = float("inf")
    fittable: bool = False
    #: an execution option ``ExecutionSpec`` derives a field for (fastmodel/lm/execution.py): "flag" (true/false),
    #: "number" (within lo..hi) or "code" (a name of its CODE_TABLES entry); "" for every other column
    option: str = ""
    forbid: tuple = ()  # ``Forbidden`` open intervals of [lo, hi], each with its reason (registry/validators.py)


def _cols(group: str, *rows: tuple) -> tuple[Column, ...]:
    return tuple(Column(*row[:4], group, *row[4:]) for row in rows)


# --- integer codes -----------------------------------------------------------
SHARDING_CODES = {"ddp": 0, "zero1": 1, "distopt": 1, "zero2": 2, "fsdp": 3, "hsdp": 3}
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "partial_layers": 3}
PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp8": 1, "fp4": 2, "nvfp4": 2}
#: ``sgd`` keeps a momentum buffer (``sgd_momentum`` the same); ``sgd_no_momentum`` is ``torch.optim.SGD`` at its
#: default ``momentum=0``, which keeps no state (PyTorch docs, torch.optim.SGD); ``muon`` is Muon on the layers'
#: weight matrices and AdamW on every other parameter (KellerJordan/Muon muon.py, docs/model.md §11.7 "Muon")
OPTIMIZER_CODES = {"adam": 0, "adamw": 0, "sgd": 1, "sgd_momentum": 1, "adafactor": 2, "sgd_no_momentum": 3,
                   "muon": 4}
PIPELINE_SCHEDULES = {"1f1b": 0, "interleaved": 1, "gpipe": 2, "zb_h1": 3, "dualpipe": 4}
#: token dispatchers of expert parallelism (Megatron-Core ``--moe-token-dispatcher-type``; ``flex`` is its
#: DeepEP backend, ``deepep`` the same kernels as TorchTitan and DeepSeek name them)
MOE_DISPATCHERS = {"alltoall": 0, "allgather": 1, "deepep": 2, "flex": 2, "einsum": 3, "deepep_ll": 4}
#: overlap of the expert-parallel dispatch and combine with compute: none (Megatron's default), batch-level
#: (Megatron-Core ``--overlap-moe-expert-parallel-comm``: one micro-batch's all-to-all behind another's
#: compute), dualpipe (DeepSeek-V3's forward/backward chunk pairs)
MOE_A2A_OVERLAPS = {"none": 0, "batch": 1, "dualpipe": 2}
SELECTIVE_POLICIES = {"megatron": 0, "op": 1}
#: Megatron-Core ``recompute_modules`` (``TransformerConfig.recompute_modules``, megatron/core/transformer/
#: transformer_config.py; Megatron-LM ``--recompute-modules``), one bit each in the ``recompute_modules`` column;
#: 0 = the default list ``["core_attn"]``
RECOMPUTE_MODULES = {"core_attn": 1, "layernorm": 2, "mla_up_proj": 4, "moe_act": 8, "mlp": 16, "moe": 32,
                     "shared_experts": 64}
CP_ALGORITHMS = {"ring": 0, "alltoall": 1, "allgather": 2}
#: the LM loss as the stack computes it (kernels/lm/memory.py ``loss_workspace_bytes_per_logit``): Megatron's
#: vocab-parallel cross entropy, eager ``torch.nn.functional.cross_entropy`` on an FP32 upcast of the logits,
#: or the same function under torch.compile (TorchInductor)
LOSS_IMPLS = {"vocab_parallel": 0, "eager": 1, "compiled": 2}
COLLECTIVE_ALGORITHMS = {"auto": 0, "ring": 1, "tree": 2}
LOAD_MODES = {"batch": 0, "concurrency": 1, "max_throughput": 2}
#: the code table of every coded column: a name in a spec, record or sweep axis -> its integer
CODE_TABLES: dict[str, dict[str, int]] = {
    "sharding": SHARDING_CODES, "recompute": RECOMPUTE_CODES, "precision": PRECISION_CODES,
    "optimizer": OPTIMIZER_CODES, "pipeline_schedule": PIPELINE_SCHEDULES, "cp_algorithm": CP_ALGORITHMS,
    "collective_algorithm": COLLECTIVE_ALGORITHMS, "load_mode": LOAD_MODES, "selective_policy": SELECTIVE_POLICIES,
    "moe_dispatcher": MOE_DISPATCHERS, "moe_a2a_overlap": MOE_A2A_OVERLAPS, "loss_impl": LOSS_IMPLS,
    "optimizer_moments": OPTIMIZER_MOMENTS, "fp8_recipe": FP8_RECIPES, "cuda_graphs": CUDA_GRAPH_SCOPES,
    "embedding_fp32_grads": EMBEDDING_FP32_GRADS, "fsdp_backward_prefetch": FSDP_BACKWARD_PREFETCH,
}

MODEL_COLUMNS = _cols(
    "model",
    ("layers", "1", 32, "Transformer layers L (excluding MTP layers).", 1, 4096),
    ("hidden", "1", 4096, "Model width h.", 1, 1 << 20),
    ("ffn", "1", 11008, "Dense MLP width (intermediate size).", 1, 1 << 22),
    ("heads", "1", 32, "Query heads a.", 1, 4096),
    ("kv_heads", "1", 32, "Key/value heads (GQA: < heads; MQA: 1).", 1, 4096),
    ("head_dim", "1", 128, "Per-head width d_head (may differ from h / a).", 1, 4096),
    ("vocab", "1", 32000, "Vocabulary size V.", 1, 1 << 24),
    ("seq_len", "tokens", 4096, "Sequence length s.", 1, 1 << 24),
    ("gated_mlp", "1", 1, "1: gated 3-matrix MLP (SwiGLU/GeGLU); 0: 2-matrix MLP.", 0, 1),
    ("flash_attention", "1", 1, "1: fused flash attention (no s x s scores in HBM); 0: unfused (Megatron 2021-22).",
     0, 1),
    ("causal", "1", 1, "1: causal attention (half the score FLOPs executed by flash kernels).", 0, 1),
    ("tied_embeddings", "1", 0, "1: LM head shares the embedding matrix.", 0, 1),
    ("moe_experts", "1", 0, "Routed experts E (0 = dense).", 0, 1 << 16),
    ("moe_topk", "1", 0, "Routed experts per token k.", 0, 1024),
    ("moe_ffn", "1", 0, "Per-expert MLP width.", 0, 1 << 22),
    ("moe_shared_experts", "1", 0, "Shared (always-on) experts, each moe_ffn wide.", 0, 1024),
    ("dense_layers", "1", 0, "Leading dense layers of a MoE model.", 0, 4096),
    ("moe_capacity_factor", "1", 0, "Token capacity factor (0 = dropless).", 0, 64),
    ("moe_pad_to_capacity", "1", 0, "1: every expert's input padded to its capacity (Megatron-Core "
     "--moe-pad-expert-input-to-capacity; needs moe_capacity_factor > 0).", 0, 1),
    ("moe_layer_freq", "1", 1, "One MoE layer every moe_layer_freq layers after the leading dense ones "
     "(Megatron-Core --moe-layer-freq N, DeepSpeed-MoE expert interval); the others are dense.", 1, 4096),
    ("moe_max_nodes", "1", 0, "Node-limited routing: nodes one token's experts may span (DeepSeek-V3 M = 4; "
     "0 = unlimited).", 0, 1 << 16),
    ("moe_round_robin", "1", 0, "1: routing forced round-robin, token i to experts k i ... k i + k - 1 mod E "
     "(TorchTitan _debug_force_load_balance); 0: uniform (DeepEP's destinations, docs/model.md §11.14.2).", 0, 1),
    ("mla", "1", 0, "1: multi-head latent attention (DeepSeek).", 0, 1),
    ("q_lora_rank", "1", 0, "MLA query low-rank width (0 = full-rank query).", 0, 1 << 20),
    ("kv_lora_rank", "1", 0, "MLA compressed KV width.", 0, 1 << 20),
    ("qk_nope_head_dim", "1", 0, "MLA per-head non-rotary QK width.", 0, 4096),
    ("qk_rope_head_dim", "1", 0, "MLA per-head rotary QK width.", 0, 4096),
    ("v_head_dim", "1", 0, "MLA per-head value width.", 0, 4096),
    ("sliding_window", "tokens", 0, "Sliding-window attention span (0 = none).", 0, 1 << 24),
    ("sliding_window_layers", "1", 0, "Layers using the sliding window.", 0, 4096),
    *CHUNK_MODEL_ROWS,
    ("mtp_layers", "1", 0, "Multi-token-prediction layers (DeepSeek-V3).", 0, 64),
    ("dropout", "1", 0, "1: hidden and attention dropout on (GPT-3/Megatron 2022: 1-byte masks stored for backward); "
     "0: no dropout (Llama-style pretraining).", 0, 1),
    *POSITION_MODEL_ROWS,
    ("rms_norm", "1", 1, "1: RMSNorm (Llama family; eager PyTorch composes it of element-wise ops); 0: LayerNorm "
     "(GPT family; one kernel even in eager PyTorch).", 0, 1),
)

PLAN_COLUMNS = _cols(
    "plan",
    ("tp", "1", 1, "Tensor-parallel degree.", 1, 1 << 16),
    ("pp", "1", 1, "Pipeline-parallel stages.", 1, 1 << 16),
    ("vp", "1", 1, "Virtual stages per pipeline rank (interleaved 1F1B; 1 = none).", 1, 1024),
    ("cp", "1", 1, "Context-parallel degree.", 1, 1 << 16),
    ("ep", "1", 1, "Expert-parallel degree (expert mesh etp x ep x edp = tp x cp x dp, MoE parallel folding).",
     1, 1 << 16),
    ("etp", "1", 0, "Expert tensor-parallel degree; 0 = tp (Megatron-Core's default).", 0, 1 << 16),
    ("dp", "1", 1, "Data-parallel degree = devices / (tp pp cp).", 1, 1 << 24),
    ("sharding", "code", 1, "SHARDING_CODES: 0 ddp, 1 zero1/distopt, 2 zero2, 3 fsdp/hsdp.", 0, 3),
    ("shard_degree", "1", 0, "Devices one parameter shard group spans (FSDP/HSDP; 0 = all of dp).", 0, 1 << 24),
    ("micro_batch", "sequences", 1, "Sequences per micro-batch per data-parallel rank.", 1, 1 << 20),
    ("global_batch", "sequences", 1, "Sequences per optimizer step.", 1, 1 << 30),
    ("recompute", "code", 0, "RECOMPUTE_CODES: 0 none, 1 selective, 2 full, 3 partial layers.", 0, 3),
    ("recompute_fraction", "1", 0, "Share of layers fully recomputed under partial recompute.", 0, 1),
    ("selective_policy", "code", 0, "SELECTIVE_POLICIES, what selective recompute keeps: 0 Megatron (recompute the attention core, "
     "keep the rest); 1 op-level SAC as TorchTitan's 'op' mode (keep GEMM and attention outputs except every "
     "second GEMM, recompute element-wise ops).", 0, 1),
    ("recompute_modules", "bits", 0, "Megatron-Core recompute_modules under selective recompute, a sum of "
     "RECOMPUTE_MODULES bits (1 core_attn, 2 layernorm, 4 mla_up_proj, 8 moe_act, 16 mlp, 32 moe, 64 "
     "shared_experts); 0 = the default core_attn.", 0, 127),
    ("sequence_parallel", "1", 0, "1: Megatron sequence parallelism with TP (RS+AG instead of AR).", 0, 1),
    ("tp_comm_overlap", "1", 0, "1: TP communication overlapped with GEMMs (userbuffers).", 0, 1),
    ("precision", "code", 0, "PRECISION_CODES: 0 bf16/fp16, 1 fp8, 2 fp4 (NVFP4, §11.38) GEMMs.", 0, 2),
    ("grad_reduce_bytes", "bytes", 4, "Bytes per gradient element in the data-parallel reduction.", 1, 8),
    ("optimizer", "code", 0, "OPTIMIZER_CODES: 0 Adam(W), 1 SGD-momentum, 2 Adafactor, 3 SGD without momentum "
     "(no state), 4 Muon (layer matrices) + AdamW (the rest).", 0, 4),
    ("master_weights", "1", 1, "1: mixed precision, an FP32 master copy of the parameters is updated by the "
     "optimizer (Micikevicius et al. 2018; under FSDP the FP32 shards are that copy). 0: the model itself is "
     "16-bit (built in FP16/BF16, e.g. module.half()): the optimizer updates the 16-bit parameters in place, "
     "no FP32 copy anywhere, FSDP shards are 16-bit and gradients have the parameters' dtype.", 0, 1, False,
     "flag"),
    ("fsdp_module_wrap", "1", 0, "1: FSDP wraps each weight-bearing module of a layer (the attention block, each "
     "MLP linear) as its own unit, so one module at a time is gathered instead of the whole layer (memory only). "
     "0: one unit per transformer layer.", 0, 1, False, "flag"),
    ("fp8_params", "1", 0, "1: FP8 weight copies kept (no BF16 weight copy).", 0, 1),
    ("pipeline_schedule", "code", 0, "PIPELINE_SCHEDULES: " + ", ".join(f"{c} {n}" for n, c in PIPELINE_SCHEDULES.items())
     + ".", 0, len(PIPELINE_SCHEDULES) - 1),
    ("overlap_grad_reduce", "1", 1, "1: gradient reduction overlaps the last backward pass.", 0, 1),
    ("overlap_param_gather", "1", 1, "1: distributed-optimizer parameter gather overlaps the next forward; "
     "FSDP: backward prefetch (0: one unit gathered at a time).", 0, 1),
    ("activation_offload", "1", 0, "Share of activations offloaded to host memory.", 0, 1),
    ("fused_kernels", "1", 1, "1: fused element-wise kernels (Megatron, Transformer Engine, torch.compile); "
     "0: eager PyTorch, one kernel per op in FP32.", 0, 1),
    ("loss_impl", "code", 0, "LOSS_IMPLS, the cross entropy's workspace per logit: 0 Megatron vocab-parallel "
     "(BF16 logits + FP32 copy, 6 B), 1 eager torch cross_entropy on FP32-upcast logits (12 B), 2 the same "
     "under torch.compile (BF16 logits + BF16 gradient, 4 B).", 0, 2),
    ("cp_algorithm", "code", 0, "CP_ALGORITHMS: 0 ring attention (K/V blocks passed around, overlapped with "
     "attention), 1 all-to-all (DeepSpeed-Ulysses: heads scattered over cp, exposed), 2 K/V all-gather (Llama 3: exposed).", 0, 2),
    ("collective_algorithm", "code", 0, "COLLECTIVE_ALGORITHMS for allreduce: 0 the faster of ring and tree (as "
     "NCCL's tuner picks), 1 ring, 2 tree.", 0, 2),
    ("collective_bucket_bytes", "bytes", 0, "Largest message of a sharded-data-parallel collective: a layer's "
     "gather or reduction is issued in buckets of this size, each paying the ring latency (DeepSpeed ZeRO-3 "
     "prefetch bucket 5e7 elements; 0 = one collective per layer).", 0, 1e12),
    ("uneven_stages", "1", 0, "1: the layer count need not divide pp x vp (Llama 3: 126 layers on 16 stages, "
     "DeepSeek-V3: 61 on 16); the busiest pipeline rank holds ceil(L / (pp vp)) layers per virtual stage. 0: the "
     "rule layers_not_divisible applies (sweeps).", 0, 1),
    ("embedding_loss_in_split", "1", 0, "1: the word embedding and the loss each count as one layer in the "
     "pipeline split (Megatron-Core account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split; "
     "Llama 3 paper sec. 3.3.2): every rank holds (L + 2) / pp slots, the first rank's first chunk the embedding "
     "alone and the last rank's last chunk the loss alone, so the first and last ranks hold one layer fewer.",
     0, 1, False, "flag"),
    ("moe_dispatcher", "code", 0, "MOE_DISPATCHERS: 0 all-to-all, 1 all-gather (+ reduce-scatter), 2 DeepEP "
     "(NVLink + RDMA two-hop kernels; Megatron-Core flex), 3 einsum (DeepSpeed-MoE: dense GShard einsums + all-to-all), "
     "4 DeepEP low-latency (serving decode: one message per token and expert; docs/model_serving.md S39).",
     0, 4, False, "code"),
    ("moe_a2a_overlap", "code", 0, "MOE_A2A_OVERLAPS: 0 none, 1 batch-level (Megatron-Core EP A2A overlap), "
     "2 DualPipe: dispatch and combine hidden behind another micro-batch's compute.", 0, 2, False, "code"),
    ("moe_fp8_dispatch", "1", 0, "1: tokens dispatched in FP8 (1 byte + one FP32 scale per 128 elements; "
     "DeepEP, DeepSeek-V3 report sec. 3.3); the combine stays BF16.", 0, 1, False, "flag"),
    ("moe_shared_expert_overlap", "1", 0, "1: shared-expert compute overlaps the dispatch all-to-all "
     "(Megatron-Core --moe-shared-expert-overlap).", 0, 1, False, "flag"),
    ("moe_probs_in_experts", "1", 0, "1: router probabilities scale the expert activation (Megatron-Core's "
     "weighted SwiGLU), so the combine keeps no expert output for the probabilities' gradient; 0: the combine "
     "multiplies them and keeps the expert output (memory only).", 0, 1, False, "flag"),
    *LOW_PRECISION_PLAN_ROWS, *EXPERT_PLAN_ROWS,
    *MUON_PLAN_ROWS,
    *OFFLOAD_PLAN_ROWS, *CUDA_GRAPH_PLAN_ROWS, *PIPELINE_PLAN_ROWS, *EVAL_PLAN_ROWS,
    *SDPA_PLAN_ROWS, *ALLOCATOR_PLAN_ROWS, *USERBUFFER_PLAN_ROWS, *FSDP1_PLAN_ROWS,
    ("moe_imbalance", "1", 1, "Dropless routing: routed tokens of the busiest expert-parallel rank / the mean "
     "(1 = balanced, as forced balancing runs).", 1, 64, False, "number"),
    ("moe_expert_maxvio", "1", 0.0, "Per-expert load imbalance of the router's balancing method (max expert load / "
     "mean - 1), set from moe_balance when moe_imbalance is unset; the busiest of ep ranks then carries "
     "1 + maxvio sqrt(ep ln ep / (E ln E)) (docs/model.md §11.14.5). 0: moe_imbalance as given.", 0, 64),
    ("moe_mem_kernels", "1", 0.0, "Small memory-bound kernels (router score, top-k, masks, auxiliary loss, "
     "permutation bookkeeping) the stack launches per MoE layer forward, each charged kernel_overhead_s; counted "
     "from its source (docs/model.md §11.14). 0: not counted (fused or compiled routers). The stack profile sets "
     "it.", 0, 1e4, False, "number"),
    ("moe_sync_issue_ops", "1", 0.0, "Operators the host issues onto an idle GPU after the blocking host syncs of one "
     "MoE layer forward, each charged host_op_s, in the forward and a recomputed forward (docs/model.md §11.14.6). "
     "0: not counted. The stack profile sets it.", 0, 1e4, False, "number"),
    ("wgrad_fused_accumulation", "1", 0, "1: weight-gradient GEMMs accumulate into the main gradient (beta = 1), "
     "reading it back, grad_reduce_bytes per element (Megatron-LM gradient_accumulation_fusion; TE "
     "fuse_wgrad_accumulation); charged on every fused linear, routed experts, dense layers and the head "
     "(docs/model.md §11.3, §11.46). Set by the stack (or a record).", 0, 1, False, "flag"),
    *STEP_PLAN_ROWS,
    ("loss_traffic_bytes_per_logit", "bytes", 20.0, "HBM bytes the LM loss moves per logit (vocab / tp x tokens), "
     "forward and backward, beyond the head GEMM's (the bytes kept live: loss_impl). 20: generic (16-bit logits "
     "written, FP32 softmax read and written, each pass). Megatron-Core's unfused vocab-parallel cross-entropy: "
     "52, counted from its source (docs/model.md §11.5). The stack profile sets it.", 1, 1000, False, "number"),
    ("fsdp_copy_out", "1", 0, "1: ZeRO-3/FSDP copies each gathered layer out of the all-gather buffer into its "
     "parameters on the compute stream, a memory-bound read + write per gather, and its gradients into the "
     "reduce-scatter buffer in the reduce dtype (PyTorch FSDP2 per-parameter sharding, foreach_reduce; FSDP1's "
     "flat parameters are views of the buffer).", 0, 1),
    ("param_fetch_bw", "bytes/s", 0, "Throughput of a framework's own synchronous ZeRO-3 parameter fetch, bytes "
     "received per device per second (DeepSpeed <= 0.4.1: ~21.8e9 on A100, DeepSpeed issue #1174); each gather "
     "takes the longer of NCCL's time and this, and full recompute fetches the layer again. 0: NCCL's all-gather "
     "alone (every other stack).", 0, 1e13, False, "number"),
    ("grad_accum_bytes", "bytes", 0, "HBM bytes per layer parameter and micro-batch of a weight-gradient "
     "accumulation run as its own memory-bound kernel after the backward pass: 10 for FP32 accumulation of "
     "BF16 gradients (read the gradient 2 B, read and write the FP32 accumulator 4 + 4 B; PyTorch FSDP2 "
     "FSDPParam.accumulate_unsharded_grad_if_needed; Llama 3 paper sec. 3.3.2). 0: fused into the "
     "weight-gradient GEMM (Megatron gradient_accumulation_fusion) or not run.", 0, 64, False, "number"),
    ("grad_allreduce", "1", 0, "1: a ZeRO-1/distributed-optimizer step all-reduces the whole gradient instead of "
     "reduce-scattering it, then gathers the updated parameters (DeepSpeed ZeRO-1 and BF16_Optimizer, docs/model.md "
     "§11.6). Set by the stack.", 0, 1, False, "flag"),
)

DEVICE_COLUMNS = _cols(
    "device",
    ("peak_flops_16", "FLOP/s", 989e12, "Dense BF16/FP16 tensor peak (datasheet).", 1e9, 1e18),
    ("peak_flops_8", "FLOP/s", 1979e12, "Dense FP8 tensor peak (datasheet; 0 = unsupported).", 0, 1e18),
    ("peak_flops_4", "FLOP/s", 0.0, "Dense FP4 (NVFP4/MXFP4) tensor peak (datasheet; 0 = no FP4 tensor cores: "
     "serving runs FP4 weights weight-only, dequantised into 16-bit GEMMs).", 0, 1e18),
    ("hbm_bytes", "bytes", 80 * 2**30, "HBM capacity.", 1e8, 1e14),
    ("hbm_bw", "bytes/s", 3.35e12, "HBM bandwidth (datasheet).", 1e9, 1e15),
    ("gemm_eff_16", "1", 0.75, "Attainable fraction of the 16-bit peak for large GEMMs (microbenchmarks).", 0.05, 1, True),
    ("gemm_eff_8", "1", 0.65, "Attainable fraction of the FP8 peak for large GEMMs (microbenchmarks).", 0.05, 1, True),
    ("attn_eff", "1", 0.55, "Attainable fraction of the 16-bit peak for flash-attention kernels.", 0.05, 1, True),
    ("hbm_eff", "1", 0.80, "Attainable fraction of HBM bandwidth for memory-bound kernels.", 0.05, 1, True),
    ("sm_count", "1", 132, "Streaming multiprocessors (wave quantization).", 1, 1024),
    ("gemm_tile_m", "1", 128, "Output-tile rows of the GEMM library's main kernel.", 1, 1024),
    ("gemm_tile_n", "1", 256, "Output-tile columns of the GEMM library's main kernel.", 1, 1024),
    ("gemm_k_half", "1", 512, "Reduction length at which a GEMM reaches half its pipeline efficiency "
     "(prologue/epilogue amortisation).", 0, 1 << 16, True),
    ("comm_sm_share", "1", 0.15, "Share of compute throughput lost while a collective overlaps it (NCCL runs one "
     "SM per channel, 16-24 channels, and competes for HBM).", 0, 0.9, True),
    ("kernel_overhead_s", "s", 4e-6, "Launch + tail per kernel.", 0, 1e-3, True),
    *OVERHEAD_DEVICE_ROWS,
    *OFFLOAD_DEVICE_ROWS,
    *SDPA_DEVICE_ROWS,
    *FP8_DEVICE_ROWS,
    *STRAGGLER_DEVICE_ROWS,
)

NETWORK_COLUMNS = _cols(
    "network",
    ("n_gpus", "1", 8, "Devices in the job.", 1, 1 << 24),
    ("gpus_per_node", "1", 8, "Devices per server.", 1, 1 << 16),
    ("domain_size", "1", 8, "Devices per NVLink domain (tier 0 of a cluster's .tiers; 72 for NVL72).", 1, 1 << 16),
    ("intra_bw", "bytes/s", 450e9, "NVLink-domain (tier 0) bandwidth per device, one direction.", 1e8, 1e14),
    ("nvlink_mesh_max", "1", 0, "Largest NVLink domain the device's baseboard wires as a direct mesh, no NVSwitch: "
     "a device's links are split evenly among its domain - 1 peers (HGX 4-GPU: 4); 0: switched.", 0, 16),
    ("intra_latency", "s", 3.4e-6, "NVLink-domain (tier 0) per-step latency of a collective.", 0, 1e-2, True),
    ("collective_overhead_s", "s", 0.0, "GPU idle time around each tensor-parallel collective issued between compute "
     "kernels (NCCL kernel launch, ranks meeting), beyond NCCL's latency + bandwidth time; 0 where no device "
     "measurement exists (b200.toml: 23.6e-6, measured).", 0, 1e-2),
    ("intra_eff", "1", 0.80, "Attainable fraction of tier-0 (NVLink) bandwidth (NCCL bus bandwidth / link rate).",
     0.05, 1, True),
    ("alltoall_eff", "1", 0.0, "Attainable fraction of tier-0 bandwidth for an NCCL all-to-all, where measured apart "
     "from the rings (b200.toml: 0.64, nccl-tests); 0: intra_eff (docs/model.md §11.14.7).", 0, 1),
    ("alltoall_latency", "s", 0.0, "Per-peer latency of an NCCL all-to-all inside a domain, where measured "
     "(b200.toml: 7.3e-6, nccl-tests): (g - 1) x it over g peers; 0: one intra_latency.", 0, 1e-3),
    ("deepep_nvl_bw", "bytes/s", 0.0, "DeepEP normal kernels inside one NVLink domain: received bytes per second per "
     "rank (own share included), measured on the device at 128 SMs (docs/model.md §11.14.6); 0: intra_bw x intra_eff on "
     "the remote share.", 0, 1e14),
    ("inter_bw", "bytes/s", 50e9, "Scale-out (tier 1, NIC) bandwidth per device, one direction.", 1e7, 1e14),
    ("inter_latency", "s", 9.6e-6, "Scale-out (tier 1) per-step latency of a collective.", 0, 1e-2, True),
    ("inter_eff", "1", 0.85, "Attainable fraction of tier-1 (scale-out) bandwidth.", 0.05, 1, True),
    ("step_overhead_s", "s", 0.0, "Framework time per optimizer step outside the model (data, logging).",
     0, 100, True),
    ("stack_compute_eff", "1", 1.0, "Share of the modelled kernel speed the software stack attains (divides every "
     "GEMM, attention and memory-bound kernel time). 1 = the device files' microbenchmark efficiencies; only a "
     "calibration's [stack.\"NAME\"] table sets another value.", 0.5, 2.0, True),
    ("host_layer_s", "s", 0.0, "Host (CPU) time the software stack takes to issue one transformer layer's forward "
     "pass (Python, dispatcher, autograd, kernel launches); its backward and a recomputed forward take as long. A "
     "micro-batch the GPU runs faster than the CPU issues it lasts the issue time (time_host_wait). 0: the CPU "
     "always runs ahead; a calibration's [stack.\"NAME\"] table sets it. > 0 overrides host_ops_layer x "
     "host_op_s.", 0, 1, True),
    ("host_ops_layer", "1", 0.0, "Framework operators (PyTorch dispatcher calls) the stack issues per transformer "
     "layer forward pass, counted from its source (docs/model.md, host issue time); with host_op_s it gives the "
     "host time per layer pass when host_layer_s is 0. The stack profile sets it.", 0, 1e5, False, "number"),
    ("host_op_s", "s", 0.0, "Host (CPU) seconds to issue one eager framework operator: Python, dispatcher, "
     "autograd recording, kernel launch (docs/model.md, host issue time). 0: not counted (the CPU runs ahead, "
     "e.g. CUDA graphs). The stack profile sets it; a calibration's [stack.\"NAME\"] table may.", 0, 1e-3, True,
     "number"),
)

SERVE_COLUMNS = _cols(
    "serve",
    ("input_len", "tokens", 1024, "Prompt tokens per request.", 1, 1 << 24),
    ("output_len", "tokens", 128, "Generated tokens per request (the first comes from the prefill).", 1, 1 << 24),
    ("load_mode", "code", 0, "LOAD_MODES: 0 fixed batch (static), 1 concurrency (continuous batching), "
     "2 max_throughput (as many requests as the KV cache holds).", 0, 2),
    ("batch_size", "requests", 1, "Requests decoded together (load_mode 0) or in flight (load_mode 1).", 1, 1 << 24),
    ("max_batch_size", "requests", 2048, "Most requests the engine schedules at once (max_num_seqs; caps "
     "max_throughput).", 1, 1 << 24),
    ("max_num_tokens", "tokens", 8192, "Token budget of one engine step (prefill chunk size).", 1, 1 << 24),
    ("kv_cache_mem_fraction", "1", 0.9, "Share of the HBM left after weights, workspace and framework given "
     "to the KV cache (with kv_budget_of_total: share of the whole HBM, less those).", 0.01, 1),
    ("weight_bytes", "bytes", 2, "Bytes per weight element (2 BF16/FP16, 1 FP8/INT8, 0.5 INT4 weight-only).",
     0.25, 4),
    ("kv_bytes", "bytes", 2, "Bytes per KV-cache element (2 BF16/FP16, 1 FP8).", 0.25, 4),
    ("instances", "1", 1, "Serving instances in the cluster (each tp x pp devices).", 1, 1 << 24),
    ("serve_step_overhead_s", "s", 0.0, "Host seconds of an engine iteration's scheduler loop that do not depend "
     "on its requests (schedule, launch, hand-off; alias host_step_s). Continuous batching: with overlap_step it "
     "hides under the GPU, else it adds (docs/model_serving.md S36); static batch, max_throughput: added per step.",
     0, 1, True),
    ("attention_dp", "1", 1, "Attention data-parallel groups of tp GPUs (SGLang/TRT-LLM attention DP): each holds "
     "batch / attention_dp requests and their KV cache; the experts span tp x attention_dp GPUs.", 1, 1 << 16),
    ("moe_tp", "1", 0, "Tensor parallelism of each expert (0: tp x attention_dp / ep, the experts split like "
     "attention over what EP leaves).", 0, 1 << 16),
    *ENGINE_KERNEL_ROWS, *CHUNK_ENGINE_ROWS,
    ("kv_on_demand", "1", 0, "0: a request is admitted only if its KV cache at full length fits (TRT-LLM "
     "GUARANTEED_NO_EVICT); 1: KV blocks are allocated as tokens arrive (vLLM, SGLang): a request holds "
     "input_len + output_len / 2 tokens on average.", 0, 1),
    ("client_rounds", "1", 10, "Concurrency load: requests each closed-loop client sends in the measured run "
     "(num_prompts / concurrency; 10 in InferenceMAX's benchmark_serving runs). The first concurrency requests "
     "arrive together (start wave) and are 1 / client_rounds of the mean TTFT; 0: steady state only.", 0, 1 << 24),
)

COLUMNS: tuple[Column, ...] = MODEL_COLUMNS + PLAN_COLUMNS + DEVICE_COLUMNS + NETWORK_COLUMNS + SERVE_COLUMNS
COLUMN_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(COLUMNS)}

ENGINE = "lm"
#: a result variable of the real-world training model (name, units, better, description)
Result = producer(ENGINE)

MEMORY_KINDS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "buffers", "overhead")
#: coordinates of the dimensions the engine's variables have beyond the grid's axes
COORDS: dict[str, tuple[str, ...]] = {"memory_kind": MEMORY_KINDS}

#: result rows of the kernels, in order (``R_<NAME>``, kernels/lm/layout.py)
RESULTS: tuple[Variable, ...] = (
    STEP_TIME,
    Result("tokens_per_s", "tokens/s", "max", "global_batch x seq_len / step_time."),
    Result("tokens_per_s_per_gpu", "tokens/s", "max", "tokens_per_s / n_gpus."),
    Result("mfu", "1", "max", "Model FLOPs (6 N + attention, RUNS.md mfu_std convention) / (step_time x peak)."),
    Result("hfu", "1", "max", "Executed FLOPs including recompute / (step_time x peak)."),
    Result("flops_per_token", "FLOP", "", "Model training FLOPs per token (RUNS.md mfu_std convention)."),
    TIME_GEMM,
    Result("time_attention", "s", "min", "Per-step attention-kernel time (scores, softmax, PV; incl. recompute)."),
    Result("time_memory_bound", "s", "min", "Per-step memory-bound kernels (norms, activations, rotary, loss)."),
    Result("time_recompute", "s", "min", "Part of the compute times spent recomputing activations."),
    Result("time_optimizer", "s", "min", "Optimizer step on the local shard."),
    Result("pipeline_bubble", "s", "min", "Idle time of a pipeline stage per step."),
    Result("time_host_wait", "s", "min", "GPU idle per step while the host issues the kernels of host-bound "
           "micro-batches (host_layer_s)."),
    Result("comm_tp", "s", "min", "Tensor/sequence-parallel communication per step."),
    Result("comm_cp", "s", "min", "Context-parallel communication per step."),
    Result("comm_ep", "s", "min", "Expert-parallel all-to-all per step."),
    Result("comm_pp", "s", "min", "Pipeline point-to-point sends on the schedule's critical path, overlapped or not."),
    Result("comm_dp", "s", "min", "Data-parallel / sharding collectives per step."),
    Result("exposed_tp", "s", "min", "TP communication not hidden behind compute."),
    Result("exposed_cp", "s", "min", "CP communication not hidden behind compute."),
    Result("exposed_ep", "s", "min", "EP communication not hidden behind compute."),
    Result("exposed_pp", "s", "min", "PP communication not hidden behind compute."),
    Result("exposed_dp", "s", "min", "DP communication not hidden behind compute."),
    Result("comm_ep_scale_out", "s", "min", "Part of comm_ep's traffic on the scale-out tier (tier 1): the bytes "
           "of dispatch and combine that cross the NICs at their bandwidth (0 inside one NVLink domain)."),
    Result("memory_weights", "bytes", "min", "Weights per device (incl. gathered FSDP buffers' owners)."),
    Result("memory_gradients", "bytes", "min", "Gradients per device."),
    Result("memory_optimizer", "bytes", "min", "Optimizer states and master weights per device."),
    Result("memory_activations", "bytes", "min", "Activations held for backward on the most loaded rank."),
    Result("memory_kv_cache", "bytes", "min", "KV cache (serving)."),
    Result("memory_buffers", "bytes", "min", "Communication and gather buffers, logits workspace."),
    Result("memory_overhead", "bytes", "min", "Not a live tensor: CUDA context, cuBLAS workspaces, NCCL "
           "communicator buffers (kernels/lm/memory.py overhead_bytes)."),
    MEMORY_PER_DEVICE,
    FITS_MEMORY,
    Result("memory_allocated", "bytes", "min", "Peak bytes of live tensors over one step on the worst rank, as "
           "torch.cuda.max_memory_allocated reports: the memory kinds but overhead, at the rank's peak moment."),
    Result("memory_reserved", "bytes", "min", "Peak bytes the caching allocator holds from the device: "
           "memory_allocated x (1 + allocator_cache_fraction), as torch.cuda.max_memory_reserved reports (its "
           "cache is released on demand, so memory_per_device = memory_allocated + overhead decides fits_memory)."),
    Result("memory_peak_stage", "1", "", "Pipeline rank (0 = first) whose peak memory_per_device is reported."),
    *(Result(*r) for r in OFFLOAD_RESULT_ROWS), *(Result(*r) for r in EVAL_RESULT_ROWS),
    *(Result(*r) for r in STRAGGLER_RESULT_ROWS),
)
RESULT_INDEX: dict[str, int] = {r.name: i for i, r in enumerate(RESULTS)}
MEMORY_RESULTS = tuple("memory_" + k for k in MEMORY_KINDS)
#: the memory rows as one dataset variable with a ``memory_kind`` dimension (its parts: MEMORY_RESULTS)
MEMORY = Result("memory", "bytes", "min", "Bytes per device by kind on the most loaded rank; they sum to "
                "memory_per_device.", "memory by kind", dims=("memory_kind",))
#: ``best`` ranks only points that fit in usable HBM by default (fits_memory comes from the memory model)
RANK_ONLY_FITTING = True
#: the step as stacked bars (kernels/lm/step.py): compute on the busiest device + optimizer + pipeline bubble +
#: each process group's whole ("serialized") or exposed communication (= step_time exactly)
_COMPUTE = ("time_gemm", "time_attention", "time_memory_bound", "time_optimizer", "pipeline_bubble", "time_host_wait",
            "time_offload", "time_eval", "time_straggler")
BREAKDOWN = Breakdown((*_COMPUTE, *(f"comm_{g}" for g in ("tp", "cp", "ep", "pp", "dp"))),
                      (*_COMPUTE, *(f"exposed_{g}" for g in ("tp", "cp", "ep", "pp", "dp"))))
#: dataset variables made of several result rows: (variable, its rows, one per coordinate of its dimension)
GROUPED: tuple[tuple[Variable, tuple[str, ...]], ...] = ((MEMORY, MEMORY_RESULTS),)


def column_defaults() -> list[float]:
    """Default value of every column, in column order."""
    return [float(c.default) for c in COLUMNS]
