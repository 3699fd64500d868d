"""Encoder-only, BERT-like: bidirectional stack, masked-LM head and/or a pooled classifier."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.blocks.heads import ClassificationHead, MaskedLMHead
from attnlab.blocks.view import AttentionView
from attnlab.models.common import (
    MODEL_CLASSES,
    FamilyModel,
    check_vocab,
    init_weights,
    need,
    stack_of,
    token_embedding,
    token_positions,
)
from attnlab.schema.model import BertConfig


@MODEL_CLASSES.builds(BertConfig)
class EncoderModel(FamilyModel):
    """``forward`` gives hidden states; ``mlm_logits`` and ``classify`` apply the heads."""

    causal = False

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        check_vocab(cfg)
        self.cfg = cfg
        self.embed = token_embedding(cfg, causal=False, type_vocab_size=cfg.type_vocab_size)
        self.stack = stack_of(cfg, self.embed.pos, cfg.n_layers)
        tied = self.embed.tokens if cfg.tie_embeddings else None
        self.mlm_head = (
            MaskedLMHead(
                cfg.d_model,
                cfg.vocab_size,
                tied,
                activation=cfg.activation,
                norm=cfg.norm,
                norm_eps=cfg.norm_eps,
                norm_bias=cfg.norm_bias,
            )
            if cfg.mlm_head
            else None
        )
        self.cls_head = (
            ClassificationHead(cfg.d_model, cfg.num_classes, cfg.pooling, cfg.classifier_hidden, cfg.dropout)
            if cfg.num_classes > 0
            else None
        )
        init_weights(self, cfg.init_std, cfg.n_layers)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Hidden states (B, T, D); ``attention_mask`` (B, T) is True (or 1) at real tokens.
        ``document_ids`` (B, T) pack documents: each sees only itself, its positions restarting at 0."""
        positions = token_positions(input_ids, document_ids)
        x = self.embed(input_ids, positions, token_type_ids)
        return self.stack(x, AttentionView(positions, padding=attention_mask, documents=document_ids))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        if self.mlm_head is None:
            raise ValueError("this encoder was built without a masked-LM head (model.mlm_head=false)")
        return self.mlm_head(hidden)

    def classify(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        if self.cls_head is None:
            raise ValueError("this encoder was built without a classifier (model.num_classes=0)")
        return self.cls_head(hidden, attention_mask)

    def classifies(self, batch: dict[str, Tensor]) -> bool:
        """Whether ``logits(batch)`` are class logits: with a classifier, unless the batch holds
        masked-LM labels (one per token) for a model that also has the masked-LM head."""
        labels = batch.get("labels")
        return self.cls_head is not None and (self.mlm_head is None or labels is None or labels.dim() == 1)

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Class logits (B, C), or masked-LM logits (B, T, V) at every position (see ``classifies``)."""
        need(batch, "input_ids")
        mask = batch.get("attention_mask")
        hidden = self(batch["input_ids"], mask, batch.get("token_type_ids"), batch.get("document_ids"))
        return self.classify(hidden, mask) if self.classifies(batch) else self.mlm_logits(hidden)

    def input_embedding(self) -> nn.Module:
        return self.embed

    def readout_positions(self, batch: dict[str, Tensor]) -> Tensor | None:
        """The first (CLS) token of a classifier that pools it; else None (a masked-LM position is the
        caller's choice)."""
        if not self.classifies(batch) or self.cfg.pooling != "cls":
            return None
        return torch.zeros(batch["input_ids"].shape[0], dtype=torch.long, device=batch["input_ids"].device)
