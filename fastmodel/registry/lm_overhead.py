"""Device columns of the memory that is not a model tensor: what fits, the allocator, the overhead's terms.

Rows of ``fastmodel.registry.lm.DEVICE_COLUMNS`` (name, units, default, doc, lo, hi), and the allocator's plan
column (``ALLOCATOR_PLAN_ROWS``, a row of ``PLAN_COLUMNS``) and the Userbuffers plan columns
(``USERBUFFER_PLAN_ROWS``), kept here so the registry module stays readable.
The overhead of the training engine (``kernels/lm/memory.py`` ``overhead_bytes``) is the CUDA context, the cuBLAS
workspaces, the NCCL communicator buffers, DeepEP's buffers and Transformer Engine's Userbuffers; docs/model_memory.md
"Overhead" gives the equations and sources.
``framework_memory_bytes`` is the serving engine's flat constant (kernels/serve).
"""

from __future__ import annotations

from fastmodel.registry.validators import Forbidden

#: NCCL connection buffers per protocol, bytes (NVIDIA/nccl src/init.cc, DEFAULT_LL_BUFFSIZE,
#: DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE; NCCL_BUFFSIZE sets the Simple one): LL 8 lines x 512 threads x
#: NCCL_STEPS 8 x 16 B; LL128 120 elements x 640 threads x 8 steps x 8 B; Simple 4 MiB
NCCL_LL_BYTES = 8 * 512 * 8 * 16
NCCL_LL128_BYTES = 120 * 640 * 8 * 8
NCCL_SIMPLE_BYTES = 1 << 22

#: the smallest share of HBM a set ``usable_hbm_fraction`` may give (its bound before 0 came to mean "not set");
#: a value below it reads as the share to keep FREE typed by mistake ("0.05" for a 5 % reserve)
USABLE_HBM_FRACTION_MIN = 0.1
#: the values of ``usable_hbm_fraction`` between "not set" (0) and ``USABLE_HBM_FRACTION_MIN`` it refuses, and why
USABLE_HBM_FRACTION_GAP = Forbidden(
    0.0, USABLE_HBM_FRACTION_MIN,
    "is the share of HBM a plan may FILL (0 = not set: keep the plan's allocator cache free); a set share is in "
    f"[{USABLE_HBM_FRACTION_MIN:g}, 1] (to keep a margin free, use --memory-margin)")


OVERHEAD_DEVICE_ROWS = (
    ("usable_hbm_fraction", "1", 0.0, "Share of HBM a plan may fill, when set (> 0): fits_memory is then "
     "memory_per_device <= f x HBM. 0 (default): not set; the training engine keeps free the plan's own allocator "
     "cache, allocator_cache_fraction x memory_allocated (docs/model_memory.md \"What a run keeps free\"), and the "
     "serving engine uses SERVE_USABLE_HBM_FRACTION (fastmodel/registry/serve.py).", 0, 1, False, "",
     (USABLE_HBM_FRACTION_GAP,)),
    ("framework_memory_bytes", "bytes", 3 * 2**30, "Serving engine: per-device memory that is not a live tensor "
     "(CUDA context, NCCL, library handles, fragmentation), one constant. The training engine counts these "
     "terms one by one (cuda_context_bytes, cublas_workspace_bytes, nccl_channels) and does not read it.", 0, 1e12),
    ("allocator_cache_fraction", "1", 0.05, "Memory the caching allocator reserves beyond its peak allocated "
     "bytes, as a share of them: memory_reserved = (1 + f) x memory_allocated (cached free blocks; "
     "torch.cuda.memory_stats: reserved = allocated + cached). Also the default margin of fits_memory "
     "(the most of it a failed allocation does not get back: free blocks split from segments in use; "
     "docs/model_memory.md \"What a run keeps free\"). 0.05: the Megatron-LM B200 runs of "
     "runs_dev_b200.jsonl report max_memory_reserved / max_memory_allocated of 1.028-1.069. Under "
     "expandable segments (plan column allocator_expandable_segments) the margin takes "
     "allocator_cache_fraction_expandable instead; memory_reserved keeps this share.", 0, 1),
    ("allocator_cache_fraction_expandable", "1", 0.013, "The default margin of fits_memory, as a share of "
     "allocated bytes, of a run under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (plan "
     "allocator_expandable_segments = 1): a failed allocation unmaps every whole free page, so only partial pages "
     "at the ends of free blocks stay (c10/cuda/CUDACachingAllocator.cpp, Note [Expandable Segments]). 0.013: "
     "TorchTitan's DeepEP snapshot, 122.28 of 123.89 GB reserved allocated, its whole cache (pytorch/torchtitan"
     "@022f885f34 scripts/memory_analysis/compare_deepep_vs_baseline.py lines 15-20; docs/model_memory.md "
     "\"Expandable segments\").", 0, 1),
    ("cuda_context_bytes", "bytes", 287047680, "Device memory of the process's CUDA context with lazy module "
     "loading (PyTorch sets CUDA_MODULE_LOADING=LAZY since 1.13; pytorch/pytorch PR #86509 measured 287,047,680 "
     "bytes lazy vs 666,632,192 eager).", 0, 1e11),
    ("cublas_workspace_bytes", "bytes", 32 * 2**20, "cuBLAS workspace PyTorch gives each (handle, stream): "
     "CUBLAS_WORKSPACE_CONFIG default :4096:8 = 32 MiB on sm 9.0 (Hopper), :4096:2:16:8 = 8.125 MiB on every "
     "other arch, Blackwell included (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize).",
     0, 1e10),
    ("nccl_channels", "1", 16, "Ring channels of one NCCL communicator of the job, each holding one connection's "
     "LL + LL128 + Simple buffers (NCCL logs: 16 on multi-node H100, NVIDIA/nccl#1453; 24 on HGX A100, "
     "NVIDIA/nccl-tests#100). 0: NCCL buffers not counted.", 0, 64),
    ("nccl_p2p_channels_per_peer", "1", 2, "NCCL channels per peer of point-to-point traffic (pipeline sends, "
     "all-to-all), each a Simple buffer (NCCL logs '2 p2p channels per peer', NVIDIA/nccl#1189, #1706).", 0, 64),
)


#: plan (stack) column of the caching allocator's mode: which share, ``allocator_cache_fraction`` or
#: ``allocator_cache_fraction_expandable``, sets the default margin (docs/model_memory.md
#: "Expandable segments (``allocator_expandable_segments``)"); the stack profiles set it where their launcher does
ALLOCATOR_PLAN_ROWS = (
    ("allocator_expandable_segments", "1", 0, "1: the run's PyTorch caching allocator maps its segments in pages "
     "(PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF expandable_segments:True): the default margin of "
     "fits_memory takes allocator_cache_fraction_expandable instead of allocator_cache_fraction (memory_reserved "
     "does not move: the pages stay cached until an allocation fails). Set by "
     "the TorchTitan profile (run_train.sh, pytorch/torchtitan a5e57e4a9 on) and Megatron-Bridge's performance "
     "launcher (scripts/performance/utils/executors.py PERF_ENV_VARS at b7b4e11b); 0: the default allocator.",
     0, 1, False, "flag"),
)


#: plan (stack) columns of Transformer Engine's Userbuffers under ``tp_comm_overlap`` (kernels/lm/memory.py
#: ``userbuffer_bytes``; docs/model_memory.md "Overhead" (Userbuffers))
USERBUFFER_PLAN_ROWS = (
    ("ub_communicators", "1", 0, "Userbuffers communicators Transformer Engine's initialize_ub creates under "
     "tp_comm_overlap (tp > 1), one buffer of micro_batch x seq_len / cp rows x hidden each, allocated outside "
     "PyTorch's caching allocator: 12 from TE 2.7 on (ring exchange 4, pipeline 2, bulk 4, external 2; TE@d64bc14d "
     "transformer_engine/pytorch/module/base.py lines 288-298, 467-477), 10 before (no external wgrad overlaps: "
     "TE 09ba842 base.py lines 133-137, v1.6rc1 lines 88-92). The megatron-core profile sets 12; a record of an "
     "older TE states its own. 0: the stack's TP overlap uses no Userbuffers (no term).", 0, 24, False, "number"),
    ("ub_ring_exchange_rs", "1", 0, "Of the two forward reduce-scatter overlaps (proj_fprop, fc2_fprop), how many "
     "the run's userbuffers config runs as ring exchange: that buffer holds 2 tp - 1 chunks of 1 / tp of the "
     "shape (TE v1.6rc1 comm_gemm_overlap.h lines 572-579; d64bc14d comm_gemm_overlap.cpp lines 688-696) instead "
     "of one whole shape. Megatron-Bridge's FP8 Llama configs: 2 (src/megatron/bridge/training/comm_overlap.py "
     "at b7b4e11b lines 120-121, 146-147, 173-174, 199-200; its BF16 ones run both as pipeline); MLPerf v4.0 "
     "h100tp4mbs2.yaml: 1 (fc2_fprop). Default 0 (both pipelined) is what a run without a userbuffers config gets, "
     "FP8 or not: TE's initialize_ub defaults put proj_fprop and fc2_fprop under pipeline (TE@d64bc14d base.py "
     "lines 288-298), Megatron-LM passes no ub_cfgs without --tp-comm-overlap-cfg, and Megatron-Bridge's "
     "CommOverlapConfig.setup without tp_comm_overlap_cfg initializes 'with the default config'; a plan that "
     "names Megatron-Bridge's FP8 configs states 2.", 0, 2, False, "number"),
)
