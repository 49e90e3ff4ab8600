"""Numba kernels of fastmodel: pure array functions, no I/O, no Python objects.

``layout`` fixes the column order of parameter tables and the codes shared
with the Python side; ``costs`` turns parameter rows of every family into cost-slot
durations; ``schedule`` runs the generic two-stream scheduler.
"""
