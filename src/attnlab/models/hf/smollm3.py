"""SmolLM3 (``SmolLM3ForCausalLM``): Llama's architecture with NoPE layers and optional sliding windows.

``no_rope_layers`` holds 1 for a layer that rotates its queries and keys and 0 for one that does not
(by default every fourth layer: ``no_rope_layer_interval=4``); ``layer_types`` with
``use_sliding_window`` and ``sliding_window`` marks the windowed layers. Both are attnlab's per-layer
``model.layout`` (``models.hf.layouts``); the weights are Llama's.
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.layouts import layer_types, read_layout, rope_layers
from attnlab.models.hf.llama import llama_config, llama_export, llama_weights
from attnlab.schema.model import GPTConfig


def smollm3_rope_layers(c: dict) -> list[int]:
    """``no_rope_layers`` as SmolLM3Config fills it in when absent: NoPE every ``interval``-th layer."""
    if c.get("no_rope_layers"):
        return c["no_rope_layers"]
    interval = c.get("no_rope_layer_interval", 4)
    return [int((i + 1) % interval != 0) for i in range(c["num_hidden_layers"])]


def smollm3_config(c: dict, cls: str) -> GPTConfig:
    window = c.get("sliding_window") if c.get("use_sliding_window", False) else None
    n = c["num_hidden_layers"]
    layout = read_layout(n, c.get("layer_types"), window, smollm3_rope_layers(c))
    return replace(llama_config(c, cls), tie_embeddings=c.get("tie_word_embeddings", True), **layout)


def smollm3_export(cfg: GPTConfig) -> dict:
    types = layer_types(cfg)
    window = "sliding_attention" in types
    return {
        **llama_export(cfg, "smollm3", "SmolLM3ForCausalLM"),
        "no_rope_layers": rope_layers(cfg),
        "layer_types": types,
        "use_sliding_window": window,
        "sliding_window": cfg.attn_window if window else None,
        "pad_token_id": None,  # its default, 128004, is no token of a smaller vocabulary
    }


register(
    Architecture(
        model_type="smollm3",
        classes=("SmolLM3ForCausalLM",),
        prefix="model.",
        config=smollm3_config,
        weights=llama_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=smollm3_export,
        family="gpt",
    )
)
