"""Weight / compute and KV-cache precisions of the serving model: name -> (code, bytes per element).

Kept apart from ``fastmodel.serve.api`` (and numpy) so that the CLI can list the choices without importing it.
"""

#: precision name -> (compute precision code, bytes per weight element)
PRECISIONS = {"bf16": (0, 2.0), "fp16": (0, 2.0), "fp8": (1, 1.0), "int8": (0, 1.0), "int4": (0, 0.5)}
KV_PRECISIONS = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
