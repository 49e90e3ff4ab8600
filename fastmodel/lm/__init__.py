"""The real-world training engine (``semantics = "default"``, ``family = "lm"`` models, run records).

``spec``, ``execution`` and ``loader`` (model, cluster, execution), ``lowering`` (specs + mesh -> the
column vector, for sweeps and records), ``record_schema`` and ``records`` (RUNS.md run records),
``stacks/`` (framework stack profiles), ``table`` (the column table and its codes), ``rules`` (plan legality), ``engine`` (the one door into ``kernels/lm``),
``api``, ``sweep``, ``pipeline`` (the exact pipeline path), ``timeline``, ``validate`` and ``calibrate/``.
Nothing is imported here.
"""
