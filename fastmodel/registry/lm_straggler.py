"""Device column of the spread of per-GPU speed among GPUs of one model: the synchronous step waits for the slowest
GPU of the job (docs/model.md §11.68, ``kernels/lm/straggler.py``).

Rows of ``fastmodel.registry.lm.DEVICE_COLUMNS`` (name, units, default, doc, lo, hi) and of its ``RESULTS``, kept here so the registry
module stays under the line cap.
"""

from __future__ import annotations

#: relative standard deviation of one GPU's sustained matmul speed among the GPUs of one node, all busy at once:
#: the slowest of 8 H200s 745 against the node median 755 TFLOP/s (1.32 %) and of 8 B200s 1,421 against 1,439
#: (1.25 %), stas00/ml-engineering compute/accelerator/benchmarks/README.md ("Measure while the other GPUs compute",
#: mamf-finder-all-gpus.py), over E[max of 8 standard normals] = 1.4236: 1.32 / 1.4236 = 0.93 % (docs/model.md §11.68)
GPU_SPEED_SPREAD = 0.0093

STRAGGLER_DEVICE_ROWS = (
    ("gpu_speed_spread", "1", 0.0, "Relative standard deviation of one GPU's sustained speed among "
     "GPUs of the same model under a full node's load (chip-to-chip and power-management spread with its "
     "run-to-run jitter): a synchronous step waits for the slowest of the job's n_gpus, step x (1 + spread x "
     "E[max of n_gpus standard normals]) (kernels/lm/straggler.py, docs/model.md §11.68). 0.0093: 8 H200 and 8 "
     "B200, slowest against median (stas00/ml-engineering mamf-finder-all-gpus.py), GPU_SPEED_SPREAD; 0 (default until "
     "the pinned step compositions take time_straggler, §11.68): every GPU alike.", 0, 0.2),
)

STRAGGLER_RESULT_ROWS = (
    ("time_straggler", "s", "min", "Seconds per step the job waits for its slowest GPU: the rest of the step x "
     "gpu_speed_spread x E[max of n_gpus standard normals] (kernels/lm/straggler.py, docs/model.md §11.68); 0 at "
     "gpu_speed_spread 0."),
)
