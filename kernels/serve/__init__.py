"""Kernels of the serving engine: ``costs`` (GEMMs, memory-bound kernels and collectives of the body and
head), ``attention`` (decode and prefill attention, KV cache per token), ``memory`` (weights, workspace),
``evaluate`` (phases, legality, one configuration) and ``fused`` (the fused passes over a table and a grid)."""
