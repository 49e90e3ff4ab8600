"""Host (CPU) issue time of the serving iterations an engine runs eagerly (docs/model_serving.md §S21).

Every engine here replays CUDA graphs for decode-only iterations, so their host cost is the graph launch. An
iteration that carries prompt tokens is issued from Python op by op where the engine does not graph it:
TensorRT-LLM's PyTorch backend graphs only batches that ``can_run_cuda_graph`` (generation only;
``tensorrt_llm/_torch/pyexecutor/model_engine.py`` ``_maybe_get_cuda_graph``), and its piecewise prefill graphs
are opt-in ("Torch Compile & Piecewise CUDA Graph", nvidia.github.io/TensorRT-LLM/features/
torch_compile_and_piecewise_cuda_graph.html: they exist "to reduce context-phase launch overhead"). With the
overlap scheduler the CPU issues while the GPU runs, so an eager iteration lasts ``max(GPU, host)``: the GPU
waits for kernels the CPU has not issued yet, or the CPU waits at the next iteration for the GPU.

The host time of one layer is ``host_ops_layer x host_op_s`` (the training model's columns, the same meaning:
dispatcher calls per layer forward x seconds per eager operator); ``host_ops_layer = 0`` takes the count
below, and ``host_op_s = 0`` (the default, and every engine whose eager ops are not counted) turns the term off.

The scheduler loop's own host time per iteration (§S36, ``scheduler_host_s``): ``serve_step_overhead_s + host_req_s x r``
for the ``r`` requests a rank's loop walks (each attention-DP rank runs its own loop over its requests; every TP
rank of a group walks the group's batch). ``iteration_s`` combines it with the GPU time and the eager issue time:
with the overlap scheduler (``overlap_step``) the CPU prepares iteration n+1 while the GPU runs n, so an
iteration lasts ``max(GPU, eager + sched)``; without it the scheduler runs between iterations,
``max(GPU, eager) + sched``.

Count per decoder layer of TensorRT-LLM's PyTorch backend (one per Python-level ``torch.ops`` / ``torch``
call; a ``.size()``, an assert or a Python list is none), read from NVIDIA/TensorRT-LLM stored copies:
``_torch/modules/linear.py`` and ``gated_mlp.py`` @01503f5, ``_torch/modules/attention.py`` @01503f5
(``Attention.forward``), ``_torch/attention_backend/trtllm.py`` @00bede1 (``TrtllmAttentionWrapper.run``:
``q.new_empty`` and ``torch.ops.trtllm.attention_inplace``), ``_torch/modules/fused_moe/fused_moe_cutlass.py``
@000a01d (``CutlassFusedMoE.forward_chunk``), ``_torch/modules/fused_moe/routing.py``
(``RenormalizeMoeRoutingMethod.apply``: ``renorm_moe_routing_op`` for <= 128 experts and top-k <= 8).

The OpenAI-Triton MoE backend (``TritonFusedMoE``, TensorRT-LLM's MXFP4 MoE on Hopper at the ``gpt-oss-dev``
image) issues its routing and both expert GEMMs from Python through OpenAI's ``triton_kernels``; its block is
``TRITON_MOE_OPS`` calls instead of ``MOE_OPS`` (docs/model_serving.md §S37, ``triton_moe_layer_ops``).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    C_ATTENTION_DP, C_HOST_OP_S, C_HOST_OPS_LAYER, C_HOST_REQ_S, C_LAYERS, C_OVERLAP_STEP, C_PP, C_SERVE_STEP_OVERHEAD_S,
    C_TP,
)
from fastmodel.kernels.lm.layout import C_EP, C_MOE_EXPERTS
from fastmodel.kernels.serve.costs import dense_format, gemm_format

#: the two RMSNorms of a layer, each one fused add+norm call (or the all-reduce's fused norm)
NORM_OPS = 2.0
#: attention: ``q.new_empty`` (the output) and ``torch.ops.trtllm.attention_inplace`` (RoPE fused in the op);
#: with NVFP4 linears ``TrtllmAttention.forward`` first asks ``attention_supports_nvfp4_output`` (one more call)
ATTENTION_OPS = 2.0
ATTENTION_FP4_OPS = 1.0
#: the gated activation of a dense MLP (``swiglu``: one ``flashinfer_silu_and_mul`` call)
SWIGLU_OPS = 1.0
#: ``Linear.apply_linear`` per precision: 16-bit ``F.linear`` (``t`` + ``mm``, docs/model.md's convention),
#: FP8 per-tensor (``static_quantize_e4m3_per_tensor``, ``weight.t()``, ``cublas_scaled_mm``), FP4
#: (``fp4_quantize``, ``nvfp4_gemm``)
LINEAR_OPS_16 = 2.0
LINEAR_OPS_FP8 = 3.0
LINEAR_OPS_FP4 = 2.0
#: an MoE block (``CutlassFusedMoE``): router ``weight.t()`` + ``cublas_mm``, ``renorm_moe_routing_op``, two
#: expert-weight ``.view`` calls, ``fused_moe``; + one input quantize when the experts take FP8/FP4 activations
MOE_OPS = 6.0
MOE_QUANT_OPS = 1.0
#: the MoE block of ``TritonFusedMoE`` with MXFP4 weights and 16-bit activations (TensorRT-LLM stored copy that
#: imports ``triton_kernels`` from ``$TRITON_ROOT``, Triton f3067cd3 "verified"; ``triton_kernels`` stored copies of
#: the same API, ``routing(..., simulated_ep)`` era; docs/model_serving.md §S37): router ``t`` + ``mm`` 2;
#: ``topk`` 7 (4 ``torch.empty``, ``transpose``, a slice, the launch); ``routing_from_bitmatrix`` 28
#: (``Bitmatrix.sum`` 5, 1 slice of the histogram, 5 ``torch.empty``, 7 slices, 2 launches, the two
#: ``_unpack_into_dict`` 4 slices each); the activation ``F.pad`` to 128 columns 1; two ``matmul_ogs`` 9 each
#: (scale ``view``, output ``torch.empty``, 4 ``view``, the launch, ``squeeze``, ``view``); the un-pad slice 1
TRITON_MOE_OPS = 57.0
#: ``TritonEPRouter.prune_routing_ep`` at ep > 1: the shift and clear launches and ``compaction``'s launch (its
#: allocations not read)
TRITON_EP_OPS = 3.0


@njit(inline="always")
def linear_ops(fmt):
    """Dispatcher calls of one ``Linear`` forward at GEMM format ``fmt`` (``costs.gemm_format``'s codes:
    0 16-bit, 1 FP8, 2 FP4 W4A4)."""
    if fmt >= 2.0:
        return LINEAR_OPS_FP4
    if fmt >= 1.0:
        return LINEAR_OPS_FP8
    return LINEAR_OPS_16


@njit
def eager_layer_ops(row):
    """Dispatcher calls one decoder layer issues in an eager iteration: ``host_ops_layer`` when set, else the
    TensorRT-LLM count (module docstring): norms, QKV and output projections, attention, a dense gated MLP
    (two linears and the activation) or an MoE block, and one all-reduce after attention and one after the
    MLP when tp > 1."""
    if row[C_HOST_OPS_LAYER] > 0.0:
        return row[C_HOST_OPS_LAYER]
    fmt, _ = dense_format(row)
    lin = linear_ops(fmt)
    ops = NORM_OPS + 2.0 * lin + ATTENTION_OPS + (ATTENTION_FP4_OPS if fmt >= 2.0 else 0.0)
    if row[C_MOE_EXPERTS] > 0.0:
        ops += MOE_OPS + (MOE_QUANT_OPS if gemm_format(row) > 0.0 else 0.0)
    else:
        ops += 2.0 * lin + SWIGLU_OPS
    if row[C_TP] > 1.0:
        ops += 2.0
    return ops


@njit
def triton_moe_layer_ops(row):
    """Dispatcher calls of one decoder layer with TensorRT-LLM's Triton MoE block (``TRITON_MOE_OPS``, +
    ``TRITON_EP_OPS`` at ep > 1) in place of the CUTLASS one: the value ``host_ops_layer`` takes for such a
    deployment (docs/model_serving.md §S37). Reads the counted layer, not ``host_ops_layer``."""
    fmt, _ = dense_format(row)
    lin = linear_ops(fmt)
    ops = NORM_OPS + 2.0 * lin + ATTENTION_OPS + (ATTENTION_FP4_OPS if fmt >= 2.0 else 0.0) + TRITON_MOE_OPS
    if row[C_EP] > 1.0:
        ops += TRITON_EP_OPS
    if row[C_TP] > 1.0:
        ops += 2.0
    return ops


@njit
def eager_host_s(row):
    """Host seconds to issue one eager iteration of a pipeline stage: layers / pp x ops per layer x
    ``host_op_s`` (0 when ``host_op_s`` is 0: not counted)."""
    if row[C_HOST_OP_S] <= 0.0:
        return 0.0
    return row[C_LAYERS] / row[C_PP] * eager_layer_ops(row) * row[C_HOST_OP_S]


@njit(inline="always")
def scheduler_host_s(row, requests):
    """Host seconds of one iteration of the engine's scheduler loop on a rank that walks ``requests`` requests:
    ``serve_step_overhead_s + host_req_s x requests`` (docs/model_serving.md S36; 0 when both columns are 0)."""
    return row[C_SERVE_STEP_OVERHEAD_S] + row[C_HOST_REQ_S] * requests


@njit(inline="always")
def iteration_s(row, gpu, eager, requests):
    """Seconds of an iteration whose GPU work lasts ``gpu``, whose host issues ``eager`` seconds of operators and
    whose busiest rank walks ``requests`` requests (``requests`` over all attention-DP groups divided by
    ``attention_dp`` by the caller): ``max(gpu, eager + sched)`` with the overlap scheduler (the loop prepares the
    next iteration while the GPU runs this one), else ``max(gpu, eager) + sched`` (docs/model_serving.md S36)."""
    sched = scheduler_host_s(row, requests)
    if row[C_OVERLAP_STEP] > 0.0:
        return max(gpu, eager + sched)
    return max(gpu, eager) + sched


@njit(inline="always")
def rank_requests(row, requests):
    """Requests one rank's loop walks when ``requests`` are spread over the attention-DP groups."""
    return requests / row[C_ATTENTION_DP]
