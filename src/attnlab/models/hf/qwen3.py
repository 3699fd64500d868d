"""Qwen3 (``Qwen3ForCausalLM``): Llama's architecture with QK-norm, and optionally a sliding window.

Each attention head's queries and keys pass through an RMSNorm over the head dimension before RoPE
(``self_attn.q_norm``/``k_norm``): attnlab's ``model.qk_norm``. Qwen3 windows only the layers that
``layer_types`` marks ``sliding_attention`` (with ``use_sliding_window``; by default those from
``max_window_layers`` on): attnlab's per-layer ``model.layout`` (``models.hf.layouts``). Qwen3's head size is a config key of its own (``head_dim``, 128 by default);
attnlab's is ``hidden_size / heads``, so a checkpoint where they differ (Qwen3-0.6B: 1024 / 16 = 64)
is refused in one line.
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.layouts import layer_types, read_layout
from attnlab.models.hf.llama import llama_config, llama_export, llama_weights
from attnlab.models.hf.spec import Table, layers
from attnlab.schema.model import GPTConfig


def qwen3_layer_types(c: dict) -> list[str]:
    """``layer_types`` as Qwen3Config fills it in when absent: sliding from ``max_window_layers`` on."""
    if c.get("layer_types"):
        return c["layer_types"]
    first = c.get("max_window_layers", c["num_hidden_layers"])
    return ["sliding_attention" if i >= first else "full_attention" for i in range(c["num_hidden_layers"])]


def qwen3_config(c: dict, cls: str) -> GPTConfig:
    window = c.get("sliding_window") if c.get("use_sliding_window", False) else None
    layout = read_layout(c["num_hidden_layers"], qwen3_layer_types(c), window)
    return replace(llama_config(c, cls), qk_norm=True, **layout)


def qwen3_export(cfg: GPTConfig) -> dict:
    """Qwen3's keys on Llama's: each layer's window in ``layer_types``; QK-norm is the architecture's."""
    types = layer_types(cfg)
    window = "sliding_attention" in types
    return {
        **llama_export(cfg, "qwen3", "Qwen3ForCausalLM"),
        "use_sliding_window": window,
        "sliding_window": cfg.attn_window if window else None,
        "max_window_layers": types.index("sliding_attention") if window else cfg.n_layers,
        "layer_types": types,
    }


def qwen3_weights(cfg: GPTConfig) -> Table:
    def qk_norms(i: int) -> Table:
        p = f"layers.{i}.self_attn."
        return {"self_attn.fn.q_norm": p + "q_norm", "self_attn.fn.k_norm": p + "k_norm"}

    return {**llama_weights(cfg), **layers("stack.layers", cfg.n_layers, qk_norms)}


register(
    Architecture(
        model_type="qwen3",
        classes=("Qwen3ForCausalLM",),
        prefix="model.",
        config=qwen3_config,
        weights=qwen3_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=qwen3_export,
        family="gpt",
    )
)
