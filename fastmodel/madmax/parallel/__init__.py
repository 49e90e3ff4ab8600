"""Parallelization plans: their syntax, their device mesh and their legality rules.

``plans`` is the MAD-Max ``DENSE/EMB`` plan syntax, a front-end onto ``mesh``
(ordered axes with degrees, each component's strategy and role per axis);
``rules`` is the MAD-Max legality rule table (shape rules per plan, row rules
vectorized); ``lm_rules`` the one rule table of the real-world model's mesh
plans (``tp8.pp4.cp2``).
"""
