"""Numba kernels of fastmodel: pure array functions, no I/O, no Python objects.

MAD-Max engine: ``layout`` fixes the column order of parameter tables and the
codes shared with the Python side; ``costs`` turns parameter rows of every family
into cost-slot durations; ``schedule`` runs the generic two-stream scheduler.

Real-world engine (``lm_layout`` derives its indices from ``fastmodel.registry.lm``):
``lm_layer`` (per-layer costs), ``lm_parallel`` (collectives around the layer) and
``lm_step`` (the step); ``memory_states``, ``memory_activations`` and ``memory``
(memory by kind); ``serve_costs``, ``serve_attention``, ``serve_memory`` and
``serve`` (serving); ``lm_evaluate`` and ``lm_grid`` (the fused passes).
"""
