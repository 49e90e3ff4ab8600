"""The real-world training engine (``semantics = "default"``, ``family = "lm"`` models, run records).

``spec`` and ``loader`` (model, cluster, execution), ``records`` (RUNS.md run records), ``table`` (the
column table and its codes), ``rules`` (plan legality), ``engine`` (the one door into ``kernels/lm``),
``api``, ``sweep``, ``pipeline`` (the exact pipeline path), ``timeline``, ``validate`` and ``calibrate/``.
Nothing is imported here.
"""
