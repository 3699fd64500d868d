"""Model families: builders that compose the shared blocks, and the table from family name to model class."""

from __future__ import annotations

from torch import nn

from attnlab.models.common import FamilyModel
from attnlab.models.decoder import DecoderLM
from attnlab.models.encoder import EncoderModel
from attnlab.models.seq2seq import Seq2SeqModel
from attnlab.models.vit import ViT
from attnlab.schema.model import Family, ModelConfig

MODEL_CLASSES: dict[str, type[FamilyModel]] = {
    cls.family: cls for cls in (DecoderLM, EncoderModel, Seq2SeqModel, ViT)
}


def build_model(cfg: ModelConfig) -> FamilyModel:
    """The model of family ``cfg.family`` built from the shared blocks."""
    if cfg.family not in MODEL_CLASSES:
        raise ValueError(f"model.family={cfg.family}: not a family; choose one of {Family.listed()}")
    return MODEL_CLASSES[cfg.family](cfg)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "MODEL_CLASSES",
    "DecoderLM",
    "EncoderModel",
    "FamilyModel",
    "ModelConfig",
    "Seq2SeqModel",
    "ViT",
    "build_model",
    "count_parameters",
]
