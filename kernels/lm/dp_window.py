"""The compute the once-per-step data-parallel collectives hide behind (docs/model.md §11.6 "DP", §11.28).

Without interleaving the gradient reduction of a rank's stage overlaps its last micro-batch's backward and the
parameter all-gather its first micro-batch's forward: ``per_stage x`` a layer's backward or forward.

Under the interleaved schedule (``v > 1`` model chunks per rank, ``p`` ranks) Megatron-Core launches the
collectives per model chunk (core_v0.7.0.beta, commit 3c0f3ef38c645043be18e51ce2698b37eaceb128,
megatron/core/pipeline_parallel/schedules.py ``forward_backward_pipelining_with_interleaving``): chunk ``c``'s
gradients are reduced (``config.grad_sync_func[c]``, lines 674-682) once the backward of its last micro-batch
is done, shifted by the rank's index so that every rank launches at the same wall time; backward virtual
micro-batch ``k`` belongs to chunk ``v - 1 - (k mod p v) // p`` (lines 554-560) and chunk ``c``'s last one is
``k = m v - 1 - c p`` (``is_last_microbatch_for_model_chunk``, lines 582-591), so on rank 0, which runs the
step's last backward, ``c p`` chunk backwards ``b`` follow the launch; chunk 0's reduction is launched after
the schedule (lines 996-1001) and hides behind nothing. The parameter all-gathers of chunks 0 and 1 are launched
before the first forward (lines 550-552), that of chunk ``c >= 2`` at the first forward of chunk ``c - 1``
(forward index ``(c - 1) p``, lines 605-615), each needed at forward index ``c p``: ``p`` chunk forwards ``f``
after it, chunk 0's at once. NeMo's MLPerf GPT-3 (distributed_fused_adam, ``overlap_grad_sync`` and
``overlap_param_sync``) passes these per-chunk functions (NeMo v2.0.0.rc0.beta megatron_gpt_model.py
``fwd_bwd_step``, lines 588-607: ``reduce_overlap_gradients``, ``sync_overlap_parameters``), as Megatron-LM's
training.py does with ``overlap_grad_reduce``/``delay_grad_reduce`` and
``overlap_param_gather``/``delay_param_gather`` (lines 928-943).

The chunks' collectives (``rho = R / v`` each of the stage's reduction ``R``) queue on one communication stream,
so the last finishes at ``max_c (launch_c + (c + 1) rho)`` and the exposed part is

    max_{c=0..v-1} ((c + 1) rho - c p b) = max(rho, R - (v - 1) p b)

(the maximum of affine terms sits at an end), i.e. ``R`` less a window ``(v - 1) min(R / v, p b)``; the
all-gather likewise with ``f``. Only the compute counts: the cool-down's idle time is the bubble's.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_DP, C_PIPELINE_SCHEDULE, C_PP, C_SHARDING, C_VP, SCHED_1F1B, \
    SCHED_INTERLEAVED, SHARD_FSDP


@njit
def chunked_window(total, chunks, hidden_per_chunk):
    """Seconds of compute that ``total`` seconds of one collective per chunk, ``chunks`` equal chunks queued on
    one stream, each launched ``hidden_per_chunk`` seconds of compute after the one before and the last with
    none after it, hide behind: ``(chunks - 1) min(total / chunks, hidden_per_chunk)``, so that
    ``total - window = max(total / chunks, total - (chunks - 1) hidden_per_chunk)`` stays exposed."""
    if chunks <= 1.0 or total <= 0.0:
        return 0.0
    return (chunks - 1.0) * min(total / chunks, hidden_per_chunk)


@njit
def dp_overlap_windows(row, reduce, gather, backward, forward):
    """(backward window, forward window): seconds of compute the stage's once-per-step gradient reduction
    (``reduce`` seconds) and parameter all-gather (``gather`` seconds) overlap (module docstring), given the
    stage's backward and forward of one micro-batch (``per_stage`` layers' passes). ``parallel.data_parallel``
    calls it for the dense parameters where it has timed the two collectives; the per-chunk window applies with
    ``vp > 1`` (Megatron-Core runs the interleaved schedule whenever a virtual pipeline size is set: ``1f1b`` and
    ``interleaved``), ``pp > 1`` and a non-FSDP data-parallel group of more than one device (FSDP gathers per
    layer; kernels/lm/parallel.py); else the windows are ``backward`` and ``forward``."""
    if not per_chunk_collectives(row):
        return backward, forward
    v = row[C_VP]
    p = row[C_PP]
    return chunked_window(reduce, v, p * backward / v), chunked_window(gather, v, p * forward / v)


@njit
def per_chunk_collectives(row):
    """Whether the once-per-step data-parallel collectives run per model chunk, launched at the same wall time on
    every rank (module docstring): ``vp > 1`` under ``1f1b`` or ``interleaved``, ``pp > 1``, and a non-FSDP
    data-parallel group of more than one device."""
    schedule = int(row[C_PIPELINE_SCHEDULE])
    return (schedule == SCHED_INTERLEAVED or schedule == SCHED_1F1B) and row[C_VP] > 1.0 and row[C_PP] > 1.0 \
        and row[C_SHARDING] != SHARD_FSDP and row[C_DP] > 1.0


@njit
def collectives_per_step(row, chunked):
    """How many collectives carry the stage's once-per-step reduction (and gather): ``vp``, one per model chunk, when
    ``chunked`` (the dense parameters' call) and the rule of :func:`per_chunk_collectives` holds, each with its own
    ring latency (Megatron-Core's ``grad_sync_func[c]`` / ``param_sync_func[c]``; Megatron-LM de7dc40f88
    ``training.py`` lines 368-369 reduces chunk by chunk too; docs/model.md §11.65); else 1."""
    return row[C_VP] if chunked and per_chunk_collectives(row) else 1.0
