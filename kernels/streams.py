"""Codes the list scheduler (``kernels/schedule.py``) and every Program share: streams, op categories,
the scheduler's outputs and its scratch-vector layout. Engine-neutral: the MAD-Max lowering and the
real-world exact pipeline path both build Programs on them (``fastmodel/schedule/program.py``).
"""

# --- stream codes -----------------------------------------------------------
STREAM_COMPUTE = 0
STREAM_COMM = 1

# --- op categories (busy-time accumulators) ---------------------------------
CAT_GEMM = 0
CAT_EMB = 1
CAT_ALL2ALL = 2
CAT_ALLREDUCE = 3
CAT_ALLGATHER = 4
CAT_REDUCESCATTER = 5
N_CATEGORIES = 6
CATEGORY_NAMES = ("gemm", "emb", "all2all", "allreduce", "allgather", "reducescatter")

# --- scheduler outputs -------------------------------------------------------
SCHEDULE_OUTPUTS = ("iteration_time", "forward_time") + tuple("time_" + c for c in CATEGORY_NAMES)
O_ITERATION_TIME = 0
O_FORWARD_TIME = 1
O_CATEGORY0 = 2
N_SCHEDULE_OUTPUTS = len(SCHEDULE_OUTPUTS)

# --- scheduler scratch: small state vector layout ---------------------------
MAX_STREAMS = 8        # compute + up to 7 communication streams (one per process group, point-to-point)
W_CURSORS = 0                          # MAX_STREAMS: each stream's cursor
W_PREV_CURSORS = MAX_STREAMS           # MAX_STREAMS
W_INC_CURSOR = 2 * MAX_STREAMS         # MAX_STREAMS
W_PREV_INC_CURSOR = 3 * MAX_STREAMS    # MAX_STREAMS
W_LAYER_BUSY = 4 * MAX_STREAMS         # N_CATEGORIES
N_WORK = 4 * MAX_STREAMS + N_CATEGORIES
