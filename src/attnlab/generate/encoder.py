"""Predictions of encoder-only models: fill-mask for MLM, class probabilities for classifiers and ViT."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.models.common import eval_mode, model_device


@dataclass
class MaskFill:
    """The ``top_k`` most likely tokens at one masked position (row, position) of the input."""

    row: int
    position: int
    token_ids: list[int]
    probs: list[float]


@torch.inference_mode()
def fill_mask(
    model: nn.Module, input_ids: Tensor, *, mask_id: int, attention_mask: Tensor | None = None, top_k: int = 5
) -> list[MaskFill]:
    """Top-k predictions of a masked-LM encoder at every position holding ``mask_id``, row by row."""
    device = model_device(model)
    input_ids = input_ids.to(device).unsqueeze(0) if input_ids.dim() == 1 else input_ids.to(device)
    rows, cols = (input_ids == mask_id).nonzero(as_tuple=True)
    if rows.numel() == 0:
        raise ValueError(
            f"no mask token (id {mask_id}) in the input: put the tokenizer's mask token where to predict"
        )
    with eval_mode(model):
        mask = attention_mask.to(device) if attention_mask is not None else None
        hidden = model(input_ids, mask)
        probs = model.mlm_logits(hidden[rows, cols]).float().softmax(dim=-1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    return [
        MaskFill(int(r), int(c), ids, ps)
        for r, c, ids, ps in zip(rows.tolist(), cols.tolist(), top.indices.tolist(), top.values.tolist())
    ]


@torch.inference_mode()
def class_probabilities(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Softmax over the classes (B, C) of a text classifier (an encoder with ``num_classes`` > 0)."""
    device = model_device(model)
    input_ids = input_ids.to(device).unsqueeze(0) if input_ids.dim() == 1 else input_ids.to(device)
    mask = attention_mask.to(device) if attention_mask is not None else None
    with eval_mode(model):
        return model.classify(model(input_ids, mask), mask).float().softmax(dim=-1)


@torch.inference_mode()
def image_probabilities(model: nn.Module, images: Tensor) -> Tensor:
    """Softmax over the classes (B, C) of a ViT for images (B, C, H, W) already normalised."""
    with eval_mode(model):
        return model(images.to(model_device(model))).float().softmax(dim=-1)
