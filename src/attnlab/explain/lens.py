"""The logit lens (nostalgebraist 2020): each layer's residual stream read out as if it were the last.

Every layer's ``resid_post`` goes through the stack's final norm (where it has one) and the model's
token head, the computation the last layer's output gets, so the last layer's lens is the model's own
logits. Served: gpt (next-token head), bert with its masked-LM head, seq2seq's decoder. A model that
predicts classes (vit, a bert classifier) has no token head to read a layer through.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.layers import TransformerStack
from attnlab.explain.sites import recorded
from attnlab.models.common import eval_mode
from attnlab.models.decoder import DecoderLM
from attnlab.models.encoder import EncoderModel
from attnlab.models.seq2seq import Seq2SeqModel
from attnlab.schema.data import IGNORE_INDEX


@dataclass
class LogitLens:
    """``logits`` (layers, B, T, V): each layer's readout, labelled by ``sites``; ``losses`` (layers,):
    the cross-entropy of each layer's logits against the batch's ``labels`` (None without labels)."""

    sites: list[str]
    logits: Tensor
    losses: Tensor | None

    def top_tokens(self, k: int = 1) -> Tensor:
        """The ``k`` most likely token ids per layer and position, (layers, B, T, k)."""
        return self.logits.topk(k, dim=-1).indices


def lens_parts(model: nn.Module, batch: dict[str, Tensor]) -> tuple[str, TransformerStack, nn.Module]:
    """The site prefix, the stack and the token head that the lens reads each layer through."""
    if isinstance(model, DecoderLM):
        return "", model.stack, model.lm_head
    if isinstance(model, Seq2SeqModel):
        return "decoder.", model.decoder, model.lm_head
    if isinstance(model, EncoderModel) and model.mlm_head is not None and not model.classifies(batch):
        return "", model.stack, model.mlm_head
    raise ValueError(
        f"logit lens: {type(model).__name__} predicts classes on this batch, not tokens: no token head to read layers through"
    )


def logit_lens(model: nn.Module, batch: dict[str, Tensor]) -> LogitLens:
    """Each layer's residual stream through the final norm and the token head, on ``batch`` (no grad)."""
    prefix, stack, head = lens_parts(model, batch)
    names = [f"{prefix}layers.{i}.resid_post" for i in range(len(stack.layers))]
    with torch.no_grad(), eval_mode(model), recorded(model, names) as acts:
        model.logits(batch)
        readout = [stack.final_norm(acts[n]) if stack.final_norm is not None else acts[n] for n in names]
        logits = torch.stack([head(x) for x in readout])
    losses = None
    if "labels" in batch:
        labels = batch["labels"]
        losses = torch.stack(
            [
                F.cross_entropy(layer.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
                for layer in logits
            ]
        )
    return LogitLens(names, logits, losses)
