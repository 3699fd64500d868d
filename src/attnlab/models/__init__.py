"""Model families: builders that compose the shared blocks. Each family's class registers itself as
its config's builder (``MODEL_CLASSES``, ``@MODEL_CLASSES.builds(GPTConfig)``); importing this package
imports the four built-in families."""

from __future__ import annotations

from torch import nn

from attnlab.models.common import MODEL_CLASSES, FamilyModel
from attnlab.models.decoder import DecoderLM
from attnlab.models.encoder import EncoderModel
from attnlab.models.parametrization import apply_mup, is_mup
from attnlab.models.seq2seq import Seq2SeqModel
from attnlab.models.vit import ViT
from attnlab.schema.model import ModelConfig


def build_model(cfg: ModelConfig) -> FamilyModel:
    """The model of family ``cfg.family`` built from the shared blocks, in its parametrisation."""
    model = MODEL_CLASSES.of(cfg)(cfg)
    if is_mup(cfg):
        apply_mup(model, cfg)
    return model


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
