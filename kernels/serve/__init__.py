"""Kernels of the serving engine: ``costs`` (GEMMs, memory-bound kernels and collectives of the body and
head), ``attention`` (decode and prefill attention, KV cache per token), ``memory`` (weights, workspace) and
``evaluate`` (phases, legality, one configuration and the fused passes)."""
