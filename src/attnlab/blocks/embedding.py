"""Token embeddings with positions, optional segments, scale and norm: the input of every text family."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.blocks.guards import check_index
from attnlab.blocks.norm import build_norm
from attnlab.blocks.positional import PositionalEncoding
from attnlab.blocks.roles import ParamRole, declare_roles


class TokenEmbedding(nn.Module):
    """``dropout(norm(scale * tok[ids] + seg[types] + pos))``; absent parts are skipped.

    ``scale`` multiplies by sqrt(d_model) (the original Transformer); ``norm`` follows BERT and
    BLOOM, which normalise the embeddings before the first layer.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        pos: PositionalEncoding,
        *,
        type_vocab_size: int,
        scale: bool,
        norm: str | None,
        norm_eps: float,
        norm_bias: bool,
        dropout: float,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.segments = nn.Embedding(type_vocab_size, d_model) if type_vocab_size else None
        for table in (self.tokens, self.segments):
            if table is not None:
                declare_roles(table, weight=ParamRole.embedding)
        self.pos = pos
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.norm = build_norm(norm, d_model, norm_eps, norm_bias) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, positions: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        vocab = self.tokens.num_embeddings
        check_index(
            input_ids,
            vocab,
            "token id",
            f"is outside the model's vocabulary of {vocab} "
            f"(ids 0..{vocab - 1}; does the tokenizer match model.vocab_size?)",
        )
        x = self.tokens(input_ids)
        if self.scale != 1.0:  # skipping the no-op product saves a pass over (B, T, D) forward and backward
            x = x * self.scale
        if self.segments is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + self.segments(types)
        x = self.pos.embed(x, positions)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x) if self.training and self.dropout.p > 0 else x
