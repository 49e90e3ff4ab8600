"""Probe (not run by the tests; needs PyTorch, 2.9.0 for the TorchTitan DeepEP records): what a full-AC block keeps
after its forward when it is compiled as TorchTitan 022f885f34 compiles it, ``torch.compile(checkpoint_wrapper(block),
fullgraph=False)`` (torchtitan/distributed/activation_checkpoint.py ``_apply_full_ac``; models/llama4/infra/
parallelize.py ``apply_compile``), with graph breaks where DeepEP's dispatch and combine are. docs/model_memory.md,
"TorchTitan MoE: what the peak holds".

CPU, resident memory after the forward of three blocks, in units of one ``[T, h]`` FP32 tensor per block; the
``deepep_like`` block adds a custom ``autograd.Function`` keeping a tensor on ``ctx`` and returning a non-tensor
(``FusedDispatch``), module state set in the forward (``setup_metadata``) and a nested ``@torch.compile(fullgraph=True)``
scatter-add (``unpermute``). Run: ``python bench/probe_ac_compile_moe.py`` (about 15 minutes on two cores).
Result with PyTorch 2.9.0+cu128 (0fabc3ba): no AC eager 23.0, no AC compiled 20.0, AC eager 1.0, AC compiled 1.0
with or without graph breaks, AC compiled DeepEP-like 1.00 (1.03 in a first run: resident-memory noise).
"""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

T, H, K, FE = 8192, 1024, 8, 384
MIB = 2 ** 20


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Dispatch(torch.autograd.Function):
    """As DeepEP's FusedDispatch: a small handle kept on ctx, returned as a second output."""

    @staticmethod
    def forward(ctx, x):
        handle = torch.arange(x.shape[0], dtype=torch.int32)
        ctx.handle = handle
        return x.clone(), handle

    @staticmethod
    def backward(ctx, grad, grad_handle):
        return grad


@torch.compile(fullgraph=True)
def unpermute(rows, idx):
    out = torch.zeros(T, H, dtype=rows.dtype)
    return out.scatter_add_(0, idx.unsqueeze(1).expand(-1, H), rows)


class Block(nn.Module):
    def __init__(self, graph_breaks, deepep_like):
        super().__init__()
        self.wa = nn.Parameter(torch.randn(H, H) * 0.02)
        self.w1 = nn.Parameter(torch.randn(FE, H) * 0.02)
        self.w3 = nn.Parameter(torch.randn(FE, H) * 0.02)
        self.w2 = nn.Parameter(torch.randn(H, FE) * 0.02)
        self.graph_breaks, self.deepep_like = graph_breaks, deepep_like

    def forward(self, x):
        h = x + torch.tanh(x @ self.wa.t())                  # "attention"
        y = F.rms_norm(h, (H,))
        if self.deepep_like:
            self.meta = torch.zeros(T, K)                     # setup_metadata
            y, _ = Dispatch.apply(y)
        if self.graph_breaks:
            torch._dynamo.graph_break()                       # DeepEP dispatch
        idx = torch.arange(T).repeat(K)
        r = y.index_select(0, idx)                            # routed rows [K T, H]
        o = (F.silu(r @ self.w1.t()) * (r @ self.w3.t())) @ self.w2.t()
        o = unpermute(o, idx) if self.deepep_like else o.view(K, T, H).sum(0)
        if self.graph_breaks:
            torch._dynamo.graph_break()                       # DeepEP combine
        return h + o


def kept_per_block(ac, compiled, graph_breaks, deepep_like, n=3):
    blocks = [Block(graph_breaks, deepep_like) for _ in range(n)]
    if ac:
        blocks = [checkpoint_wrapper(b, preserve_rng_state=False) for b in blocks]
    if compiled:
        blocks = [torch.compile(b, fullgraph=False) for b in blocks]
    x0 = torch.randn(T, H, requires_grad=True)
    kept = 0
    for _ in range(2):                                        # the first pass compiles
        gc.collect()
        base = rss()
        z = x0
        for b in blocks:
            z = b(z)
        gc.collect()
        kept = rss() - base
        z.sum().backward()
        del z
    return kept / n / (T * H * 4)


if __name__ == "__main__":
    torch.manual_seed(0)
    for case in ((0, 0, 1, 0), (0, 1, 1, 0), (1, 0, 1, 0), (1, 1, 0, 0), (1, 1, 1, 0), (1, 1, 1, 1)):
        print("ac=%d compiled=%d graph_breaks=%d deepep_like=%d: %.2f [T, h] per block" % (*case, kept_per_block(*case)),
              flush=True)
