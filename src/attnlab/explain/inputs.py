"""How each family is run on a batch, so the explain tools need not know the families apart.

Batches are dicts of tensors as the data modules produce them (``input_ids``/``attention_mask``
for text encoders and decoders, ``src_ids``/``tgt_in`` for seq2seq, ``pixel_values`` for ViT).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention


def family(model: nn.Module) -> str:
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise ValueError(f"{type(model).__name__} is not an attnlab model (it has no .cfg)")
    return cfg.family


def _need(batch: dict[str, Tensor], *keys: str) -> None:
    missing = [k for k in keys if k not in batch]
    if missing:
        raise ValueError(f"the batch lacks {', '.join(missing)} (it has {', '.join(sorted(batch))})")


def run_model(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """The family's output logits: next-token (gpt), masked-LM or class (bert), target (seq2seq), class (vit)."""
    kind = family(model)
    if kind == "gpt":
        _need(batch, "input_ids")
        return model(batch["input_ids"], attention_mask=batch.get("attention_mask"))
    if kind == "bert":
        _need(batch, "input_ids")
        hidden = model(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))
        if model.cls_head is not None and (model.mlm_head is None or _is_classification(batch)):
            return model.classify(hidden, batch.get("attention_mask"))
        return model.mlm_logits(hidden)
    if kind == "seq2seq":
        _need(batch, "src_ids", "tgt_in")
        return model(batch["src_ids"], batch["tgt_in"], batch.get("src_mask"), batch.get("tgt_mask"))
    if kind == "vit":
        _need(batch, "pixel_values")
        return model(batch["pixel_values"])
    raise ValueError(f"model.family={kind!r} is not a family attnlab can explain")


def _is_classification(batch: dict[str, Tensor]) -> bool:
    """Class labels are one per example (B,); masked-LM labels are one per token (B, T)."""
    labels = batch.get("labels")
    return labels is None or labels.dim() == 1


def batch_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """Mean cross-entropy of the family's output against ``batch["labels"]`` (-100 ignored)."""
    _need(batch, "labels")
    logits = run_model(model, batch)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100
    )


def input_embedding(model: nn.Module) -> nn.Module:
    """The module whose output is the per-token (or per-patch) input of the first layer."""
    kind = family(model)
    if kind in ("gpt", "bert"):
        return model.embed
    if kind == "seq2seq":
        return model.src_embed
    if kind == "vit":
        return model.patches
    raise ValueError(f"model.family={kind!r} has no known input embedding")


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    """Every attention module by name, in the order the model runs them."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
