"""Kernels of the real-world training engine (``layout`` derives its indices from ``fastmodel.registry.lm``):
``layer`` (per-layer costs), ``parallel`` (collectives around the layer), ``step`` (the step),
``memory_states``, ``memory_activations`` and ``memory`` (memory by kind), ``rules`` (legality),
``evaluate`` and ``grid`` (the fused passes)."""
