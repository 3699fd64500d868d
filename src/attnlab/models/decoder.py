"""Decoder-only, GPT-like: causal stack over token embeddings, logits for every position."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.blocks.cache import KVCache
from attnlab.blocks.heads import LMHead
from attnlab.blocks.hooks import soft_cap
from attnlab.blocks.mixers.registry import layer_caches
from attnlab.blocks.static_cache import StaticAttentionCache, StaticCache
from attnlab.blocks.view import AttentionView
from attnlab.models.common import (
    MODEL_CLASSES,
    FamilyModel,
    check_vocab,
    init_tied_scaled_tokens,
    init_weights,
    need,
    stack_of,
    token_embedding,
    token_positions,
)
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import GPTConfig


@MODEL_CLASSES.builds(GPTConfig)
class DecoderLM(FamilyModel):
    """GPT-2, Llama and BLOOM are configurations of this one model."""

    causal = True

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        check_vocab(cfg)
        self.cfg = cfg
        self.embed = token_embedding(cfg, causal=True)
        self.stack = stack_of(cfg, self.embed.pos, cfg.n_layers)
        tied = self.embed.tokens if cfg.tie_embeddings else None
        self.lm_head = LMHead(cfg.d_model, cfg.vocab_size, tied, bias=cfg.lm_head_bias)
        self.logit_cap = soft_cap(cfg.logit_softcap)  # Gemma 2's final-logit soft-capping (None: off)
        init_weights(self, cfg.init_std, cfg.n_layers)
        init_tied_scaled_tokens(self.embed, cfg)  # near the uniform loss with scaled, tied embeddings

    def new_cache(self, reserve: int = 0) -> KVCache:
        """An empty KV cache; ``reserve``: the tokens (prompt and new) its buffers hold from the start.
        A sliding layer reserves no more than twice its window: its cache keeps only the window's last
        keys, and its memory must not grow with the length of the decoding (``model.layout``). Each
        layer's cache is of its mixer's kind (``blocks.mixers``): keys and values, a latent, a state."""
        windows = [layer.self_attn.fn.window for layer in self.stack.layers]
        reserves = [reserve if w is None else min(reserve, 2 * w) for w in windows]
        return KVCache(self_attn=layer_caches([layer.mixer for layer in self.stack.layers], reserves))

    def new_static_cache(self, batch: int, length: int) -> StaticCache:
        """A KV cache of ``length`` columns for ``batch`` rows, allocated once (compiled decoding), each
        layer's buffers sized by its own key/value heads (a pruned layer may keep fewer) and of the
        dtype its key projection computes in."""
        caches = []
        if any(layer.mixer != Mixer.attention for layer in self.stack.layers):
            raise ValueError(f"a static KV cache holds softmax attention only; model.mixer={self.cfg.mixer}")
        for layer in self.stack.layers:
            attn = layer.self_attn.fn
            weight = attn.qkv_proj.weight
            caches.append(
                StaticAttentionCache(
                    batch, attn.n_kv_heads, length, attn.head_dim, weight.dtype, weight.device
                )
            )
        return StaticCache(self_attn=caches)

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, T, V) for ``input_ids`` (B, T).

        With ``cache``, the tokens continue the cached ones, and ``attention_mask`` (B, T_all) covers
        cached and new tokens. ``positions`` (B, T) default to ``offset .. offset+T-1``, or with
        ``document_ids`` (B, T) of packed documents to positions restarting in each document.
        """
        if positions is None:
            positions = token_positions(input_ids, document_ids, cache.offset if cache is not None else 0)
        x = self.embed(input_ids, positions)
        view = AttentionView(
            positions, causal=True, padding=attention_mask, documents=document_ids, cache=cache
        )
        x = self.stack(x, view)
        logits = self.lm_head(x)
        return self.logit_cap(logits) if self.logit_cap is not None else logits

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Next-token logits (B, T, V) of ``input_ids`` (B, T) (packed where it has ``document_ids``)."""
        need(batch, "input_ids")
        return self(
            batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            document_ids=batch.get("document_ids"),
        )

    def input_embedding(self) -> nn.Module:
        return self.embed

    def readout_positions(self, batch: dict[str, Tensor]) -> Tensor:
        """The last real token of each (right-padded) row: its logits predict the next token."""
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        if mask is None:
            return torch.full((ids.shape[0],), ids.shape[1] - 1, device=ids.device)
        return mask.long().sum(dim=1) - 1
