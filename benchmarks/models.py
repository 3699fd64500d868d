"""The benchmark's model pairs: a Hugging Face reference and its attnlab twin with the same weights.

The attnlab model is built by ``attnlab.models.hf.from_transformers`` from the Hugging Face one,
so both have the same configuration and weights and do the same arithmetic; each builder checks
that their outputs agree before anything is timed. Dropout is 0 on both sides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    PretrainedConfig,
    ViTConfig,
    ViTForImageClassification,
)

from attnlab.models import build_model
from attnlab.models.hf import from_transformers, hf_model_config

logging.getLogger("transformers").setLevel(logging.ERROR)


@dataclass(frozen=True)
class GPTSize:
    """A decoder-only configuration and the batch it trains on."""

    name: str
    n_layers: int
    n_heads: int
    d_model: int
    seq_len: int
    batch: int
    vocab: int = 65

    def __str__(self) -> str:
        return (
            f"L{self.n_layers} H{self.n_heads} d{self.d_model} T{self.seq_len} B{self.batch} "
            f"V{self.vocab} fp32"
        )


GPT_4L = GPTSize("gpt-4L", 4, 4, 128, 64, 12)
GPT_6L = GPTSize("gpt-6L", 6, 6, 384, 256, 8)
GPT_TINY = GPTSize("gpt-tiny", 1, 2, 32, 16, 2)
GPT2_SMALL = GPTSize("gpt2-small", 12, 12, 768, 1024, 1, vocab=50257)


def gpt2_config(size: GPTSize, seq_len: int | None = None) -> GPT2Config:
    return GPT2Config(
        n_layer=size.n_layers,
        n_head=size.n_heads,
        n_embd=size.d_model,
        n_positions=seq_len or size.seq_len,
        vocab_size=size.vocab,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )


def hf_gpt2(size: GPTSize, seq_len: int | None = None) -> nn.Module:
    """Hugging Face GPT-2 (SDPA attention) at ``size``, randomly initialised, dropout off."""
    torch.manual_seed(0)
    return GPT2LMHeadModel(gpt2_config(size, seq_len)).train()


def attnlab_like(hf_config: PretrainedConfig, architecture: str) -> nn.Module:
    """An attnlab model of a Hugging Face configuration, randomly initialised (no reference model built)."""
    cfg = hf_model_config(
        {**hf_config.to_dict(), "architectures": [architecture]}, dropout=0.0, attn_dropout=0.0
    )
    return build_model(cfg).train()


def twin(hf_model: nn.Module) -> nn.Module:
    """The attnlab model with ``hf_model``'s configuration and weights (its own copies), in train mode."""
    return from_transformers(hf_model, dropout=0.0, attn_dropout=0.0).train()


def with_activation(model: nn.Module, activation: str) -> nn.Module:
    """A copy of the attnlab ``model`` with another feed-forward activation (same weights, train mode)."""
    other = build_model(replace(model.cfg, activation=activation))
    other.load_state_dict(model.state_dict())
    return other.train()


def gpt_batch(size: GPTSize, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random token ids and next-token labels (B, T)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, size.vocab, (size.batch, size.seq_len + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


@dataclass(frozen=True)
class EncoderSize:
    """A BERT-like or ViT configuration and its batch."""

    name: str
    n_layers: int
    n_heads: int
    d_model: int
    seq_len: int  # text tokens; for ViT the image side in pixels
    batch: int
    vocab: int = 1024  # BERT; for ViT the patch size
    classes: int = 10

    def __str__(self) -> str:
        if self.name.startswith("vit"):
            return (
                f"L{self.n_layers} H{self.n_heads} d{self.d_model} img{self.seq_len} patch{self.vocab} "
                f"B{self.batch} {self.classes} classes fp32"
            )
        return f"L{self.n_layers} H{self.n_heads} d{self.d_model} T{self.seq_len} B{self.batch} V{self.vocab} fp32"


BERT_SMALL = EncoderSize("bert-small", 4, 4, 256, 128, 16)
BERT_TINY = EncoderSize("bert-tiny", 1, 2, 32, 16, 2, vocab=64)
VIT_SMALL = EncoderSize("vit-small", 4, 4, 192, 32, 32, vocab=4)
VIT_TINY = EncoderSize("vit-tiny", 1, 2, 32, 8, 2, vocab=4)


def bert_config(size: EncoderSize) -> BertConfig:
    return BertConfig(
        vocab_size=size.vocab,
        hidden_size=size.d_model,
        num_hidden_layers=size.n_layers,
        num_attention_heads=size.n_heads,
        intermediate_size=4 * size.d_model,
        max_position_embeddings=size.seq_len,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        type_vocab_size=2,
    )


def hf_bert(size: EncoderSize) -> nn.Module:
    torch.manual_seed(0)
    return BertForMaskedLM(bert_config(size)).train()


def mlm_batch(size: EncoderSize, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Token ids, an all-real attention mask and labels with 15% of positions predicted (-100 elsewhere)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, size.vocab, (size.batch, size.seq_len), generator=g)
    picked = torch.rand(ids.shape, generator=g) < 0.15
    labels = ids.masked_fill(~picked, -100)
    return ids, torch.ones_like(ids, dtype=torch.bool), labels


def vit_config(size: EncoderSize) -> ViTConfig:
    return ViTConfig(
        image_size=size.seq_len,
        patch_size=size.vocab,
        num_channels=3,
        hidden_size=size.d_model,
        num_hidden_layers=size.n_layers,
        num_attention_heads=size.n_heads,
        intermediate_size=4 * size.d_model,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=size.classes,
    )


def hf_vit(size: EncoderSize) -> nn.Module:
    torch.manual_seed(0)
    return ViTForImageClassification(vit_config(size)).train()


def image_batch(size: EncoderSize, seed: int = 0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(size.batch, 3, size.seq_len, size.seq_len, generator=g)
    return images, torch.randint(0, size.classes, (size.batch,), generator=g)


def check_same(ours: Tensor, theirs: Tensor, what: str, tol: float = 1e-4) -> float:
    """Max abs difference of two outputs; ValueError if the twins do not compute the same thing."""
    diff = (ours - theirs).abs().max().item()
    if not diff <= tol:
        raise ValueError(
            f"{what}: attnlab and the reference differ by {diff:.2e} (> {tol:g}); not the same work"
        )
    return diff
