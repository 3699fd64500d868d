"""Per-layer layouts in Hugging Face configs: ``layer_types`` (Qwen3, Gemma 2, SmolLM3) with one
``sliding_window``, and SmolLM3's ``no_rope_layers`` (1: the layer rotates, 0: NoPE), read into
``model.layout`` and ``model.attn_window`` and written back from them."""

from __future__ import annotations

from attnlab.schema.layout import LayerKind, explicit
from attnlab.schema.model import ModelConfig


def read_layout(
    n_layers: int, layer_types: list[str] | None, window: int | None, rope_layers: list[int] | None = None
) -> dict:
    """``layout`` and ``attn_window`` of a config whose layer ``i`` slides over ``window`` keys where
    ``layer_types[i]`` is ``sliding_attention`` (and a window is set), and rotates unless
    ``rope_layers[i]`` is 0. A model whose layers are all alike gets no layout."""
    types = layer_types or ["full_attention"] * n_layers
    if len(types) != n_layers or (rope_layers is not None and len(rope_layers) != n_layers):
        raise ValueError(f"layer_types or no_rope_layers do not have num_hidden_layers={n_layers} entries")
    rotates = rope_layers or [1] * n_layers
    kinds = [
        LayerKind(sliding=window is not None and t == "sliding_attention", positions=bool(r))
        for t, r in zip(types, rotates, strict=True)
    ]
    sliding = any(k.sliding for k in kinds)
    if len(set(kinds)) == 1 and kinds[0].positions:
        return {"layout": None, "attn_window": window if sliding else None}
    return {"layout": explicit(kinds), "attn_window": window if sliding else None}


def layer_types(cfg: ModelConfig) -> list[str]:
    """Hugging Face's ``layer_types`` of ``cfg``."""
    return [k.hf_type for k in cfg.layer_kinds()]


def rope_layers(cfg: ModelConfig) -> list[int]:
    """SmolLM3's ``no_rope_layers`` of ``cfg``: 1 where a layer applies the positions, 0 where not."""
    return [int(k.positions) for k in cfg.layer_kinds()]
