"""The slowest GPU of a synchronous step (docs/model.md §11.68).

Every step couples all ``n_gpus`` ranks: a TP collective waits for its group each layer, a pipeline runs at its
slowest stage, and the data-parallel gradient reduction waits for the slowest pipeline. GPUs of one model differ
in sustained speed (chip-to-chip and power management, with run-to-run jitter), so the step is the slowest rank's:

    step x (1 + spread x E[max of N standard normals]),    N = n_gpus,  spread = ``gpu_speed_spread``

E[max of N] is Blom's (1958) approximation Phi^-1((N - 0.375) / (N + 0.25)): 0 at N = 1; 1.434 at N = 8, 3.234
at 1,024, 3.787 at 8,192 against the exact 1.4236, 3.2482, 3.8023 (within 0.7 %). The device files' single-GPU
microbenchmark efficiencies are one GPU's, the median's (§11.68: what they already hold).
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_GPU_SPEED_SPREAD, C_N_GPUS, R_TIME_STRAGGLER

#: at most this many Newton steps for the normal upper-tail quantile (it stops once a step is below 1e-13 of x);
#: from x0 = sqrt(-2 ln q), an upper bound (Chernoff), the
#: convex decreasing tail converges monotonically, to < 1e-12 in under 10 steps for q in [1e-9, 0.5]
QUANTILE_NEWTON_STEPS = 30


@njit
def normal_upper_quantile(q):
    """x with P(Z > x) = q for a standard normal Z, 0 < q <= 0.5: Newton on 0.5 erfc(x / sqrt 2) - q."""
    x = math.sqrt(-2.0 * math.log(q))
    for _ in range(QUANTILE_NEWTON_STEPS):
        tail = 0.5 * math.erfc(x / math.sqrt(2.0))
        density = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        dx = (tail - q) / density
        x += dx
        if abs(dx) < 1e-13 * x:              # converged (quadratic: 4-6 steps), so sweeps pay little
            break
    return x


@njit
def expected_max_normal(n):
    """E[max of n standard normals], Blom's Phi^-1((n - 0.375) / (n + 0.25)); 0 for n <= 1 (§11.68)."""
    if n <= 1.0:
        return 0.0
    return normal_upper_quantile(0.625 / (n + 0.25))


@njit
def straggler_factor(row):
    """1 + gpu_speed_spread x E[max of n_gpus]: the step of the job's slowest GPU over the median GPU's (§11.68)."""
    spread = row[C_GPU_SPEED_SPREAD]
    return 1.0 if spread == 0.0 else 1.0 + spread * expected_max_normal(row[C_N_GPUS])


@njit
def add_straggler(row, step, out):
    """``step`` with the wait for the job's slowest GPU added, step x (straggler_factor - 1), also written to
    ``out[R_TIME_STRAGGLER]`` (the breakdown's ``time_straggler``, §11.68)."""
    out[R_TIME_STRAGGLER] = step * (straggler_factor(row) - 1.0)
    return step + out[R_TIME_STRAGGLER]
