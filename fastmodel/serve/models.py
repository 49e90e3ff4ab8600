"""Decoder LMs that serving commands know by name, as model columns (``fastmodel.registry.lm``).

Each entry is the model's published ``config.json`` (Hugging Face model cards of
meta-llama/Llama-3.1-8B, -70B, -405B, mistralai/Mistral-7B-v0.3 and
mistralai/Mixtral-8x7B-v0.1): layers, width, MLP width, heads, KV heads, head
width, vocabulary, and for Mixtral its 8 experts with top-2 routing. All use
SwiGLU (gated 3-matrix MLPs) and untied embeddings.
"""

from __future__ import annotations

from fastmodel.errors import SpecError, nearest

_LLAMA = {"gated_mlp": 1, "tied_embeddings": 0, "head_dim": 128}

SERVE_MODELS: dict[str, dict[str, float]] = {
    "llama3.1-8b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                    "vocab": 128256},
    "llama3.1-70b": {**_LLAMA, "layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8,
                     "vocab": 128256},
    "llama3.1-405b": {**_LLAMA, "layers": 126, "hidden": 16384, "ffn": 53248, "heads": 128, "kv_heads": 8,
                      "vocab": 128256},
    "mistral-7b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                   "vocab": 32768},
    "mixtral-8x7b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                     "vocab": 32000, "moe_experts": 8, "moe_topk": 2, "moe_ffn": 14336},
}


def serve_model(name: str) -> dict[str, float]:
    """The model columns of a built-in serving model; SpecError with the nearest name otherwise."""
    key = name.lower()
    if key not in SERVE_MODELS:
        raise SpecError(None, "model", f"unknown model {name!r}; built-in: {', '.join(SERVE_MODELS)}"
                        f"{nearest(key, SERVE_MODELS)}")
    return dict(SERVE_MODELS[key])
