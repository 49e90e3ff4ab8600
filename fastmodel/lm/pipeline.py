"""The real-world step's pipeline, op by op: the exact path that tests the closed form (docs/model.md §11.7.1).

The closed form (``kernels/lm/step.py``) charges one step ``m t_mb + bubble``: ``t_mb`` is one
micro-batch on the slowest (last) stage, the bubble the schedule's (``kernels/lm/pipeline.py``), e.g.
``(p - 1)/v t_avg`` for 1F1B with ``t_avg`` the average stage.
Here the same per-micro-batch stage times, read back from the kernel's own results, become
the cost slots of a pipeline Program (``lm/pipeline_program.py``), which the generic scheduler
times exactly:

- per micro-batch, stage body ``t_body = t_mb - t_head``: the stage's layers, forward and
  backward (with recompute and exposed TP/CP/EP), ``t_mb`` recovered from
  ``step_time - pipeline_bubble - exposed_pp - exposed_dp - time_optimizer - step_overhead_s``
  over m; ``t_head`` the LM head and loss (``kernels/lm/passes.head_passes``), on the last
  virtual stage only (under DualPipe the last stage of each direction: half of it per micro-batch), and beside
  it the MTP modules' layers ``t_MTP = D t_mtp`` (``kernels/lm/mtp_breakdown.mtp_layer``, §11.4), as the closed
  form's last rank holds them (``step.busiest_stage_into``: ``(t_head + t_MTP) / copies``);
  when the loss takes a layer's slot (``embedding_loss_in_split``) and a middle rank is the busiest,
  ``t_body = t_mb``: the body of a full rank, scaled from the busiest rank's layers (``busiest_stage``);
  ``e`` the word embedding's TP collectives at pp > 1 (``kernels/lm/first_rank.py``), on the first virtual
  stage only (off the busiest rank's body where it holds them: the first rank, or under DualPipe half);
- each virtual stage (chunk) holds ``t_body / v``; with ``uneven_stages``, in proportion to the
  layers it holds (:func:`chunk_layers`); forward, backward and its weight-gradient part in the
  kernel's pass ratios (:func:`pass_shares`), a split the 1F1B, GPipe and interleaved makespans do
  not depend on in the cases the tests prove; ZB-H1 and DualPipe read it.

Data-parallel, optimizer and host time are outside the pipeline: the comparison is of the
compute and bubble part ``m t_mb + bubble`` alone, and, with sends (:func:`send_time`, each on
its stage's send stream), of what the sends add against the closed form's ``exposed_pp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fastmodel.errors import UnsupportedError
from fastmodel.lm.pipeline_program import PipelineTimes, pipeline_program, pipeline_slots, schedule_pipeline
from fastmodel.registry.lm import COLUMN_INDEX, PIPELINE_SCHEDULES


def _col(columns: np.ndarray, name: str) -> float:
    return float(columns[COLUMN_INDEX[name]])


def chunk_layers(layers: int, stages: int, virtual_stages: int = 1) -> np.ndarray:
    """Layers of each virtual stage, shape (v, p): ``layers / (p v)`` each when that divides; otherwise the
    busiest hold ``ceil(layers / (p v))`` (the closed form's count) and the layers missing are taken one by
    one from the first and the last virtual stage, then the second and the second-to-last, ... (Llama 3,
    Dubey et al. 2024 sec. 3.3.2: one layer fewer on the first and the last stage)."""
    n = stages * virtual_stages
    per = math.ceil(layers / n)
    counts = np.full(n, per, dtype=np.int64)
    order = [k for pair in zip(range(n), range(n - 1, -1, -1)) for k in pair]
    for k in order[:per * n - layers]:
        counts[k] -= 1
    return counts.reshape(virtual_stages, stages)


@dataclass(frozen=True)
class StageTimes:
    """Per-micro-batch times of one configuration's pipeline stages (seconds) and the closed form's terms."""

    schedule: str
    stages: int
    virtual_stages: int
    micro_batches: int
    forward: np.ndarray          # (v, p): forward of one micro-batch on chunk c of stage s (head included)
    backward: np.ndarray         # (v, p): full backward (inputs and weights)
    weight: np.ndarray           # (v, p): its weight-gradient part (the W pass of split-backward schedules)
    stage_mb: float              # the closed form's t_mb: the busiest stage, one micro-batch
    head: float                  # LM head and loss, forward and backward, one micro-batch
    mtp: float                   # the MTP modules' layers on the last stage, forward and backward, one micro-batch
    closed_bubble: float         # the kernel's pipeline_bubble

    @property
    def closed_compute(self) -> float:
        """m t_mb: the closed form's pipeline compute (busiest stage)."""
        return self.micro_batches * self.stage_mb

    @property
    def closed(self) -> float:
        """The closed form's compute + bubble."""
        return self.closed_compute + self.closed_bubble


def _schedule(columns: np.ndarray, v: int) -> str:
    if v > 1:
        return "interleaved"     # the closed form divides the bubble by v whatever the schedule code
    name = {code: name for name, code in PIPELINE_SCHEDULES.items()}[int(_col(columns, "pipeline_schedule"))]
    return "1f1b" if name == "interleaved" else name


def pass_shares(columns: np.ndarray) -> tuple[float, float]:
    """(forward, weight-gradient) shares of the average layer's critical-path time (``kernels/lm/passes.py``:
    F + exposed forward communication, and W, over t_layer)."""
    from fastmodel.kernels.lm.passes import A_BACKWARD_WEIGHT, A_EXPOSED_F, A_FORWARD, N_WORK, layer_passes, layer_time

    work = np.zeros(N_WORK)
    layer_passes(columns, work)
    total = layer_time(work)
    return (work[A_FORWARD] + work[A_EXPOSED_F]) / total, work[A_BACKWARD_WEIGHT] / total


def stage_times(columns: np.ndarray, uniform: bool = False, schedule: str | None = None) -> StageTimes:
    """The per-micro-batch stage times of the configuration ``columns`` (a registry column vector, pp > 1),
    from the kernel's results, split into passes in the kernel's ratios (:func:`pass_shares`). ``uniform``:
    every stage runs the average stage (body + (head + MTP layers) / p, spread over its chunks; with the loss in the
    split the body of L / p layers), the case where the closed form is exact."""
    from fastmodel.kernels.lm.first_rank import embedding_stage
    from fastmodel.kernels.lm.memory_states import layers_per_stage, split_slots
    from fastmodel.kernels.lm.passes import N_WORK, head_passes
    from fastmodel.kernels.lm.pipeline import model_copies
    from fastmodel.kernels.lm.step import busiest_stage
    from fastmodel.lm.engine import evaluate_table

    columns = np.asarray(columns, dtype=np.float64)
    p, v = int(_col(columns, "pp")), max(int(_col(columns, "vp")), 1)
    if p < 2:
        raise ValueError("no pipeline: pp = 1")
    r = {name: float(values[0]) for name, values in evaluate_table(columns[:, None]).items()}
    m = _col(columns, "global_batch") / (_col(columns, "micro_batch") * _col(columns, "dp"))
    if abs(m - round(m)) > 1e-9 * m:
        raise ValueError(f"{m} micro-batches per step is not a whole number")
    # once-per-step terms (kernels/lm/step.step_row); the host wait is per micro-batch and stays in the stage's time
    outside = (r["exposed_pp"] + r["exposed_dp"] + r["time_optimizer"] + _col(columns, "step_overhead_s")
               + r["time_offload"] + r["time_eval"])
    stage_mb = (r["step_time"] - r["pipeline_bubble"] - outside) / m
    head_f, head_b, head_w = head_passes(columns, np.zeros(N_WORK))
    head = head_f + head_b + head_w
    mtp_f, mtp_b, mtp_w = mtp_passes(columns)
    # the busiest rank holds ``layers`` layers and ``share`` of the head (kernels/lm/step.busiest_stage): the body
    # is the time of a full rank's layers (layers_per_stage), scaled back from it
    busiest = busiest_stage(columns, np.zeros(N_WORK))
    layers_busiest, share, emb = busiest[4], busiest[5], busiest[8]
    body = (stage_mb - share * (head + mtp_f + mtp_b) / model_copies(columns) - emb) * layers_per_stage(columns) \
        / layers_busiest
    f_share, w_share = pass_shares(columns)
    emb_f, emb_b = embedding_stage(columns)     # the first virtual stage's (§11.44 1d, dense gradient in B); 0 at pp 1
    if uniform:
        body *= 1.0 - split_slots(columns) / p / layers_per_stage(columns)    # L / p layers: the slots are no layers
        share = np.full((v, p), 1.0 / v)
        forward = share * (f_share * body + (head_f + mtp_f + emb_f) / p)
        backward = share * ((1.0 - f_share) * body + (head_b + head_w + mtp_b + emb_b) / p)
        weight = share * (w_share * body + (head_w + mtp_w) / p)
    else:
        layers = chunk_layers(int(round(_col(columns, "layers"))), p, v)
        share = layers / layers.max() / v         # the busiest rank's chunks hold body / v each
        forward, backward, weight = share * f_share * body, share * (1.0 - f_share) * body, share * w_share * body
        forward[-1, -1] += head_f + mtp_f         # the last model stage (DualPipe: rank p - 1 and rank 0)
        backward[-1, -1] += head_b + head_w + mtp_b
        weight[-1, -1] += head_w + mtp_w
        forward[0, 0] += emb_f                    # the first: the embedding's collectives (its backward a B)
        backward[0, 0] += emb_b
    return StageTimes(schedule or _schedule(columns, v), p, v, int(round(m)), forward, backward, weight, stage_mb,
                      head, mtp_f + mtp_b, r["pipeline_bubble"])


def mtp_passes(columns: np.ndarray) -> tuple[float, float, float]:
    """(forward, full backward, its weight-gradient part) seconds of the ``mtp_layers`` MTP modules' transformer
    layers, one micro-batch (``kernels/lm/mtp_breakdown.mtp_layer``: each at its own kind's passes); zeros without
    MTP modules. Forward: F + exposed forward communication, as :func:`pass_shares` splits a layer."""
    from fastmodel.kernels.lm.mtp_breakdown import mtp_layer
    from fastmodel.kernels.lm.passes import A_BACKWARD_WEIGHT, A_EXPOSED_F, A_FORWARD, N_WORK

    depth = _col(columns, "mtp_layers")
    if depth <= 0.0:
        return 0.0, 0.0, 0.0
    d_mtp = np.zeros(N_WORK)
    seconds = mtp_layer(columns, d_mtp)[0]       # the entry tests/lm/test_mtp_kind.py already calls: no new signature
    forward = depth * (d_mtp[A_FORWARD] + d_mtp[A_EXPOSED_F])
    return forward, depth * seconds - forward, depth * d_mtp[A_BACKWARD_WEIGHT]


def send_time(columns: np.ndarray) -> float:
    """Seconds of one point-to-point send of the configuration ``columns``: the kernel's ``comm_pp`` counts
    2 (m v + p - 1) sends (``kernels/lm/pipeline.pipeline_p2p``). An UnsupportedError for a pipeline that
    DeepSpeed's engine runs (blocking sends, ``kernels/lm/pipeline.deepspeed_p2p``) or Megatron-LM 2021's
    blocking exchanges (``kernels/lm/pipeline_2021.sync_p2p``)."""
    from fastmodel.lm.engine import evaluate_table

    columns = np.asarray(columns, dtype=np.float64)
    p, v = _col(columns, "pp"), max(_col(columns, "vp"), 1.0)
    from fastmodel.kernels.lm.pipeline import deepspeed_engine
    from fastmodel.kernels.lm.pipeline_2021 import sync_exchanges

    if deepspeed_engine(columns):
        raise UnsupportedError("", "plan.pp_engine_deepspeed", "the exact pipeline path runs each send on a stream of "
                               "its own; DeepSpeed's blocking sends and TP gathers (docs/model.md §11.31) are in "
                               "the step kernel only")
    if sync_exchanges(columns):
        raise UnsupportedError("", "plan.pp_exchange_2021", "the exact pipeline path runs each send on a stream of "
                               "its own; Megatron-LM 2021's blocking exchanges (docs/model.md §11.52) are in the "
                               "step kernel only")
    m = _col(columns, "global_batch") / (_col(columns, "micro_batch") * _col(columns, "dp"))
    return float(evaluate_table(columns[:, None])["comm_pp"][0]) / (2.0 * (m * v + p - 1.0))


def exact_pipeline(times: StageTimes, send: float | None = None) -> PipelineTimes:
    """The pipeline of ``times`` scheduled op by op (a Program with one stream per stage); with ``send``
    seconds, each stage's sends on a stream of its own (``pipeline_program(sends=True)``)."""
    program = pipeline_program(times.stages, times.micro_batches, times.schedule, times.virtual_stages,
                               sends=send is not None)
    return schedule_pipeline(program, pipeline_slots(times.forward, times.backward, times.stages,
                                                     times.virtual_stages, send or 0.0, times.weight))
