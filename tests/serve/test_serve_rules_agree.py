"""Serving sweeps and single evaluations agree on random grids (issue 25 item 5): every point of a grid has
the status, and (when legal) the numbers, of the same configuration evaluated alone."""

import numpy as np
import pytest

from fastmodel.serve.api import evaluate, sweep

MODELS = ("llama3.1-8b", "mixtral-8x7b", "llama3.1-70b")


@pytest.mark.parametrize("seed", range(3))
def test_random_serving_grids_agree_with_single_evaluations(seed):
    rng = np.random.default_rng(seed)
    model = str(rng.choice(MODELS))
    axes = {"device": ["H100", "A100"], "precision": ["bf16", "fp8"], "tp": sorted(rng.choice([1, 2, 3, 4, 8], 3,
                                                                                                replace=False).tolist()),
            "ep": [1, 2], "batch_size": [1, int(rng.integers(2, 64))], "input_len": [int(rng.integers(64, 4096))]}
    ds = sweep(model, output_len=64, **axes)
    statuses = set()
    for index in np.ndindex(*ds.status.shape):
        point = {dim: ds[dim].values[i].item() for dim, i in zip(ds.status.dims, index)}
        alone = evaluate(model, point.pop("device"), output_len=64, **point)
        swept = ds.isel(dict(zip(ds.status.dims, index)))
        statuses.add(alone["status"])
        assert ds.status.attrs["flag_meanings"].split()[int(swept.status)] == alone["status"], point
        if alone["status"] == "ok":
            for name in ("ttft", "tpot", "output_tokens_per_s", "memory_per_device"):
                assert float(swept[name]) == alone[name], (point, name)
    assert "ok" in statuses and len(statuses) > 1
