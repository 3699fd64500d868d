"""Model families: builders that compose the shared blocks."""

from __future__ import annotations

from torch import nn

from attnlab.config import FAMILIES, ModelConfig
from attnlab.models.decoder import DecoderLM
from attnlab.models.encoder import EncoderModel
from attnlab.models.seq2seq import Seq2SeqModel
from attnlab.models.vit import ViT

MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "gpt": DecoderLM,
    "bert": EncoderModel,
    "seq2seq": Seq2SeqModel,
    "vit": ViT,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model of family ``cfg.family`` built from the shared blocks."""
    if cfg.family not in MODEL_CLASSES:
        raise ValueError(f"model.family={cfg.family!r} is not a family; choose one of {', '.join(FAMILIES)}")
    return MODEL_CLASSES[cfg.family](cfg)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "DecoderLM",
    "EncoderModel",
    "ModelConfig",
    "Seq2SeqModel",
    "ViT",
    "build_model",
    "count_parameters",
]
