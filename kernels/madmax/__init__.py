"""Kernels of the MAD-Max engine: ``layout`` (columns, slots, codes), ``collectives``, ``costs`` (rows ->
cost-slot durations) and ``evaluate`` (the fused pass: costs -> schedule -> results)."""
