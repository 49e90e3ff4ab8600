"""Parallelization plans: their syntax, their device mesh and their legality rules.

``plans`` is the MAD-Max ``DENSE/EMB`` plan syntax; ``lm_rules`` the one rule
table of the real-world model's mesh plans (``tp8.pp4.cp2``).
"""
