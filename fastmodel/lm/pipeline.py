"""The real-world step's pipeline, op by op: the exact path that tests the closed form (docs/model.md §11.7.1).

The closed form (``kernels/lm/step.py``) charges one step ``m t_mb + (p - 1)/v t_avg``:
``t_mb`` is one micro-batch on the slowest (last) stage, ``t_avg`` on the average stage.
Here the same per-micro-batch stage times, read back from the kernel's own results, become
the cost slots of a pipeline Program (``lm/pipeline_program.py``), which the generic scheduler
times exactly:

- per micro-batch, stage body ``t_body = t_mb - t_head``: the stage's layers, forward and
  backward (with recompute and exposed TP/CP/EP), ``t_mb`` recovered from
  ``step_time - pipeline_bubble - exposed_pp - exposed_dp - time_optimizer - step_overhead_s``
  over m; ``t_head`` the LM head and loss (``kernels/lm_layer.head_costs``), on the last
  virtual stage only;
- each virtual stage (chunk) holds ``t_body / v``; with ``uneven_stages``, in proportion to the
  layers it holds (:func:`chunk_layers`); the forward is a third of a chunk, the backward two
  thirds (GEMMs 1 : 2), a choice the makespan does not depend on in the cases the tests prove.

Data-parallel, optimizer and host time are outside the pipeline: the comparison is of the
compute and bubble part ``m t_mb + bubble`` alone, and, with sends (:func:`send_time`, each on
its stage's send stream), of what the sends add against the closed form's ``exposed_pp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fastmodel.lm.pipeline_program import PipelineTimes, pipeline_program, pipeline_slots, schedule_pipeline
from fastmodel.registry.lm import COLUMN_INDEX, PIPELINE_SCHEDULES

FORWARD_SHARE = 1.0 / 3.0   # forward : backward of a layer's GEMMs, 1 : 2


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
    backward: np.ndarray         # (v, p)
    stage_mb: float              # the closed form's t_mb: the last stage, one micro-batch
    head: float                  # LM head and loss, forward and backward, one micro-batch
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
    code = int(_col(columns, "pipeline_schedule"))
    return "gpipe" if code == PIPELINE_SCHEDULES["gpipe"] else "1f1b"


def stage_times(columns: np.ndarray, uniform: bool = False, schedule: str | None = None) -> StageTimes:
    """The per-micro-batch stage times of the configuration ``columns`` (a registry column vector, pp > 1),
    from the kernel's results. ``uniform``: every stage runs the average stage (body + head / p, spread
    over its chunks), the case where the closed form is exact."""
    from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_MEM, W_TP, head_costs
    from fastmodel.lm.engine import evaluate_table

    columns = np.asarray(columns, dtype=np.float64)
    p, v = int(_col(columns, "pp")), max(int(_col(columns, "vp")), 1)
    if p < 2:
        raise ValueError("no pipeline: pp = 1")
    r = {name: float(values[0]) for name, values in evaluate_table(columns[:, None]).items()}
    m = _col(columns, "global_batch") / (_col(columns, "micro_batch") * _col(columns, "dp"))
    if abs(m - round(m)) > 1e-9 * m:
        raise ValueError(f"{m} micro-batches per step is not a whole number")
    outside = r["exposed_pp"] + r["exposed_dp"] + r["time_optimizer"] + _col(columns, "step_overhead_s")
    stage_mb = (r["step_time"] - r["pipeline_bubble"] - outside) / m
    work = np.zeros(N_WORK)
    head_costs(columns, work)
    head_forward = work[W_GEMM] + work[W_MEM]
    head_backward = 2.0 * work[W_GEMM] + work[W_MEM] + 2.0 * work[W_TP]
    head = head_forward + head_backward
    body = stage_mb - head
    if uniform:
        share = np.full((v, p), 1.0 / v)
        forward = share * (FORWARD_SHARE * body + head / p)
        backward = share * ((1.0 - FORWARD_SHARE) * body)
    else:
        layers = chunk_layers(int(round(_col(columns, "layers"))), p, v)
        share = layers / layers.max() / v         # the busiest rank's chunks hold body / v each
        forward = share * FORWARD_SHARE * body
        backward = share * (1.0 - FORWARD_SHARE) * body
        forward[-1, -1] += head_forward
        backward[-1, -1] += head_backward
    return StageTimes(schedule or _schedule(columns, v), p, v, int(round(m)), forward, backward, stage_mb, head,
                      r["pipeline_bubble"])


def send_time(columns: np.ndarray) -> float:
    """Seconds of one point-to-point send of the configuration ``columns``: the kernel's ``comm_pp`` counts
    2 (m v + p - 1) sends (``kernels/lm_parallel.pipeline_p2p``)."""
    from fastmodel.lm.engine import evaluate_table

    columns = np.asarray(columns, dtype=np.float64)
    p, v = _col(columns, "pp"), max(_col(columns, "vp"), 1.0)
    m = _col(columns, "global_batch") / (_col(columns, "micro_batch") * _col(columns, "dp"))
    return float(evaluate_table(columns[:, None])["comm_pp"][0]) / (2.0 * (m * v + p - 1.0))


def exact_pipeline(times: StageTimes, send: float | None = None) -> PipelineTimes:
    """The pipeline of ``times`` scheduled op by op (a Program with one stream per stage); with ``send``
    seconds, each stage's sends on a stream of its own (``pipeline_program(sends=True)``)."""
    program = pipeline_program(times.stages, times.micro_batches, times.schedule, times.virtual_stages,
                               sends=send is not None)
    return schedule_pipeline(program, pipeline_slots(times.forward, times.backward, times.stages,
                                                     times.virtual_stages, send or 0.0))
