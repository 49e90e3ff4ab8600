"""The serving engine: LLM inference under load (docs/model_serving.md).

``api`` (one configuration and sweeps), ``spec`` (the ``serve`` task of sweep files), ``records``
(SERVE_RUNS.md records), ``models`` and ``precisions``, ``validate``. It shares the transformer layer's
shape with the training engine (``kernels/lm``). Nothing is imported here.
"""
