"""Encoder-decoder: the original Transformer, and T5/Marian as configurations of it."""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.blocks.cache import KVCache
from attnlab.blocks.heads import LMHead
from attnlab.blocks.view import AttentionView
from attnlab.models.common import (
    MODEL_CLASSES,
    FamilyModel,
    check_vocab,
    default_positions,
    init_weights,
    need,
    stack_of,
    token_embedding,
)
from attnlab.schema.model import Seq2SeqConfig


@MODEL_CLASSES.builds(Seq2SeqConfig)
class Seq2SeqModel(FamilyModel):
    """``encode`` the source once, then ``decode`` target tokens (all at once, or step by step with a cache)."""

    input_stack = "encoder"
    causal = True

    def __init__(self, cfg: Seq2SeqConfig) -> None:
        super().__init__()
        check_vocab(cfg)
        self.cfg = cfg
        n_dec = cfg.n_decoder_layers or cfg.n_layers

        self.src_embed = token_embedding(cfg, causal=False)
        self.tgt_embed = token_embedding(cfg, causal=True)
        if cfg.share_embeddings:
            self.tgt_embed.tokens = self.src_embed.tokens
        self.encoder = stack_of(cfg, self.src_embed.pos, cfg.n_layers)
        self.decoder = stack_of(cfg, self.tgt_embed.pos, n_dec, first=cfg.n_layers, cross=True)
        tied = self.tgt_embed.tokens if cfg.tie_embeddings else None
        scale = cfg.d_model**-0.5 if cfg.tied_output_scale and tied is not None else 1.0
        self.lm_head = LMHead(cfg.d_model, cfg.vocab_size, tied, bias=cfg.lm_head_bias, scale=scale)
        init_weights(self, cfg.init_std, cfg.n_layers + n_dec)

    def new_cache(self) -> KVCache:
        return KVCache.empty(len(self.decoder.layers), cross=True)

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Encoder output (B, S, D); ``src_mask`` (B, S) is True at real source tokens."""
        positions = default_positions(src_ids)
        x = self.src_embed(src_ids, positions)
        return self.encoder(x, AttentionView(positions, padding=src_mask))

    def decode(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits (B, T, V) for target tokens given the encoder output.

        With ``cache`` the tokens continue the cached ones; the encoder's keys and values are
        computed at the first step and reused, so ``memory`` may be None afterwards.
        """
        positions = default_positions(tgt_ids, cache.offset if cache is not None else 0)
        x = self.tgt_embed(tgt_ids, positions)
        view = AttentionView(
            positions, causal=True, padding=tgt_mask, cache=cache, memory=memory, memory_padding=src_mask
        )
        x = self.decoder(x, view)
        return self.lm_head(x)

    def forward(
        self, src_ids: Tensor, tgt_ids: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """Teacher-forced logits (B, T, V) of ``tgt_ids`` given ``src_ids``."""
        return self.decode(tgt_ids, self.encode(src_ids, src_mask), src_mask, tgt_mask)

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Teacher-forced logits (B, T, V) of ``tgt_in`` given ``src_ids``."""
        need(batch, "src_ids", "tgt_in")
        return self(batch["src_ids"], batch["tgt_in"], batch.get("src_mask"), batch.get("tgt_mask"))

    def input_embedding(self) -> nn.Module:
        return self.src_embed

    def batch_shape(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        need(batch, "src_ids")
        b, s = batch["src_ids"].shape
        return b, s
