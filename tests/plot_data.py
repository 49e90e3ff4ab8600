"""Small synthetic sweep datasets for the plot tests (same layout as fastmodel.sweep output)."""

import numpy as np
import xarray as xr

from fastmodel.io.aliases import with_aliases
from fastmodel.registry import attrs
from fastmodel.registry.madmax import STATUS, STATUS_NAMES

PLANS = ["fsdp/ddp", "tp,ddp/mp", "ddp/ddp"]
NODES = [16, 32, 64, 128]
BATCHES = [512, 1024, 2048]
COMPONENTS = ("time_gemm", "time_emb", "time_all2all", "time_allreduce", "time_allgather", "time_reducescatter")


def synthetic_sweep(seed: int = 0) -> xr.Dataset:
    """num_nodes x global_batch x plan with consistent times, some illegal and some infeasible points."""
    rng = np.random.default_rng(seed)
    shape = (len(NODES), len(BATCHES), len(PLANS))
    nodes = np.array(NODES, dtype=float)[:, None, None]
    batch = np.array(BATCHES, dtype=float)[None, :, None]
    gemm = batch / nodes * 0.05 * np.array([1.0, 0.9, 1.1])[None, None, :] * np.ones(shape)
    parts = {
        "time_gemm": gemm,
        "time_emb": 1e-4 * np.ones(shape),
        "time_all2all": np.zeros(shape),
        "time_allreduce": rng.uniform(0.01, 0.3, shape),
        "time_allgather": rng.uniform(0.01, 0.5, shape),
        "time_reducescatter": rng.uniform(0.01, 0.2, shape),
    }
    comm = parts["time_allreduce"] + parts["time_allgather"] + parts["time_reducescatter"]
    exposed = comm * rng.uniform(0.1, 0.9, shape)
    iteration = gemm + parts["time_emb"] + exposed
    memory = 80e9 / nodes * np.array([0.2, 1.0, 3.0])[None, None, :] * np.ones(shape)
    status = np.zeros(shape, dtype=np.int8)
    status[0, :, 2] = STATUS["does_not_fit"]      # ddp/ddp on 16 nodes does not fit
    status[:, 0, 1] = STATUS["batch_not_divisible"]   # tp,ddp/mp at batch 512
    status[3, 2, 1] = STATUS["product_ne_devices"]
    bad = status != 0
    values = {**parts, "exposed_comm": exposed, "overlapped_comm": comm - exposed, "step_time": iteration,
              "throughput": batch / iteration, "memory_per_device": memory}
    dims = ("num_nodes", "global_batch", "plan")
    data = {}
    for name, value in values.items():
        value = np.where(bad & (name != "memory_per_device" or status != STATUS["does_not_fit"]), np.nan, value)
        if name == "memory_per_device":
            value = np.where(bad & (status != STATUS["does_not_fit"]), np.nan, memory)
        data[name] = (dims, value, attrs(name))
    data["fits_memory"] = (dims, status == 0, attrs("fits_memory"))
    data["status"] = (dims, status, {"long_name": "status", "units": "1",
                                     "flag_values": list(range(len(STATUS_NAMES))),
                                     "flag_meanings": " ".join(STATUS_NAMES)})
    coords = {"num_nodes": ("num_nodes", np.array(NODES, dtype=np.int32), {"field": "system.num_nodes"}),
              "global_batch": ("global_batch", np.array(BATCHES, dtype=np.int32), {"field": "task.global_batch"}),
              "plan": ("plan", np.array(PLANS, dtype=object), {"field": "plan"})}
    return with_aliases(xr.Dataset(data, coords=coords))


def synthetic_file(tmp_path_factory) -> str:
    """:func:`synthetic_sweep` written as netCDF into a fresh temporary folder: its path, as the ``fastmodel plot``
    tests pass it on the command line."""
    path = tmp_path_factory.mktemp("sweep") / "out.nc"
    synthetic_sweep().to_netcdf(path, engine="scipy")
    return str(path)
