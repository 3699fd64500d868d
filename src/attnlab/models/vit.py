"""Vision Transformer (Dosovitskiy et al. 2021): image patches as tokens, a pooled classifier."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.blocks.heads import ClassificationHead
from attnlab.blocks.roles import ParamRole, declare_own_init, declare_roles
from attnlab.blocks.view import AttentionView
from attnlab.models.common import (
    MODEL_CLASSES,
    FamilyModel,
    init_weights,
    need,
    positional,
    stack_of,
)
from attnlab.schema.model import ViTConfig, check_patches


def num_patches(cfg: ViTConfig) -> int:
    check_patches(cfg.image_size, cfg.patch_size)
    return (cfg.image_size // cfg.patch_size) ** 2


class PatchEmbedding(nn.Module):
    """Non-overlapping patches, each linearly projected to ``d_model`` (a strided convolution)."""

    def __init__(self, channels: int, d_model: int, patch_size: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, d_model, kernel_size=patch_size, stride=patch_size)
        declare_roles(self.proj, weight=ParamRole.input_matrix)  # its fan-in (pixels) does not grow

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, N, D)


@MODEL_CLASSES.builds(ViTConfig)
class ViT(FamilyModel):
    """Patches, an optional CLS token, positions, an encoder stack, and a classification head."""

    input_kind = "images"
    causal = False

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        if cfg.num_classes <= 0:
            raise ValueError(f"model.num_classes={cfg.num_classes}: a ViT needs at least one class")
        self.cfg = cfg
        self.use_cls = cfg.pooling == "cls"
        self.n_tokens = num_patches(cfg) + int(self.use_cls)  # positions through the stack
        self.patches = PatchEmbedding(cfg.channels, cfg.d_model, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if self.use_cls else None
        if self.use_cls:  # a learned token of its own: one row of an embedding table, starting at zero
            declare_roles(self, cls_token=ParamRole.embedding)
            declare_own_init(self, "cls_token")
        self.pos = positional(cfg, causal=False, max_len=self.n_tokens)
        self.dropout = nn.Dropout(cfg.dropout)
        self.stack = stack_of(cfg, self.pos, cfg.n_layers)
        self.head = ClassificationHead(
            cfg.d_model, cfg.num_classes, cfg.pooling, cfg.classifier_hidden, dropout=0.0
        )
        init_weights(self, cfg.init_std, cfg.n_layers)

    def features(self, images: Tensor) -> Tensor:
        """Hidden states (B, N(+1), D) of images (B, C, H, W)."""
        expected = (self.cfg.channels, self.cfg.image_size, self.cfg.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images of shape {tuple(images.shape)} do not match the model: expected (B, {expected[0]}, "
                f"{expected[1]}, {expected[2]}) from model.channels and model.image_size"
            )
        x = self.patches(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        positions = torch.arange(x.shape[1], device=x.device)
        x = self.dropout(self.pos.embed(x, positions))
        return self.stack(x, AttentionView(positions))

    def forward(self, images: Tensor) -> Tensor:
        """Class logits (B, num_classes)."""
        return self.head(self.features(images))

    def logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Class logits (B, num_classes) of ``pixel_values`` (B, C, H, W)."""
        need(batch, "pixel_values")
        return self(batch["pixel_values"])

    def input_embedding(self) -> nn.Module:
        return self.patches

    def batch_shape(self, batch: dict[str, Tensor]) -> tuple[int, int]:
        need(batch, "pixel_values")
        return batch["pixel_values"].shape[0], self.n_tokens

    def readout_positions(self, batch: dict[str, Tensor]) -> Tensor | None:
        """The CLS token, when the classifier pools it."""
        if not self.use_cls:
            return None
        images = batch["pixel_values"]
        return torch.zeros(images.shape[0], dtype=torch.long, device=images.device)
