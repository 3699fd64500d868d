"""Mistral (``MistralForCausalLM``): Llama's architecture with sliding-window attention.

``sliding_window`` (null for none) is attnlab's ``model.attn_window``: a query sees the keys less than
that many positions before it, itself included, as Hugging Face's ``sliding_window_overlay`` has it
(``kv_idx > q_idx - sliding_window``). Everything else, weights included, is read as for Llama.
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import llama_config, llama_export, llama_weights
from attnlab.schema.model import GPTConfig


def mistral_config(c: dict, cls: str) -> GPTConfig:
    return replace(llama_config(c, cls), attn_window=c.get("sliding_window"))


def mistral_export(cfg: GPTConfig) -> dict:
    return {**llama_export(cfg, "mistral", "MistralForCausalLM"), "sliding_window": cfg.attn_window}


register(
    Architecture(
        model_type="mistral",
        classes=("MistralForCausalLM",),
        prefix="model.",
        config=mistral_config,
        weights=llama_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=mistral_export,
        family="gpt",
    )
)
