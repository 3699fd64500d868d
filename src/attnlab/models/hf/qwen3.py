"""Qwen3 (``Qwen3ForCausalLM``): Llama's architecture with QK-norm, and optionally a sliding window.

Each attention head's queries and keys pass through an RMSNorm over the head dimension before RoPE
(``self_attn.q_norm``/``k_norm``): attnlab's ``model.qk_norm``. Qwen3 windows only the layers that
``layer_types`` marks ``sliding_attention`` (with ``use_sliding_window``, those from
``max_window_layers`` on); attnlab has one window for every layer, so a config that mixes windowed and
full layers is refused. Qwen3's head size is a config key of its own (``head_dim``, 128 by default);
attnlab's is ``hidden_size / heads``, so a checkpoint where they differ (Qwen3-0.6B: 1024 / 16 = 64)
is refused in one line.
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import llama_config, llama_export, llama_weights
from attnlab.models.hf.spec import Table, layers
from attnlab.schema.model import GPTConfig


def qwen3_window(c: dict) -> int | None:
    """The one window of every layer (None: full attention), from ``layer_types`` and ``sliding_window``."""
    kinds = set(c.get("layer_types") or ["full_attention"])
    if kinds == {"full_attention"} or not c.get("use_sliding_window", False):
        return None
    if kinds != {"sliding_attention"}:
        raise ValueError(
            f"layer_types mixes {', '.join(sorted(kinds))} (max_window_layers={c.get('max_window_layers')}); "
            "attnlab has one window for every layer"
        )
    return c["sliding_window"]


def qwen3_config(c: dict, cls: str) -> GPTConfig:
    return replace(llama_config(c, cls), qk_norm=True, attn_window=qwen3_window(c))


def qwen3_export(cfg: GPTConfig) -> dict:
    """Qwen3's keys on Llama's: the window on every layer, or none; QK-norm is the architecture's."""
    window = cfg.attn_window is not None
    return {
        **llama_export(cfg, "qwen3", "Qwen3ForCausalLM"),
        "use_sliding_window": window,
        "sliding_window": cfg.attn_window,
        "max_window_layers": 0 if window else cfg.n_layers,
        "layer_types": [("sliding" if window else "full") + "_attention"] * cfg.n_layers,
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
