"""Model columns of chunked local attention (Llama 4's iRoPE layers: token i attends to the keys j of its own
chunk, floor(j / C) = floor(i / C), j <= i).

Rows of ``fastmodel.registry.lm.MODEL_COLUMNS`` (name, units, default, doc, lo, hi) and one serving engine column
(``CHUNK_ENGINE_ROWS``, set by the engine profiles, ``fastmodel/serve/profiles.py``), kept here so the registry
module stays readable. The chunked layers take the sliding-window layer kind's slot of ``shape.layer_mix`` (a
model has one or the other, ``fastmodel/lm/spec.py``); docs/model.md §11.55 and docs/model_serving.md S60 give
the equations. Sources: huggingface/transformers@b17cfe48 ``models/llama4/configuration_llama4.py``
(``attention_chunk_size`` 8192, ``no_rope_layers``: every 4th layer global) and ``masking_utils.py``
``chunked_overlay``; vLLM 0.18.0 ``vllm/v1/core/single_type_kv_cache_manager.py`` ``ChunkedLocalAttentionManager``.
"""

from __future__ import annotations

CHUNK_MODEL_ROWS = (
    ("attention_chunk", "tokens", 0, "Chunked local attention span C (Llama 4 attention_chunk_size; 0 = none): a "
     "query attends to the earlier keys of its own chunk of C tokens.", 0, 1 << 24),
    ("attention_chunk_layers", "1", 0, "Layers using chunked local attention (Llama 4: the 3 of every 4 with "
     "RoPE).", 0, 4096),
)

CHUNK_ENGINE_ROWS = (
    ("chunk_kv_local", "1", 0, "1: the serving engine keeps on a chunked layer only the current chunk's KV (vLLM "
     "from 0.15.1: the hybrid KV cache manager's ChunkedLocalAttentionManager frees the blocks before the chunk, "
     "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaulting to 1; docs/model_serving.md S60); 0: the whole "
     "context, as on a full layer (vLLM 0.10.2-0.12.0, whose variable defaults to 0; engines not read).", 0, 1),
)
