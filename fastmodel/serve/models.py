"""Decoder LMs that serving commands know by name, as model columns (``fastmodel.registry.lm``).

Each entry is the model's published ``config.json`` (Hugging Face model cards of
meta-llama/Llama-3.1-8B, -70B, -405B, mistralai/Mistral-7B-v0.3 and
mistralai/Mixtral-8x7B-v0.1): layers, width, MLP width, heads, KV heads, head
width, vocabulary, its context (``max_position_embeddings``: 131072 for Llama 3.1, 32768 for Mistral 7B v0.3 and
Mixtral 8x7B; ``context_len``, the most tokens one request may hold, prompt and output together, as vLLM's default
``max_model_len``), and for Mixtral its 8 experts with top-2 routing. All use
SwiGLU (gated 3-matrix MLPs) and untied embeddings.

Every other name is read as a real-world (``family = "lm"``) model spec through the training engine's door
(``fastmodel.engines.LM``, ``specs/models/*.toml``: DeepSeek-V2/V3, Kimi K2, Qwen3 MoE, gpt-oss, Llama 4
Maverick, ...), the model description both engines share: :func:`serving_model` is the one mapping serve -m,
the Python API and serving sweep files use. The serving kernels read its MoE columns (experts, top-k, expert
width, shared experts, dense layers, MoE layer frequency), MLA (latent KV cache, absorbed decode attention),
sliding windows and chunked local attention. The model columns they do not price have no serving cost, or are approximated; each is a note
when set (``UNSERVED``, docs/model_serving.md S40). A model that is not a family-"lm" decoder is refused in one line.
"""

from __future__ import annotations

from typing import Any

from fastmodel.errors import SpecError, nearest

_LLAMA = {"gated_mlp": 1, "tied_embeddings": 0, "head_dim": 128}
#: config.json ``max_position_embeddings`` of Llama 3.1 (8B, 70B, 405B: 128K tokens, Dubey et al. 2024 sec. 3.4.2)
#: and of Mistral-7B-v0.3 and Mixtral-8x7B-v0.1 (32K)
LLAMA31_CONTEXT, MISTRAL_CONTEXT = 131072, 32768

SERVE_MODELS: dict[str, dict[str, float]] = {
    "llama3.1-8b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                    "vocab": 128256, "context_len": LLAMA31_CONTEXT},
    "llama3.1-70b": {**_LLAMA, "layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8,
                     "vocab": 128256, "context_len": LLAMA31_CONTEXT},
    "llama3.1-405b": {**_LLAMA, "layers": 126, "hidden": 16384, "ffn": 53248, "heads": 128, "kv_heads": 8,
                      "vocab": 128256, "context_len": LLAMA31_CONTEXT},
    "mistral-7b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                   "vocab": 32768, "context_len": MISTRAL_CONTEXT},
    "mixtral-8x7b": {**_LLAMA, "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8,
                     "vocab": 32000, "moe_experts": 8, "moe_topk": 2, "moe_ffn": 14336, "context_len": MISTRAL_CONTEXT},
}


def serve_model(name: str) -> dict[str, float]:
    """The model columns of a built-in serving model; SpecError with the nearest name otherwise."""
    key = name.lower()
    if key not in SERVE_MODELS:
        raise SpecError(None, "model", f"unknown model {name!r}; built-in: {', '.join(SERVE_MODELS)}"
                        f"{nearest(key, SERVE_MODELS)}")
    return dict(SERVE_MODELS[key])


#: model columns of a family-"lm" spec the serving kernels do not price, when set away from their default, and
#: why that is the serving cost (a note, not a refusal: every column a spec can set is either priced by the serving
#: kernels or has no serving cost; a model that is not a family-"lm" decoder is refused by the door in one line).
#: MTP: an engine loads the multi-token-prediction layers only as a speculative-decoding draft (vLLM
#: ``DeepseekV2ForCausalLM.load_weights`` skips them: "skip spec decode layers for main model"), which ``serve -m``
#: does not run. Capacity factors and padding are training-time token dropping (serving engines route every token
#: to its top-k, dropless); node-limited routing bounds the nodes a token's experts span, which the EP dispatch
#: price does not read; round-robin routing is TorchTitan's debug load balance.
UNSERVED: dict[str, str] = {
    "mtp_layers": "its multi-token-prediction layers are not served (no speculative decoding): their weights and "
                  "steps are not counted",
    "moe_capacity_factor": "the capacity factor is training-time token dropping; serving routes dropless",
    "moe_pad_to_capacity": "padding to capacity is training-time; serving routes dropless",
    "moe_max_nodes": "node-limited routing is not priced: expert dispatch is priced as unlimited top-k",
    "moe_round_robin": "round-robin routing is a training debug mode; serving is priced with uniform routing",
}


def serving_model(spec: Any, base=None) -> tuple[str, dict[str, float], list[str]]:
    """(name, model columns, notes) of a built-in serving model name (``SERVE_MODELS``) or a family-"lm" model
    spec (a built-in name of ``specs/models``, a path or a dict, relative to ``base``) read through the training
    engine's door; ``seq_len`` is left to the serving task (input + output). A column of ``UNSERVED`` away from
    its default is a note naming it."""
    from pathlib import Path

    from fastmodel import engines
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
    from fastmodel.sweeps.file import spec_ref

    if isinstance(spec, str) and spec.lower() in SERVE_MODELS:
        return spec, serve_model(spec), []
    spec = spec_ref(spec, Path(base or Path.cwd()))    # a record or JSON lines: the loader names it (other_inputs)
    try:
        name, values = engines.LM.door().model_columns(spec)
    except SpecError as error:
        if error.field == "model.family":    # the training engine's pointer to the MAD-Max semantics: not serving's
            raise SpecError(error.source, error.field, f"{error.reason.split(';')[0]}; serving models: "
                            f"{', '.join(SERVE_MODELS)} or a family-\"lm\" spec (fastmodel serve --list-models)") from None
        if error.source:
            raise
        reason = error.reason
        if isinstance(spec, str) and reason.startswith("unknown built-in model"):
            # the nearest of both lists: a serving name misspelled is not an lm spec's near miss
            from fastmodel.errors import nearest
            from fastmodel.spec.loader import _builtin_names

            reason = f"unknown model {spec!r}{nearest(spec, [*SERVE_MODELS, *_builtin_names('model')])}"
        raise SpecError(None, "model", f"{reason}; serving models: {', '.join(SERVE_MODELS)} or a "
                                       f"family-\"lm\" spec (fastmodel serve --list-models)") from None
    notes = []
    for column, why in UNSERVED.items():
        value = values.get(column, COLUMNS[COLUMN_INDEX[column]].default)
        if value != COLUMNS[COLUMN_INDEX[column]].default:
            notes.append(f"{name}: model.{column} = {value:g}: {why}")
    return name, {k: v for k, v in values.items() if k != "seq_len"}, notes


def model_summary(values: dict[str, float]) -> str:
    """One line of a model's serving-relevant shape: layers, width, attention (GQA or MLA) and MoE."""
    text = f"{values['layers']:g} layers, hidden {values['hidden']:g}, "
    if values.get("mla", 0) > 0:
        text += f"MLA (KV latent {values['kv_lora_rank']:g} + rope {values['qk_rope_head_dim']:g})"
    else:
        text += f"{values['heads']:g} heads / {values['kv_heads']:g} KV heads"
    if values.get("sliding_window", 0) > 0:
        text += f", window {values['sliding_window']:g} on {values['sliding_window_layers']:g} layers"
    if values.get("attention_chunk", 0) > 0 and values.get("attention_chunk_layers", 0) > 0:
        text += f", chunk {values['attention_chunk']:g} on {values['attention_chunk_layers']:g} layers"
    if values.get("moe_experts", 0) > 0:
        text += (f"; MoE {values['moe_experts']:g} experts top-{values['moe_topk']:g} x {values['moe_ffn']:g}"
                 + (f" + {values['moe_shared_experts']:g} shared" if values.get("moe_shared_experts", 0) else "")
                 + (f", first {values['dense_layers']:g} layers dense" if values.get("dense_layers", 0) else "")
                 + (f", MoE every {values['moe_layer_freq']:g} layers" if values.get("moe_layer_freq", 1) > 1 else ""))
    return text


def servable_models() -> list[tuple[str, str]]:
    """(name, summary) of every model ``serve -m`` takes: the built-in serving models, then each built-in
    family-"lm" spec (``specs/models``) that :func:`serving_model` does not refuse."""
    from fastmodel.spec.loader import builtin_names

    found = [(name, model_summary(values)) for name, values in SERVE_MODELS.items()]
    for name in builtin_names("model"):
        if name in SERVE_MODELS:
            continue
        try:
            _, values, _ = serving_model(name)
        except SpecError:
            continue
        found.append((name, model_summary(values)))
    return found
