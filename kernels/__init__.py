"""Numba kernels of fastmodel: pure array functions, no I/O, no Python objects.

Shared: ``jit`` (the project's ``njit``, on-disk cache), ``args`` (argument bundles), ``schedule`` (the list
scheduler over N streams), ``roofline`` (GEMM, attention and memory-bound kernel times) and ``nccl``
(collectives over network tiers). One subpackage per engine: ``madmax/``, ``lm/``, ``serve/``.
"""
